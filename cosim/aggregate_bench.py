"""AGGREGATE figures of docs/performance-rtl.md, section 5 (``python -m smartsage.cosim.aggregate_bench``).

1. Feature bytes to the host for one mini-batch (golden model, no simulation): with aggregation
   (self rows + neighbor sums), with device-side gathering only (the rows of the last frontier and
   of its last-hop samples), and what an mmap sampler pulls (every distinct 4 KiB page of the
   features section those rows touch, cold cache).
2. Aggregation throughput on the co-simulated kernel with ideal memory: the same command run with
   and without AGGREGATE; the cycle difference is the aggregation's; feature bytes read per cycle
   as a fraction of the read port's width, and the beats the port carried per cycle (the
   ``storage_bytes`` counter's difference).

:func:`feature_image` writes the random graphs with feature tables (special values included) that
the tests use too.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

import numpy as np

from smartsage.spec import golden
from smartsage.spec.config import KernelConfig, get_config
from smartsage.spec.descriptor import Flags
from smartsage.spec.image import PAGE_SIZE, FeatureDtype, GraphImage, IndexDtype, SectionKind, write_image

from .runner import run_plan
from .scoreboard import CommandSpec

__all__ = ["feature_image", "special_features", "host_feature_bytes", "aggregation_throughput", "main"]


def special_features(rng: np.random.Generator, size: int, dtype: FeatureDtype) -> np.ndarray:
    """``size`` feature elements in storage representation (bit patterns for the float dtypes):
    ordinary values mixed with subnormals, infinities, NaNs (random sign and payload), signed zeros
    and values near the largest finite one (sums overflow); int8 with many -128 and 127."""
    if dtype is FeatureDtype.INT8:
        values = rng.integers(-128, 128, size).astype(np.int8)
        values[rng.random(size) < 0.1] = -128
        values[rng.random(size) < 0.1] = 127
        return values
    bits = 32 if dtype is FeatureDtype.FP32 else 16
    exp_bits, frac_bits = {FeatureDtype.FP32: (8, 23), FeatureDtype.FP16: (5, 10), FeatureDtype.BF16: (8, 7)}[dtype]
    if dtype is FeatureDtype.FP16:
        ordinary = rng.normal(0, 4, size).astype(np.float16).view(np.uint16)
    elif dtype is FeatureDtype.BF16:
        ordinary = (rng.normal(0, 4, size).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    else:
        ordinary = rng.normal(0, 4, size).astype(np.float32).view(np.uint32)
    out = ordinary.astype(np.uint64)
    exp_max = (1 << exp_bits) - 1
    sign = rng.integers(0, 2, size).astype(np.uint64) << np.uint64(bits - 1)
    frac = rng.integers(0, 1 << frac_bits, size).astype(np.uint64)
    kind = rng.random(size)
    classes = [
        (0.12, sign | np.maximum(frac, 1)),                                              # subnormal
        (0.04, sign | np.uint64(exp_max << frac_bits)),                                  # infinity
        (0.04, sign | np.uint64(exp_max << frac_bits) | np.maximum(frac, 1)),            # NaN
        (0.08, sign),                                                                    # +-0
        (0.05, sign | (np.uint64(exp_max - 1) << np.uint64(frac_bits)) | frac),          # near overflow
    ]
    low = 0.0
    for share, values in classes:
        out = np.where((kind >= low) & (kind < low + share), values, out)
        low += share
    storage = np.uint32 if bits == 32 else np.uint16
    return out.astype(storage).view(dtype.numpy_storage)   # bit patterns, never value casts


def feature_image(path, seed: int, num_nodes: int, dim: int, dtype: FeatureDtype, max_degree: int = 7,
                  index_dtype: IndexDtype | None = None) -> None:
    """A random graph (degrees 0..max_degree, some isolated nodes) with a ``dim``-wide feature table."""
    rng = np.random.default_rng(seed)
    degrees = rng.integers(0, max_degree + 1, num_nodes)
    degrees[rng.choice(num_nodes, max(1, num_nodes // 20), replace=False)] = 0
    indptr = np.zeros(num_nodes + 1, np.uint64)
    np.cumsum(degrees, out=indptr[1:])
    indices = rng.integers(0, num_nodes, int(indptr[-1]), dtype=np.uint64)
    features = special_features(rng, num_nodes * dim, dtype).reshape(num_nodes, dim)
    write_image(path, indptr, indices, features=features, feature_dtype=dtype, index_dtype=index_dtype)


def host_feature_bytes(image: GraphImage, targets, fanouts, seed: int) -> dict:
    """Feature bytes to the host for one batch: aggregation, gather only, mmap pages (golden model)."""
    result = golden.sample(image, np.asarray(targets), fanouts, seed, aggregate=True)
    last = result.self_rows.shape[0]
    row = image.header.feature_row_bytes
    rows = result.node_list[:last].astype(np.int64)
    samples = result.node_list[last:].astype(np.int64)
    offset = image.header.section(SectionKind.FEATURES).offset
    every = np.concatenate([rows, samples])
    pages = np.unique(np.concatenate([(offset + every * row) // PAGE_SIZE,
                                      (offset + every * row + row - 1) // PAGE_SIZE])).size
    aggregated = result.self_rows.nbytes + result.sums.nbytes
    return {"last_frontier": int(last), "last_hop_samples": int(samples.size), "row_bytes": row,
            "aggregate": int(aggregated), "gather": int(every.size * row), "mmap": int(pages * PAGE_SIZE),
            "feature_section": int(image.header.section(SectionKind.FEATURES).length)}


def aggregation_throughput(config: KernelConfig, path, targets, fanouts, seed: int) -> dict:
    """Aggregation cycles (ideal memory) and feature bytes read per cycle for one command."""
    commands = [CommandSpec(targets=[int(t) for t in targets], fanouts=list(fanouts), seed=seed, flags=flags)
                for flags in (0, int(Flags.AGGREGATE))]
    result = run_plan(config, path, commands, seed=1)
    sample_cycles, total_cycles = (r["header"]["cycles"] for r in result.results)
    sample_beats, total_beats = (r["header"]["storage_bytes"] // config.data_bytes for r in result.results)
    with GraphImage(path) as image:
        expected = golden.sample(image, np.asarray(targets), fanouts, seed, aggregate=True, config=config)
        elements = expected.stats.feature_rows_read * image.header.feature_dim
        feature_bytes = expected.stats.feature_rows_read * image.header.feature_row_bytes
    cycles = total_cycles - sample_cycles
    return {"sample_cycles": sample_cycles, "aggregate_cycles": cycles, "elements": int(elements),
            "feature_bytes": int(feature_bytes), "elements_per_cycle": elements / cycles,
            "bytes_per_cycle": feature_bytes / cycles,
            "fraction_of_port": feature_bytes / cycles / config.data_bytes,
            # beats the read port carried (a row not aligned to beats costs a partial beat at each end)
            "beats": total_beats - sample_beats, "beats_per_cycle": (total_beats - sample_beats) / cycles}


#: (dtype, F) of the throughput table: fp32 at the goal's F = 64 and larger rows (several chunks at
#: F = 256 on 512 bits), the other dtypes, and short, unaligned rows.
THROUGHPUT_CASES = (("fp32", 64), ("fp32", 128), ("fp32", 256), ("fp32", 100), ("fp16", 64), ("bf16", 128),
                    ("int8", 64), ("int8", 256), ("bf16", 17), ("fp32", 3))


def _case(text: str) -> tuple[str, int]:
    dtype, _, dim = text.partition(":")
    FeatureDtype.parse(dtype)
    if not dim.isdigit() or int(dim) < 1:
        raise argparse.ArgumentTypeError(f"A case is DTYPE:F with F a positive integer, not {text!r}")
    return dtype, int(dim)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="default")
    parser.add_argument("--case", type=_case, action="append",
                        help="throughput case DTYPE:F (repeatable; default: THROUGHPUT_CASES)")
    parser.add_argument("--no-host-bytes", action="store_true", help="skip the bytes-to-host figure")
    parser.add_argument("-o", "--output", help="write the figures as JSON")
    args = parser.parse_args(argv)
    config = get_config(args.config)
    report = {}
    with tempfile.TemporaryDirectory() as workdir:
        if not args.no_host_bytes:
            path = Path(workdir) / "bytes.img"
            feature_image(path, 3, 100_000, 128, FeatureDtype.FP32, max_degree=30)
            with GraphImage(path) as image:
                targets = np.random.default_rng(1).choice(100_000, 1024, replace=False)
                report["host_bytes"] = host_feature_bytes(image, targets, (25, 10), 7)
            path.unlink()
        for dtype, dim in args.case or THROUGHPUT_CASES:
            path = Path(workdir) / f"{dtype}_{dim}.img"
            feature_image(path, 5, 2000, dim, FeatureDtype.parse(dtype), max_degree=20)
            rng = random.Random(1)
            targets = [rng.randrange(2000) for _ in range(32)]
            report[f"throughput_{dtype}_{dim}"] = aggregation_throughput(config, path, targets, (10, 5), 7)
    text = json.dumps(report, indent=2)
    print(text)
    print(f"\n{'dtype':>5} {'F':>4} {'agg. cycles':>11} {'bytes/cycle':>11} {'of the port':>11} {'beats/cycle':>11}")
    for name, figures in report.items():
        if name.startswith("throughput_"):
            dtype, dim = name.split("_")[1:]
            print(f"{dtype:>5} {dim:>4} {figures['aggregate_cycles']:>11} {figures['bytes_per_cycle']:>11.2f} "
                  f"{figures['fraction_of_port']:>11.3f} {figures['beats_per_cycle']:>11.3f}")
    if args.output:
        Path(args.output).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
