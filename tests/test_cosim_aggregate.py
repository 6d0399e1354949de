"""AGGREGATE on the co-simulated kernel (docs/spec.md section 4), bit for bit with the golden model.

Random graphs with feature tables of every dtype, including the values an exact sum must get right
(subnormals, infinities, NaNs of any sign and payload, signed zeros, cancellations); feature
dimensions 1, 3, 17 and 64; rows of non-power-of-two length, longer than an accumulator chunk, starting
anywhere in a beat and across 4 KiB pages; 1-3 hops; random backpressure, the SSD timing model;
FEATURES_CAPACITY (self, then sum); a storage error inside the features section and on one beat in
the middle of a burst; write errors in the sums and the self rows. On success the scoreboard compares
the whole device memory (node list, counts, self rows, sums, result header) with the golden model's.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from smartsage.cosim.aggregate_bench import feature_image
from smartsage.cosim.runner import DEFAULT_IMAGE_BASE, run_plan
from smartsage.cosim.scoreboard import CommandSpec
from smartsage.cosim.storage import PM983
from smartsage.spec.config import CONFIGS
from smartsage.spec.descriptor import Flags, Status
from smartsage.spec.image import PAGE_SIZE, FeatureDtype, GraphImage, IndexDtype, SectionKind

pytestmark = pytest.mark.sim

AGGREGATE = int(Flags.AGGREGATE)


def _feature_image(path, seed: int, num_nodes: int, dim: int, dtype: FeatureDtype, max_degree: int = 7,
                   index_dtype: IndexDtype | None = None):
    """A random feature graph (cosim.aggregate_bench.feature_image); checks that its float table
    holds subnormals and NaNs (bit patterns, never value casts)."""
    feature_image(path, seed, num_nodes, dim, dtype, max_degree, index_dtype)
    with GraphImage(path) as image:
        raw = image.features
        if dtype is not FeatureDtype.INT8:
            bits = raw.view(np.uint32 if dtype is FeatureDtype.FP32 else np.uint16).astype(np.uint64)
            exp_bits, frac_bits = {FeatureDtype.FP32: (8, 23), FeatureDtype.FP16: (5, 10),
                                   FeatureDtype.BF16: (8, 7)}[dtype]
            exp = (bits >> np.uint64(frac_bits)) & np.uint64((1 << exp_bits) - 1)
            frac = bits & np.uint64((1 << frac_bits) - 1)
            if raw.size >= 200:
                assert ((exp == 0) & (frac != 0)).any() and ((exp == (1 << exp_bits) - 1) & (frac != 0)).any()


def _commands(rng: random.Random, num_nodes: int, config, count: int, max_hops: int = 3) -> list[CommandSpec]:
    commands = []
    for _ in range(count):
        hops = rng.randint(1, min(max_hops, config.max_hops))
        fanouts = [rng.randint(1, min(config.max_fanout, 6)) for _ in range(hops)]
        batch = rng.randint(1, 4 if hops == 3 else 6)
        commands.append(CommandSpec(targets=[rng.randrange(num_nodes) for _ in range(batch)], fanouts=fanouts,
                                    seed=rng.getrandbits(64), flags=AGGREGATE))
    return commands


@pytest.mark.parametrize("dtype, dim, config_name, backpressure", [
    ("fp32", 17, "small", 0.3),
    ("fp16", 3, "wide2", 0.2),
    ("bf16", 64, "default", 0.0),
    ("int8", 1, "small", 0.2),
    ("int8", 17, "default", 0.3),
    ("fp32", 1, "default", 0.2),
])
def test_aggregate_bit_exact(tmp_path, dtype, dim, config_name, backpressure):
    dtype = FeatureDtype.parse(dtype)
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    config = CONFIGS[config_name]
    image = tmp_path / "features.img"
    num_nodes = 150
    _feature_image(image, seed, num_nodes, dim, dtype)
    commands = _commands(random.Random(seed), num_nodes, config, 4)
    result = run_plan(config, image, commands, backpressure=backpressure, seed=seed)
    assert [r["header"]["status"] for r in result.results] == [Status.OK] * len(commands)
    assert sum(r["header"]["edges_sampled"] for r in result.results) > 0


def test_aggregate_u64_ids_and_full_fanout(tmp_path):
    """u64 node ids (the sample ids are 8-byte node-list entries) and the largest fanout of the build."""
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    config = CONFIGS["small"]
    image = tmp_path / "features.img"
    num_nodes = 100
    _feature_image(image, seed, num_nodes, 9, FeatureDtype.BF16, max_degree=3 * config.max_fanout,
                   index_dtype=IndexDtype.U64)
    rng = random.Random(seed)
    commands = [CommandSpec(targets=[rng.randrange(num_nodes) for _ in range(3)],
                            fanouts=[3, config.max_fanout], seed=rng.getrandbits(64), flags=AGGREGATE),
                CommandSpec(targets=[rng.randrange(num_nodes) for _ in range(2)], fanouts=[config.max_fanout],
                            seed=rng.getrandbits(64), flags=AGGREGATE)]
    result = run_plan(config, image, commands, backpressure=0.2, seed=seed)
    assert [r["header"]["status"] for r in result.results] == [Status.OK] * len(commands)


def test_aggregate_with_ssd_timing(tmp_path):
    """Features straddling pages (row of 3 x fp16 = 6 bytes) under the SSD latency model."""
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    config = CONFIGS["small"]
    image = tmp_path / "features.img"
    num_nodes = 1500   # 9 KB of features: rows across page boundaries
    _feature_image(image, seed, num_nodes, 3, FeatureDtype.FP16)
    commands = _commands(random.Random(seed), num_nodes, config, 1, max_hops=2)
    result = run_plan(config, image, commands, timing=PM983, seed=seed)
    assert result.results[0]["header"]["status"] == Status.OK


def test_aggregate_errors_then_ok(tmp_path):
    """FEATURES_CAPACITY (self first, then sum), a misaligned self/sum pointer, a storage error in
    the features section; the kernel keeps working after each."""
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    config = CONFIGS["small"]
    image = tmp_path / "features.img"
    num_nodes = 120
    dim = 5
    _feature_image(image, seed, num_nodes, dim, FeatureDtype.FP16, max_degree=4)
    with GraphImage(image) as img:
        features = img.header.section(SectionKind.FEATURES)
        features_range = (features.offset, features.offset + max(features.length, PAGE_SIZE))
    rng = random.Random(seed)
    targets = [rng.randrange(num_nodes) for _ in range(4)]
    base = dict(targets=targets, fanouts=[3, 2], seed=rng.getrandbits(64), flags=AGGREGATE)
    commands = [
        CommandSpec(**base, self_capacity=0, sum_capacity=0),            # self first: error_index 0
        CommandSpec(**base, sum_capacity=4),                              # sum: error_index 1
        CommandSpec(**base, overrides={"self_ptr": "+8"}),
        CommandSpec(**base, overrides={"sum_ptr": "+4"}),
        CommandSpec(**base, storage_errors=[features_range]),
        CommandSpec(**base, write_error=("sum", 4)),
        CommandSpec(**base),
    ]
    result = run_plan(config, image, commands, backpressure=0.2, seed=seed, check=False)
    headers = [r["header"] for r in result.results]
    problems = [p for r in result.results for p in r["problems"]]
    assert not problems, problems
    assert [h["status"] for h in headers] == [
        Status.FEATURES_CAPACITY, Status.FEATURES_CAPACITY, Status.BAD_DESCRIPTOR, Status.BAD_DESCRIPTOR,
        Status.STORAGE_ERROR, Status.OUTPUT_ERROR, Status.OK]
    assert headers[0]["error_index"] == 0 and headers[1]["error_index"] == 1
    assert headers[1]["error_value"] > 4


def _straddles(image_path, dim_bytes: int, num_nodes: int) -> tuple[int, int]:
    """(rows across a 4 KiB page boundary, rows not starting on a 64-byte boundary) of the table."""
    with GraphImage(image_path) as img:
        base = img.header.section(SectionKind.FEATURES).offset
    starts = [base + v * dim_bytes for v in range(num_nodes)]
    return (sum(s // PAGE_SIZE != (s + dim_bytes - 1) // PAGE_SIZE for s in starts),
            sum(s % 64 != 0 for s in starts))


@pytest.mark.parametrize("dtype, dim, config_name", [
    ("fp32", 100, "default"),    # 400-byte rows: across 4 KiB pages, unaligned starts
    ("fp32", 300, "default"),    # 3 chunks of 128 elements, across pages
    ("bf16", 17, "default"),     # 34-byte rows straddling beats
    ("int8", 600, "wide2"),      # 600 / 32-element chunks, unaligned
    ("fp16", 45, "small"),       # 64-bit bus: 3 chunks of 16 elements, unaligned
    ("fp32", 3, "wide2"),
])
def test_aggregate_row_shapes(tmp_path, dtype, dim, config_name):
    """Feature rows of non-power-of-two length, longer than one accumulator chunk, starting anywhere in
    a beat and across 4 KiB pages (the burst reader splits there); bit-exact, random backpressure."""
    dtype = FeatureDtype.parse(dtype)
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    config = CONFIGS[config_name]
    image = tmp_path / "features.img"
    num_nodes = 200
    _feature_image(image, seed, num_nodes, dim, dtype, max_degree=9)
    across_pages, unaligned = _straddles(image, dim * dtype.itemsize, num_nodes)
    assert unaligned > 0 and (across_pages > 0 or dim * dtype.itemsize * num_nodes < PAGE_SIZE)
    rng = random.Random(seed)
    commands = _commands(rng, num_nodes, config, 3, max_hops=2)
    commands[0].targets += [rng.randrange(num_nodes) for _ in range(10)]
    result = run_plan(config, image, commands, backpressure=0.25, seed=seed)
    assert [r["header"]["status"] for r in result.results] == [Status.OK] * len(commands)


def test_aggregate_storage_error_mid_burst(tmp_path):
    """A read error on one beat in the middle of a feature row's burst (the beats before it answer
    OKAY): STORAGE_ERROR naming that beat, every read and write in flight finished, nothing written
    outside the buffers; a write error inside the self rows gives OUTPUT_ERROR; a device-memory read
    error on a count (read back only by the aggregation) gives STORAGE_ERROR; then the kernel works
    again."""
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    config = CONFIGS["default"]
    image = tmp_path / "features.img"
    num_nodes = 64
    dim = 256                                   # fp32: 1 KiB rows, 16 beats, 2 chunks
    _feature_image(image, seed, num_nodes, dim, FeatureDtype.FP32, max_degree=6)
    with GraphImage(image) as img:
        features = img.header.section(SectionKind.FEATURES).offset
    rng = random.Random(seed)
    target = rng.randrange(num_nodes)
    row = features + target * dim * 4
    bad_beat = (row + 5 * 64, row + 6 * 64)     # the 6th beat of the target's own (self) row
    targets = [rng.randrange(num_nodes) for _ in range(5)] + [target]
    base = dict(targets=targets, fanouts=[4], seed=rng.getrandbits(64), flags=AGGREGATE)
    commands = [CommandSpec(**base, storage_errors=[bad_beat]),
                CommandSpec(**base, write_error=("self", 3 * dim * 4 + 100)),
                CommandSpec(**base, read_error=("counts", 4 * 4)),    # entry 4's count: read only here
                CommandSpec(**base)]
    result = run_plan(config, image, commands, backpressure=0.2, seed=seed, check=False)
    problems = [p for r in result.results for p in r["problems"]]
    assert not problems, problems
    headers = [r["header"] for r in result.results]
    assert [h["status"] for h in headers] == [Status.STORAGE_ERROR, Status.OUTPUT_ERROR, Status.STORAGE_ERROR,
                                              Status.OK]
    assert headers[0]["error_value"] == DEFAULT_IMAGE_BASE + bad_beat[0]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16", "int8"])
def test_aggregate_long_random_run(tmp_path, dtype):
    """12 commands, larger batches and dims, random backpressure."""
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    config = CONFIGS["default"]
    rng = random.Random(seed)
    image = tmp_path / "features.img"
    num_nodes = 600
    _feature_image(image, seed, num_nodes, rng.choice([2, 8, 13, 33]), FeatureDtype.parse(dtype), max_degree=12)
    commands = _commands(rng, num_nodes, config, 12)
    for command in commands[::3]:
        command.targets += [rng.randrange(num_nodes) for _ in range(12)]
    result = run_plan(config, image, commands, backpressure=0.3, seed=seed)
    assert [r["header"]["status"] for r in result.results] == [Status.OK] * len(commands)
