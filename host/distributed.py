"""Training across processes and hosts: DistributedDataParallel, each rank with its own device.

Launch (every form runs the same ``smartsage train`` code on every rank):

- one host, N processes: ``smartsage train IMAGE --nproc N ...`` (spawns the ranks itself);
- torchrun: ``torchrun --nproc-per-node N -m smartsage.host.cli train IMAGE ...``;
- several hosts: ``torchrun --nnodes H --nproc-per-node N --rdzv-backend c10d
  --rdzv-endpoint HOST0:29500 --rdzv-id JOB -m smartsage.host.cli train IMAGE ...`` on every host
  (docs/user-guide.md, "Training on several processes and hosts").

Each rank opens its own sampler (device backend or baseline) on its replica of the image (``IMAGE``
may hold ``{rank}``, e.g. ``/data/replica{rank}.img``). Every global batch (its targets and its
command seed, as in one process: :func:`~smartsage.host.train.batch_seed`) is split into R
contiguous shards, one per rank, each sampled with the global batch's seed. Sampling is a pure
function of (seed, hop, node, draw) (docs/spec.md), so every target gets exactly the samples it gets
in one process, and so the same logits. Gradients are combined weighted by each shard's share of
the global batch (a DDP communication hook), so a step equals the single-process step on the global
batch, uneven last batches included, up to floating-point summation order; with dropout the masks
differ from one process's (test: dropout 0, parameters allclose after several steps).

Only rank 0 prints, writes checkpoints and results; every rank reads the checkpoint on resume.
The process group has a timeout (``--dist-timeout``): a rank that fails ends the job with its
error (the launcher stops the others) instead of leaving them waiting in a collective.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import socket
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .train import Trainer

__all__ = ["DistributedTrainer", "world", "init_from_env", "spawn", "shard", "DEFAULT_TIMEOUT_S"]

DEFAULT_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def world() -> World:
    """This process's place in the job, from the launcher's environment (torchrun, :func:`spawn`)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    return World(int(os.environ.get("RANK", "0")), size, int(os.environ.get("LOCAL_RANK", "0")))


def init_from_env(timeout_s: float = DEFAULT_TIMEOUT_S) -> World:
    """Join the process group the environment describes (gloo on CPU; NCCL needs GPUs and is not
    used for these host-side tensors). A no-op for a single process."""
    w = world()
    if w.size > 1 and not dist.is_initialized():
        dist.init_process_group("gloo", rank=w.rank, world_size=w.size,
                                timeout=datetime.timedelta(seconds=timeout_s))
    return w


def shard(targets: np.ndarray, rank: int, size: int) -> tuple[np.ndarray, float]:
    """Rank ``rank``'s contiguous share of a global batch, and its weight (share of the targets).

    A rank whose share is empty (a global batch smaller than the job) gets the batch's first target
    with weight 0, so that it still joins the step's collectives and changes nothing.
    """
    bounds = np.linspace(0, targets.size, size + 1).round().astype(np.int64)
    local = targets[bounds[rank]:bounds[rank + 1]]
    if local.size == 0:
        return targets[:1], 0.0
    return local, local.size / targets.size


class _Aggregated(torch.nn.Module):
    """``forward`` = the model's ``forward_aggregated`` (what DDP wraps)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *inputs):
        return self.model.forward_aggregated(*inputs)


class _DistributedModel:
    """The trainer's model under DDP: ``forward_aggregated`` goes through DDP, everything else
    (parameters, state_dict) to the plain model, so checkpoints match one process's."""

    def __init__(self, model: torch.nn.Module, ddp: DistributedDataParallel):
        self._model = model
        self._ddp = ddp

    def forward_aggregated(self, *inputs):
        return self._ddp(*inputs)

    def train(self, mode: bool = True):
        self._ddp.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def __getattr__(self, name):
        return getattr(self._model, name)


def _weighted_allreduce(state, bucket):  # no annotations: DDP checks them, and this module's are strings
    """Sum of each rank's gradient times its shard's weight: the gradient of the global batch's mean."""
    tensor = bucket.buffer()
    tensor.mul_(state["weight"])
    return dist.all_reduce(tensor, async_op=True).get_future().then(lambda fut: fut.value()[0])


class DistributedTrainer(Trainer):
    """:class:`~smartsage.host.train.Trainer` on one rank of a DDP job (process group already joined).

    The model is wrapped in DistributedDataParallel; each training batch's targets are this rank's
    shard of the global batch, its gradient weighted by the shard's share; the epoch loss is summed
    over the ranks, so every rank's epoch loss is the single-process one (``batch_losses`` stay this
    rank's shard's). Evaluation is not sharded: every rank evaluates the same nodes (forward only).
    """

    def __init__(self, sampler, config, progress=None):
        super().__init__(sampler, config, progress=progress)
        if not dist.is_initialized():
            raise ValueError("DistributedTrainer needs an initialized process group (init_from_env)")
        self.world = World(dist.get_rank(), dist.get_world_size(), world().local_rank)
        self._hook_state = {"weight": 1.0}
        self._sharding = False
        self._standins: list[int] = []
        ddp = DistributedDataParallel(_Aggregated(self.model))
        ddp.register_comm_hook(self._hook_state, _weighted_allreduce)
        self.model = _DistributedModel(self.model, ddp)

    def _batches(self, commands):
        if not self._sharding:
            yield from super()._batches(commands)
            return
        w = self.world
        local, weights = [], []
        for targets, seed in commands:
            part, weight = shard(np.asarray(targets), w.rank, w.size)
            local.append((part, seed))
            weights.append(weight)
        for prepared in super()._batches(local):
            self._hook_state["weight"] = weights[prepared.index]
            if weights[prepared.index] == 0.0:
                self._standins.append(prepared.index)
            yield prepared

    def train_epoch(self) -> dict:
        self._sharding, self._standins = True, []
        try:
            record = super().train_epoch()
        finally:
            self._sharding = False
        # a stand-in target (weight 0) entered this rank's loss sum once: take it out
        cfg = self.config
        targets = self.train_nodes.size if cfg.max_batches is None else min(self.train_nodes.size,
                                                                          cfg.max_batches * cfg.batch_size)
        local = record["loss"] - sum(record["batch_losses"][i] for i in self._standins) / targets
        record["loss"] = self._sum(local)
        record["world_size"] = self.world.size
        return record

    def evaluate(self, nodes):
        sharding, self._sharding = self._sharding, False  # train_epoch evaluates inside its own call
        try:
            return super().evaluate(nodes)
        finally:
            self._sharding = sharding

    def _sum(self, value: float) -> float:
        tensor = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(tensor)
        return float(tensor.item())

    def save_checkpoint(self, path) -> None:
        if self.world.is_main:
            super().save_checkpoint(path)
        dist.barrier()

    def write_results(self, path) -> None:
        if self.world.is_main:
            super().write_results(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawned(rank: int, size: int, port: int, args) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(size),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from .cli import USER_ERRORS

    try:
        code = args.func(args)
    except USER_ERRORS as err:
        print(f"smartsage: error: rank {rank}: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    if code:
        raise SystemExit(code)


def spawn(nproc: int, args) -> int:
    """Run the parsed command ``args`` as ``nproc`` ranks on this host (torch.multiprocessing, spawn).

    A rank that fails stops the others (the launcher terminates them); its error is printed and the
    exit status is non-zero.
    """
    import torch.multiprocessing as mp

    if nproc < 1:
        raise ValueError(f"--nproc must be a positive integer, not {nproc}")
    try:
        mp.spawn(_spawned, args=(nproc, free_port(), args), nprocs=nproc, join=True)
    except mp.ProcessExitedException as err:
        print(f"smartsage: error: rank {err.error_index} exited with status {err.exit_code}; the job was "
              f"stopped", file=sys.stderr)
        return err.exit_code if err.exit_code and err.exit_code > 0 else 1
    except mp.ProcessRaisedException as err:
        text = str(err).strip()
        last = text.splitlines()[-1] if text else repr(err)
        print(f"smartsage: error: rank {err.error_index} failed: {last}; the job was stopped", file=sys.stderr)
        return 1
    return 0
