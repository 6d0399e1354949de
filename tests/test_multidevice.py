"""Several devices in one host: same batches as one device, all devices busy, errors, training."""

from __future__ import annotations

import dataclasses
import shutil
import time

import numpy as np
import pytest

from smartsage.host.cli import main
from smartsage.host.driver import DeviceError
from smartsage.host.graphs.communities import NodeDataConfig
from smartsage.host.graphs.rmat import RmatConfig, generate_rmat
from smartsage.host.multidevice import MultiDeviceSampler, ssd_command_seconds, throughput
from smartsage.host.pipeline import sampled_batches
from smartsage.host.train import TrainConfig, Trainer, open_sampler

FANOUTS = (5, 3)


@pytest.fixture(scope="module")
def image_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("multi") / "rmat10.img"
    generate_rmat(path, RmatConfig(scale=10, edge_factor=8, num_classes=4, seed=6),
                  NodeDataConfig(num_classes=4, feature_dim=8, seed=6))
    return path


def _commands(n, count=12, size=64):
    rng = np.random.default_rng(8)
    return [(rng.integers(0, n, size, dtype=np.int64), 1000 + b) for b in range(count)]


def _same(a, b):
    assert np.array_equal(a.node_list, b.node_list) and np.array_equal(a.counts, b.counts)
    assert np.array_equal(a.self_rows, b.self_rows) and np.array_equal(a.sums, b.sums)


@pytest.mark.parametrize("backend", ["golden", "mmap"])
def test_two_and_three_devices_give_the_batches_of_one(image_path, tmp_path, backend):
    replica = tmp_path / "replica.img"
    shutil.copyfile(image_path, replica)
    one = open_sampler(backend, image_path)
    try:
        commands = _commands(one.image.num_nodes)
        reference = [p.batch for p in sampled_batches(one, commands, FANOUTS, depth=0)]
        io_one = one.io
    finally:
        one.close()
    for paths, devices in (([image_path, replica], 2), ([image_path], 3)):
        with MultiDeviceSampler.open(backend, paths, devices) as multi:
            got = list(multi.prepared_batches(commands, FANOUTS, depth=1))
            assert [p.index for p in got] == list(range(len(commands)))
            for prepared, batch in zip(got, reference, strict=True):
                _same(prepared.batch, batch)
            assert sum(multi.commands_run) == len(commands)
            if backend == "golden":  # the device's read rule is per command; mmap counts per-sampler pages
                assert multi.io.bytes_to_host == io_one.bytes_to_host
                assert multi.io.storage_bytes == io_one.storage_bytes
            _same(multi.sample(commands[3][0], FANOUTS, commands[3][1], aggregate=True), reference[3])


def test_devices_overlap_under_the_device_model(image_path):
    """With a modeled device time (a sleep, as a host waits on a real device), 4 devices finish the
    same commands in well under the time of one: every device has a command in flight."""
    def slow(sampler, batch):
        return 0.1

    commands = _commands(1024, count=8)
    seconds, counts = {}, {}
    for devices in (1, 4):
        with MultiDeviceSampler.open("golden", image_path, devices, device_time=slow) as multi:
            start = time.perf_counter()
            list(multi.prepared_batches(commands, FANOUTS, depth=0))
            seconds[devices] = time.perf_counter() - start
            counts[devices] = list(multi.commands_run)
    assert seconds[1] >= 8 * 0.1
    assert seconds[4] < seconds[1] * 0.6, seconds
    assert all(c > 0 for c in counts[4]), counts  # every device ran commands


def test_error_is_raised_at_its_command_and_threads_stop(image_path):
    commands = _commands(1024, count=10)
    commands[4] = (np.array([5, 1 << 20]), 7)  # node id out of range: the device ends with a status
    with MultiDeviceSampler.open("golden", image_path, 2) as multi:
        seen = []
        with pytest.raises(DeviceError):
            for prepared in multi.prepared_batches(commands, FANOUTS, depth=0):
                seen.append(prepared.index)
        assert seen == [0, 1, 2, 3]
        # stopping early (a break) does not hang either
        for _ in multi.prepared_batches(_commands(1024), FANOUTS):
            break


def test_training_on_two_devices_gives_the_losses_of_one(image_path):
    config = TrainConfig(epochs=1, batch_size=128, fanouts=(4, 3), hidden=16, seed=2, max_eval_nodes=64,
                         max_batches=3)
    losses = []
    for devices in (1, 2):
        sampler = MultiDeviceSampler.open("golden", image_path, devices) if devices > 1 else \
            open_sampler("golden", image_path)
        try:
            trainer = Trainer(sampler, dataclasses.replace(config))
            trainer.fit()
            losses.append([r["batch_losses"] for r in trainer.history])
        finally:
            sampler.close()
    assert losses[0] == losses[1]


def test_cli_devices_and_bad_replicas(image_path, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["train", str(image_path), "--devices", "2", "--epochs", "1", "--batch-size", "512", "--fanouts",
                 "3,2", "--hidden", "8", "--eval-nodes", "64", "--quiet", "--json", str(out)]) == 0
    assert '"backend": "golden x 2"' in out.read_text()
    assert main(["train", str(image_path), "--devices", "3", "--replica", str(image_path), "--quiet"]) == 2
    assert "2 image replicas for 3 devices" in capsys.readouterr().err


def test_replicas_must_match_and_model_and_throughput(image_path, tmp_path):
    other = tmp_path / "other.img"
    generate_rmat(other, RmatConfig(scale=9, edge_factor=4, num_classes=4, seed=1),
                  NodeDataConfig(num_classes=4, feature_dim=8, seed=1))
    with pytest.raises(ValueError, match="replica of one image"):
        MultiDeviceSampler.open("golden", [image_path, other], 2)
    with MultiDeviceSampler.open("golden", image_path, 1) as multi:
        batch = multi.sample(np.arange(16), FANOUTS, 3, aggregate=True)
        assert 85e-6 < ssd_command_seconds(multi.samplers[0], batch) < 0.1
    r = throughput(image_path, "golden", 2, batches=4, batch_size=32, modeled=True)
    assert r["batches_per_s"] > 0 and r["devices"] == 2
