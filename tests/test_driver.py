"""The driver over the golden device and the software baselines: same batches, typed errors, I/O counts."""

import numpy as np
import pytest

from smartsage.host.backends.golden import GoldenBackend
from smartsage.host.backends.software import DirectSampler, MmapSampler
from smartsage.host.device import Device, DeviceMemoryError, SyncDirection
from smartsage.host.driver import DeviceError, DeviceProtocolError, SamplerDriver, output_bounds
from smartsage.spec import golden
from smartsage.spec.config import CONFIGS
from smartsage.spec.descriptor import ResultHeader, Status
from smartsage.spec.image import FeatureDtype, GraphImage, ImageFormatError, SectionKind, write_image

SEED = 20261129


@pytest.fixture(scope="module")
def image_path(tmp_path_factory):
    rng = np.random.default_rng(SEED)
    num_nodes, num_edges = 3000, 40000
    src = np.sort(rng.integers(0, num_nodes, num_edges))
    dst = rng.integers(0, num_nodes, num_edges)
    src[:5000] = 7  # one high-degree node, far above any fanout
    src.sort()
    indptr = np.zeros(num_nodes + 1, np.uint64)
    np.cumsum(np.bincount(src, minlength=num_nodes), out=indptr[1:])
    features = rng.standard_normal((num_nodes, 24)).astype(np.float32)
    path = tmp_path_factory.mktemp("driver") / "g.img"
    write_image(path, indptr, dst, features=features, feature_dtype=FeatureDtype.FP32)
    return path


def _same(batch, result, aggregate):
    assert batch.header.spec_fields() == result.header.spec_fields()
    np.testing.assert_array_equal(batch.counts, result.counts)
    n = len(batch.node_list)
    np.testing.assert_array_equal(batch.node_list, result.node_list[:n])
    if aggregate:
        np.testing.assert_array_equal(batch.self_rows, result.self_rows)
        np.testing.assert_array_equal(batch.sums.view(np.uint32), result.sums.view(np.uint32))


@pytest.mark.parametrize("aggregate", [False, True])
@pytest.mark.parametrize("fanouts", [(5,), (10, 4), (3, 2, 2)])
def test_golden_device_matches_golden_model(image_path, fanouts, aggregate):
    targets = np.random.default_rng(SEED).integers(0, 3000, 64)
    with Device(GoldenBackend(), image_path, CONFIGS["default"]) as device:
        batch = SamplerDriver(device).sample(targets, fanouts, seed=5, aggregate=aggregate)
        result = golden.sample(device.image, targets, fanouts, 5, aggregate=aggregate)
    _same(batch, result, aggregate)
    assert batch.frontier_sizes[-1] == result.header.nodes_written
    if aggregate:
        # the innermost hop's ids are not read back: the sums replace them
        assert len(batch.node_list) == batch.frontier_sizes[-2]


@pytest.mark.parametrize("sampler_class", [MmapSampler, DirectSampler])
def test_baselines_give_identical_batches_and_count_pages(image_path, sampler_class):
    targets = np.arange(0, 3000, 37)
    with sampler_class(image_path) as sampler:
        batch = sampler.sample(targets, (10, 5), seed=11, aggregate=True)
        first = sampler.io.storage_pages
    with Device(GoldenBackend(), image_path, CONFIGS["default"]) as device:
        result = golden.sample(device.image, targets, (10, 5), 11, aggregate=True)
    _same(batch, result, True)
    assert first > 0 and sampler.io.storage_bytes == first * 4096
    assert sampler.io.bytes_to_host == sampler.io.storage_bytes


def test_out_of_range_target_raises_named_error(image_path):
    with Device(GoldenBackend(), image_path, CONFIGS["default"]) as device:
        with pytest.raises(DeviceError, match=r"NODE_OUT_OF_RANGE .*node 3000 at hop 0, frontier position 2"):
            SamplerDriver(device).sample([1, 2, 3000, 4], (3,), seed=1)


def test_fanout_above_build_limit_is_bad_descriptor(image_path):
    with Device(GoldenBackend(), image_path, CONFIGS["small"]) as device:
        with pytest.raises(DeviceError, match=r"BAD_DESCRIPTOR .*byte offset 24") as info:
            SamplerDriver(device).sample([1, 2], (CONFIGS["small"].max_fanout + 1,), seed=1)
    assert info.value.status is Status.BAD_DESCRIPTOR


def test_image_elsewhere_in_storage_is_bad_image(image_path):
    with Device(GoldenBackend(), image_path, CONFIGS["default"]) as device:
        device.__class__ = type("Shifted", (Device,), {"image_address": property(lambda self: 4096)})
        with pytest.raises(DeviceError, match="BAD_IMAGE"):
            SamplerDriver(device).sample([1], (3,), seed=1)


def test_short_buffers_give_capacity_status(image_path):
    with Device(GoldenBackend(), image_path, CONFIGS["default"]) as device:
        driver = SamplerDriver(device)
        driver.sample([7], (10,), seed=1)  # sizes buffers for one target
        bufs = driver._buffers
        # A device whose node list is too short for node 7's samples: shrink the buffer the driver passes.
        bufs["nodes"].size = 4 * 5
        driver._capacity_key = (10**9,) * 4
        with pytest.raises(DeviceError, match=r"NODES_CAPACITY .*needs 11 entries"):
            driver.sample([7], (10,), seed=1)


def test_driver_rejects_a_device_that_never_answers(image_path):
    class SilentBackend:
        name = "silent"

        def execute(self, *args):
            pass

    with Device(SilentBackend(), image_path, CONFIGS["default"]) as device:
        with pytest.raises(DeviceError, match="unknown status code"):
            SamplerDriver(device).sample([1], (3,), seed=1)


def test_driver_rejects_inconsistent_header(image_path):
    class LyingBackend(GoldenBackend):
        def execute(self, image, memory, image_addr, descriptor_addr, config):
            super().execute(image, memory, image_addr, descriptor_addr, config)
            result_ptr = int.from_bytes(memory[descriptor_addr + 96:descriptor_addr + 104].tobytes(), "little")
            header = ResultHeader.unpack(memory[result_ptr:result_ptr + 64].tobytes())
            header.nodes_written += 1
            memory[result_ptr:result_ptr + 64] = np.frombuffer(header.pack(), np.uint8)

    with Device(LyingBackend(), image_path, CONFIGS["default"]) as device:
        with pytest.raises(DeviceProtocolError, match="inconsistent result header"):
            SamplerDriver(device).sample([1, 2], (3,), seed=1)


def test_image_failing_verification_is_refused(image_path, tmp_path):
    bad = tmp_path / "bad.img"
    data = bytearray(image_path.read_bytes())
    with GraphImage(image_path) as image:
        section = image.header.section(SectionKind.INDICES)
    data[section.offset + section.length // 2] ^= 0xFF  # inside the indices section: checksum mismatch
    bad.write_bytes(bytes(data))
    with pytest.raises(ImageFormatError, match="section 'indices': checksum mismatch"):
        Device(GoldenBackend(), bad, CONFIGS["default"])


def test_driver_argument_errors(image_path):
    with Device(GoldenBackend(), image_path, CONFIGS["default"]) as device:
        driver = SamplerDriver(device)
        with pytest.raises(ValueError, match="non-empty"):
            driver.sample([], (3,), seed=1)
        with pytest.raises(ValueError, match="Between 1 and 4 fanouts"):
            driver.sample([1], (), seed=1)
        with pytest.raises(ValueError, match="non-negative"):
            driver.sample([-1], (3,), seed=1)
        with pytest.raises(ValueError, match="unsigned 64-bit"):
            driver.sample([1], (3,), seed=-1)


def test_buffer_bounds_and_link_accounting(image_path):
    with Device(GoldenBackend(), image_path, CONFIGS["default"], memory_size=1 << 20) as device:
        bo = device.alloc(256)
        bo.write(np.arange(8, dtype=np.uint32))
        bo.sync(SyncDirection.TO_DEVICE, 32)
        assert device.link.bytes_to_device == 32
        np.testing.assert_array_equal(bo.read(32).view(np.uint32), np.arange(8))
        with pytest.raises(DeviceMemoryError, match="outside a 256-byte buffer"):
            bo.read(8, 252)
        with pytest.raises(DeviceMemoryError, match="device memory exhausted"):
            device.alloc(2 << 20)


def test_output_bounds_are_exact_worst_case():
    assert output_bounds(4, (2, 3)) == (4 * 3 * 4, 4 + 12, 12)


@pytest.mark.parametrize("backend", ["mmap", "direct"])
def test_cli_sample_baselines_equal_golden(image_path, tmp_path, backend):
    from smartsage.host import cli

    outputs = {}
    for name in ("golden", backend):
        out = tmp_path / f"{name}.npz"
        assert cli.main(["sample", str(image_path), "--backend", name, "--batch-size", "32", "--fanouts", "6,3",
                         "--seed", "9", "--aggregate", "-o", str(out)]) == 0
        with np.load(out) as data:
            outputs[name] = {key: data[key] for key in data.files}
    assert set(outputs["golden"]) == set(outputs[backend])
    for key, value in outputs["golden"].items():
        if key not in ("backend", "header_storage_bytes"):  # the baselines count whole pages read
            assert value.tobytes() == outputs[backend][key].tobytes(), key


@pytest.mark.parametrize("aggregate, expected", [(False, 9), (True, 9 + 3 + 8)])
def test_golden_counts_read_requests_by_the_read_rule(tmp_path, aggregate, expected):
    """Degrees 0, 3 and 10 with fanout 5: 3 indptr pairs, 0 + 1 burst + 5 single reads, then one request per
    feature row (3 self rows, 0 + 3 + 5 sampled rows) when aggregating."""
    from smartsage.host.train import open_sampler

    path = tmp_path / "degrees.img"
    indices = np.concatenate([[0, 1, 2], np.arange(10) % 3])
    write_image(path, np.array([0, 0, 3, 13]), indices, features=np.ones((3, 2), np.float32))
    sampler = open_sampler("golden", path)
    try:
        sampler.sample(np.array([0, 1, 2]), (5,), seed=4, aggregate=aggregate)
        assert sampler.io.storage_reads == expected
        assert sampler.io.storage_pages is None  # not counted by a kernel
    finally:
        sampler.close()
