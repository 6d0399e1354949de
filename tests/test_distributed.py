"""DDP on gloo: 2 ranks on localhost equal one process (parameters allclose after several steps),
resume under DDP, only rank 0 writes, a failing rank stops the job with its error."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from smartsage.host.cli import main
from smartsage.host.distributed import shard
from smartsage.host.graphs.communities import NodeDataConfig
from smartsage.host.graphs.rmat import RmatConfig, generate_rmat
from smartsage.host.train import TrainConfig, Trainer, open_sampler

# 614 train nodes in batches of 101: six batches split 50/51 between 2 ranks, the last one 4/4
ARGS = ["--batch-size", "101", "--fanouts", "4,3", "--hidden", "16", "--dropout", "0", "--eval-nodes", "64",
        "--seed", "1", "--quiet"]
CONFIG = dict(batch_size=101, fanouts=(4, 3), hidden=16, dropout=0.0, max_eval_nodes=64, seed=1)


@pytest.fixture(scope="module")
def image_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("ddp") / "rmat10.img"
    generate_rmat(path, RmatConfig(scale=10, edge_factor=8, num_classes=4, seed=2),
                  NodeDataConfig(num_classes=4, feature_dim=16, seed=2))
    return path


def _single(image_path, epochs):
    sampler = open_sampler("golden", image_path)
    try:
        trainer = Trainer(sampler, TrainConfig(epochs=epochs, **CONFIG))
        trainer.fit()
        return trainer
    finally:
        sampler.close()


def test_shards_cover_the_batch_with_weights():
    targets = np.arange(101)
    parts = [shard(targets, r, 2) for r in range(2)]
    assert np.array_equal(np.concatenate([p for p, _ in parts]), targets)
    assert sum(w for _, w in parts) == pytest.approx(1.0)
    parts = [shard(np.arange(1), r, 2) for r in range(2)]  # more ranks than targets
    assert sorted(w for _, w in parts) == [0.0, 1.0]  # one rank gets a stand-in with weight 0
    assert all(p.size == 1 for p, _ in parts)


def test_two_ranks_equal_one_process_and_resume(image_path, tmp_path):
    first = tmp_path / "epoch1.pt"
    checkpoint = tmp_path / "ck.pt"
    results = tmp_path / "r.json"
    assert main(["train", str(image_path), "--nproc", "2", "--epochs", "1", *ARGS, "--checkpoint", str(checkpoint),
                 "--json", str(results)]) == 0
    shutil.copyfile(checkpoint, first)
    assert main(["train", str(image_path), "--nproc", "2", "--epochs", "2", *ARGS, "--checkpoint", str(checkpoint),
                 "--resume", "--json", str(results)]) == 0
    assert not list(tmp_path.glob("*.tmp"))
    reference = {1: _single(image_path, 1), 2: _single(image_path, 2)}
    for epochs, path in ((1, first), (2, checkpoint)):
        state = torch.load(path, weights_only=False)
        assert state["epoch"] == epochs
        mine = reference[epochs].model.state_dict()
        for name, tensor in state["model"].items():
            assert torch.allclose(tensor, mine[name], rtol=1e-5, atol=1e-6), (epochs, name)
    history = json.loads(results.read_text())["epochs"]
    assert [r["epoch"] for r in history] == [0, 1] and history[1]["world_size"] == 2
    for got, want in zip(history, reference[2].history, strict=True):
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
        assert got["val_acc"] == want["val_acc"]


def test_a_failing_rank_stops_the_job_with_its_error(image_path, tmp_path, capfd):
    shutil.copyfile(image_path, tmp_path / "replica0.img")  # rank 1's replica is missing
    code = main(["train", str(tmp_path / "replica{rank}.img"), "--nproc", "2", "--epochs", "1", *ARGS,
                 "--dist-timeout", "60"])
    assert code != 0
    err = capfd.readouterr().err  # the ranks' own stderr (file descriptor 2)
    assert "replica1.img" in err and "rank 1" in err
