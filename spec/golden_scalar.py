"""The scalar reference of the golden model: docs/spec.md read literally, one Python loop per rule.

Slow and independent of the vectorized code in :mod:`smartsage.spec.golden` (which tests compare with
it bit for bit): scalar RNG functions, Floyd's algorithm on a Python list, one entry of the frontier at
a time, and binary32 additions computed exactly with rationals and rounded to nearest even by hand
(no numpy float arithmetic), so a flush-to-zero or a pairwise sum on the vectorized side would show.
Only the descriptor checks (:func:`~smartsage.spec.golden.check_descriptor`) are shared.
"""

from __future__ import annotations

import struct
from fractions import Fraction

import numpy as np

from . import rng
from .config import CONFIGS, KernelConfig
from .descriptor import ResultHeader, Status
from .golden import CANONICAL_NAN, GoldenResult, SampleStats, check_descriptor, command_fields
from .image import FeatureDtype

__all__ = ["sample_scalar", "sample_node", "floyd", "f32_add", "widen_bits", "aggregate_scalar"]

_POS_INF = 0x7F800000
_NEG_INF = 0xFF800000


# ------------------------------------------------------------------------------------ sampling

def floyd(node_key: int, degree: int, fanout: int) -> tuple[list[int], int]:
    """Floyd's algorithm for d > k: (positions in insertion order, draws consumed)."""
    chosen: list[int] = []
    index = 0
    for j in range(degree - fanout, degree):
        t, index = rng.bounded(node_key, j + 1, index)
        chosen.append(j if t in chosen else t)
    return chosen, index


def sample_node(seed: int, hop: int, node: int, degree: int, fanout: int) -> tuple[list[int], int]:
    """Edge positions of ``node`` at ``hop`` (docs/spec.md section 2) and the draws consumed."""
    if degree <= fanout:
        return list(range(degree)), 0
    return floyd(rng.node_key(rng.hop_key(rng.command_key(seed), hop), node), degree, fanout)


# --------------------------------------------------------------------------------- binary32 math

def _f32_value(bits: int):
    """'nan', +-inf as float, or (Fraction, negative-zero flag) for finite values."""
    sign = -1 if bits >> 31 else 1
    exponent = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    if exponent == 0xFF:
        return "nan" if mantissa else sign * float("inf")
    if exponent == 0:
        magnitude = Fraction(mantissa, 1 << 149)
    else:
        magnitude = Fraction((1 << 23) | mantissa) * Fraction(2) ** (exponent - 150)
    return sign * magnitude, sign < 0 and magnitude == 0


def _round_f32(value: Fraction) -> int:
    """Bits of the binary32 nearest to a nonzero rational (ties to even), subnormals and overflow included."""
    sign = 0x80000000 if value < 0 else 0
    magnitude = abs(value)
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** exponent > magnitude:
        exponent -= 1                       # now 2^exponent <= magnitude < 2^(exponent+1)
    quantum = Fraction(2) ** (max(exponent, -126) - 23)
    scaled = magnitude / quantum
    whole = scaled.numerator // scaled.denominator
    rest = scaled - whole
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2):
        whole += 1
    rounded = whole * quantum
    if rounded >= Fraction(2) ** 128:
        return sign | _POS_INF
    return sign | struct.unpack("<I", struct.pack("<f", float(rounded)))[0]


def f32_add(a: int, b: int) -> int:
    """IEEE-754 binary32 addition of two bit patterns, round to nearest even; NaN -> canonical NaN."""
    x, y = _f32_value(a), _f32_value(b)
    if x == "nan" or y == "nan":
        return CANONICAL_NAN
    if isinstance(x, float) or isinstance(y, float):
        if isinstance(x, float) and isinstance(y, float) and x != y:
            return CANONICAL_NAN            # inf + -inf
        inf = x if isinstance(x, float) else y
        return _POS_INF if inf > 0 else _NEG_INF
    (xv, xneg), (yv, yneg) = x, y
    total = xv + yv
    if total == 0:
        return 0x80000000 if xneg and yneg else 0   # -0 + -0 = -0; every other exact zero is +0
    return _round_f32(total)


def widen_bits(raw: int, dtype: FeatureDtype) -> int:
    """A stored element (raw unsigned bits; int8 as its signed value) -> binary32 bits or int."""
    if dtype is FeatureDtype.FP32:
        return raw
    if dtype is FeatureDtype.BF16:
        return raw << 16
    if dtype is FeatureDtype.FP16:
        sign = 0x80000000 if raw >> 15 else 0
        exponent, mantissa = (raw >> 10) & 0x1F, raw & 0x3FF
        if exponent == 0x1F:
            return sign | 0x7F800000 | (mantissa << 13)   # inf, or a NaN (canonicalised by the sum)
        if exponent == 0:
            if mantissa == 0:
                return sign
            exponent = 1
            while not mantissa & 0x400:                    # normalise a subnormal half
                mantissa <<= 1
                exponent -= 1
            mantissa &= 0x3FF
        return sign | ((exponent - 15 + 127) << 23) | (mantissa << 13)
    return raw


def aggregate_scalar(rows: list[list[int]], dtype: FeatureDtype, dim: int) -> list[int]:
    """Sum of the rows in order (section 4): binary32 bits (canonical NaN) or int32 values."""
    if dtype is FeatureDtype.INT8:
        return [sum(row[e] for row in rows) for e in range(dim)]
    out = []
    for e in range(dim):
        acc = 0 if not rows else widen_bits(rows[0][e], dtype)
        for row in rows[1:]:
            acc = f32_add(acc, widen_bits(row[e], dtype))
        if (acc >> 23) & 0xFF == 0xFF and acc & 0x7FFFFF:
            acc = CANONICAL_NAN
        out.append(acc)
    return out


def _row(features: np.ndarray, node: int, dtype: FeatureDtype) -> list[int]:
    raw = features[node]
    if dtype is FeatureDtype.INT8:
        return [int(x) for x in raw]
    return [int(x) for x in raw.view({1: np.uint32, 2: np.uint16, 3: np.uint16}[int(dtype)])]


# ---------------------------------------------------------------------------------- a command

def sample_scalar(image, targets, fanouts, seed: int, aggregate: bool = False,
                  config: KernelConfig = CONFIGS["default"], nodes_capacity: int | None = None,
                  counts_capacity: int | None = None, self_capacity: int | None = None,
                  sum_capacity: int | None = None) -> GoldenResult:
    """:func:`smartsage.spec.golden.sample`, written as plain loops over docs/spec.md."""
    header = image.header
    id_dtype = header.index_dtype.numpy_dtype
    targets = [int(t) for t in targets]
    fanouts = [int(k) for k in fanouts]
    fields = command_fields(len(targets), fanouts, seed, aggregate, nodes_capacity, counts_capacity,
                            self_capacity, sum_capacity)
    nodes_cap, counts_cap = fields["nodes_capacity"], fields["counts_capacity"]
    stats = SampleStats()
    nodes = list(targets)
    counts: list[int] = []

    def result(status=Status.OK, hop=0, index=0, value=0, self_rows=None, sums=None):
        stats.storage_bytes = (8 * stats.indptr_reads + header.index_dtype.itemsize * stats.index_reads
                               + header.feature_row_bytes * stats.feature_rows_read)
        ok = status == Status.OK
        head = ResultHeader(status=int(status), error_hop=hop, error_index=index, error_value=value,
                            nodes_written=len(nodes) if ok else 0, counts_written=len(counts) if ok else 0,
                            edges_sampled=len(nodes) - len(targets) if ok else 0,
                            storage_bytes=stats.storage_bytes)
        return GoldenResult(head, np.array(nodes, id_dtype), np.array(counts, np.uint32), self_rows, sums, stats)

    bad = check_descriptor(fields, header.feature_dim, config)
    if bad is not None:
        return result(Status.BAD_DESCRIPTOR, value=bad)
    indptr, indices = image.indptr, image.indices
    frontier_size = len(targets)
    for hop, k in enumerate(fanouts):
        last_size = frontier_size  # |F_h|; after the loop |F_{L-1}|
        if len(counts) + frontier_size > counts_cap:
            return result(Status.COUNTS_CAPACITY, hop=hop, value=len(counts) + frontier_size)
        for i in range(frontier_size):
            v = nodes[i]
            if v >= header.num_nodes:
                return result(Status.NODE_OUT_OF_RANGE, hop=hop, index=i, value=v)
            start, end = int(indptr[v]), int(indptr[v + 1])
            stats.indptr_reads += 2
            stats.read_requests += 1                          # the indptr pair
            n = min(end - start, k)
            if len(nodes) + n > nodes_cap:
                return result(Status.NODES_CAPACITY, hop=hop, index=i, value=len(nodes) + n)
            positions, draws = sample_node(seed, hop, v, end - start, k)
            assert len(positions) == n
            stats.frontier_entries += 1
            stats.draws += draws
            stats.rejections += draws - (k if end - start > k else 0)
            stats.index_reads += n
            degree = end - start
            stats.read_requests += (1 if degree > 0 else 0) if degree <= k else k  # one burst, or k reads
            nodes.extend(int(indices[start + p]) for p in positions)
            counts.append(n)
        frontier_size = len(nodes)
    if not aggregate:
        return result()
    dtype = header.feature_dtype
    row_bytes = header.feature_row_bytes
    if last_size * row_bytes > fields["self_capacity"]:
        return result(Status.FEATURES_CAPACITY, index=0, value=last_size * row_bytes)
    if last_size * header.feature_dim * 4 > fields["sum_capacity"]:
        return result(Status.FEATURES_CAPACITY, index=1, value=last_size * header.feature_dim * 4)
    features = image.features
    self_rows = np.array([features[v] for v in nodes[:last_size]], features.dtype).reshape(
        last_size, header.feature_dim)
    sums = []
    cursor = last_size
    last_counts = counts[len(counts) - last_size:]
    for i in range(last_size):
        rows = [_row(features, u, dtype) for u in nodes[cursor:cursor + last_counts[i]]]
        cursor += last_counts[i]
        sums.append(aggregate_scalar(rows, dtype, header.feature_dim))
        stats.feature_rows_read += 1 + len(rows)
        stats.read_requests += 1 + len(rows)                  # one request per feature row
    if dtype is FeatureDtype.INT8:
        sums_array = np.array(sums, np.int32).reshape(last_size, header.feature_dim)
    else:
        sums_array = np.array(sums, np.uint32).reshape(last_size, header.feature_dim).view(np.float32)
    return result(self_rows=self_rows, sums=sums_array)

