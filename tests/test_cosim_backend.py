"""The ``rtl`` backend: `smartsage sample --backend rtl` writes the same .npz as `--backend golden`."""

from __future__ import annotations

import random

import numpy as np
import pytest

from smartsage.cosim.graphs import edge_case_image
from smartsage.host import cli, cli_sample
from smartsage.spec.config import CONFIGS
from smartsage.spec.golden import sample as golden_sample
from smartsage.spec.image import FeatureDtype, GraphImage, write_image

pytestmark = pytest.mark.sim


def test_rtl_backend_matches_golden_result(tmp_path):
    from smartsage.host.backends import rtl

    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    path = tmp_path / "g.img"
    graph = edge_case_image(path, seed, hub_degree=3_000)
    targets = np.array([graph.hub, graph.isolated[0], graph.self_loops[0], 7, 7], np.uint32)
    with GraphImage(path) as image:
        got = rtl.sample(image, targets, (4, 3), seed, config=CONFIGS["small"])
        want = golden_sample(image, targets, (4, 3), seed, config=CONFIGS["small"])
    assert got.header.spec_fields() == want.header.spec_fields()
    np.testing.assert_array_equal(got.node_list, want.node_list)
    np.testing.assert_array_equal(got.counts, want.counts)


def _featured_image(path, seed: int, dtype: str, dim: int = 6) -> None:
    """A small random graph with features that include NaNs, infinities, subnormals and signed zeros."""
    rng = np.random.default_rng(seed)
    num_nodes = 200
    degrees = rng.integers(0, 8, num_nodes)
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.uint64)
    indices = rng.integers(0, num_nodes, int(indptr[-1]), dtype=np.uint64)
    feature_dtype = FeatureDtype.parse(dtype)
    if feature_dtype is FeatureDtype.INT8:
        features = rng.integers(-128, 128, (num_nodes, dim)).astype(np.int8)
    else:
        values = rng.normal(0, 3, (num_nodes, dim)).astype(np.float32)
        specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -3e-39], np.float32)
        mask = rng.random((num_nodes, dim)) < 0.2
        values[mask] = rng.choice(specials, int(mask.sum()))
        features = {FeatureDtype.FP32: values, FeatureDtype.FP16: values.astype(np.float16),
                    FeatureDtype.BF16: (values.view(np.uint32) >> 16).astype(np.uint16)}[feature_dtype]
    write_image(path, indptr, indices, features=features, feature_dtype=feature_dtype)


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
def test_cli_sample_rtl_aggregate_npz_equals_golden(tmp_path, monkeypatch, dtype):
    """`smartsage sample --aggregate`: self features and neighbor sums bit for bit (NaNs included)."""
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    path = tmp_path / "g.img"
    _featured_image(path, seed, dtype)
    monkeypatch.setitem(cli_sample.SAMPLE_BACKENDS, "rtl", "smartsage.host.backends.rtl:sample")
    outputs = {}
    for backend in ("golden", "rtl"):
        outputs[backend] = tmp_path / f"{backend}.npz"
        assert cli.main([
            "sample", str(path), "--backend", backend, "--batch-size", "5", "--fanouts", "3,4",
            "--seed", str(seed), "--config", "small", "--aggregate", "-o", str(outputs[backend])]) == 0
    golden, rtl = np.load(outputs["golden"]), np.load(outputs["rtl"])
    assert sorted(golden.files) == sorted(rtl.files)
    assert {"self_features", "neighbor_sums"} <= set(golden.files)
    assert golden["neighbor_sums"].size > 0
    counters = {"backend", "header_storage_bytes", "header_cycles"}
    for name in sorted(set(golden.files) - counters):
        # bit patterns, so that NaNs compare too
        assert golden[name].dtype == rtl[name].dtype, name
        assert golden[name].tobytes() == rtl[name].tobytes(), name


def test_cli_sample_rtl_npz_equals_golden(tmp_path, monkeypatch):
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    path = tmp_path / "g.img"
    edge_case_image(path, seed, hub_degree=3_000)
    monkeypatch.setitem(cli_sample.SAMPLE_BACKENDS, "rtl", "smartsage.host.backends.rtl:sample")
    outputs = {}
    for backend in ("golden", "rtl"):
        outputs[backend] = tmp_path / f"{backend}.npz"
        assert cli.main([
            "sample", str(path), "--backend", backend, "--batch-size", "6", "--fanouts", "5,3",
            "--seed", str(seed), "--config", "small", "-o", str(outputs[backend])]) == 0
    golden, rtl = np.load(outputs["golden"]), np.load(outputs["rtl"])
    assert sorted(golden.files) == sorted(rtl.files)
    # Everything is bit-identical except the backend's name and the result header's implementation
    # counters (docs/spec.md s. 5: storage_bytes and cycles are not compared between implementations).
    counters = {"backend", "header_storage_bytes", "header_cycles"}
    assert counters <= set(golden.files)
    for name in sorted(set(golden.files) - counters):
        np.testing.assert_array_equal(golden[name], rtl[name], err_msg=name)
    assert int(rtl["header_cycles"]) > 0 and int(rtl["header_storage_bytes"]) > 0


def test_rtl_device_backend_through_the_driver(tmp_path):
    """The driver's device API (XRT-like) on the co-simulated kernel equals the golden model."""
    from smartsage.host.backends.rtl import RtlBackend
    from smartsage.host.device import Device
    from smartsage.host.driver import SamplerDriver

    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    path = tmp_path / "g.img"
    graph = edge_case_image(path, seed, hub_degree=3_000)
    targets = np.array([graph.hub, graph.isolated[1], graph.multi_edges[0], 11], np.uint32)
    device = Device(RtlBackend(seed_backpressure=seed), path, CONFIGS["small"], memory_size=1 << 20)
    try:
        batch = SamplerDriver(device).sample(targets, (3, 2), seed, aggregate=False)
        want = golden_sample(device.image, targets, (3, 2), seed, config=CONFIGS["small"])
    finally:
        device.close()
    assert batch.header.spec_fields() == want.header.spec_fields()
    np.testing.assert_array_equal(batch.node_list, want.node_list)
    np.testing.assert_array_equal(batch.counts, want.counts)


def test_rtl_device_backend_aggregates_through_the_driver(tmp_path):
    """The driver's AGGREGATE command on the co-simulated kernel: the whole device memory equals the
    golden model's (checked inside the co-simulation), and the rows it returns equal golden's."""
    from smartsage.host.backends.rtl import RtlBackend
    from smartsage.host.device import Device
    from smartsage.host.driver import SamplerDriver

    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    path = tmp_path / "g.img"
    _featured_image(path, seed, "fp16", dim=7)
    targets = np.array([3, 9, 9, 150], np.uint32)
    backend = RtlBackend(seed_backpressure=seed)
    device = Device(backend, path, CONFIGS["small"], memory_size=1 << 20)
    try:
        batch = SamplerDriver(device).sample(targets, (2, 3), seed, aggregate=True)
        want = golden_sample(device.image, targets, (2, 3), seed, aggregate=True, config=CONFIGS["small"])
    finally:
        device.close()
    assert batch.header.spec_fields() == want.header.spec_fields()
    assert batch.self_rows.tobytes() == want.self_rows.tobytes()
    assert batch.sums.tobytes() == want.sums.tobytes()
    # the storage model's count of the AXI reads the kernel issued: their bytes are the kernel's own counter
    stats = backend.last_stats
    assert stats.storage_bytes == batch.header.storage_bytes > 0
    assert 0 < stats.storage_pages <= stats.read_requests <= stats.storage_bytes // CONFIGS["small"].data_bytes
