"""Performance model of the device path and of the software baselines (docs/performance-model.md).

RTL co-simulation gives the device's time exactly but reaches only small graphs (every simulated
flash read waits ~21 K cycles). This module turns the *read trace* of a mini-batch, which the golden
model gives exactly at any scale, into time, for the device and for the host-side baselines, with
the storage, link and clock parameters of ARCHITECTURE.md. It is calibrated against the
co-simulation (device) and against measurement on this machine's disk (mmap, O_DIRECT).

Public API
----------
read_trace(image, targets, fanouts, seed, aggregate=False, config=CONFIGS["default"], *,
           granularity="spec", feature_dim=None, feature_itemsize=4) -> ReadTrace
    The exact storage reads of one command under the spec's read rule (docs/spec.md, section 2),
    per frontier *entry* (the device does not deduplicate), in issue order, with the 4 KiB pages each
    read touches; beside them the gathers a host-side sampler makes for the same batch (the pages an
    mmap sampler faults in, the coalesced runs an O_DIRECT sampler reads). ``granularity="rtl"``
    splits the reads the way this RTL issues them (indptr pairs and dense adjacency lists per data
    beat, the 7 image-header words, feature rows per 4 KiB burst): what the co-simulation's storage
    model sees. Featureless images get a *virtual* feature section after the graph
    (``feature_dim`` x ``feature_itemsize`` bytes per row).
SsdModel(name, latency_us, iops, bandwidth_gbs, max_outstanding=256, iops_by_queue_depth=None)
    One SSD; :data:`PM983` (the SmartSSD's SSD, identical to ``cosim.storage.PM983``), :data:`PM1733`
    (a Gen4 enterprise drive), :func:`ssd_preset` by name, :meth:`SsdModel.from_probe` for this
    machine's disk (:func:`probe_disk`, re-exported from :mod:`smartsage.host.disk_probe`).
PageCache(capacity_bytes)
    The SmartSSD's on-board DRAM as an LRU page cache, the co-simulation's semantics: a flash read
    inserts the page, a hit refreshes it; :meth:`PageCache.access` runs a trace.
DeviceModel(config, ssd=PM983, attachment="flash", clock_mhz=None, ...)
    :meth:`DeviceModel.batch_time(trace, cache)` -> :class:`DeviceTime`: per phase (hop, aggregation)
    flash reads at the IOPS ceiling or Little's law of the kernel's outstanding reads, dependent
    latency rounds, kernel compute from measured cycles per edge / per aggregated beat, PCIe Gen3 x4
    for the results. ``attachment="p2p"`` is the SmartSSD path: indptr resident in the 4 GiB DDR,
    each hop's index (and the aggregation's feature) pages staged by host-issued P2P reads.
mmap_time(trace, ssd, host_cpu_s=0.0, fault_us=..., cache=None) -> HostTime
direct_time(trace, ssd, host_cpu_s=0.0, queue_depth=64, per_read_us=0.0) -> HostTime
    The host baselines from their page and run counts: mmap faults one page at a time (queue depth
    1 with MADV_RANDOM); O_DIRECT reads each gather's runs at a deep queue, one gather after another.
epoch_time(stage_seconds, batches, pipelined=True) -> float
    Serial sum of the stages, or the pipeline's steady state (the slowest stage) plus one fill.

All times are seconds. Bad inputs raise ValueError naming the cause.
"""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np

from smartsage.spec import golden, rng
from smartsage.spec.config import CONFIGS, KernelConfig
from smartsage.spec.descriptor import RESULT_HEADER_SIZE
from smartsage.spec.image import PAGE_SIZE, SectionKind, align_up

from .disk_probe import DirectIOUnavailable, DiskProbe, probe_disk

__all__ = [
    "ReadTrace", "Gather", "read_trace", "SsdModel", "PM983", "PM1733", "SSD_PRESETS", "ssd_preset",
    "PageCache", "DeviceModel", "DeviceTime", "HostTime", "mmap_time", "direct_time", "epoch_time",
    "probe_disk", "DiskProbe", "DirectIOUnavailable", "PCIE_GEN3_X4_GBS", "CYCLES_PER_EDGE_PER_LANE",
    "AGG_BEATS_PER_CYCLE", "SECTIONS",
]

#: Host link of the SmartSSD: PCIe Gen3 x4, GB/s (ARCHITECTURE.md).
PCIE_GEN3_X4_GBS = 3.9
#: Measured kernel cost with ideal memory (docs/performance-rtl.md, section 1): cycles per sampled
#: edge per lane (4-lane default build, fanouts 25,10).
CYCLES_PER_EDGE_PER_LANE = 1.011
#: Measured aggregation throughput: read beats of the 512-bit port per cycle (section 5: 0.977).
AGG_BEATS_PER_CYCLE = 0.98
#: Sections of a trace, by code (``ReadTrace.section``).
SECTIONS = ("header", "indptr", "indices", "features")
_HEADER, _INDPTR, _INDICES, _FEATURES = range(4)
#: RTL: the image-header words the kernel reads at the start of a command (one round).
_RTL_HEADER_READS = 7
#: RTL: a burst never crosses 4 KiB and is at most 256 beats.
_MAX_BURST_BEATS = 256
#: RTL: jobs a lane holds before it starts them (its queue, rtl/job_dispatcher.py: JOBS_PER_LANE), and the
#: aggregator's group of entries and chunk of accumulator words (rtl/feature_aggregator.py: SLOTS, CHUNK_BEATS).
_LANE_JOB_SLOTS = 4
_AGG_SLOTS = 6
_AGG_CHUNK_WORDS = 8
#: Rows per chunk of the golden model's aggregation (its gathers are per chunk).
_AGG_CHUNK = golden._AGG_CHUNK


# ------------------------------------------------------------------------------------ read traces

@dataclasses.dataclass
class Gather:
    """One array gather of a host-side sampler (what one ``section[rows]`` of the golden model reads).

    Members
    -------
    section : str
    pages : ndarray of int64
        Distinct 4 KiB storage pages the gather touches, sorted.
    runs : int
        Runs of adjacent pages (at most ``max_run_pages`` each): the O_DIRECT sampler's reads.
    phase : int
        Hop (0..L-1) or L for the aggregation's gathers.
    """

    section: str
    pages: np.ndarray
    runs: int
    phase: int


@dataclasses.dataclass
class ReadTrace:
    """The storage reads of one command, the device's and a host-side sampler's.

    Device reads (one entry per read request, in issue order)
    -------------------------------------------------------
    req_section, req_phase : ndarray of int8
        Section code (:data:`SECTIONS`) and phase (hop 0..L-1, L = aggregation) of each request.
    req_bytes : ndarray of int64
        Bytes the request asks for.
    req_entry : ndarray of int64
        The frontier entry (of its phase's frontier; F_{L-1} for the aggregation) the request is for;
        -1 for the image-header reads.
    req_first_page, req_num_pages : ndarray of int64
        The 4 KiB pages the request touches.
    pages : ndarray of int64
        Page ids of all requests in issue order (a request touching two pages gives two entries).
    page_section, page_phase : ndarray of int8
        Section and phase of each entry of ``pages``.

    Batch facts
    -----------
    num_targets, fanouts, aggregate, granularity
    frontier_entries : list of int
        Entries sampled per hop (|F_h|).
    edges : list of int
        Ids sampled per hop.
    node_list_entries, counts_entries : int
    last_frontier : int
        |F_{L-1}|: the rows of self features and of sums the device returns with AGGREGATE.
    feature_row_bytes, sum_row_bytes, id_bytes : int
    distinct_nodes : int
        Distinct nodes of D_0 (the rows a host gathers when the device only samples).
    host_gathers : list of Gather
        The golden model's gathers for the same batch (sampling, and features when ``aggregate``).
    feature_gather : Gather
        The distinct feature pages of D_0 (a host gathering the features after device sampling).
    """

    req_section: np.ndarray
    req_phase: np.ndarray
    req_bytes: np.ndarray
    req_entry: np.ndarray
    req_first_page: np.ndarray
    req_num_pages: np.ndarray
    pages: np.ndarray
    page_section: np.ndarray
    page_phase: np.ndarray
    num_targets: int
    fanouts: tuple[int, ...]
    aggregate: bool
    granularity: str
    frontier_entries: list[int]
    edges: list[int]
    node_list_entries: int
    counts_entries: int
    last_frontier: int
    feature_row_bytes: int
    sum_row_bytes: int
    id_bytes: int
    distinct_nodes: int
    host_gathers: list[Gather]
    feature_gather: Gather

    @property
    def num_phases(self) -> int:
        return len(self.fanouts) + 1

    @property
    def requests(self) -> int:
        """Device read requests (equals golden's ``SampleStats.read_requests`` for ``granularity="spec"``)."""
        return int(self.req_bytes.size)

    @property
    def bytes(self) -> int:
        """Device bytes read (equals golden's ``SampleStats.storage_bytes`` for ``granularity="spec"``)."""
        return int(self.req_bytes.sum())

    def section_requests(self, section: str) -> int:
        return int(np.count_nonzero(self.req_section == SECTIONS.index(section)))

    def section_bytes(self, section: str) -> int:
        return int(self.req_bytes[self.req_section == SECTIONS.index(section)].sum())

    def section_pages(self, section: str) -> np.ndarray:
        """Page ids of one section's reads, in issue order."""
        return self.pages[self.page_section == SECTIONS.index(section)]

    @property
    def device_bytes_to_host(self) -> int:
        """What the device returns over PCIe: node list (entries past the targets), counts, result
        header and, with AGGREGATE, the self rows and sums of F_{L-1}."""
        total = (self.node_list_entries - self.num_targets) * self.id_bytes + 4 * self.counts_entries \
            + RESULT_HEADER_SIZE
        if self.aggregate:
            total += self.last_frontier * (self.feature_row_bytes + self.sum_row_bytes)
        return total

    def mmap_pages(self, sampling_only: bool = False) -> np.ndarray:
        """Distinct pages an mmap sampler faults in from a cold cache (sorted)."""
        gathers = [g for g in self.host_gathers if not (sampling_only and g.section == "features")]
        if not gathers:
            return np.zeros(0, np.int64)
        return np.unique(np.concatenate([g.pages for g in gathers]))

    def direct_reads(self, sampling_only: bool = False) -> tuple[int, int]:
        """(runs, pages) an O_DIRECT sampler reads: every gather's distinct pages, coalesced."""
        gathers = [g for g in self.host_gathers if not (sampling_only and g.section == "features")]
        return sum(g.runs for g in gathers), sum(int(g.pages.size) for g in gathers)


def _runs(pages: np.ndarray, max_run_pages: int) -> int:
    """Runs of adjacent pages in sorted distinct ``pages``, each split into at most ``max_run_pages``."""
    if pages.size == 0:
        return 0
    breaks = np.flatnonzero(np.diff(pages) != 1)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks + 1, [pages.size]])
    return int(np.sum((ends - starts + max_run_pages - 1) // max_run_pages))


def _row_pages(base: int, rows: np.ndarray, row_bytes: int) -> np.ndarray:
    """Distinct pages holding the given rows of a section (the software samplers' ``pages_of``)."""
    if rows.size == 0 or row_bytes == 0:
        return np.zeros(0, np.int64)
    start = base + rows.astype(np.int64) * row_bytes
    first = start // PAGE_SIZE
    last = (start + row_bytes - 1) // PAGE_SIZE
    return np.unique(np.concatenate([first, last]))  # a row spans at most 2 pages when row <= 4 KiB


def _gather(section: str, base: int, rows: np.ndarray, row_bytes: int, phase: int, max_run_pages: int) -> Gather:
    if row_bytes > PAGE_SIZE:  # rows wider than a page: every page between first and last
        start = base + rows.astype(np.int64) * row_bytes
        span = (row_bytes + PAGE_SIZE - 1) // PAGE_SIZE + 1
        pages = (start // PAGE_SIZE)[:, None] + np.arange(span)
        pages = np.unique(pages[pages <= ((start + row_bytes - 1) // PAGE_SIZE)[:, None]])
    else:
        pages = _row_pages(base, rows, row_bytes)
    return Gather(section, pages, _runs(pages, max_run_pages), phase)


def read_trace(image, targets, fanouts, seed: int, aggregate: bool = False,
               config: KernelConfig = CONFIGS["default"], *, granularity: str = "spec",
               feature_dim: int | None = None, feature_itemsize: int = 4,
               max_run_pages: int = 32) -> ReadTrace:
    """The storage read trace of one command (see the module docstring).

    Parameters
    ----------
    image : GraphImage
    targets : array of int
    fanouts : sequence of int
    seed : int
    aggregate : bool
        Include the AGGREGATE reads (self rows of F_{L-1}, the last hop's sampled rows).
    config : KernelConfig
        The kernel build (its ``data_width`` sets the beat size of ``granularity="rtl"``).
    granularity : {"spec", "rtl"}
        ``spec``: the read rule of docs/spec.md (one read per indptr pair, one burst per adjacency
        list with 0 < d <= k, one read per chosen entry when d > k, one per feature row).
        ``rtl``: as this RTL issues them (see the module docstring).
    feature_dim, feature_itemsize :
        For a featureless image: the virtual feature rows (placed after the image, page aligned).
        Ignored when the image has features.
    max_run_pages : int
        Longest run of adjacent pages an O_DIRECT sampler reads in one request.

    Raises
    ------
    ValueError
        Unknown granularity; the command fails on the golden model (the status is named);
        ``aggregate`` on a featureless image without ``feature_dim``.
    """
    if granularity not in ("spec", "rtl"):
        raise ValueError(f"Granularity must be 'spec' or 'rtl', not {granularity!r}")
    fanouts = tuple(int(k) for k in fanouts)
    targets = np.asarray(targets)
    header = image.header
    result = golden.sample(image, targets, fanouts, seed, aggregate=False, config=config)
    if not result.ok:
        raise ValueError(f"The command fails on the golden model: {result.header.describe()}")
    frontiers = golden.hop_frontiers(result.node_list, result.counts, targets.size, fanouts)
    indptr = image.indptr
    indptr_off = header.section(SectionKind.INDPTR).offset
    indices_off = header.section(SectionKind.INDICES).offset
    item = header.index_dtype.itemsize
    beat = config.data_bytes
    if image.feature_dim:
        feat_off = header.section(SectionKind.FEATURES).offset
        row_bytes = header.feature_row_bytes
        dim_of_rows = image.feature_dim
        sum_row = image.feature_dim * golden.SUM_ITEMSIZE
    else:
        dim = int(feature_dim or 0)
        if aggregate and dim <= 0:
            raise ValueError("AGGREGATE on a featureless image needs feature_dim (the virtual feature rows)")
        feat_off = align_up(header.file_size)
        row_bytes = dim * int(feature_itemsize)
        dim_of_rows = dim
        sum_row = dim * golden.SUM_ITEMSIZE
    key = rng.command_key(int(seed))

    sec_parts, phase_parts, addr_parts, nbytes_parts, entry_parts = [], [], [], [], []

    def emit(section: int, phase: int, addr: np.ndarray, nbytes: np.ndarray, entry: np.ndarray) -> None:
        sec_parts.append(np.full(addr.size, section, np.int8))
        phase_parts.append(np.full(addr.size, phase, np.int8))
        addr_parts.append(addr.astype(np.int64))
        nbytes_parts.append(np.broadcast_to(np.asarray(nbytes, np.int64), addr.shape).copy())
        entry_parts.append(np.asarray(entry, np.int64))

    if granularity == "rtl":
        emit(_HEADER, 0, np.arange(_RTL_HEADER_READS, dtype=np.int64) * 8, np.int64(8),
             np.full(_RTL_HEADER_READS, -1))
    gathers: list[Gather] = []
    frontier_sizes, edge_counts = [], []
    consumed = 0
    for hop, k in enumerate(fanouts):
        frontier = frontiers[hop].astype(np.int64)
        size = frontier.size
        frontier_sizes.append(size)
        uniq, inverse = np.unique(frontier, return_inverse=True)
        lo_u = np.asarray(indptr[uniq]).astype(np.int64)
        deg_u = np.asarray(indptr[uniq + 1]).astype(np.int64) - lo_u
        n_u = np.minimum(deg_u, k)
        # Positions of each distinct node's sampled entries (Floyd for d > k, all d otherwise).
        big = np.flatnonzero(deg_u > k)
        pos_big = np.zeros((0, k), np.int64)
        if big.size:
            keys = rng.node_key_np(rng.hop_key(key, hop), uniq[big].astype(np.uint64))
            pos_big, _ = golden.floyd_positions(keys, deg_u[big].astype(np.uint64), k)
        # host-side sampler's gathers: indptr[uniq], indptr[uniq + 1], indices[edges of uniq]
        gathers.append(_gather("indptr", indptr_off, uniq, 8, hop, max_run_pages))
        gathers.append(_gather("indptr", indptr_off, uniq + 1, 8, hop, max_run_pages))
        small = deg_u <= k
        edge_rows = [golden.segment_runs(lo_u[small], n_u[small])]
        if big.size:
            edge_rows.append((lo_u[big][:, None] + pos_big).reshape(-1))
        gathers.append(_gather("indices", indices_off, np.concatenate(edge_rows), item, hop, max_run_pages))
        # device reads, per frontier entry, in frontier order: the indptr pair, then the index reads
        deg = deg_u[inverse]
        lo = lo_u[inverse]
        entry = np.arange(size, dtype=np.int64)
        reqs = []  # (entry, order within entry, section, addr, nbytes)
        pair = indptr_off + frontier * 8
        if granularity == "rtl":
            split = (pair // beat) != ((pair + 8) // beat)
            one = ~split
            reqs.append((entry[one], np.zeros(int(one.sum()), np.int64), pair[one], np.full(int(one.sum()), 16)))
            two = np.flatnonzero(split)
            reqs.append((np.repeat(two, 2), np.tile([0, 1], two.size),
                         (pair[two][:, None] + np.array([0, 8])).reshape(-1), np.full(2 * two.size, 8)))
        else:
            reqs.append((entry, np.zeros(size, np.int64), pair, np.full(size, 16)))
        dense = np.flatnonzero((deg > 0) & (deg <= k))
        start = indices_off + lo[dense] * item
        length = deg[dense] * item
        if granularity == "rtl":  # one read per data beat of the list
            first_beat = start // beat
            beats = (start + length - 1) // beat - first_beat + 1
            which = np.repeat(dense, beats)
            idx = golden.segment_runs(np.zeros(dense.size, np.int64), beats)
            b_addr = (np.repeat(first_beat, beats) + idx) * beat
            b_lo = np.maximum(b_addr, np.repeat(start, beats))
            b_hi = np.minimum(b_addr + beat, np.repeat(start + length, beats))
            reqs.append((which, 2 + idx, b_lo, b_hi - b_lo))
        else:
            reqs.append((dense, np.full(dense.size, 2), start, length))
        sparse = np.flatnonzero(deg > k)
        if sparse.size:
            row_of_u = np.full(uniq.size, -1, np.int64)
            row_of_u[big] = np.arange(big.size)
            positions = pos_big[row_of_u[inverse[sparse]]]                 # (entries, k)
            addr = indices_off + (lo[sparse][:, None] + positions) * item
            reqs.append((np.repeat(sparse, k), np.tile(np.arange(k) + 2, sparse.size), addr.reshape(-1),
                         np.full(sparse.size * k, item)))
        ent = np.concatenate([r[0] for r in reqs])
        sub = np.concatenate([r[1] for r in reqs])
        order = np.lexsort((sub, ent))
        addrs = np.concatenate([r[2] for r in reqs])[order]
        nbytes = np.concatenate([np.asarray(r[3], np.int64) for r in reqs])[order]
        is_indptr = np.concatenate([np.full(r[0].size, i == 0 or (granularity == "rtl" and i == 1))
                                    for i, r in enumerate(reqs)])[order]
        sec_parts.append(np.where(is_indptr, _INDPTR, _INDICES).astype(np.int8))
        phase_parts.append(np.full(addrs.size, hop, np.int8))
        addr_parts.append(addrs)
        nbytes_parts.append(nbytes)
        entry_parts.append(ent[order])
        counts = result.counts[consumed:consumed + size]
        edge_counts.append(int(counts.sum()))
        consumed += size
    num_hops = len(fanouts)
    last = frontiers[num_hops - 1].astype(np.int64)
    samples = result.node_list[last.size:].astype(np.int64)
    if aggregate:
        last_counts = result.counts[consumed - last.size:consumed].astype(np.int64)
        # device: per entry of F_{L-1}, its self row, then its samples' rows
        ent = np.concatenate([np.arange(last.size), np.repeat(np.arange(last.size), last_counts)])
        sub = np.concatenate([np.zeros(last.size, np.int64),
                              1 + golden.segment_runs(np.zeros(last.size, np.int64), last_counts)])
        agg_order = np.lexsort((sub, ent))
        rows = np.concatenate([last, samples])[agg_order]
        row_entry = ent[agg_order]
        start = feat_off + rows * row_bytes
        if granularity == "rtl":
            # as rtl/feature_aggregator.py issues them: groups of _AGG_SLOTS entries; per group and per
            # chunk of the row (_AGG_CHUNK_WORDS accumulator words of data_width / 32 elements), the
            # samples' rows sample-major (u_0 of every entry, then u_1, ...), then the self rows; each
            # piece one burst, split at 4 KiB
            itemsize = max(1, row_bytes // max(1, dim_of_rows))
            chunk_bytes = _AGG_CHUNK_WORDS * (config.data_width // 32) * itemsize
            n_chunks = max(1, -(-row_bytes // chunk_bytes))
            n_last = last.size
            group = np.concatenate([np.arange(n_last), np.repeat(np.arange(n_last), last_counts)]) // _AGG_SLOTS
            kind = np.concatenate([np.ones(n_last, np.int64), np.zeros(samples.size, np.int64)])
            j = np.concatenate([np.zeros(n_last, np.int64),
                                golden.segment_runs(np.zeros(n_last, np.int64), last_counts)])
            all_rows = np.concatenate([last, samples])
            rep = np.repeat(np.arange(all_rows.size), n_chunks)
            chunk = np.tile(np.arange(n_chunks), all_rows.size)
            order = np.lexsort((ent[rep], j[rep], kind[rep], chunk, group[rep]))
            rep, chunk = rep[order], chunk[order]
            c_lo = chunk * chunk_bytes
            c_len = np.minimum(chunk_bytes, row_bytes - c_lo)
            start = feat_off + all_rows[rep] * row_bytes + c_lo
            first = start // PAGE_SIZE
            pieces = (start + c_len - 1) // PAGE_SIZE - first + 1
            idx = golden.segment_runs(np.zeros(start.size, np.int64), pieces)
            p_lo = (np.repeat(first, pieces) + idx) * PAGE_SIZE
            b_lo = np.maximum(p_lo, np.repeat(start, pieces))
            b_hi = np.minimum(p_lo + PAGE_SIZE, np.repeat(start + c_len, pieces))
            if ((b_hi - b_lo - 1) // (_MAX_BURST_BEATS * beat)).any():
                raise ValueError("row pieces over 256 beats inside one page are not modelled")
            emit(_FEATURES, num_hops, b_lo, b_hi - b_lo, np.repeat(ent[rep], pieces))
        else:
            emit(_FEATURES, num_hops, start, np.int64(row_bytes), row_entry)
        # host-side sampler's gathers: per chunk, the distinct self rows, then the distinct sample rows
        starts = np.zeros(last.size + 1, np.int64)
        np.cumsum(last_counts, out=starts[1:])
        for lo_c in range(0, last.size, _AGG_CHUNK):
            hi_c = min(lo_c + _AGG_CHUNK, last.size)
            gathers.append(_gather("features", feat_off, np.unique(last[lo_c:hi_c]), row_bytes, num_hops,
                                   max_run_pages))
            gathers.append(_gather("features", feat_off, np.unique(samples[starts[lo_c]:starts[hi_c]]),
                                   row_bytes, num_hops, max_run_pages))
    d0 = np.unique(result.node_list.astype(np.int64))
    feature_gather = _gather("features", feat_off, d0, row_bytes, num_hops, max_run_pages)

    req_section = np.concatenate(sec_parts) if sec_parts else np.zeros(0, np.int8)
    req_phase = np.concatenate(phase_parts) if phase_parts else np.zeros(0, np.int8)
    req_addr = np.concatenate(addr_parts) if addr_parts else np.zeros(0, np.int64)
    req_bytes = np.concatenate(nbytes_parts) if nbytes_parts else np.zeros(0, np.int64)
    req_entry = np.concatenate(entry_parts) if entry_parts else np.zeros(0, np.int64)
    first = req_addr // PAGE_SIZE
    num_pages = (req_addr + np.maximum(req_bytes, 1) - 1) // PAGE_SIZE - first + 1
    pages = np.repeat(first, num_pages) + golden.segment_runs(np.zeros(first.size, np.int64), num_pages)
    return ReadTrace(
        req_section=req_section, req_phase=req_phase, req_bytes=req_bytes, req_entry=req_entry, req_first_page=first,
        req_num_pages=num_pages, pages=pages, page_section=np.repeat(req_section, num_pages),
        page_phase=np.repeat(req_phase, num_pages), num_targets=int(targets.size), fanouts=fanouts,
        aggregate=bool(aggregate), granularity=granularity, frontier_entries=frontier_sizes, edges=edge_counts,
        node_list_entries=int(result.node_list.size), counts_entries=int(result.counts.size),
        last_frontier=int(last.size), feature_row_bytes=int(row_bytes), sum_row_bytes=int(sum_row),
        id_bytes=int(item), distinct_nodes=int(d0.size), host_gathers=gathers, feature_gather=feature_gather)


# -------------------------------------------------------------------------------------------- SSDs

@dataclasses.dataclass(frozen=True)
class SsdModel:
    """One SSD: random 4 KiB reads and sequential bandwidth.

    Parameters
    ----------
    name : str
    latency_us : float
        Latency of one 4 KiB random read (queue depth 1).
    iops : float
        Random 4 KiB reads per second at a deep queue (the ceiling).
    bandwidth_gbs : float
        Sequential read bandwidth, GB/s.
    max_outstanding : int
        Reads the drive (or its queue) holds in flight at most.
    iops_by_queue_depth : tuple of (int, float), optional
        Measured IOPS at given queue depths (a probed disk); the model interpolates between them
        instead of using Little's law.
    fault_us : float, optional
        One major page fault of the mmap path (buffered, queue depth 1, no readahead), host overhead
        included. Default: ``latency_us`` + 5 us (fault handling, page-cache insertion, block layer).
        A probed disk measures it (:attr:`DiskProbe.mmap_fault_us`).

    Raises
    ------
    ValueError
        A non-positive latency, IOPS, bandwidth or outstanding count.
    """

    name: str
    latency_us: float
    iops: float
    bandwidth_gbs: float
    max_outstanding: int = 256
    iops_by_queue_depth: tuple[tuple[int, float], ...] | None = None
    fault_us: float | None = None

    def __post_init__(self):
        if self.fault_us is None:
            object.__setattr__(self, "fault_us", self.latency_us + 5.0 if self.latency_us > 0 else None)
        for field in ("latency_us", "iops", "bandwidth_gbs"):
            value = getattr(self, field)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"SSD {self.name}: {field} must be a positive number, not {value!r}")
        if not isinstance(self.max_outstanding, int) or self.max_outstanding < 1:
            raise ValueError(f"SSD {self.name}: max_outstanding must be a positive integer, "
                             f"not {self.max_outstanding!r}")

    def rate(self, queue_depth: float) -> float:
        """Random 4 KiB reads per second with ``queue_depth`` reads kept in flight."""
        if not queue_depth > 0:
            raise ValueError(f"Queue depth must be positive, not {queue_depth!r}")
        qd = min(float(queue_depth), float(self.max_outstanding))
        if self.iops_by_queue_depth:
            points = sorted(self.iops_by_queue_depth)
            depths = np.array([0.0] + [p[0] for p in points])
            rates = np.array([0.0] + [p[1] for p in points])
            return float(min(np.interp(qd, depths, rates), self.iops))
        return min(self.iops, qd * 1e6 / self.latency_us)

    def random_read_seconds(self, reads: int, queue_depth: float) -> float:
        """Seconds for ``reads`` independent random 4 KiB reads kept ``queue_depth`` deep: the
        pipeline's throughput plus one latency to drain (0 for no reads)."""
        if reads < 0:
            raise ValueError(f"Read count must be >= 0, not {reads!r}")
        if reads == 0:
            return 0.0
        return reads / self.rate(queue_depth) + self.latency_us * 1e-6

    @classmethod
    def from_probe(cls, probe: DiskProbe, name: str = "this-disk") -> SsdModel:
        """The model of a probed disk: QD1 latency, the best deep-queue IOPS, the measured table."""
        table = tuple(sorted((int(q), float(v)) for q, v in probe.iops.items()))
        fault = float(probe.mmap_fault_us)
        return cls(name=name, latency_us=float(probe.qd1_latency_us), iops=max(v for _, v in table),
                   bandwidth_gbs=float(probe.seq_bandwidth_gbs), max_outstanding=max(q for q, _ in table),
                   iops_by_queue_depth=table, fault_us=fault if math.isfinite(fault) else None)


#: Samsung PM983 3.84 TB, the SSD of the SmartSSD: the co-simulation's storage model (cosim/storage.py).
PM983 = SsdModel("PM983", latency_us=85.0, iops=540_000.0, bandwidth_gbs=3.2)
#: A Gen4 enterprise drive of the PM1733 class (3.84 TB data sheet: 1.5 M random 4 KiB reads/s,
#: 7.0 GB/s sequential); latency as the PM983's generation (~80 us).
PM1733 = SsdModel("PM1733", latency_us=80.0, iops=1_500_000.0, bandwidth_gbs=7.0)
SSD_PRESETS = {"PM983": PM983, "PM1733": PM1733}


def ssd_preset(name: str) -> SsdModel:
    """An SSD preset by name (case-insensitive): ``PM983`` or ``PM1733``."""
    for key, model in SSD_PRESETS.items():
        if key.lower() == str(name).lower():
            return model
    raise ValueError(f"Unknown SSD preset {name!r}; known: {', '.join(SSD_PRESETS)}")


# -------------------------------------------------------------------------------------- page cache

class PageCache:
    """LRU page cache of the on-board DRAM, with the co-simulation's semantics (cosim/storage.py).

    A page read from flash enters the cache (evicting the least recently used page when full); a hit
    refreshes the page. Capacity 0 is no cache (nothing is ever inserted).

    Parameters
    ----------
    capacity_bytes : int
        0 to any size; whole 4 KiB pages (rounded down).

    Members
    -------
    hits, misses : int
        Totals over every :meth:`access`.

    Raises
    ------
    ValueError
        A negative or non-integer capacity.
    """

    def __init__(self, capacity_bytes: int):
        if isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, (int, np.integer)):
            raise ValueError(f"Cache capacity must be an integer number of bytes, not {capacity_bytes!r}")
        if capacity_bytes < 0:
            raise ValueError(f"Cache capacity must be >= 0 bytes, not {capacity_bytes!r}")
        self.capacity_bytes = int(capacity_bytes)
        self.capacity_pages = self.capacity_bytes // PAGE_SIZE
        self._pages: collections.OrderedDict[int, None] = collections.OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._pages)

    def __contains__(self, page) -> bool:
        return int(page) in self._pages

    def clear(self) -> None:
        self._pages.clear()

    def snapshot(self) -> tuple:
        """The cache's state (pages in LRU order, counters), for :meth:`restore`."""
        return collections.OrderedDict(self._pages), self.hits, self.misses

    def restore(self, state: tuple) -> None:
        pages, self.hits, self.misses = state
        self._pages = collections.OrderedDict(pages)

    def access(self, pages) -> np.ndarray:
        """Run ``pages`` (page ids, in order) through the cache; returns the hit mask (bool array)."""
        pages = np.asarray(pages, np.int64).reshape(-1)
        hit = np.zeros(pages.size, bool)
        if self.capacity_pages == 0:
            self.misses += int(pages.size)
            return hit
        cache = self._pages
        cap = self.capacity_pages
        for i, page in enumerate(pages.tolist()):
            if page in cache:
                cache.move_to_end(page)
                hit[i] = True
            else:
                cache[page] = None
                if len(cache) > cap:
                    cache.popitem(last=False)
        n_hit = int(hit.sum())
        self.hits += n_hit
        self.misses += int(pages.size) - n_hit
        return hit

    def stage(self, pages) -> int:
        """P2P staging: the distinct ``pages`` not resident are read (and inserted); returns how many.
        Resident pages are refreshed. With capacity 0 every distinct page is read."""
        distinct = np.unique(np.asarray(pages, np.int64))
        if self.capacity_pages == 0:
            self.misses += int(distinct.size)
            return int(distinct.size)
        return int((~self.access(distinct)).sum())


# ------------------------------------------------------------------------------------ device time

@dataclasses.dataclass
class DeviceTime:
    """Modelled time of one command on the device (seconds) and what bound it.

    Members
    -------
    kernel_s : float
        ap_start to ap_done: the phases' flash, latency and compute, per phase the slowest resource.
    pcie_s : float
        Results to the host over the link.
    total_s : float
        kernel_s + pcie_s (+ the host's P2P round trips, in kernel_s, for ``attachment="p2p"``).
    phases : list of dict
        Per phase: flash_reads, cache_hits, flash_s, compute_s, latency_s, time_s, bound.
    flash_reads, cache_hits : int
    bytes_to_host : int
    bound : str
        The resource that bound the most time: "flash IOPS", "outstanding reads", "flash latency",
        "kernel clock", "PCIe", "host P2P".
    """

    kernel_s: float
    pcie_s: float
    total_s: float
    phases: list[dict]
    flash_reads: int
    cache_hits: int
    bytes_to_host: int
    bound: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class DeviceModel:
    """The device's time for one command (docs/performance-model.md, section 2).

    Parameters
    ----------
    config : KernelConfig
        Lanes, outstanding reads (per storage master), data width and clock of the kernel build.
    ssd : SsdModel
    attachment : {"flash", "p2p"}
        ``flash``: the kernel reads flash directly through its storage masters (the co-simulated
        design). ``p2p``: SmartSSD, indptr resident in the DDR, each hop's index pages and the
        aggregation's feature pages staged into the DDR by host-issued P2P reads of the distinct
        pages the kernel names.
    clock_mhz : float, optional
        Kernel clock (default ``config.clock_mhz``; a timing report's figure can be given).
    cycles_per_edge_per_lane, agg_beats_per_cycle : float
        Measured kernel costs (docs/performance-rtl.md).
    pcie_gbs : float
        Device-to-host link.
    latency_rounds_per_hop : float
        Dependent flash-latency rounds of a hop that reads flash: the indptr round, then the index
        reads' drain (2: each hop waits for its indptr answers before the first index read, and
        drains its last reads before the next hop's frontier is read).
    p2p_round_trip_us : float
        ``p2p``: per staging step, the kernel -> host notification and the host's submission of the
        page list (interrupt, reading the list, building NVMe commands).
    p2p_queue_depth : int
        ``p2p``: NVMe reads the host keeps in flight.
    p2p_host_us_per_read : float
        ``p2p``: host CPU per P2P read submitted (0: the drive binds).
    ddr_bytes : int
        ``p2p``: on-board DDR; the indptr lives there, the rest can be the page pool.
    method : {"event", "analytic"}
        ``flash`` attachment: ``event`` replays the trace through the kernel's storage masters (each
        with ``outstanding_reads`` in flight and answers in order, as AXI with one ID answers), the
        sequencer's indptr prefetch window, the lanes' collectors (one id per cycle), the shared
        flash (one page read started per 1/IOPS, ``latency`` later, moved at the bandwidth) and the
        cache (hits after ``dram_latency_ns``), hop by hop with a drain at every boundary: the
        co-simulation's storage model, without the RTL. ``analytic``: per phase the slowest of
        IOPS, Little's law and compute, plus ``latency_rounds_per_hop`` dependent latencies.
    dram_latency_ns, boundary_cycles :
        ``event``: a cache hit's latency; cycles a hop boundary or the start costs besides the drain.

    Raises
    ------
    ValueError
        Unknown attachment, a non-positive clock, link or cost.
    """

    config: KernelConfig = CONFIGS["default"]
    ssd: SsdModel = PM983
    attachment: str = "flash"
    clock_mhz: float | None = None
    cycles_per_edge_per_lane: float = CYCLES_PER_EDGE_PER_LANE
    agg_beats_per_cycle: float = AGG_BEATS_PER_CYCLE
    pcie_gbs: float = PCIE_GEN3_X4_GBS
    latency_rounds_per_hop: float = 2.0
    p2p_round_trip_us: float = 20.0
    p2p_queue_depth: int = 128
    p2p_host_us_per_read: float = 0.0
    ddr_bytes: int = 4 << 30
    method: str = "event"
    dram_latency_ns: float = 200.0
    boundary_cycles: int = 100

    def __post_init__(self):
        if self.attachment not in ("flash", "p2p"):
            raise ValueError(f"Attachment must be 'flash' or 'p2p', not {self.attachment!r}")
        if self.method not in ("event", "analytic"):
            raise ValueError(f"Method must be 'event' or 'analytic', not {self.method!r}")
        if self.clock_mhz is None:
            self.clock_mhz = self.config.clock_mhz
        for field in ("clock_mhz", "cycles_per_edge_per_lane", "agg_beats_per_cycle", "pcie_gbs"):
            if not getattr(self, field) > 0:
                raise ValueError(f"Device model {field} must be positive, not {getattr(self, field)!r}")
        if self.latency_rounds_per_hop < 0 or self.p2p_round_trip_us < 0 or self.p2p_host_us_per_read < 0:
            raise ValueError("Device model latency rounds and P2P costs must be >= 0")

    def _compute_s(self, trace: ReadTrace, phase: int) -> float:
        cfg = self.config
        if phase < len(trace.fanouts):
            cycles = trace.edges[phase] * self.cycles_per_edge_per_lane / cfg.lanes \
                + trace.frontier_entries[phase] / cfg.lanes
        else:
            beats = trace.section_bytes("features") / cfg.data_bytes
            cycles = beats / self.agg_beats_per_cycle
        return cycles / (self.clock_mhz * 1e6)

    def batch_time(self, trace: ReadTrace, cache: PageCache | None = None) -> DeviceTime:
        """Time of the command whose reads are ``trace``; ``cache`` (kept across calls) is the DDR
        page cache (flash) or page pool (p2p); None = no cache."""
        cache = cache if cache is not None else PageCache(0)
        if self.attachment == "p2p":
            return self._p2p_time(trace, cache)
        if self.method == "event" and cache.capacity_pages:
            # The cache sees the reads in the order they are issued, which is not the trace's order
            # (the indptr prefetch runs ahead of the index reads; lanes interleave). The order is
            # taken from a replay without cache (so it is the same for every cache size, and a larger
            # LRU cache hits a superset: time never rises with the cache), then the pages are looked
            # up in that order and the trace replayed with those hits.
            issued = np.zeros(trace.requests)
            self._event_time(trace, np.zeros(trace.pages.size, bool), issued)
            order = np.argsort(np.repeat(issued, trace.req_num_pages), kind="stable")
            hit = np.empty(trace.pages.size, bool)
            hit[order] = cache.access(trace.pages[order])
            return self._event_time(trace, hit)
        hit = cache.access(trace.pages)
        if self.method == "event":
            return self._event_time(trace, hit)
        cfg = self.config
        lat = self.ssd.latency_us * 1e-6
        phases = []
        for phase in range(trace.num_phases):
            in_phase = trace.page_phase == phase
            flash = in_phase & ~hit
            n_flash = int(flash.sum())
            sec = trace.page_section[flash]
            seq_reads = int(np.count_nonzero(sec <= _INDPTR))       # sequencer's master: header, indptr
            lane_reads = n_flash - seq_reads                          # lanes' (or the aggregator's) masters
            masters_out = cfg.outstanding_reads * (cfg.lanes if phase < len(trace.fanouts) else 1)
            t_iops = n_flash / self.ssd.rate(self.ssd.max_outstanding)
            t_seq = seq_reads / self.ssd.rate(cfg.outstanding_reads)
            t_lane = lane_reads / self.ssd.rate(masters_out) if lane_reads else 0.0
            flash_s = max(t_iops, t_seq, t_lane)
            if phase < len(trace.fanouts):
                rounds = self.latency_rounds_per_hop if n_flash else 0.0
                if phase == 0 and trace.granularity == "rtl" and np.any(flash & (trace.page_section == _HEADER)):
                    rounds += 1.0   # the image-header round before the first indptr read
            else:
                rounds = 1.0 if n_flash else 0.0
            latency_s = rounds * lat
            compute_s = self._compute_s(trace, phase)
            time_s = max(flash_s, compute_s) + latency_s
            if compute_s >= flash_s:
                bound = "kernel clock"
            elif t_iops >= max(t_seq, t_lane):
                bound = "flash IOPS"
            else:
                bound = "outstanding reads"
            phases.append(dict(phase=phase, flash_reads=n_flash, cache_hits=int((in_phase & hit).sum()),
                               flash_s=flash_s, compute_s=compute_s, latency_s=latency_s, time_s=time_s,
                               bound=bound))
        return self._finish(trace, phases, int((~hit).sum()), int(hit.sum()))

    def _event_time(self, trace: ReadTrace, hit: np.ndarray, issued: np.ndarray | None = None) -> DeviceTime:
        """Replay of the trace through the kernel's storage masters (see ``method``).

        Each master (the sequencer's, one per lane, the aggregator's) issues at most one read per
        cycle, keeps ``outstanding_reads`` in flight and gets its answers in order (a hit waits behind
        an earlier miss). The flash starts one page read per slot of 1/IOPS (or per page transfer, if
        longer). Requests are replayed master by master, not in global time order, so a flash read
        takes the first free slot at or after its issue time (a union-find over slot numbers, which
        makes the result independent of the replay order)."""
        cfg = self.config
        cyc = 1.0 / (self.clock_mhz * 1e6)
        lat = self.ssd.latency_us * 1e-6
        dram = self.dram_latency_ns * 1e-9
        xfer = PAGE_SIZE / (self.ssd.bandwidth_gbs * 1e9)
        gap = max(1.0 / self.ssd.iops, xfer)
        lat_x = lat + xfer
        depth = cfg.outstanding_reads
        ahead = max(2, cfg.outstanding_reads // 2)          # indptr prefetch (rtl/frontier_prefetcher.py)
        misses = np.zeros(trace.requests, np.int64)
        if trace.requests:
            owner = np.repeat(np.arange(trace.requests), trace.req_num_pages)
            np.add.at(misses, owner, ~hit)
        miss_l = misses.tolist()
        next_free: dict[int, int] = {}
        ceil = math.ceil

        def flash_ready(t: float, n: int) -> float:
            """Ready time of a request issued at ``t`` with ``n`` flash pages."""
            ready = t + dram
            for _ in range(n):
                slot = ceil(t / gap - 1e-9)
                root = slot
                while root in next_free:
                    root = next_free[root]
                while slot != root:                          # path compression
                    nxt = next_free.get(slot, root)
                    next_free[slot] = root + 1
                    slot = nxt
                next_free[root] = root + 1
                ready = max(ready, root * gap + lat_x)
            return ready

        sections = trace.req_section.tolist()
        phases_of = trace.req_phase.tolist()
        entries = trace.req_entry.tolist()
        nbytes = trace.req_bytes.tolist()
        id_bytes = trace.id_bytes
        num_hops = len(trace.fanouts)
        edge_cyc = self.cycles_per_edge_per_lane * cyc
        beat_cyc = cyc / self.agg_beats_per_cycle
        data_bytes = cfg.data_bytes
        n_req = trace.requests
        # master state: [last issue, last ready, deque of ready times]
        seq = [-cyc, 0.0, collections.deque()]

        def issue(m, t: float, r: int) -> float:
            t = max(t, m[0] + cyc)
            done = m[2]
            if len(done) >= depth:
                t = max(t, done.popleft())
            m[0] = t
            if issued is not None:
                issued[r] = t
            n = miss_l[r]
            ready = flash_ready(t, n) if n else t + dram
            if ready < m[1]:
                ready = m[1]
            m[1] = ready
            done.append(ready)
            return ready

        t = self.boundary_cycles * cyc
        phases = []
        r = 0
        header_end = t
        while r < n_req and sections[r] == _HEADER:            # the image header: one round
            header_end = max(header_end, issue(seq, t, r))
            r += 1
        header_s = header_end - t
        t = header_end
        for phase in range(trace.num_phases):
            start = t
            first_r = r
            end = t
            if phase < num_hops:
                n = trace.frontier_entries[phase]
                indptr_done = [t] * n
                dispatch = [t] * n
                lanes = [[-cyc, 0.0, collections.deque()] for _ in range(cfg.lanes)]
                collect = [t] * cfg.lanes
                num_lanes = cfg.lanes
                lane_of: dict[int, int] = {}
                job_starts = [collections.deque(maxlen=_LANE_JOB_SLOTS) for _ in range(cfg.lanes)]
                last_lane = num_lanes - 1
                while r < n_req and phases_of[r] == phase:
                    e = entries[r]
                    if sections[r] == _INDPTR:
                        gate = dispatch[e - ahead] if e >= ahead else t
                        ready = issue(seq, gate if gate > t else t, r)
                        if ready > indptr_done[e]:
                            indptr_done[e] = ready
                        prev = (dispatch[e - 1] if e else t) + cyc
                        dispatch[e] = indptr_done[e] if indptr_done[e] > prev else prev
                        if dispatch[e] > end:
                            end = dispatch[e]
                    else:
                        lane = lane_of.get(e)
                        if lane is None:  # the job goes to the next lane in turn with room in its job FIFO
                            t_d = dispatch[e]
                            lane, wait = None, None
                            for k in range(1, num_lanes + 1):
                                cand = (last_lane + k) % num_lanes
                                starts = job_starts[cand]
                                if len(starts) < _LANE_JOB_SLOTS or starts[-_LANE_JOB_SLOTS] <= t_d:
                                    lane = cand
                                    break
                                free = starts[-_LANE_JOB_SLOTS]
                                if wait is None or free < wait:
                                    wait, lane_w = free, cand
                            if lane is None:
                                lane, dispatch[e] = lane_w, wait
                            last_lane = lane
                            lane_of[e] = lane
                            first_read = True
                        else:
                            first_read = False
                        ready = issue(lanes[lane], dispatch[e], r)
                        if first_read:
                            job_starts[lane].append(lanes[lane][0])
                        ids = nbytes[r] // id_bytes or 1
                        c = (collect[lane] if collect[lane] > ready else ready) + ids * edge_cyc
                        collect[lane] = c
                        if c > end:
                            end = c
                    r += 1
            else:
                agg = [-cyc, 0.0, collections.deque()]
                proc = t
                while r < n_req and phases_of[r] == phase:
                    ready = issue(agg, t, r)
                    beats = -(-nbytes[r] // data_bytes) or 1
                    proc = (proc if proc > ready else ready) + beats * beat_cyc
                    r += 1
                end = max(end, proc)
            t = end + self.boundary_cycles * cyc
            in_phase = trace.page_phase == phase
            n_flash = int((in_phase & ~hit).sum())
            compute_s = self._compute_s(trace, phase)
            flash_s = n_flash / self.ssd.iops
            time_s = t - start + (header_s if phase == 0 else 0.0)
            if compute_s >= 0.5 * time_s:
                bound = "kernel clock"
            elif flash_s >= 0.5 * time_s:
                bound = "flash IOPS"
            elif n_flash:
                bound = "flash latency"
            else:
                bound = "kernel clock"
            phases.append(dict(phase=phase, requests=r - first_r, flash_reads=n_flash,
                               cache_hits=int((in_phase & hit).sum()), flash_s=flash_s, compute_s=compute_s,
                               latency_s=0.0, time_s=time_s, bound=bound))
        phases[0]["time_s"] += self.boundary_cycles * cyc      # the start
        return self._finish(trace, phases, int((~hit).sum()), int(hit.sum()))

    def _p2p_time(self, trace: ReadTrace, pool: PageCache) -> DeviceTime:
        lat = self.ssd.latency_us * 1e-6
        rate = self.ssd.rate(self.p2p_queue_depth)
        if self.p2p_host_us_per_read > 0:
            rate = min(rate, 1e6 / self.p2p_host_us_per_read)
        phases = []
        total_flash = total_hits = 0
        for phase in range(trace.num_phases):
            mask = (trace.page_phase == phase) & (trace.page_section >= _INDICES)  # indptr is resident
            pages = trace.pages[mask]
            distinct = int(np.unique(pages).size)
            n_flash = pool.stage(pages)
            total_flash += n_flash
            total_hits += int(pages.size) - n_flash
            flash_s = n_flash / rate if n_flash else 0.0
            latency_s = (lat if n_flash else 0.0) + (self.p2p_round_trip_us * 1e-6 if distinct else 0.0)
            # the kernel passes twice per hop: naming the pages, then sampling from the DDR
            compute_s = self._compute_s(trace, phase) * (2 if phase < len(trace.fanouts) else 1)
            time_s = flash_s + latency_s + compute_s
            parts = {"flash IOPS": flash_s, "host P2P": latency_s, "kernel clock": compute_s}
            phases.append(dict(phase=phase, flash_reads=n_flash, cache_hits=int(pages.size) - n_flash,
                               flash_s=flash_s, compute_s=compute_s, latency_s=latency_s, time_s=time_s,
                               bound=max(parts, key=parts.get)))
        return self._finish(trace, phases, total_flash, total_hits)

    def _finish(self, trace: ReadTrace, phases: list[dict], flash: int, hits: int) -> DeviceTime:
        kernel_s = sum(p["time_s"] for p in phases)
        to_host = trace.device_bytes_to_host
        pcie_s = to_host / (self.pcie_gbs * 1e9)
        by_bound: dict[str, float] = collections.defaultdict(float)
        for p in phases:
            by_bound[p["bound"]] += p["time_s"]
        by_bound["PCIe"] += pcie_s
        return DeviceTime(kernel_s=kernel_s, pcie_s=pcie_s, total_s=kernel_s + pcie_s, phases=phases,
                          flash_reads=flash, cache_hits=hits, bytes_to_host=to_host,
                          bound=max(by_bound, key=by_bound.get))


# -------------------------------------------------------------------------------------- host time

@dataclasses.dataclass
class HostTime:
    """Modelled time of one batch on a host-side sampler (seconds).

    Members
    -------
    io_s : float
        Waiting for storage.
    cpu_s : float
        The host's compute (the caller's measured figure).
    total_s : float
        io_s + cpu_s (the samplers read synchronously).
    reads, pages : int
        Storage read requests and pages.
    bytes_to_host : int
    """

    io_s: float
    cpu_s: float
    total_s: float
    reads: int
    pages: int
    bytes_to_host: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _check_cpu(host_cpu_s: float) -> float:
    if not host_cpu_s >= 0:
        raise ValueError(f"Host CPU time must be >= 0 seconds, not {host_cpu_s!r}")
    return float(host_cpu_s)


def mmap_time(trace: ReadTrace, ssd: SsdModel, host_cpu_s: float = 0.0, fault_us: float | None = None,
              cache: PageCache | None = None, sampling_only: bool = False) -> HostTime:
    """The mmap sampler: every distinct page not resident is one synchronous fault (queue depth 1,
    readahead off with MADV_RANDOM): ``pages x fault_us + host_cpu_s`` (``fault_us`` default: the
    SSD's :attr:`SsdModel.fault_us`).

    ``cache`` is the host page cache kept across batches (None: cold every batch, the steady state
    of a graph far larger than memory); ``sampling_only`` leaves out the feature gathers.
    """
    cpu = _check_cpu(host_cpu_s)
    fault_us = ssd.fault_us if fault_us is None else fault_us
    if not fault_us > 0:
        raise ValueError(f"Fault time must be > 0 us, not {fault_us!r}")
    pages = trace.mmap_pages(sampling_only)
    n = int(pages.size) if cache is None else int((~cache.access(pages)).sum())
    io = n * fault_us * 1e-6
    return HostTime(io_s=io, cpu_s=cpu, total_s=io + cpu, reads=n, pages=n, bytes_to_host=n * PAGE_SIZE)


def direct_time(trace: ReadTrace, ssd: SsdModel, host_cpu_s: float = 0.0, queue_depth: int = 64,
                per_read_us: float = 0.0, sampling_only: bool = False,
                gathers: list[Gather] | None = None) -> HostTime:
    """The O_DIRECT sampler: each gather's coalesced runs at ``queue_depth`` (gathers one after
    another: each waits for its reads), ``per_read_us`` host software per read (0 when the probed
    disk's IOPS already include it), plus ``host_cpu_s``. ``gathers`` replaces the trace's own
    (e.g. ``[trace.feature_gather]`` for the host's feature gather after device sampling)."""
    cpu = _check_cpu(host_cpu_s)
    if queue_depth < 1:
        raise ValueError(f"Queue depth must be a positive integer, not {queue_depth!r}")
    if per_read_us < 0:
        raise ValueError(f"Per-read host overhead must be >= 0 us, not {per_read_us!r}")
    if gathers is None:
        gathers = [g for g in trace.host_gathers if not (sampling_only and g.section == "features")]
    io = 0.0
    reads = pages = 0
    for g in gathers:
        if g.runs == 0:
            continue
        rate = ssd.rate(min(queue_depth, g.runs))
        if per_read_us > 0:
            rate = min(rate, 1e6 / per_read_us)
        transfer = g.pages.size * PAGE_SIZE / (ssd.bandwidth_gbs * 1e9)
        io += max(g.runs / rate, transfer) + ssd.latency_us * 1e-6
        reads += g.runs
        pages += int(g.pages.size)
    return HostTime(io_s=io, cpu_s=cpu, total_s=io + cpu, reads=reads, pages=pages,
                    bytes_to_host=pages * PAGE_SIZE)


def epoch_time(stage_seconds, batches: int, pipelined: bool = True) -> float:
    """Epoch time of ``batches`` mini-batches whose per-batch stages take ``stage_seconds``
    (e.g. [device command, host training]). Serial: every batch pays the sum. Pipelined (the next
    batch's command runs while the host trains on this one): the slowest stage per batch, plus one
    fill of the others."""
    stages = [float(s) for s in stage_seconds]
    if any(not s >= 0 for s in stages):
        raise ValueError(f"Stage times must be >= 0 seconds, not {stage_seconds!r}")
    if batches < 0:
        raise ValueError(f"Batch count must be >= 0, not {batches!r}")
    if batches == 0 or not stages:
        return 0.0
    if not pipelined:
        return batches * sum(stages)
    return batches * max(stages) + (sum(stages) - max(stages))
