"""The HLS kernel (hls/), C-simulated: bit for bit against the golden model, every status, no stray writes."""

from __future__ import annotations

import ctypes
import json
import pathlib
import shutil
import struct
import subprocess
import zlib

import numpy as np
import pytest

from smartsage.host.backends import hls
from smartsage.spec import golden
from smartsage.spec.config import CONFIGS
from smartsage.spec.descriptor import (
    DESCRIPTOR_FIELDS,
    DESCRIPTOR_SIZE,
    DESCRIPTOR_STRUCT,
    RESULT_HEADER_SIZE,
    Descriptor,
    Flags,
    ResultHeader,
    Status,
)
from smartsage.spec.image import GraphImage, IndexDtype, write_image

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is needed to build the HLS kernel")

VECTORS = pathlib.Path(__file__).parent / "vectors" / "rng.json"
DTYPES = ("fp32", "fp16", "bf16", "int8")


# ------------------------------------------------------------------------------------ graphs

def special_features(gen: np.random.Generator, num_nodes: int, dim: int, dtype: str) -> np.ndarray:
    """Feature rows in storage representation, dense in special values: signed zeros, subnormals,
    infinities, NaNs of several payloads and signs, the largest finite values (overflow to inf)."""
    if dtype == "int8":
        return gen.integers(-128, 128, (num_nodes, dim)).astype(np.int8)
    if dtype == "fp32":
        special = np.array([0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00400000, 0x7F800000,
                            0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001, 0x7F7FFFFF, 0xFF7FFFFF,
                            0x3F800000, 0x33800000], np.uint32)
        bits = gen.integers(0, 1 << 32, (num_nodes, dim), dtype=np.uint64).astype(np.uint32)
    else:  # fp16 / bf16 bit patterns
        special = (np.array([0x0000, 0x8000, 0x0001, 0x83FF, 0x0200, 0x7C00, 0xFC00, 0x7E00, 0xFE01,
                             0x7C01, 0x7BFF, 0xFBFF, 0x3C00], np.uint16) if dtype == "fp16" else
                   np.array([0x0000, 0x8000, 0x0001, 0x807F, 0x0040, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1,
                             0x7F81, 0x7F7F, 0xFF7F, 0x3F80], np.uint16))
        bits = gen.integers(0, 1 << 16, (num_nodes, dim)).astype(np.uint16)
    pick = gen.random((num_nodes, dim)) < 0.4
    bits[pick] = special[gen.integers(0, special.size, int(pick.sum()))]
    if dtype == "fp32":
        # a narrow exponent range makes the sums round, cancel and reach subnormals
        narrow = gen.random((num_nodes, dim)) < 0.3
        bits[narrow] = (bits[narrow] & np.uint32(0x807FFFFF)) | np.uint32(0x00800000)
        return bits.view(np.float32)
    return bits.view(np.float16) if dtype == "fp16" else bits


def random_graph(gen: np.random.Generator, num_nodes: int, max_degree: int, hub_degree: int = 0):
    """CSR with isolated nodes, multi-edges, self loops and (optionally) one hub of ``hub_degree``."""
    degree = gen.integers(0, max_degree + 1, num_nodes)
    degree[gen.random(num_nodes) < 0.15] = 0
    if hub_degree:
        degree[0] = hub_degree
    indptr = np.zeros(num_nodes + 1, np.uint64)
    np.cumsum(degree, out=indptr[1:])
    indices = gen.integers(0, num_nodes, int(indptr[-1]))
    if indices.size > 3:
        indices[1] = indices[2]  # a multi-edge
    return indptr, indices


def make_image(tmp_path, gen, dtype="fp32", num_nodes=200, dim=6, max_degree=40, hub_degree=3000,
               index_dtype=None, name="g.img") -> GraphImage:
    indptr, indices = random_graph(gen, num_nodes, max_degree, hub_degree)
    features = special_features(gen, num_nodes, dim, dtype) if dim else None
    path = tmp_path / name
    write_image(path, indptr, indices, features, feature_dtype=dtype, index_dtype=index_dtype)
    return GraphImage(path)


@pytest.fixture
def gen(request):
    seed = zlib.crc32(request.node.nodeid.encode())
    print(f"seed={seed}")
    return np.random.default_rng(seed)


def assert_same(expected: golden.GoldenResult, got: golden.GoldenResult) -> None:
    assert got.header.spec_fields() == expected.header.spec_fields()
    if expected.header.status != Status.OK:
        return
    assert got.node_list.dtype == expected.node_list.dtype
    assert got.node_list.tobytes() == expected.node_list.tobytes()
    assert got.counts.tobytes() == expected.counts.astype("<u4").tobytes()
    if expected.self_rows is None:
        assert got.self_rows is None and got.sums is None
        return
    assert got.self_rows.tobytes() == expected.self_rows.tobytes()
    assert got.sums.dtype == expected.sums.dtype
    assert got.sums.tobytes() == expected.sums.tobytes()
    # the read-cost accounting follows the same rule
    assert got.header.storage_bytes == expected.header.storage_bytes
    assert (got.stats.draws, got.stats.rejections) == (expected.stats.draws, expected.stats.rejections)
    assert_storage_reads(expected, got)


def assert_storage_reads(expected: golden.GoldenResult, got: golden.GoldenResult) -> None:
    """The harness's count: one read per element the kernel loads (2 indptr entries per frontier entry,
    one per sampled index entry, one per feature element of each row read), bytes = storage_bytes."""
    rule = expected.stats
    dim = 0 if expected.self_rows is None else expected.self_rows.shape[1]
    assert got.stats.read_requests == rule.indptr_reads + rule.index_reads + rule.feature_rows_read * dim
    assert got.stats.storage_bytes == got.header.storage_bytes
    assert 0 < got.stats.storage_pages <= got.stats.read_requests


# ------------------------------------------------------------------------- headers and the RNG

def test_generated_headers_are_current():
    for path, text in hls.generated_headers().items():
        assert path.read_text() == text, \
            f"regenerate {path.name}: python -m smartsage.host.backends.hls --write-headers"


def test_rng_matches_vectors():
    lib = hls.load_library()
    vectors = json.loads(VECTORS.read_text())
    for case in vectors["mix32"]:
        assert lib.smartsage_rng_mix32(case["x"]) == case["out"]
    for case in vectors["command_key"]:
        assert lib.smartsage_rng_command_key(case["seed"]) == case["out"]
    for case in vectors["hop_key"]:
        assert lib.smartsage_rng_hop_key(case["key"], case["hop"]) == case["out"]
    for case in vectors["node_key"]:
        assert lib.smartsage_rng_node_key(case["hop_key"], case["node"]) == case["out"]
    for case in vectors["draw"]:
        assert lib.smartsage_rng_draw(case["node_key"], case["index"]) == case["out"]
    for case in vectors["bounded"]:
        index = ctypes.c_uint32(case["index"])
        assert lib.smartsage_rng_bounded(case["node_key"], case["n"], ctypes.byref(index)) == case["value"]
        assert index.value == case["next_index"]
    for case in vectors["floyd"]:
        positions, draws = hls.sample_positions(case["node_key"], case["degree"], case["fanout"])
        assert positions == case["positions"] and draws == case["draws"]


def test_sampling_rule_matches_spec_random(gen):
    """Floyd positions and draw counts against the spec's scalar rule over random keys and sizes."""
    from smartsage.spec import rng

    for _ in range(300):
        key = int(gen.integers(0, 1 << 32))
        fanout = int(gen.integers(1, 40))
        degree = int(gen.choice([gen.integers(0, 60), gen.integers(1 << 31, 1 << 32)]))
        expected, index = [], 0
        if degree <= fanout:
            expected = list(range(degree))
        else:
            for j in range(degree - fanout, degree):
                t, index = rng.bounded(key, j + 1, index)
                expected.append(j if t in expected else t)
        assert hls.sample_positions(key, degree, fanout) == (expected, index)


# -------------------------------------------------------------------- bit for bit with golden

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fanouts", [(3,), (5, 2), (4, 3, 2)], ids=["1hop", "2hop", "3hop"])
def test_sample_matches_golden(tmp_path, gen, dtype, fanouts):
    image = make_image(tmp_path, gen, dtype, dim=int(gen.integers(1, 9)))
    with image:
        for trial in range(3):
            targets = gen.integers(0, image.num_nodes, int(gen.integers(1, 40)))
            targets[0] = 0  # the hub: degree far above the fanout
            if trial == 1:
                targets[-1] = targets[0]  # duplicate targets get the same sample
            seed = int(gen.integers(0, 1 << 64, dtype=np.uint64))
            aggregate = trial != 2
            expected = golden.sample(image, targets, fanouts, seed, aggregate=aggregate)
            assert expected.ok
            got = hls.sample(image, targets, fanouts, seed, aggregate=aggregate)
            assert_same(expected, got)


def test_storage_pages_are_the_distinct_pages_read(tmp_path, gen):
    """The hub alone, one hop: the indptr page of its two entries and the pages of its k chosen index entries."""
    from smartsage.spec import rng
    from smartsage.spec.image import PAGE_SIZE, SectionKind

    image = make_image(tmp_path, gen, "fp32", dim=2, hub_degree=5000)
    with image:
        k, seed = 12, 99
        got = hls.sample(image, [0], (k,), seed)
        positions, _ = hls.sample_positions(rng.node_key(rng.hop_key(rng.command_key(seed), 0), 0), 5000, k)
        indptr = image.header.section(SectionKind.INDPTR).offset
        indices = image.header.section(SectionKind.INDICES).offset
        begin = int(image.indptr[0])
        pages = {indptr // PAGE_SIZE, (indptr + 15) // PAGE_SIZE}
        pages |= {(indices + (begin + p) * 4) // PAGE_SIZE for p in positions}
    assert got.stats.read_requests == 2 + k
    assert got.stats.storage_bytes == 2 * 8 + k * 4
    assert got.stats.storage_pages == len(pages) > 1


def test_u64_indices_and_large_fanout(tmp_path, gen):
    image = make_image(tmp_path, gen, "fp32", dim=3, max_degree=900, hub_degree=5000,
                       index_dtype=IndexDtype.U64)
    config = CONFIGS["default"].replace(max_fanout=1024)
    with image:
        targets = np.array([0, 1, 2, 3, 0], np.uint64)
        for fanouts in ((1000,), (700, 1)):
            expected = golden.sample(image, targets, fanouts, 7, aggregate=True, config=config)
            got = hls.sample(image, targets, fanouts, 7, aggregate=True, config=config)
            assert got.node_list.dtype == np.dtype("<u8")
            assert_same(expected, got)


def test_isolated_targets_and_all_zero_counts(tmp_path, gen):
    indptr = np.zeros(6, np.uint64)  # five isolated nodes
    path = tmp_path / "empty.img"
    write_image(path, indptr, np.zeros(0, np.uint32), np.full((5, 2), -0.0, np.float32))
    with GraphImage(path) as image:
        expected = golden.sample(image, [4, 0, 4], (3, 2), 1, aggregate=True)
        got = hls.sample(image, [4, 0, 4], (3, 2), 1, aggregate=True)
        assert_same(expected, got)
        assert got.sums.view(np.uint32).tolist() == [[0, 0]] * 3  # n = 0 sums are +0.0


# ----------------------------------------------------------------------------------- errors

ERROR_CASES = {
    "out_of_range_target": dict(targets=[3, 10_000, 5]),
    "out_of_range_first": dict(targets=[1 << 31]),
    "nodes_capacity_targets_only": dict(nodes_capacity="B"),
    "nodes_capacity_hop0": dict(nodes_capacity="B+hop0-1"),
    "nodes_capacity_last_hop": dict(nodes_capacity="all-1"),
    "counts_capacity_hop0": dict(counts_capacity=1),
    "counts_capacity_hop1": dict(counts_capacity="B"),
    "self_capacity": dict(self_capacity="need-1"),
    "sum_capacity": dict(sum_capacity="need-1"),
    "no_targets": dict(targets=[]),
    "fanout_too_large": dict(fanouts=(5, 33)),
    "fanout_zero": dict(fanouts=(5, 0)),
    "too_many_hops": dict(fanouts=(1, 1, 1), config="max_hops=2"),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_errors_match_golden(tmp_path, gen, case):
    spec = ERROR_CASES[case]
    image = make_image(tmp_path, gen, "bf16", dim=4)
    with image:
        targets = np.array(spec.get("targets", gen.integers(0, image.num_nodes, 12)), np.int64)
        if "targets" not in spec:
            targets[0] = 0  # the hub: hop 0 always samples
        fanouts = spec.get("fanouts", (5, 3))
        config = CONFIGS["default"].replace(max_hops=2) if spec.get("config") else CONFIGS["default"]
        ok = golden.sample(image, targets, fanouts, 99, aggregate=True) if targets.size and all(
            1 <= k <= 32 for k in fanouts) and targets.max() < image.num_nodes else None
        caps = {}
        for name in ("nodes_capacity", "counts_capacity", "self_capacity", "sum_capacity"):
            value = spec.get(name)
            if value == "B":
                value = targets.size
            elif value == "B+hop0-1":
                value = targets.size + int(ok.counts[:targets.size].sum()) - 1
            elif value == "all-1":
                value = int(ok.node_list.size) - 1
            elif value == "need-1":
                last = golden.hop_frontiers(ok.node_list, ok.counts, targets.size, fanouts)[-2].size
                row = image.feature_dim * (2 if name == "self_capacity" else 4)
                value = last * row - 1
            if value is not None:
                caps[name] = value
        expected = golden.sample(image, targets, fanouts, 99, aggregate=True, config=config, **caps)
        assert expected.header.status != Status.OK, "the case must provoke an error"
        got = hls.sample(image, targets, fanouts, 99, aggregate=True, config=config, **caps)
        assert_same(expected, got)


# ------------------------------------------------------- device level: memory bytes and guards

GUARD = 192  # bytes of random guard before and after every buffer


def device_layout(gen, image, targets, fanouts, seed, aggregate, caps=None, fields=None):
    """Device memory with the descriptor, the targets and every output buffer between random guards.

    Returns (memory, descriptor_addr, buffers: name -> (addr, bytes)).
    """
    caps = caps or {}
    ref = golden.sample(image, targets, fanouts, seed, aggregate=aggregate)
    id_size = image.header.index_dtype.itemsize
    need = dict(nodes=ref.node_list.size * id_size, counts=ref.counts.size * 4,
                self=0 if ref.self_rows is None else ref.self_rows.nbytes,
                sum=0 if ref.sums is None else ref.sums.nbytes, result=RESULT_HEADER_SIZE)
    sizes = {name: caps.get(name, need[name]) for name in need}
    buffers, cursor = {}, 0
    cursor += GUARD
    descriptor_addr = (cursor + 63) // 64 * 64
    cursor = descriptor_addr + DESCRIPTOR_SIZE + GUARD
    for name in ("nodes", "counts", "self", "sum", "result"):
        addr = (cursor + 63) // 64 * 64
        buffers[name] = (addr, sizes[name])
        cursor = addr + sizes[name] + GUARD
    memory = gen.integers(0, 256, cursor, dtype=np.uint8)
    for addr, nbytes in buffers.values():
        memory[addr:addr + nbytes] = 0xA5  # buffer bytes: a pattern the outputs overwrite
    targets = np.asarray(targets, image.header.index_dtype.numpy_dtype)
    memory[buffers["nodes"][0]:buffers["nodes"][0] + targets.nbytes] = targets.view(np.uint8)
    units = dict(nodes=id_size, counts=4, self=1, sum=1)
    descriptor = Descriptor(
        seed=seed, num_targets=targets.size, fanouts=tuple(fanouts), flags=int(Flags.AGGREGATE) * aggregate,
        result_ptr=buffers["result"][0],
        **{f"{n}_ptr": buffers[n][0] for n in units},
        **{f"{n}_capacity": buffers[n][1] // units[n] for n in units})
    raw = bytearray(descriptor.pack())
    for name, value in (fields or {}).items():
        code, offset = next((c, o) for f, c, o, _ in DESCRIPTOR_FIELDS if f == name)
        struct.pack_into("<" + code, raw, offset, value)
        if name.endswith("_ptr"):  # the buffer the descriptor now names (guards are judged against it)
            buffers[name[:-4]] = (value, buffers[name[:-4]][1])
    memory[descriptor_addr:descriptor_addr + DESCRIPTOR_SIZE] = np.frombuffer(bytes(raw), np.uint8)
    return memory, descriptor_addr, buffers


def outside_buffers(memory: np.ndarray, buffers) -> np.ndarray:
    mask = np.ones(memory.size, bool)
    for addr, nbytes in buffers.values():
        mask[addr:addr + nbytes] = False
    return memory[mask]


def run_both(image, memory, descriptor_addr, config=CONFIGS["default"]):
    gold_mem, hls_mem = memory.copy(), memory.copy()
    expected = golden.run_command(image, gold_mem, descriptor_addr, config)
    got = hls.run_command(image, hls_mem, descriptor_addr, config)
    return expected, got, gold_mem, hls_mem


@pytest.mark.parametrize("dtype", DTYPES)
def test_device_memory_identical_and_guards_untouched(tmp_path, gen, dtype):
    image = make_image(tmp_path, gen, dtype, dim=5)
    with image:
        for fanouts in ((4,), (6, 3), (3, 2, 2)):
            targets = gen.integers(0, image.num_nodes, int(gen.integers(1, 30)))
            targets[0] = 0
            memory, daddr, buffers = device_layout(gen, image, targets, fanouts, 5, aggregate=True)
            expected, got, gold_mem, hls_mem = run_both(image, memory, daddr)
            assert expected.status == Status.OK
            assert got.spec_fields() == expected.spec_fields()
            assert hls_mem.tobytes() == gold_mem.tobytes()
            assert outside_buffers(hls_mem, buffers).tobytes() == outside_buffers(memory, buffers).tobytes()
            stored = ResultHeader.unpack(hls_mem[buffers["result"][0]:].tobytes())
            assert stored == got


DESCRIPTOR_ERRORS = {
    "magic": 0x12345678, "version": 2, "flags": 2, "num_targets": 0, "num_hops": 5, "fanout0": 0,
    "fanout1": 40, "fanout2": 3, "nodes_ptr": 0x1008, "counts_ptr": 4, "self_ptr": 0x20, "sum_ptr": 0x30,
}


@pytest.mark.parametrize("field", list(DESCRIPTOR_ERRORS))
def test_bad_descriptor_fields(tmp_path, gen, field):
    image = make_image(tmp_path, gen, "fp16", dim=3, num_nodes=60)
    with image:
        targets = gen.integers(0, 60, 5)
        memory, daddr, buffers = device_layout(gen, image, targets, (4, 2), 3, aggregate=True,
                                               fields={field: DESCRIPTOR_ERRORS[field]})
        expected, got, gold_mem, hls_mem = run_both(image, memory, daddr)
        assert expected.status == Status.BAD_DESCRIPTOR
        assert got.spec_fields() == expected.spec_fields()
        assert hls_mem.tobytes() == gold_mem.tobytes()  # only the result header was written
        assert outside_buffers(hls_mem, buffers).tobytes() == outside_buffers(memory, buffers).tobytes()


def test_nodes_capacity_in_descriptor_and_aggregate_without_features(tmp_path, gen):
    image = make_image(tmp_path, gen, "fp32", dim=0, num_nodes=50)
    with image:
        for fields in ({"nodes_capacity": 2}, {"flags": int(Flags.AGGREGATE)}):
            memory, daddr, buffers = device_layout(gen, image, [1, 2, 3], (2,), 3, aggregate=False, fields=fields)
            expected, got, gold_mem, hls_mem = run_both(image, memory, daddr)
            assert expected.status == Status.BAD_DESCRIPTOR
            assert got.spec_fields() == expected.spec_fields()
            assert hls_mem.tobytes() == gold_mem.tobytes()


def test_misaligned_result_pointer_writes_nothing(tmp_path, gen):
    image = make_image(tmp_path, gen, "int8", dim=2, num_nodes=40)
    with image:
        memory, daddr, buffers = device_layout(gen, image, [1, 2], (3,), 3, aggregate=True,
                                               fields={"result_ptr": 0x48})
        expected, got, gold_mem, hls_mem = run_both(image, memory, daddr)
        assert got.spec_fields() == expected.spec_fields()
        assert got.status == Status.BAD_DESCRIPTOR and got.error_value == 96
        assert hls_mem.tobytes() == memory.tobytes()


def test_bad_image(tmp_path, gen):
    image = make_image(tmp_path, gen, "fp32", dim=2, num_nodes=40)
    with image:
        memory, daddr, buffers = device_layout(gen, image, [1, 2], (3,), 3, aggregate=False)
        storage = np.frombuffer(image.buffer, np.uint8).copy()
    for offset, value in ((0, ord("X")), (8, 2)):
        corrupt = storage.copy()
        corrupt[offset] = value

        class Storage:
            buffer = memoryview(corrupt)

        expected = golden.run_command(Storage, gold := memory.copy(), daddr)
        got = hls.run_command(corrupt, hls_mem := memory.copy(), daddr)
        assert expected.status == got.status == Status.BAD_IMAGE
        assert got.spec_fields() == expected.spec_fields()
        assert hls_mem.tobytes() == gold.tobytes()


def test_bus_errors_outside_device_memory(tmp_path, gen):
    """Buffers that run past the end of device memory: STORAGE_ERROR / OUTPUT_ERROR, never a stray write."""
    image = make_image(tmp_path, gen, "fp32", dim=3, num_nodes=80)
    with image:
        targets = gen.integers(0, 80, 6)
        memory, daddr, buffers = device_layout(gen, image, targets, (3, 2), 3, aggregate=True)
        end = memory.size
        cases = {
            "targets": ({"nodes_ptr": (end - 8) // 64 * 64 + 64}, Status.STORAGE_ERROR),
            "nodes": ({"nodes_ptr": (end - 30) // 64 * 64}, None),
            "counts": ({"counts_ptr": (end - 8) // 64 * 64}, Status.OUTPUT_ERROR),
            "sum": ({"sum_ptr": end + 4096}, Status.OUTPUT_ERROR),
        }
        for name, (fields, status) in cases.items():
            mem, daddr, bufs = device_layout(gen, image, targets, (3, 2), 3, aggregate=True, fields=fields)
            if name == "nodes":  # the targets fit, the samples do not
                nodes_ptr = fields["nodes_ptr"]
                mem[nodes_ptr:nodes_ptr + 24] = np.asarray(targets, "<u4").view(np.uint8)
            expected, got, gold_mem, hls_mem = run_both(image, mem, daddr)
            assert expected.status in (Status.STORAGE_ERROR, Status.OUTPUT_ERROR), name
            if status is not None:
                assert expected.status == status
            assert got.spec_fields() == expected.spec_fields(), name
            untouched = outside_buffers(mem, bufs)
            assert outside_buffers(hls_mem, bufs).tobytes() == untouched.tobytes(), name


def test_host_errors_raise(tmp_path, gen):
    image = make_image(tmp_path, gen, "fp32", dim=1, num_nodes=10)
    with image:
        memory = np.zeros(1024, np.uint8)
        with pytest.raises(ValueError, match="Descriptor address 0x8 is not a 64-byte aligned"):
            hls.run_command(image, memory, 8)
        with pytest.raises(ValueError, match="Descriptor address 0x3c0 is not"):
            hls.run_command(image, memory, 960)
        with pytest.raises(ValueError, match="writable, contiguous 1-D uint8"):
            hls.run_command(image, memory.view(np.uint32), 0)
        with pytest.raises(ValueError, match="Target 4294967296 does not fit"):
            hls.sample(image, [1 << 32], (2,), 1)
        with pytest.raises(ValueError, match="Seed must be an unsigned 64-bit integer"):
            hls.sample(image, [1], (2,), -1)


def test_docs_register_table_matches_register_map():
    from smartsage.spec.descriptor import REGISTERS

    text = (pathlib.Path(__file__).parents[1] / "docs" / "hls.md").read_text()
    for name, offset, _, _ in REGISTERS:
        assert f"| 0x{offset:02X} | `{name}` |" in text, name


def test_descriptor_struct_is_what_the_kernel_reads():
    # the kernel reads fields at the generated offsets; the struct packs them there
    assert DESCRIPTOR_STRUCT.size == DESCRIPTOR_SIZE
    text = (hls.HLS_ROOT / "include" / "smartsage_layout.h").read_text()
    for name, _, offset, _ in DESCRIPTOR_FIELDS:
        assert f"SMARTSAGE_DESC_{name.upper()}_OFFSET {offset} " in text


# ------------------------------------------------------------------------- sanitizer build

def test_sanitizer_build_clean(tmp_path, gen):
    """The standalone driver under ASan + UBSan: success, errors and bus errors, memory equal to golden."""
    exe = hls.build_executable(sanitize=True)
    image = make_image(tmp_path, gen, "fp16", dim=5, num_nodes=120)
    with image:
        targets = gen.integers(0, 120, 9)
        targets[0] = 0
        runs = [  # (memory, descriptor address, buffers, outputs compared byte for byte)
            (*device_layout(gen, image, targets, (4, 3), 11, aggregate=True), True),
            (*device_layout(gen, image, targets, (2, 2, 2), 12, aggregate=True), True),
            (*device_layout(gen, image, [5, 999], (3,), 13, aggregate=False), False),
            (*device_layout(gen, image, targets, (4, 3), 14, aggregate=True, caps={"sum": 8}), False),
        ]
        memory, daddr, buffers = device_layout(gen, image, targets, (4, 3), 15, aggregate=True)
        # device memory ends inside the sum buffer: OUTPUT_ERROR, and no room for the result header
        runs.append((memory[:buffers["sum"][0] + 8].copy(), daddr, buffers, False))
        for n, (memory, daddr, buffers, exact) in enumerate(runs):
            mem_in, mem_out = tmp_path / f"in{n}.bin", tmp_path / f"out{n}.bin"
            memory.tofile(mem_in)
            proc = subprocess.run([str(exe), image.path, str(mem_in), str(mem_out), str(daddr), "32", "4"],
                                  capture_output=True, text=True, timeout=120)
            assert proc.returncode in (0, 1), proc.stderr
            assert "AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr
            fields = {k: int(v) for k, v in (line.split("=") for line in proc.stdout.split())}
            gold_mem = memory.copy()
            expected = golden.run_command(image, gold_mem, daddr)
            for name, value in expected.spec_fields().items():
                assert fields[name] == value, (n, name)
            # the harness's storage accounting: its bytes are the result header's storage_bytes
            assert fields["storage_read_bytes"] == fields["storage_bytes"], n
            assert fields["storage_reads"] <= fields["storage_read_bytes"] <= 8 * fields["storage_reads"], n
            assert fields["storage_pages"] <= fields["storage_reads"], n
            after = np.fromfile(mem_out, np.uint8)
            assert after.size == memory.size
            if exact:
                assert after.tobytes() == gold_mem.tobytes()
            limit = np.zeros(memory.size, bool)
            limit[:] = True
            for addr, nbytes in buffers.values():
                limit[addr:addr + nbytes] = False
            assert after[limit].tobytes() == memory[limit].tobytes(), "a write outside the buffers"
            assert (proc.returncode == 0) == (buffers["result"][0] + RESULT_HEADER_SIZE <= memory.size)


# ------------------------------------------------------------------------------ the driver

def test_driver_with_hls_backend_equals_golden_backend(tmp_path, gen):
    from smartsage.host.backends.golden import GoldenBackend
    from smartsage.host.device import Device
    from smartsage.host.driver import DeviceError, SamplerDriver

    image = make_image(tmp_path, gen, "fp16", dim=4, num_nodes=150)
    config = CONFIGS["default"]
    with image, Device(hls.HlsBackend(), image, config, memory_size=4 << 20) as hls_device, \
            Device(GoldenBackend(), image, config, memory_size=4 << 20) as golden_device:
        hls_driver, golden_driver = SamplerDriver(hls_device), SamplerDriver(golden_device)
        for fanouts, aggregate in (((5, 3), True), ((4,), False), ((3, 2, 2), True)):
            targets = gen.integers(0, 150, 20)
            got = hls_driver.sample(targets, fanouts, 17, aggregate=aggregate)
            expected = golden_driver.sample(targets, fanouts, 17, aggregate=aggregate)
            assert got.header.spec_fields() == expected.header.spec_fields()
            assert got.node_list.tobytes() == expected.node_list.tobytes()
            assert got.counts.tobytes() == expected.counts.tobytes()
            if aggregate:
                assert got.sums.tobytes() == expected.sums.tobytes()
                assert got.self_rows.tobytes() == expected.self_rows.tobytes()
        with pytest.raises(DeviceError, match="NODE_OUT_OF_RANGE.*node 150 at hop 0, frontier position 1"):
            hls_driver.sample(np.array([3, 150]), (2,), 1)


# --------------------------------------------------------------------------------- the CLI

def test_cli_sample_hls_equals_golden(tmp_path, gen, monkeypatch, capsys):
    from smartsage.host import cli, cli_sample

    # registered by the lead in cli_sample.SAMPLE_BACKENDS; set here too so the test stands alone
    monkeypatch.setitem(cli_sample.SAMPLE_BACKENDS, "hls", "smartsage.host.backends.hls:sample")
    image = make_image(tmp_path, gen, "bf16", dim=3, num_nodes=300)
    image.close()
    for extra in ([], ["--aggregate", "--fanouts", "6,3,2"]):
        outputs = {}
        for backend in ("golden", "hls"):
            out = tmp_path / f"{backend}.npz"
            assert cli.main(["sample", str(tmp_path / "g.img"), "--backend", backend, "--batch-size", "64",
                             "--seed", "5", "-o", str(out), *extra]) == 0
            with np.load(out) as data:
                outputs[backend] = {name: data[name] for name in data.files}
        assert "hls:" in capsys.readouterr().out
        golden_arrays, hls_arrays = outputs["golden"], outputs["hls"]
        assert set(golden_arrays) == set(hls_arrays)
        for name in golden_arrays:
            if name != "backend":
                assert golden_arrays[name].tobytes() == hls_arrays[name].tobytes(), name
