"""--deterministic: bit-identical losses run after run (separate processes) and on every backend."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from smartsage.host.graphs.communities import NodeDataConfig
from smartsage.host.graphs.rmat import RmatConfig, generate_rmat
from smartsage.host.reproducible import deterministic, make_deterministic
from smartsage.host.train import TrainConfig, Trainer, open_sampler

CONFIG = TrainConfig(epochs=1, batch_size=128, fanouts=(6, 4), hidden=32, seed=5, max_eval_nodes=128,
                     max_batches=6, deterministic=True)


@pytest.fixture(scope="module")
def image_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("det") / "rmat10.img"
    generate_rmat(path, RmatConfig(scale=10, edge_factor=8, num_classes=4, seed=4),
                  NodeDataConfig(num_classes=4, feature_dim=16, seed=4))
    return path


@pytest.fixture
def restore_torch():
    threads, algorithms = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(algorithms)


def _losses(image_path, backend, config=CONFIG):
    sampler = open_sampler(backend, image_path)
    try:
        trainer = Trainer(sampler, config)
        trainer.fit()
        return [r["batch_losses"] for r in trainer.history], trainer
    finally:
        sampler.close()


RUN = """
import json, sys
from smartsage.host.train import TrainConfig, Trainer, open_sampler
config = TrainConfig(epochs=2, batch_size=128, fanouts=(6, 4), hidden=32, seed=5, max_eval_nodes=0, max_batches=4,
                     deterministic=True)
sampler = open_sampler("golden", sys.argv[1])
trainer = Trainer(sampler, config)
trainer.fit()
print(json.dumps([(r["loss"], r["batch_losses"]) for r in trainer.history]))
"""


def test_two_processes_give_bit_identical_losses(image_path):
    """Run to run is what varied (torch's threaded CPU kernels): two fresh processes must agree."""
    results = [subprocess.run([sys.executable, "-c", RUN, str(image_path)], check=True, capture_output=True,
                              text=True, timeout=300).stdout for _ in range(2)]
    assert json.loads(results[0]) == json.loads(results[1])  # exact: floats compared bit for bit
    assert len(json.loads(results[0])[1][1]) == 4


def test_cli_flag(image_path, tmp_path, restore_torch):
    from smartsage.host.cli import main

    out = tmp_path / "r.json"
    assert main(["train", str(image_path), "--deterministic", "--epochs", "1", "--batch-size", "512", "--fanouts",
                 "3,2", "--hidden", "8", "--eval-nodes", "64", "--quiet", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["config"]["deterministic"] is True
    assert torch.get_num_threads() == 1


def test_every_software_backend_gives_the_same_losses(image_path, restore_torch):
    reference, trainer = _losses(image_path, "golden")
    assert torch.are_deterministic_algorithms_enabled() and torch.get_num_threads() == 1
    for backend in ("mmap", "direct", "hls"):
        losses, _ = _losses(image_path, backend)
        assert losses == reference, backend


def test_deterministic_run_with_two_threads_repeats(image_path, restore_torch):
    import dataclasses

    config = dataclasses.replace(CONFIG, threads=2)
    first, trainer = _losses(image_path, "golden", config)
    assert torch.get_num_threads() == 2
    second, _ = _losses(image_path, "golden", config)
    assert first == second


def test_context_restores_settings_and_bad_thread_counts(restore_torch):
    before = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    with deterministic(1):
        assert torch.get_num_threads() == 1 and torch.are_deterministic_algorithms_enabled()
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == before
    with pytest.raises(ValueError, match="Thread count must be a positive integer"):
        make_deterministic(0)
    with pytest.raises(ValueError, match="Thread count must be a positive integer"):
        TrainConfig(threads=0)
