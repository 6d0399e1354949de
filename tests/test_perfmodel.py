"""The performance model (host/perfmodel.py) on hand-made traces and a small image (fast, for CI)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from smartsage.host import perfmodel as pm
from smartsage.spec import golden
from smartsage.spec.image import PAGE_SIZE, GraphImage, SectionKind, write_image


def _trace_of_pages(pages, phase: int = 0, section: str = "indices", fanouts=(1,)) -> pm.ReadTrace:
    """A hand-made trace: one 4 KiB read per page, all in one phase."""
    pages = np.asarray(pages, np.int64)
    n = pages.size
    sec = np.full(n, pm.SECTIONS.index(section), np.int8)
    ph = np.full(n, phase, np.int8)
    empty = pm.Gather("features", np.zeros(0, np.int64), 0, len(fanouts))
    return pm.ReadTrace(
        req_section=sec, req_phase=ph, req_bytes=np.full(n, PAGE_SIZE, np.int64), req_entry=np.arange(n),
        req_first_page=pages,
        req_num_pages=np.ones(n, np.int64), pages=pages, page_section=sec, page_phase=ph, num_targets=1,
        fanouts=tuple(fanouts), aggregate=False, granularity="spec", frontier_entries=[n] * len(fanouts),
        edges=[0] * len(fanouts), node_list_entries=1, counts_entries=1, last_frontier=1, feature_row_bytes=0,
        sum_row_bytes=0, id_bytes=4, distinct_nodes=1, host_gathers=[], feature_gather=empty)


@pytest.fixture(scope="module")
def small_image(tmp_path_factory):
    rng = np.random.default_rng(3)
    num_nodes = 600
    degree = rng.integers(0, 40, num_nodes)
    degree[:5] = [0, 1, 300, 2000, 7]               # an isolated node, d <= k, d > k, a hub
    indptr = np.zeros(num_nodes + 1, np.uint64)
    np.cumsum(degree, out=indptr[1:])
    indices = rng.integers(0, num_nodes, int(indptr[-1])).astype(np.uint32)
    features = rng.standard_normal((num_nodes, 24)).astype(np.float32)
    path = tmp_path_factory.mktemp("perfmodel") / "small.img"
    write_image(path, indptr, indices, features=features)
    with GraphImage(path) as image:
        yield image


# ------------------------------------------------------------------------------------------ SSD

def test_random_pages_above_ceiling_take_n_over_iops():
    ssd = pm.SsdModel("t", latency_us=100.0, iops=200_000.0, bandwidth_gbs=3.0, max_outstanding=1024)
    n = 50_000
    # queue depth 512 x 1e6 / 100 us = 5.12 M/s > 200 K/s: the ceiling binds
    assert ssd.rate(512) == 200_000.0
    assert ssd.random_read_seconds(n, 512) == pytest.approx(n / 200_000.0 + 100e-6)
    # the device model: N distinct random pages in one phase, outstanding reads far above Little's law
    config = pm.CONFIGS["default"]
    model = pm.DeviceModel(config=config, ssd=ssd, latency_rounds_per_hop=0.0, method="analytic")
    pages = np.random.default_rng(0).choice(1 << 30, n, replace=False)
    trace = _trace_of_pages(pages)
    t = model.batch_time(trace)
    assert t.flash_reads == n
    assert t.kernel_s == pytest.approx(n / ssd.iops, rel=1e-9)
    assert t.phases[0]["bound"] == "flash IOPS"
    # the event replay: 4 lanes x 64 reads in flight keep the flash at its ceiling; one latency drains
    event = pm.DeviceModel(config=config, ssd=ssd).batch_time(trace)
    assert n / ssd.iops <= event.kernel_s <= n / ssd.iops + 100e-6 + 10e-6
    assert event.phases[0]["bound"] == "flash IOPS"


def test_littles_law_below_ceiling():
    ssd = pm.SsdModel("t", latency_us=100.0, iops=1e6, bandwidth_gbs=3.0)
    assert ssd.rate(10) == pytest.approx(10 / 100e-6)
    model = pm.DeviceModel(config=pm.CONFIGS["small"], ssd=ssd, latency_rounds_per_hop=0.0, method="analytic")
    trace = _trace_of_pages(np.arange(1000) * 7)
    t = model.batch_time(trace)
    assert t.kernel_s == pytest.approx(1000 / (16 / 100e-6))     # 1 lane x 16 outstanding
    assert t.phases[0]["bound"] == "outstanding reads"
    event = pm.DeviceModel(config=pm.CONFIGS["small"], ssd=ssd).batch_time(trace)
    # Little's law with the page transfer (4 KiB at 3 GB/s) in each read's latency, plus a drain
    assert 1000 / (16 / 100e-6) <= event.kernel_s <= 1000 / (16 / (100e-6 + PAGE_SIZE / 3e9)) + 2 * 100e-6


def test_in_order_answers_make_a_hit_wait_behind_a_miss():
    ssd = pm.SsdModel("t", latency_us=100.0, iops=1e6, bandwidth_gbs=3.0)
    model = pm.DeviceModel(config=pm.CONFIGS["small"], ssd=ssd, boundary_cycles=0)
    # one lane, 16 in flight: page 0 misses then hits 15 times per window; every window waits a latency
    trace = _trace_of_pages(np.tile(np.arange(16) * 0 + np.repeat([0, 1, 2, 3], 4), 4)[:64])
    cached = model.batch_time(trace, pm.PageCache(1 << 20))
    assert cached.flash_reads == 4 and cached.cache_hits == 60
    assert cached.kernel_s >= 100e-6

def test_pm983_matches_cosim_storage_model():
    cosim_storage = pytest.importorskip("smartsage.cosim.storage")
    ref = cosim_storage.PM983
    assert (pm.PM983.latency_us, pm.PM983.iops, pm.PM983.bandwidth_gbs) == \
        (ref.page_latency_us, ref.iops, ref.bandwidth_gbs)


def test_presets_and_bad_inputs():
    assert pm.ssd_preset("pm1733").iops > pm.PM983.iops
    with pytest.raises(ValueError, match="Unknown SSD preset 'PM9999'"):
        pm.ssd_preset("PM9999")
    with pytest.raises(ValueError, match="iops must be a positive number"):
        pm.SsdModel("x", latency_us=80.0, iops=0, bandwidth_gbs=3.0)
    with pytest.raises(ValueError, match="latency_us must be a positive number"):
        pm.SsdModel("x", latency_us=-1.0, iops=1e5, bandwidth_gbs=3.0)
    with pytest.raises(ValueError, match="Cache capacity must be >= 0 bytes"):
        pm.PageCache(-4096)
    with pytest.raises(ValueError, match="Attachment must be 'flash' or 'p2p'"):
        pm.DeviceModel(attachment="usb")
    with pytest.raises(ValueError, match="Host CPU time must be >= 0"):
        pm.mmap_time(_trace_of_pages([1]), pm.PM983, host_cpu_s=-1.0)
    with pytest.raises(ValueError, match="Stage times must be >= 0"):
        pm.epoch_time([1.0, -2.0], 10)


# ----------------------------------------------------------------------------------- page cache

def test_lru_hit_counts_on_a_known_trace():
    cache = pm.PageCache(3 * PAGE_SIZE)
    #        1  2  3  1  4  2  1  5  3  4
    # hit?   n  n  n  y  n  n  y  n  n  y      (2 evicted by 4, 3 by 2, 2 by 5, 1 by 3)
    hit = cache.access([1, 2, 3, 1, 4, 2, 1, 5, 3, 4])
    assert hit.tolist() == [False, False, False, True, False, False, True, False, False, False]
    assert (cache.hits, cache.misses) == (2, 8)
    assert cache.access([3, 5, 1]).tolist() == [True, True, False]
    assert len(cache) == 3
    none = pm.PageCache(0)
    assert not none.access([1, 1, 1]).any() and len(none) == 0


def test_time_never_rises_with_a_larger_cache():
    rng = np.random.default_rng(11)
    model = pm.DeviceModel()
    for trial in range(20):
        n = int(rng.integers(50, 3000))
        universe = int(rng.integers(10, 4000))
        # skewed (hub-like) page popularity
        pages = (rng.zipf(1.3, n) % universe).astype(np.int64)
        trace = _trace_of_pages(pages, fanouts=(3,))
        times = [model.batch_time(trace, pm.PageCache(c * PAGE_SIZE)).kernel_s for c in (0, 1, 8, 64, 512, 8192)]
        assert all(b <= a + 1e-15 for a, b in zip(times[:-1], times[1:], strict=True)), (trial, times)
        p2p = pm.DeviceModel(attachment="p2p")
        times = [p2p.batch_time(trace, pm.PageCache(c * PAGE_SIZE)).kernel_s for c in (0, 1, 8, 64, 512)]
        assert all(b <= a + 1e-15 for a, b in zip(times[:-1], times[1:], strict=True)), (trial, times)


# ----------------------------------------------------------------------------------- read trace

@pytest.mark.parametrize("fanouts", [(4,), (10, 3), (2, 2, 2)])
@pytest.mark.parametrize("aggregate", [False, True])
def test_trace_counts_equal_golden_stats(small_image, fanouts, aggregate):
    targets = np.array([0, 1, 2, 3, 4, 2, 10, 11, 500, 3], np.uint32)   # duplicates are read twice
    result = golden.sample(small_image, targets, fanouts, 5, aggregate=aggregate)
    trace = pm.read_trace(small_image, targets, fanouts, 5, aggregate)
    assert trace.requests == result.stats.read_requests
    assert trace.bytes == result.stats.storage_bytes
    assert trace.section_requests("indptr") == result.stats.frontier_entries
    assert trace.section_requests("features") == result.stats.feature_rows_read
    # the index reads of d > k nodes are the golden model's positions: their ids are the samples
    header = small_image.header
    idx_off = header.section(SectionKind.INDICES).offset
    reads = (trace.req_section == pm.SECTIONS.index("indices")) & (trace.req_bytes == 4)
    assert (trace.req_first_page[reads] >= idx_off // PAGE_SIZE).all()
    # rtl granularity: as many or more requests, same pages touched
    rtl = pm.read_trace(small_image, targets, fanouts, 5, aggregate, granularity="rtl")
    assert rtl.requests >= trace.requests
    assert set(np.unique(rtl.pages)) - {0} == set(np.unique(trace.pages))


def test_host_sampler_pages_match_the_software_baselines(small_image):
    from smartsage.host.backends.software import DirectSampler, MmapSampler

    targets = np.arange(40, 90, dtype=np.uint32)
    fanouts = (5, 3)
    trace = pm.read_trace(small_image, targets, fanouts, 9, aggregate=True)
    with MmapSampler(small_image.path) as sampler:
        sampler.sample(targets, fanouts, 9, aggregate=True)
        assert sampler.io.storage_pages == trace.mmap_pages().size
    try:
        with DirectSampler(small_image.path) as sampler:
            sampler.sample(targets, fanouts, 9, aggregate=True)
            runs, pages = trace.direct_reads()
            assert (sampler.io.storage_reads, sampler.io.storage_pages) == (runs, pages)
    except OSError as err:  # pragma: no cover - file systems without O_DIRECT
        pytest.skip(f"O_DIRECT unavailable here: {err}")


def test_featureless_image_gets_virtual_feature_rows(tmp_path):
    indptr = np.array([0, 2, 3, 3], np.uint64)
    indices = np.array([1, 2, 0], np.uint32)
    path = tmp_path / "g.img"
    write_image(path, indptr, indices)
    with GraphImage(path) as image:
        with pytest.raises(ValueError, match="needs feature_dim"):
            pm.read_trace(image, np.array([0]), (2,), 1, aggregate=True)
        trace = pm.read_trace(image, np.array([0, 1]), (2,), 1, aggregate=True, feature_dim=128)
        pages = trace.section_pages("features")
        assert pages.size == 2 + 3 and pages.min() * PAGE_SIZE >= image.header.file_size
        assert trace.device_bytes_to_host > 2 * 128 * 4


def test_device_model_phases_and_attachments(small_image):
    targets = np.arange(0, 64, dtype=np.uint32)
    trace = pm.read_trace(small_image, targets, (10, 5), 2, aggregate=True)
    flash = pm.DeviceModel().batch_time(trace)
    assert len(flash.phases) == 3 and flash.flash_reads == trace.pages.size
    assert flash.total_s == pytest.approx(flash.kernel_s + flash.pcie_s)
    p2p = pm.DeviceModel(attachment="p2p").batch_time(trace)
    # P2P reads distinct index/feature pages per phase only (indptr resident)
    assert p2p.flash_reads <= np.unique(trace.pages).size * 3
    mm = pm.mmap_time(trace, pm.PM983, host_cpu_s=0.01)
    dr = pm.direct_time(trace, pm.PM983, host_cpu_s=0.01)
    assert mm.total_s > dr.total_s > 0.01
    assert pm.epoch_time([1.0, 3.0], 10, pipelined=False) == 40.0
    assert pm.epoch_time([1.0, 3.0], 10) == 31.0


def test_probe_on_a_small_temp_file(tmp_path):
    path = tmp_path / "probe.bin"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4 << 20, dtype=np.uint8).tobytes())
    try:
        probe = pm.probe_disk(path, reads=64, queue_depths=(1, 4), seq_bytes=2 << 20,
                              cache=tmp_path / "cache.json")
    except pm.DirectIOUnavailable as err:
        pytest.skip(f"O_DIRECT unavailable on {tmp_path}: {err}")
    assert probe.qd1_latency_us > 0 and probe.seq_bandwidth_gbs > 0
    assert set(probe.iops) == {1, 4} and all(v > 0 for v in probe.iops.values())
    again = pm.probe_disk(path, cache=tmp_path / "cache.json")
    assert dataclasses.asdict(again) == dataclasses.asdict(probe)       # cached
    disk = pm.SsdModel.from_probe(probe)
    assert disk.rate(4) == pytest.approx(min(probe.iops[4], disk.iops))
    with pytest.raises(ValueError, match="include 1"):
        pm.probe_disk(path, queue_depths=(4,), refresh=True)
