"""GraphSAGE training on what the device (or a baseline) returns.

Every mini-batch is one command: the sampler returns, for the innermost layer, each D_1 node's own
features, the sum of its sampled neighbors' features and their count (exact near-storage
aggregation), and the node list and counts from which the host builds the outer blocks. The same seed
gives the same batches on every backend (the counter-based RNG), so the same losses.

Batch seeds: the targets of epoch e are a permutation of the train nodes drawn by
``numpy.random.default_rng([seed, e])``; batch b of epoch e is sampled with the command seed
``(seed * 0x9E3779B97F4A7C15 + e * 0x100000001B3 + b) mod 2^64``. Evaluation batches use epoch
index ``EVAL_EPOCH``, so validation and test samples are the same in every epoch and run.

Pipelining: with ``TrainConfig.prefetch`` > 0 (the default, 2) the next batches' commands run in a
background thread while the model trains on the current one (:mod:`smartsage.host.pipeline`); the
batches, and so the losses, are identical to the serial loop (``prefetch=0``). Each epoch's record
says where the time went: ``phases`` holds the seconds spent waiting for batches, inside the
sampler's commands (overlapped when prefetching), building blocks and tensors, and in forward,
backward and the optimizer step.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from smartsage.spec.config import CONFIGS, KernelConfig
from smartsage.spec.image import GraphImage, Split

from .backends.software import IOCounters
from .blocks import to_blocks
from .driver import DeviceBatch
from .model import GraphSAGE, features_to_tensor
from .pipeline import sampled_batches

__all__ = ["TrainConfig", "Trainer", "open_sampler", "batch_seed", "epoch_commands", "SAMPLER_BACKENDS"]

EVAL_EPOCH = 0xFFFF_FFFF
U64 = (1 << 64) - 1


def batch_seed(seed: int, epoch: int, batch: int) -> int:
    """The command seed of batch ``batch`` of epoch ``epoch`` (see the module docstring)."""
    return (seed * 0x9E3779B97F4A7C15 + epoch * 0x100000001B3 + batch) & U64


def epoch_commands(train_nodes: np.ndarray, seed: int, epoch: int, batch_size: int,
                   max_batches: int | None = None) -> list[tuple[np.ndarray, int]]:
    """The ``(targets, command seed)`` of every training batch of ``epoch`` (see the module docstring)."""
    order = np.random.default_rng([seed, epoch]).permutation(train_nodes)
    num_batches = -(-order.size // batch_size)
    if max_batches is not None:
        num_batches = min(num_batches, max_batches)
    return [(order[b * batch_size:(b + 1) * batch_size], batch_seed(seed, epoch, b)) for b in range(num_batches)]


@dataclasses.dataclass
class TrainConfig:
    epochs: int = 5
    batch_size: int = 256
    fanouts: tuple[int, ...] = (10, 5)
    hidden: int = 64
    lr: float = 0.01
    weight_decay: float = 5e-4
    dropout: float = 0.2
    seed: int = 0
    eval_batch_size: int = 1024
    max_eval_nodes: int | None = 4096   # evaluate on at most this many val/test nodes (None: all, 0: none)
    max_batches: int | None = None      # train on at most this many batches per epoch (None: all)
    prefetch: int = 2                   # commands run ahead of training in a background thread (0: serial)

    def __post_init__(self):
        self.fanouts = tuple(int(k) for k in self.fanouts)
        if self.epochs < 0:
            raise ValueError(f"Epochs must be a non-negative integer, not {self.epochs!r}")
        if self.batch_size < 1:
            raise ValueError(f"Batch size must be a positive integer, not {self.batch_size!r}")
        if not self.fanouts or any(k < 1 for k in self.fanouts):
            raise ValueError(f"Fanouts must be positive integers, not {self.fanouts!r}")
        if self.hidden < 1:
            raise ValueError(f"Hidden width must be a positive integer, not {self.hidden!r}")
        if not self.lr > 0:
            raise ValueError(f"Learning rate must be positive, not {self.lr!r}")
        if self.prefetch < 0:
            raise ValueError(f"Prefetch depth must be a non-negative integer, not {self.prefetch!r}")


class _DeviceSampler:
    """A device backend (golden, hls, rtl) behind the driver, with the common I/O report."""

    def __init__(self, backend, image_path, config: KernelConfig):
        from .device import Device
        from .driver import SamplerDriver

        self.name = backend.name
        self.device = Device(backend, image_path, config)
        self.driver = SamplerDriver(self.device)
        self.image = self.device.image
        # Every device backend accounts its last command's storage reads in ``last_stats`` (SampleStats):
        # golden by the spec's read rule, hls and rtl the reads their kernels issued (docs/user-guide.md,
        # section 4). Pages: the per-command distinct pages of the backends that count them (``counts_pages``);
        # None for the golden model, whose read rule counts requests and bytes, not pages.
        self._counts_pages = bool(getattr(backend, "counts_pages", False))
        self.io = IOCounters(storage_reads=0, storage_pages=0 if self._counts_pages else None)

    def sample(self, targets, fanouts, seed, aggregate=True) -> DeviceBatch:
        before = self.device.link.bytes_to_host
        batch = self.driver.sample(targets, fanouts, seed, aggregate=aggregate)
        stats = self.device.backend.last_stats
        self.io.storage_bytes += int(batch.header.storage_bytes)
        self.io.storage_reads += int(stats.read_requests)
        if self._counts_pages:
            self.io.storage_pages += int(stats.storage_pages)
        self.io.bytes_to_host += self.device.link.bytes_to_host - before
        return batch

    def close(self):
        self.device.close()


def _golden(image_path, config):
    from .backends.golden import GoldenBackend
    return _DeviceSampler(GoldenBackend(), image_path, config)


def _hls(image_path, config):
    from .backends.hls import HlsBackend
    return _DeviceSampler(HlsBackend(), image_path, config)


def _rtl(image_path, config):
    from .backends.rtl import RtlBackend
    return _DeviceSampler(RtlBackend(), image_path, config)


def _mmap(image_path, config, **options):
    from .backends.software import MmapSampler
    return MmapSampler(image_path, config, **options)


def _dram(image_path, config, **options):
    from .backends.software import DramSampler
    return DramSampler(image_path, config, **options)


def _direct(image_path, config, **options):
    from .backends.software import DirectSampler
    return DirectSampler(image_path, config, **options)


#: Backend name -> factory(image_path, config) of an object with ``sample``, ``io``, ``image``, ``close``.
SAMPLER_BACKENDS: dict[str, Callable] = {
    "golden": _golden, "mmap": _mmap, "direct": _direct, "dram": _dram, "hls": _hls, "rtl": _rtl,
}


def open_sampler(backend: str, image_path, config: KernelConfig = CONFIGS["default"], **options):
    """A sampler for ``backend``; ``options`` go to the software baselines (``cold_each_batch``)."""
    try:
        factory = SAMPLER_BACKENDS[backend]
    except KeyError:
        raise ValueError(f"Unknown backend {backend!r}; known: {', '.join(SAMPLER_BACKENDS)}") from None
    return factory(image_path, config, **options)


class Trainer:
    """Trains a :class:`GraphSAGE` on an image's train split through a sampler backend.

    Parameters
    ----------
    sampler:
        From :func:`open_sampler`.
    config:
        The training hyper-parameters.
    progress:
        Optional callable ``(done, total, description)`` for a progress bar.
    on_batch:
        Optional callable, given after every training step a dict: ``index``, ``seed``, ``loss``, the
        step's phase seconds (``wait``, ``command``, ``blocks``, ``compute``) and the ``batch``.
    """

    def __init__(self, sampler, config: TrainConfig, progress: Callable | None = None,
                 on_batch: Callable | None = None):
        self.sampler = sampler
        self.config = config
        self.progress = progress
        self.on_batch = on_batch
        image: GraphImage = sampler.image
        if image.feature_dim == 0:
            raise ValueError(f"{image.path} has no node features: GraphSAGE needs them")
        if image.num_classes < 2:
            raise ValueError(f"{image.path} has {image.num_classes} classes: training needs labels of >= 2 classes")
        self.image = image
        self.train_nodes = image.split_nodes(Split.TRAIN)
        self.val_nodes = image.split_nodes(Split.VAL)
        self.test_nodes = image.split_nodes(Split.TEST)
        if self.train_nodes.size == 0:
            raise ValueError(f"{image.path} has no train nodes (split section)")
        torch.manual_seed(config.seed)
        self.model = GraphSAGE(image.feature_dim, config.hidden, image.num_classes, len(config.fanouts),
                               dropout=config.dropout)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.epoch = 0
        self.history: list[dict] = []

    # ---------------------------------------------------------------- one batch
    def _batches(self, commands):
        """The commands' batches through the pipeline (``config.prefetch`` ahead)."""
        return sampled_batches(self.sampler, commands, self.config.fanouts, aggregate=True,
                               depth=self.config.prefetch)

    def _inputs(self, num_targets: int, batch: DeviceBatch):
        """Blocks and input tensors of one batch (the host's block-building phase)."""
        fanouts = self.config.fanouts
        mfg = to_blocks(batch.node_list, batch.counts, num_targets, fanouts, aggregated=True)
        x_self = features_to_tensor(batch.self_rows, self.image.feature_dtype)
        sums = torch.from_numpy(np.ascontiguousarray(batch.sums, dtype=np.float32))
        count = torch.from_numpy(batch.hop_counts(len(fanouts) - 1).astype(np.int64))
        return mfg, x_self, sums, count

    def _labels(self, nodes: np.ndarray) -> torch.Tensor:
        labels = np.asarray(self.image.labels[nodes], np.int64)
        if (labels < 0).any():
            raise ValueError(f"node {int(nodes[np.argmax(labels < 0)])} of the split has no label")
        return torch.from_numpy(labels)

    # ---------------------------------------------------------------- epochs
    def train_epoch(self) -> dict:
        cfg = self.config
        epoch = self.epoch
        commands = epoch_commands(self.train_nodes, cfg.seed, epoch, cfg.batch_size, cfg.max_batches)
        num_batches = len(commands)
        num_targets = sum(targets.size for targets, _ in commands)
        self.model.train()
        io_before = dataclasses.replace(self.sampler.io)
        total_loss, edges, start = 0.0, 0, time.perf_counter()
        losses = []
        phases = dict.fromkeys(("wait", "command", "blocks", "compute"), 0.0)
        for prepared in self._batches(commands):
            targets, batch = prepared.targets, prepared.batch
            t0 = time.perf_counter()
            inputs = self._inputs(targets.size, batch)
            labels = self._labels(targets)
            t1 = time.perf_counter()
            loss = F.cross_entropy(self.model.forward_aggregated(*inputs), labels)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
            t2 = time.perf_counter()
            phases["wait"] += prepared.wait_seconds
            phases["command"] += prepared.sample_seconds
            phases["blocks"] += t1 - t0
            phases["compute"] += t2 - t1
            if self.on_batch:
                self.on_batch({"index": prepared.index, "seed": prepared.seed, "loss": losses[-1],
                               "wait": prepared.wait_seconds, "command": prepared.sample_seconds,
                               "blocks": t1 - t0, "compute": t2 - t1, "batch": batch})
            total_loss += losses[-1] * targets.size
            edges += int(batch.header.edges_sampled)
            if self.progress:
                self.progress(prepared.index + 1, num_batches, f"epoch {epoch} loss {losses[-1]:.4f}")
        seconds = time.perf_counter() - start
        io = self.sampler.io
        record = {
            "epoch": epoch,
            "loss": total_loss / num_targets,
            "batch_losses": losses,
            "seconds": seconds,
            "prefetch": cfg.prefetch,
            "phases": phases,
            "targets_per_s": num_targets / seconds if seconds else None,
            "sampled_edges_per_s": edges / seconds if seconds else None,
            "sampled_edges": edges,
            "io": {f.name: None if getattr(io, f.name) is None else getattr(io, f.name) - getattr(io_before, f.name)
                   for f in dataclasses.fields(io)},
        }
        record["val_acc"] = self.evaluate(self.val_nodes)
        record["test_acc"] = self.evaluate(self.test_nodes)
        self.history.append(record)
        self.epoch += 1
        return record

    @torch.no_grad()
    def evaluate(self, nodes: np.ndarray) -> float | None:
        cfg = self.config
        if nodes.size == 0 or cfg.max_eval_nodes == 0:
            return None
        if cfg.max_eval_nodes is not None and nodes.size > cfg.max_eval_nodes:
            nodes = np.random.default_rng([cfg.seed, EVAL_EPOCH]).choice(nodes, cfg.max_eval_nodes, replace=False)
        self.model.eval()
        commands = [(nodes[b:b + cfg.eval_batch_size], batch_seed(cfg.seed, EVAL_EPOCH, b // cfg.eval_batch_size))
                    for b in range(0, nodes.size, cfg.eval_batch_size)]
        correct = 0
        for prepared in self._batches(commands):
            logits = self.model.forward_aggregated(*self._inputs(prepared.targets.size, prepared.batch))
            correct += int((logits.argmax(1) == self._labels(prepared.targets)).sum())
        return correct / nodes.size

    # ---------------------------------------------------------------- checkpoints
    def save_checkpoint(self, path: str | os.PathLike) -> None:
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "epoch": self.epoch, "history": self.history, "torch_rng": torch.get_rng_state(),
                    "config": dataclasses.asdict(self.config), "image": self.image.path}, tmp)
        os.replace(tmp, path)  # never a half-written checkpoint

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        state = torch.load(path, weights_only=False)
        saved = dict(state["config"])
        saved["fanouts"] = tuple(saved["fanouts"])
        mine = dataclasses.asdict(self.config)
        for key in ("fanouts", "hidden", "seed", "batch_size"):
            if saved[key] != mine[key]:
                raise ValueError(f"checkpoint {path} was made with {key}={saved[key]!r}, this run has {mine[key]!r}")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch = state["epoch"]
        self.history = state["history"]
        torch.set_rng_state(state["torch_rng"])  # dropout masks continue as in an uninterrupted run

    def fit(self, checkpoint: str | os.PathLike | None = None, on_epoch: Callable | None = None) -> list[dict]:
        while self.epoch < self.config.epochs:
            record = self.train_epoch()
            if checkpoint is not None:
                self.save_checkpoint(checkpoint)
            if on_epoch:
                on_epoch(record)
        return self.history

    def results(self) -> dict:
        return {"config": dataclasses.asdict(self.config), "backend": getattr(self.sampler, "name", "?"),
                "image": self.image.path, "epochs": self.history}

    def write_results(self, path: str | os.PathLike) -> None:
        pathlib.Path(path).write_text(json.dumps(self.results(), indent=2))
