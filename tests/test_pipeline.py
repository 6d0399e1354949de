"""The prefetching batch pipeline: same batches and losses as the serial loop, errors in order, clean stops."""

import dataclasses
import threading

import numpy as np
import pytest
import test_train

from smartsage.host.driver import DeviceError
from smartsage.host.pipeline import sampled_batches
from smartsage.host.train import TrainConfig, Trainer, batch_seed, open_sampler
from smartsage.spec.descriptor import ResultHeader, Status

image_path = test_train.image_path  # the training tests' module-scoped image (a fixture)
CONFIG = TrainConfig(epochs=2, batch_size=64, fanouts=(5, 3), hidden=16, seed=7, max_eval_nodes=256)


def _commands(num_nodes, count=6, size=40):
    rng = np.random.default_rng(1)
    return [(rng.choice(num_nodes, size, replace=False).astype(np.uint32), batch_seed(11, 0, b)) for b in range(count)]


@pytest.mark.parametrize("backend", ["golden", "mmap"])
def test_prefetched_batches_equal_the_serial_loop(image_path, backend):
    sampler = open_sampler(backend, image_path)
    try:
        commands = _commands(sampler.image.num_nodes)
        serial = list(sampled_batches(sampler, commands, (5, 3), depth=0))
        ahead = list(sampled_batches(sampler, commands, (5, 3), depth=2))
    finally:
        sampler.close()
    assert [p.index for p in ahead] == list(range(len(commands)))
    for a, b in zip(serial, ahead, strict=True):
        assert a.seed == b.seed and np.array_equal(a.targets, b.targets)
        assert np.array_equal(a.batch.node_list, b.batch.node_list)
        assert np.array_equal(a.batch.counts, b.batch.counts)
        assert a.batch.sums.tobytes() == b.batch.sums.tobytes()
        assert a.batch.self_rows.tobytes() == b.batch.self_rows.tobytes()
        assert b.sample_seconds > 0 and b.wait_seconds >= 0
    for a in serial:  # serial: the consumer waits for the whole command
        assert a.wait_seconds >= a.sample_seconds


def test_training_with_prefetch_equals_serial_training(image_path):
    histories = {}
    for depth in (0, 3):
        sampler = open_sampler("golden", image_path)
        try:
            trainer = Trainer(sampler, dataclasses.replace(CONFIG, prefetch=depth))
            histories[depth] = trainer.fit()
            params = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
            histories[depth, "params"] = params
        finally:
            sampler.close()
    for key in ("batch_losses", "val_acc", "test_acc", "sampled_edges", "io"):
        assert [r[key] for r in histories[0]] == [r[key] for r in histories[3]], key
    for name, value in histories[0, "params"].items():
        assert np.array_equal(value.numpy(), histories[3, "params"][name].numpy()), name
    record = histories[3][0]
    assert record["prefetch"] == 3
    assert set(record["phases"]) == {"wait", "command", "blocks", "compute"}
    assert all(v >= 0 for v in record["phases"].values()) and record["phases"]["command"] > 0


class _FailingSampler:
    """Fails on one command with a device status, like a kernel that ran out of node-list room."""

    def __init__(self, fail_at):
        self.fail_at = fail_at
        self.calls = 0

    def sample(self, targets, fanouts, seed, aggregate=True):
        self.calls += 1
        if seed == self.fail_at:
            raise DeviceError(ResultHeader(status=int(Status.NODES_CAPACITY), error_hop=1, error_value=99))
        return seed


def test_a_failing_command_is_raised_when_its_batch_is_due():
    sampler = _FailingSampler(fail_at=3)
    commands = [(np.zeros(1, np.uint32), seed) for seed in range(8)]
    seen = []
    with pytest.raises(DeviceError, match="NODES_CAPACITY"):
        for prepared in sampled_batches(sampler, commands, (2,), depth=2):
            seen.append(prepared.batch)
    assert seen == [0, 1, 2]  # every batch before the failing one, in order
    assert sampler.calls <= 4 + 2  # and the producer stopped, at most `depth` beyond


def test_stopping_early_stops_the_producer():
    sampler = _FailingSampler(fail_at=-1)
    commands = [(np.zeros(1, np.uint32), seed) for seed in range(1000)]
    before = threading.active_count()
    stream = sampled_batches(sampler, commands, (2,), depth=2)
    assert next(stream).batch == 0
    stream.close()
    assert threading.active_count() == before
    assert sampler.calls < 10


def test_bad_depth_is_refused():
    with pytest.raises(ValueError, match="Prefetch depth must be a non-negative integer, not -1"):
        list(sampled_batches(_FailingSampler(0), [], (2,), depth=-1))
    with pytest.raises(ValueError, match="Prefetch depth must be a non-negative integer, not -1"):
        TrainConfig(prefetch=-1)
