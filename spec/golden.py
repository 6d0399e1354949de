"""The golden model: the executable form of docs/spec.md, vectorized with numpy.

One command (one mini-batch) = targets, L hops of fanouts, a seed and optional aggregation. This module
computes exactly what the device computes (the RTL and the HLS kernel are checked against it bit for
bit) and is fast enough to be the functional training backend:

* it reads the image only through its mmap views and gathers just the entries the sampling rule reads
  (``indptr[nodes]``, ``indices[positions]``, ``features[rows]``), so images larger than RAM work;
* Floyd's algorithm runs vectorized across all the distinct nodes of a frontier: the k draws of every
  node in one vectorized hash, then k vectorized membership steps (a node with a rejected draw, rare,
  is redone step by step); duplicate frontier entries are sampled once and expanded, which never
  changes results since a sample is a pure function of (seed, hop, node);
* the aggregation is an explicit left fold in sample order in binary32 (never ``np.sum``, which sums
  pairwise), with the canonical NaN applied at the end.

:mod:`smartsage.spec.golden_scalar` is the plain-loop reference that follows the spec's text; tests
cross-check the two bit for bit.

Entry points: :func:`sample` (arrays in, :class:`GoldenResult` out), :func:`run_command` (device-level:
descriptor and buffers in a flat device memory) and :func:`hop_frontiers` (frontier reconstruction).
"""

from __future__ import annotations

import dataclasses
import struct
import time

import numpy as np

from . import rng
from .config import CONFIGS, KernelConfig
from .descriptor import (
    BUFFER_ALIGN,
    DESCRIPTOR_MAGIC,
    DESCRIPTOR_SIZE,
    DESCRIPTOR_VERSION,
    RESULT_HEADER_SIZE,
    SPEC_MAX_HOPS,
    Descriptor,
    Flags,
    ResultHeader,
    Status,
    descriptor_field_offset,
)
from .image import MAGIC, VERSION, FeatureDtype, ImageFormatError

__all__ = [
    "GoldenResult", "SampleStats", "sample", "run_command", "hop_frontiers", "check_descriptor",
    "floyd_positions", "aggregate_rows", "widen_to_fp32", "status_message", "CANONICAL_NAN",
    "U64_MAX", "segment_runs", "command_fields",
]

#: The one NaN bit pattern every aggregation sum that is NaN is written as.
CANONICAL_NAN = 0x7FC00000
U64_MAX = (1 << 64) - 1
#: Degrees must stay below 2^32 (the bounded draw's range is a u32).
MAX_DEGREE = 1 << 32
# Bytes of one indptr entry (u64) and of one sum element (fp32 or i32).
INDPTR_ITEMSIZE = 8
SUM_ITEMSIZE = 4
# The smallest binary32 subnormal: adding it to itself tells whether the FPU flushes subnormals.
_TINY = np.frombuffer(struct.pack("<I", 1), np.float32)[0]
# Rows of the last frontier aggregated per chunk (bounds the temporary gathered rows).
_AGG_CHUNK = 1 << 14
# (node, step) pairs per Floyd chunk (bounds the temporaries: about 10 arrays of this many elements).
_FLOYD_ELEMENTS = 1 << 20
# Largest fanout for which Floyd's membership test runs directly (O(k^2)); above, by sort + recurrence.
_FLOYD_DIRECT_MAX = 40


@dataclasses.dataclass
class SampleStats:
    """Read-cost accounting of one command under the spec's read rule (docs/spec.md, section 2).

    Counts are per frontier *entry*, as the device reads (it does not deduplicate); the golden model
    itself reads each distinct node once. ``storage_bytes`` = 8 x indptr_reads + index itemsize x
    index_reads + row bytes x feature_rows_read (the image header is not counted).
    """

    frontier_entries: int = 0    # frontier entries sampled, all hops
    indptr_reads: int = 0        # indptr entries read (2 per sampled entry)
    index_reads: int = 0         # indices entries read (min(d, k) per sampled entry)
    draws: int = 0               # 32-bit random draws consumed
    rejections: int = 0          # draws rejected by the bounded-integer test
    feature_rows_read: int = 0   # AGGREGATE: |F_{L-1}| self rows + the last hop's sampled rows
    storage_bytes: int = 0
    #: Storage read requests under the read rule: one per indptr pair, one burst per adjacency list with
    #: 0 < d <= k, one per chosen entry when d > k, one per feature row.
    read_requests: int = 0
    #: Distinct 4 KiB storage pages the reads touched; None where an implementation does not count them
    #: (the golden model does not; the HLS and RTL backends count the pages of the reads they issued).
    storage_pages: int | None = None
    #: Wall seconds the model spent in the command's aggregation phase (gathering and folding feature
    #: rows); the rest of the command is sampling. A measurement of this run, not part of the result.
    aggregate_seconds: float = dataclasses.field(default=0.0, compare=False)


@dataclasses.dataclass
class GoldenResult:
    """Everything one command produces.

    On success ``node_list`` has ``header.nodes_written`` entries (targets, then every hop's samples)
    and ``counts`` has ``header.counts_written``. On an error the header carries the status and the
    ``error_*`` fields (``nodes_written``, ``counts_written`` and ``edges_sampled`` are 0) while
    ``node_list``/``counts`` hold the prefix the golden model produced before it stopped (informational:
    the spec leaves partial outputs unspecified) and ``self_rows``/``sums`` are None.
    """

    header: ResultHeader
    node_list: np.ndarray
    counts: np.ndarray
    self_rows: np.ndarray | None
    sums: np.ndarray | None
    stats: SampleStats

    @property
    def ok(self) -> bool:
        return self.header.status == Status.OK


# --------------------------------------------------------------------------------------- helpers

def status_message(header: ResultHeader) -> str:
    """One line naming a result header's status and its error fields (:meth:`ResultHeader.describe`)."""
    return header.describe()


def hop_frontiers(node_list, counts, num_targets: int, fanouts) -> list[np.ndarray]:
    """F_0 .. F_L as prefixes (views) of ``node_list``, rebuilt from the counts (docs/spec.md, section 3).

    |F_0| = num_targets and |F_{h+1}| = |F_h| + sum of hop h's counts; hop h's counts are the |F_h|
    entries after those of the previous hops.

    Raises
    ------
    ValueError
        ``counts`` or ``node_list`` is shorter than the frontiers need.
    """
    node_list = np.asarray(node_list)
    counts = np.asarray(counts)
    sizes = [int(num_targets)]
    consumed = 0
    for hop, _ in enumerate(fanouts):
        size = sizes[-1]
        if consumed + size > counts.size:
            raise ValueError(f"hop {hop} needs counts[{consumed}:{consumed + size}], only {counts.size} given")
        sizes.append(size + int(counts[consumed:consumed + size].sum(dtype=np.uint64)))
        consumed += size
    if sizes[-1] > node_list.size:
        raise ValueError(f"the counts imply {sizes[-1]} node-list entries, only {node_list.size} given")
    return [node_list[:size] for size in sizes]


def widen_to_fp32(rows: np.ndarray, dtype: FeatureDtype) -> np.ndarray:
    """Feature rows in storage representation -> binary32 (exact) or int32 (int8)."""
    dtype = FeatureDtype(dtype)
    if dtype is FeatureDtype.FP32:
        return np.asarray(rows, np.float32)
    if dtype is FeatureDtype.FP16:
        return np.asarray(rows, np.float16).astype(np.float32)
    if dtype is FeatureDtype.BF16:
        return (np.asarray(rows, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    return np.asarray(rows, np.int8).astype(np.int32)


def aggregate_rows(rows: np.ndarray, counts: np.ndarray, dtype: FeatureDtype) -> np.ndarray:
    """Neighbor sums of consecutive groups of rows (docs/spec.md, section 4).

    ``rows`` (E, F) are the sampled rows in storage representation, group i being the next
    ``counts[i]`` rows. Returns (len(counts), F): binary32 sums by an explicit left fold in row order
    (round to nearest even, subnormals kept, NaN canonicalised at the end), or exact int32 sums for int8.
    """
    dtype = FeatureDtype(dtype)
    with np.errstate(all="ignore"):
        values = widen_to_fp32(rows, dtype)
    return _fold(values, np.arange(values.shape[0]), np.asarray(counts, np.int64))


def _fold(values: np.ndarray, row_of_sample: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Left fold per group: group i sums ``values[row_of_sample[s]]`` over its ``counts[i]`` samples s.

    Vectorized across groups: step j adds every group's j-th row, and a group with fewer rows adds
    -0.0 (int: 0), which is an exact identity of IEEE addition (x + -0.0 = x for every x, +0.0
    included). A group without rows starts from +0.0.
    """
    if values.dtype == np.float32 and _TINY + _TINY == 0:
        raise RuntimeError("binary32 additions flush subnormals to zero in this thread (FTZ/DAZ set, e.g. by "
                           "torch.set_flush_denormal(True)): the sums would not be exact")
    num, dim = counts.size, values.shape[1]
    width = int(counts.max()) if num else 0
    if width == 0:
        return np.zeros((num, dim), values.dtype)
    plus_zero, minus_zero = values.shape[0], values.shape[0] + 1
    table = np.empty((values.shape[0] + 2, dim), values.dtype)
    table[:-2] = values
    table[plus_zero] = 0
    table[minus_zero] = -0.0 if values.dtype == np.float32 else 0
    index = np.full((num, width), minus_zero, np.int64)
    index[:, 0] = plus_zero
    owner = np.repeat(np.arange(num), counts)
    index[owner, segment_runs(np.zeros(num, np.int64), counts)] = row_of_sample
    with np.errstate(all="ignore"):  # inf - inf, overflow and sNaN are defined results here, not warnings
        out = table[index[:, 0]]
        step = np.empty_like(out)
        for j in range(1, width):
            np.take(table, index[:, j], axis=0, out=step)
            out += step
    if out.dtype == np.float32:
        bits = out.view(np.uint32)
        bits[np.isnan(out)] = CANONICAL_NAN
    return out


def floyd_positions(node_keys: np.ndarray, degrees: np.ndarray, fanout: int) -> tuple[np.ndarray, np.ndarray]:
    """Robert Floyd's algorithm, vectorized across nodes (docs/spec.md, section 2).

    For every node i (node key H_i, degree d_i > fanout) returns its ``fanout`` distinct edge positions
    in insertion order and the number of draws it consumed::

        for j in d-k .. d-1:  t = bounded(j + 1);  S.append(j if t in S else t)

    Draws 0..k-1 of all nodes are computed at once; the rare node with a rejected draw (probability
    about k d / 2^32) is redone step by step. Returns (positions int64 (N, k), draws uint64 (N,)).
    """
    node_keys = np.asarray(node_keys, np.uint32)
    degrees = np.asarray(degrees, np.uint64)
    k = int(fanout)
    num = node_keys.size
    positions = np.empty((num, k), np.int64)
    draws = np.full(num, k, np.uint64)
    if num and (degrees <= k).any():
        raise ValueError("Floyd's algorithm needs every degree above the fanout")
    if num and int(degrees.max()) >= MAX_DEGREE:
        raise ValueError(f"degree {int(degrees.max())} is not below 2^32")
    steps = np.arange(k, dtype=np.uint64)
    chunk = max(256, _FLOYD_ELEMENTS // k)
    for lo in range(0, num, chunk):
        hi = min(lo + chunk, num)
        keys = node_keys[lo:hi]
        base = degrees[lo:hi] - np.uint64(k)                           # j of the first step
        j = base[:, None] + steps                                      # (n, k): j of every step
        m = rng.draw_np(keys[:, None], steps[None, :]).astype(np.uint64) * (j + np.uint64(1))
        low = m & np.uint64(rng.MASK32)
        rejected = low < j + np.uint64(1)                              # cheap test first
        if rejected.any():
            rows, cols = np.nonzero(rejected)
            n = j[rows, cols] + np.uint64(1)
            rejected[rows, cols] = low[rows, cols] < (np.uint64(1 << 32) - n) % n
        t = (m >> np.uint64(32)).astype(np.int64)
        positions[lo:hi] = np.where(_floyd_collisions(t, base.astype(np.int64)), j.astype(np.int64), t)
        redo = np.flatnonzero(rejected.any(axis=1))
        if redo.size:
            positions[lo + redo], draws[lo + redo] = _floyd_stepwise(keys[redo], degrees[lo:hi][redo], k)
    return positions, draws


def _floyd_collisions(t: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Which steps of Floyd's algorithm find their draw already chosen (and so insert j instead).

    ``t`` (N, k) are the draws of every step, ``base`` (N,) = d - k. For small k the steps are run
    directly (membership against the chosen prefix, O(k^2) per node but few numpy calls); for larger
    k through the equivalent recurrence below.

    With x_i the value inserted at step i (t_i, or j_i = base + i on a collision), the chosen set before
    step s is {t_0..t_{s-1}} together with the j_i of the earlier collision steps: a drawn t_i is in
    the set either way. So step s collides iff t_s repeats an earlier t, or t_s = j_i for an earlier
    step i that collided. The first part is found for all steps at once by a stable sort of each row;
    the second is a recurrence over s with one gather per step (O(k) per node instead of O(k^2)).
    """
    num, k = t.shape
    collides = np.zeros((num, k), bool)
    if k <= _FLOYD_DIRECT_MAX:
        chosen = t.copy()
        for s in range(1, k):
            collides[:, s] = (chosen[:, :s] == t[:, s, None]).any(axis=1)
            chosen[collides[:, s], s] = base[collides[:, s]] + s
        return collides
    order = np.argsort(t, axis=1, kind="stable")
    ordered = np.take_along_axis(t, order, axis=1)
    repeat_sorted = np.zeros((num, k), bool)
    repeat_sorted[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
    np.put_along_axis(collides, order, repeat_sorted, axis=1)
    step_of_j = t - base[:, None]                                     # i such that t = j_i
    earlier_j = (step_of_j >= 0) & (step_of_j < np.arange(k))
    for s in np.flatnonzero(earlier_j.any(axis=0)):
        rows = np.flatnonzero(earlier_j[:, s])
        collides[rows, s] |= collides[rows, step_of_j[rows, s]]
    return collides


def _floyd_stepwise(node_keys: np.ndarray, degrees: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Floyd's algorithm one step at a time, each a bounded draw with rejection (any draw index)."""
    chosen = np.empty((node_keys.size, k), np.int64)
    index = np.zeros(node_keys.size, np.uint64)
    base = degrees - np.uint64(k)
    for step in range(k):
        j = base + np.uint64(step)
        t, index = rng.bounded_np(node_keys, j + np.uint64(1), index)
        t = t.astype(np.int64)
        if step:
            seen = (chosen[:, :step] == t[:, None]).any(axis=1)
            t = np.where(seen, j.astype(np.int64), t)
        chosen[:, step] = t
    return chosen, index


# ---------------------------------------------------------------------------- descriptor checks

def check_descriptor(fields: dict[str, int], feature_dim: int, config: KernelConfig) -> int | None:
    """Byte offset of the first bad descriptor field in layout order, or None (docs/spec.md, 5.2).

    ``fields`` are the raw descriptor fields by name (:meth:`Descriptor.unpack_raw`). The reserved
    fields and the seed are not checked; the capacities other than ``nodes_capacity`` are checked later,
    when the command needs them.
    """
    off = descriptor_field_offset
    flags = fields["flags"]
    aggregate = bool(flags & Flags.AGGREGATE)
    if fields["magic"] != DESCRIPTOR_MAGIC:
        return off("magic")
    if fields["version"] != DESCRIPTOR_VERSION:
        return off("version")
    if flags & ~int(Flags.AGGREGATE) or (aggregate and feature_dim == 0):
        return off("flags")
    if fields["num_targets"] < 1:
        return off("num_targets")
    hops = fields["num_hops"]
    if not 1 <= hops <= config.max_hops:
        return off("num_hops")
    for h in range(SPEC_MAX_HOPS):
        fanout = fields[f"fanout{h}"]
        if (h < hops and not 1 <= fanout <= config.max_fanout) or (h >= hops and fanout != 0):
            return off(f"fanout{h}")
    if fields["nodes_ptr"] % BUFFER_ALIGN:
        return off("nodes_ptr")
    if fields["nodes_capacity"] < fields["num_targets"]:
        return off("nodes_capacity")
    if fields["counts_ptr"] % BUFFER_ALIGN:
        return off("counts_ptr")
    if aggregate and fields["self_ptr"] % BUFFER_ALIGN:
        return off("self_ptr")
    if aggregate and fields["sum_ptr"] % BUFFER_ALIGN:
        return off("sum_ptr")
    if fields["result_ptr"] % BUFFER_ALIGN:
        return off("result_ptr")
    return None


def _image_ok(image) -> bool:
    head = bytes(image.buffer[:12])
    return len(head) == 12 and head[:8] == MAGIC and struct.unpack_from("<I", head, 8)[0] == VERSION


# --------------------------------------------------------------------------------------- engine

def _execute(image, fields: dict[str, int], targets: np.ndarray, config: KernelConfig) -> GoldenResult:
    """Run one command whose descriptor fields and targets are given (targets already in id width)."""
    stats = SampleStats()
    id_dtype = None
    empty_counts = np.zeros(0, np.uint32)

    def fail(status, hop=0, index=0, value=0, node_list=None, counts=None):
        nl = targets if node_list is None else node_list
        return GoldenResult(ResultHeader(status=int(status), error_hop=hop, error_index=index,
                                         error_value=int(value), storage_bytes=_storage_bytes(stats)),
                            nl, empty_counts if counts is None else counts, None, None, stats)

    def _storage_bytes(s: SampleStats) -> int:
        if id_dtype is None:
            return 0
        s.storage_bytes = (INDPTR_ITEMSIZE * s.indptr_reads + id_dtype.itemsize * s.index_reads
                           + image.header.feature_row_bytes * s.feature_rows_read)
        return s.storage_bytes

    # 1. the image header
    if not _image_ok(image):
        return fail(Status.BAD_IMAGE)
    header = image.header
    id_dtype = header.index_dtype.numpy_dtype
    # 2. the descriptor
    bad = check_descriptor(fields, header.feature_dim, config)
    if bad is not None:
        return fail(Status.BAD_DESCRIPTOR, value=bad)
    num_hops = fields["num_hops"]
    fanouts = [fields[f"fanout{h}"] for h in range(num_hops)]
    aggregate = bool(fields["flags"] & Flags.AGGREGATE)
    nodes_cap, counts_cap = fields["nodes_capacity"], fields["counts_capacity"]
    hop_keys = [rng.hop_key(rng.command_key(fields["seed"]), h) for h in range(num_hops)]
    num_nodes = np.uint64(header.num_nodes)
    indptr, indices = image.indptr, image.indices

    node_parts = [np.asarray(targets, id_dtype)]
    count_parts: list[np.ndarray] = []
    frontier = node_parts[0]
    counts_done = 0
    for hop, k in enumerate(fanouts):
        size = frontier.size
        # 3. the counts buffer holds this hop's counts
        if counts_done + size > counts_cap:
            return fail(Status.COUNTS_CAPACITY, hop=hop, value=counts_done + size,
                        node_list=np.concatenate(node_parts), counts=_cat(count_parts))
        # 4. per entry, in order: node in range, then room in the node list
        f64 = frontier.astype(np.uint64)
        out_of_range = np.flatnonzero(f64 >= num_nodes)
        stop = int(out_of_range[0]) if out_of_range.size else size
        valid = f64[:stop].astype(np.int64)
        uniq, inverse = np.unique(valid, return_inverse=True)
        lo = indptr[uniq].astype(np.int64)
        degree_u = indptr[uniq + 1].astype(np.int64) - lo
        if degree_u.size and int(degree_u.max()) >= MAX_DEGREE:
            bad_node = int(uniq[int(np.argmax(degree_u))])
            raise ImageFormatError("indptr", f"node {bad_node} has degree {int(degree_u.max())}, not below 2^32")
        n_u = np.minimum(degree_u, k)
        n = n_u[inverse]
        before = np.empty(stop + 1, np.int64)
        before[0] = size  # the node list holds F_h when hop h starts
        np.cumsum(n, out=before[1:])
        before[1:] += size
        over = np.flatnonzero(before[1:] > nodes_cap)
        error = None
        if over.size:
            stop = int(over[0])
            error = (Status.NODES_CAPACITY, hop, stop, int(before[stop + 1]))
        elif stop < size:
            error = (Status.NODE_OUT_OF_RANGE, hop, stop, int(f64[stop]))
        if error is not None and stop < valid.size:  # sample only the entries before the failing one
            stats.indptr_reads += 2                   # (the failing entry's degree was read)
            stats.read_requests += 1
            valid = valid[:stop]
            used = np.zeros(uniq.size, bool)
            used[inverse[:stop]] = True
            remap = np.cumsum(used) - 1
            uniq, lo, degree_u, n_u = uniq[used], lo[used], degree_u[used], n_u[used]
            inverse = remap[inverse[:stop]]
            n = n[:stop]
        neighbors, draws_u = _sample_unique(indices, hop_keys[hop], uniq, lo, degree_u, n_u, k)
        # back to frontier order; duplicate entries get the identical sample of their node
        u_start = np.zeros(uniq.size, np.int64)
        np.cumsum(n_u[:-1], out=u_start[1:])
        neighbors = neighbors[segment_runs(u_start[inverse], n)]
        draws = draws_u[inverse]
        stats.frontier_entries += valid.size
        stats.indptr_reads += 2 * valid.size
        stats.index_reads += int(n.sum())
        stats.draws += int(draws.sum())
        entry_degree = degree_u[inverse]
        stats.rejections += int(draws.sum()) - k * int(np.count_nonzero(entry_degree > k))
        stats.read_requests += valid.size + int(np.count_nonzero((entry_degree > 0) & (entry_degree <= k))) \
            + k * int(np.count_nonzero(entry_degree > k))
        node_parts.append(neighbors.astype(id_dtype, copy=False))
        count_parts.append(n.astype(np.uint32))
        if error is not None:
            return fail(error[0], hop=error[1], index=error[2], value=error[3],
                        node_list=np.concatenate(node_parts), counts=_cat(count_parts))
        counts_done += size
        frontier = np.concatenate(node_parts)

    node_list = frontier
    counts = _cat(count_parts)
    self_rows = sums = None
    if aggregate:
        # 5. room for the self rows and the sums of the last frontier
        last_size = node_list.size - node_parts[-1].size
        row_bytes = header.feature_row_bytes
        if last_size * row_bytes > fields["self_capacity"]:
            return fail(Status.FEATURES_CAPACITY, index=0, value=last_size * row_bytes,
                        node_list=node_list, counts=counts)
        sum_bytes = last_size * header.feature_dim * SUM_ITEMSIZE
        if sum_bytes > fields["sum_capacity"]:
            return fail(Status.FEATURES_CAPACITY, index=1, value=sum_bytes, node_list=node_list, counts=counts)
        last = node_list[:last_size]
        started = time.perf_counter()
        self_rows, sums = _aggregate(image, last, node_parts[-1], count_parts[-1])
        stats.aggregate_seconds = time.perf_counter() - started
        stats.feature_rows_read = last_size + node_parts[-1].size
        stats.read_requests += stats.feature_rows_read
    result = ResultHeader(status=int(Status.OK), nodes_written=node_list.size, counts_written=counts.size,
                          edges_sampled=node_list.size - targets.size)
    result.storage_bytes = _storage_bytes(stats)
    return GoldenResult(result, node_list, counts, self_rows, sums, stats)


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, np.uint32)


def segment_runs(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for every (s, n): the flat indices of variable-length runs."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offsets = np.zeros(lengths.size, np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    owner = np.repeat(np.arange(lengths.size), lengths)
    return np.arange(total, dtype=np.int64) - offsets[owner] + starts[owner]


def _sample_unique(indices, hop_key: int, nodes, lo, degree, n, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Sampled neighbor ids of distinct nodes (concatenated in node order) and draws used per node."""
    draws = np.zeros(nodes.size, np.uint64)
    floyd = np.flatnonzero(degree > k)
    within = segment_runs(np.zeros(nodes.size, np.int64), n)       # 0..n_i-1 per node
    owner = np.repeat(np.arange(nodes.size), n)
    position = within
    if floyd.size:
        keys = rng.node_key_np(hop_key, nodes[floyd])
        chosen, used = floyd_positions(keys, degree[floyd], k)
        draws[floyd] = used
        row = np.full(nodes.size, -1, np.int64)
        row[floyd] = np.arange(floyd.size)
        rows = row[owner]
        sel = np.flatnonzero(rows >= 0)
        position = within.copy()
        position[sel] = chosen[rows[sel], within[sel]]
    edge = lo[owner] + position
    return np.asarray(indices[edge]), draws


def _aggregate(image, last: np.ndarray, samples: np.ndarray, counts: np.ndarray):
    """Self rows of the last frontier and the sums of each entry's last-hop samples, chunked.

    Each distinct row of a chunk is read (and widened) once.
    """
    features = image.features
    dtype = image.feature_dtype
    dim = image.feature_dim
    sum_dtype = np.int32 if dtype is FeatureDtype.INT8 else np.float32
    self_rows = np.empty((last.size, dim), features.dtype)
    sums = np.empty((last.size, dim), sum_dtype)
    counts = counts.astype(np.int64)
    starts = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    for lo in range(0, last.size, _AGG_CHUNK):
        hi = min(lo + _AGG_CHUNK, last.size)
        self_rows[lo:hi] = _gather_rows(features, last[lo:hi])
        rows, row_of_sample = np.unique(samples[starts[lo]:starts[hi]].astype(np.int64), return_inverse=True)
        with np.errstate(all="ignore"):
            values = widen_to_fp32(np.asarray(features[rows]), dtype)
        sums[lo:hi] = _fold(values, row_of_sample, counts[lo:hi])
    return self_rows, sums


def _gather_rows(features: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """features[nodes], reading each distinct row once."""
    nodes = nodes.astype(np.int64)
    uniq, inverse = np.unique(nodes, return_inverse=True)
    rows = np.asarray(features[uniq])
    return rows if uniq.size == nodes.size and (nodes == uniq).all() else rows[inverse]


# ------------------------------------------------------------------------------------ front ends

def _targets_in_id_width(image, targets) -> np.ndarray:
    targets = np.asarray(targets)
    if targets.ndim != 1:
        raise ValueError(f"Targets must be a 1-D array of node ids, not shape {targets.shape}")
    if targets.size and targets.dtype.kind not in "iu":
        raise ValueError(f"Targets must be integer node ids, not {targets.dtype}")
    id_dtype = image.header.index_dtype.numpy_dtype
    if targets.size and targets.dtype.kind == "i" and int(targets.min()) < 0:
        raise ValueError(f"Targets must be non-negative node ids, not {int(targets.min())}")
    if targets.size and int(targets.max()) >> (8 * id_dtype.itemsize):
        raise ValueError(f"Target {int(targets.max())} does not fit the image's {id_dtype} node ids")
    return targets.astype(id_dtype)


def command_fields(num_targets: int, fanouts, seed: int, aggregate: bool, nodes_capacity: int | None = None,
                   counts_capacity: int | None = None, self_capacity: int | None = None,
                   sum_capacity: int | None = None) -> dict[str, int]:
    """The descriptor fields (by name, as :meth:`Descriptor.unpack_raw` gives them) of a command given
    as arguments; pointers are 0 and a capacity of None is the largest (2^64 - 1)."""
    def cap(value: int | None) -> int:
        return U64_MAX if value is None else int(value)

    fields = dict(
        magic=DESCRIPTOR_MAGIC, version=DESCRIPTOR_VERSION, flags=int(Flags.AGGREGATE) if aggregate else 0,
        seed=seed, num_targets=num_targets, num_hops=len(fanouts), nodes_ptr=0,
        nodes_capacity=cap(nodes_capacity), counts_ptr=0, counts_capacity=cap(counts_capacity), self_ptr=0,
        self_capacity=cap(self_capacity), sum_ptr=0, sum_capacity=cap(sum_capacity), result_ptr=0,
        reserved0=0, reserved1=0, reserved2=0)
    for h in range(SPEC_MAX_HOPS):
        fields[f"fanout{h}"] = int(fanouts[h]) if h < len(fanouts) else 0
    return fields


def sample(image, targets, fanouts, seed: int, aggregate: bool = False,
           config: KernelConfig = CONFIGS["default"], nodes_capacity: int | None = None,
           counts_capacity: int | None = None, self_capacity: int | None = None,
           sum_capacity: int | None = None) -> GoldenResult:
    """One command on ``image`` (a :class:`~smartsage.spec.image.GraphImage`), as the device runs it.

    ``image`` may be any object with a GraphImage's ``header``, ``buffer``, ``feature_dim``,
    ``feature_dtype`` and section views ``indptr``, ``indices`` and ``features``: the views are only
    ever indexed with 1-D integer arrays (never sliced or loaded whole), so instrumented readers work.

    ``fanouts`` are k_0..k_{L-1} (hop 0 from the targets). Capacities are in entries (node list,
    counts) and bytes (self, sum), as in the descriptor; None means large enough. Bad descriptor
    values (no targets, a fanout out of 1..config.max_fanout, ...) give a ``BAD_DESCRIPTOR`` result, as
    on the device; only values a descriptor cannot carry raise.

    Raises
    ------
    ValueError
        Targets not a 1-D array of non-negative ids that fit the image's id width, a seed outside u64.
    """
    fanouts = [int(k) for k in fanouts]
    seed = int(seed)
    if not 0 <= seed <= U64_MAX:
        raise ValueError(f"Seed must be an unsigned 64-bit integer, not {seed!r}")
    targets = _targets_in_id_width(image, targets)
    fields = command_fields(targets.size, fanouts, seed, aggregate, nodes_capacity, counts_capacity,
                            self_capacity, sum_capacity)
    return _execute(image, fields, targets, config)


def run_command(image, memory: np.ndarray, descriptor_addr: int,
                config: KernelConfig = CONFIGS["default"], stats: SampleStats | None = None) -> ResultHeader:
    """Execute the command whose descriptor lies at ``descriptor_addr`` of ``memory`` (device level).

    ``memory`` is the device memory: a writable 1-D ``uint8`` array, address 0 = ``memory[0]``.
    ``image`` is the storage (a GraphImage; its header is read from ``image.buffer``). The model
    reads the descriptor and the targets at ``nodes_ptr``, checks per docs/spec.md section 5, writes
    the node list (entries B onward), the counts, the self and sum rows and finally the result header
    at ``result_ptr``, and never writes outside those buffers. Device memory is modelled as the bus
    does: a read past its end ends the command with STORAGE_ERROR and a write past its end with
    OUTPUT_ERROR (error_value: the first address past the end). A misaligned ``result_ptr``, or one
    whose header would not fit, leaves memory untouched. Returns the result header; a ``stats`` object,
    if given, receives the command's read-cost accounting (:class:`SampleStats`).

    Raises
    ------
    ValueError
        ``memory`` is not a writable 1-D uint8 array, or the descriptor address is not a multiple of
        64 or its 128 bytes are not inside ``memory`` (host errors: no result header can be placed).
    """
    if not (isinstance(memory, np.ndarray) and memory.dtype == np.uint8 and memory.ndim == 1
            and memory.flags.writeable):
        raise ValueError("Device memory must be a writable 1-D uint8 numpy array")
    if descriptor_addr % BUFFER_ALIGN or not 0 <= descriptor_addr <= memory.size - DESCRIPTOR_SIZE:
        raise ValueError(f"Descriptor address {descriptor_addr:#x} is not a 64-byte aligned address of a "
                         f"descriptor inside {memory.size} bytes of device memory")
    fields = Descriptor.unpack_raw(memory[descriptor_addr:descriptor_addr + DESCRIPTOR_SIZE].tobytes())
    mem_size = memory.size

    def finish(header: ResultHeader) -> ResultHeader:
        ptr = fields["result_ptr"]
        if ptr % BUFFER_ALIGN == 0 and ptr + RESULT_HEADER_SIZE <= mem_size:
            memory[ptr:ptr + RESULT_HEADER_SIZE] = np.frombuffer(header.pack(), np.uint8)
        return header

    if _image_ok(image) and check_descriptor(fields, image.header.feature_dim, config) is None:
        id_dtype = image.header.index_dtype.numpy_dtype
        start = fields["nodes_ptr"]
        end = start + fields["num_targets"] * id_dtype.itemsize
        if end > mem_size:
            return finish(ResultHeader(status=int(Status.STORAGE_ERROR), error_value=max(start, mem_size)))
        targets = memory[start:end].view(id_dtype).copy()
    else:
        targets = np.zeros(0, np.uint8)  # the checks fail before any target is read
    result = _execute(image, fields, targets, config)
    if stats is not None:  # the read-cost accounting of the command, for the caller's I/O report
        for field in dataclasses.fields(SampleStats):
            setattr(stats, field.name, getattr(result.stats, field.name))
    if not _image_ok(image):
        return finish(result.header)
    id_size = image.header.index_dtype.itemsize
    writes = [(fields["nodes_ptr"] + targets.size * id_size, result.node_list[targets.size:]),
              (fields["counts_ptr"], result.counts)]
    if result.self_rows is not None:
        writes += [(fields["self_ptr"], result.self_rows), (fields["sum_ptr"], result.sums)]
    for address, array in writes:
        raw = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        if address + raw.size > mem_size and raw.size:
            return finish(ResultHeader(status=int(Status.OUTPUT_ERROR), error_value=max(address, mem_size),
                                       storage_bytes=result.header.storage_bytes))
        memory[address:address + raw.size] = raw
    return finish(result.header)
