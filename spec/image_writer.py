"""Streaming image writer: builds storage images far larger than memory.

The edge list is never held in memory. :meth:`ImageWriter.add_edges` filters each chunk (self loops
dropped on request), mirrors it (symmetrize on request) and appends it to one of up to
:data:`MAX_PARTITIONS` spill partitions (a file of sources and one of destinations each) in a
temporary directory next to the output, partitioned by source-node range (an external
distribution sort by source). :meth:`ImageWriter.finalize` then walks
the partitions in node order. Consecutive partitions are grouped into blocks whose cost fits the
``memory_budget``; a partition too large for the budget on its own is redistributed into finer
node ranges first (recursively, down to single nodes). Each block is loaded, turned into CSR rows
with a counting sort by source, every adjacency list sorted by destination, duplicates optionally
dropped, and appended to the indices section, which is the last section of the file, so the
final edge count need not be known in advance. indptr follows block by block.

The result is canonical: adjacency lists sorted by destination, so the bytes depend only on the
edge multiset and the options, never on chunking, partitioning or the budget. They equal what
:func:`smartsage.spec.image.write_image` writes for the same CSR.

Features, labels and split are written in row chunks, in order (``write_features(start, rows)``);
rows never written are zero features, label -1 and split 0. Every section's CRC-32 is computed
while it is written; the header page is written last, and the finished file is renamed into place,
so a failed build never leaves a file that looks like an image.

Memory: besides the budget, the writer holds O(1) state per partition, and no per-node arrays
except while a block is built. The budget must hold the largest single adjacency list (a node's
list is never split across blocks); ``memory_budget`` below :data:`MIN_MEMORY_BUDGET` is refused.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import tempfile
import time
import weakref
import zlib

import numpy as np

from .image import (
    CHUNK_BYTES,
    FLAG_NO_DUPLICATES,
    FLAG_NO_SELF_LOOPS,
    FLAG_SYMMETRIZED,
    FLAGS_KNOWN,
    HEADER_SIZE,
    FeatureDtype,
    ImageHeader,
    IndexDtype,
    Section,
    SectionKind,
    encode_features,
    layout_sections,
)

__all__ = ["ImageWriter", "DEFAULT_MEMORY_BUDGET", "MIN_MEMORY_BUDGET", "MAX_PARTITIONS", "parse_size",
           "csr_block", "DiskFullError", "MemoryBudgetError", "ProgressMeter", "process_rss", "peak_rss",
           "format_bytes", "free_disk"]

DEFAULT_MEMORY_BUDGET = 1 << 30
MIN_MEMORY_BUDGET = 16 << 10
#: Spill files per level of the distribution (one open file each while edges are added).
MAX_PARTITIONS = 64
#: Bytes of memory per edge while a block is built (spilled pair, row/column copies, CSR output),
#: keyed by spilled bytes per edge: 8 (u32 source + destination) or 16 (u64 ids).
BLOCK_BYTES_PER_EDGE = {8: 24, 16: 48}
#: Bytes of memory per node row of a block (local indptr, global indptr out).
BLOCK_BYTES_PER_ROW = 24
#: Bytes of memory per incoming edge while a chunk is filtered, mirrored and partitioned.
ADD_BYTES_PER_EDGE = 96
#: errno values that mean the file system has no room left for the build.
_DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class DiskFullError(ValueError):
    """The file system filled up during a build (the partial image and spill files are removed).

    A :class:`ValueError`, so the command line prints it as one line.
    """


class MemoryBudgetError(ValueError):
    """The memory budget cannot hold what the build must keep in memory at once."""


def format_bytes(value: float) -> str:
    """``1536`` -> ``"1.5 KiB"`` (powers of 1024)."""
    value = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    raise AssertionError  # pragma: no cover


def _status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        return None
    return None  # pragma: no cover


def process_rss() -> int:
    """This process's resident set now (bytes; 0 where /proc is missing)."""
    return _status_bytes("VmRSS") or 0


def peak_rss() -> int:
    """This process's peak resident set so far (bytes), what ``/usr/bin/time -v`` reports."""
    value = _status_bytes("VmHWM")
    if value is None:  # pragma: no cover - not Linux
        import resource

        value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return value


def free_disk(path: str | os.PathLike) -> int:
    """Bytes an unprivileged writer may still use on the file system holding ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def parse_size(text: str | int) -> int:
    """``"512M"``, ``"2G"``, ``"64k"``, ``"1048576"`` -> bytes (powers of 1024)."""
    if isinstance(text, int):
        return text
    value = str(text).strip()
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    scale = 1
    if value and value[-1].lower() == "b":
        value = value[:-1]
    if value and value[-1].lower() in units:
        scale = units[value[-1].lower()]
        value = value[:-1]
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"Size must be a number of bytes with an optional k/M/G/T suffix, not {text!r}") \
            from None
    if number < 0:
        raise ValueError(f"Size must not be negative, not {text!r}")
    return int(number * scale)


def _bit_length(value: int) -> int:
    return max(int(value).bit_length(), 0)


def _as_signed(values: np.ndarray, dtype) -> np.ndarray:
    """Non-negative ids as ``dtype`` (a view when only the signedness differs)."""
    dtype = np.dtype(dtype)
    if values.dtype.itemsize == dtype.itemsize and values.dtype.kind in "iu" and values.flags.c_contiguous:
        return values.view(dtype)
    return values.astype(dtype)


def _as_unsigned(values: np.ndarray, dtype) -> np.ndarray:
    return _as_signed(values, dtype)


def csr_block(src_local: np.ndarray, dst: np.ndarray, num_rows: int, dedup: bool,
              use_scipy: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """CSR rows of one block: ``(indptr_local int64[num_rows + 1], indices)``, lists sorted by dst.

    ``src_local`` holds row numbers in ``[0, num_rows)``. The scipy path is a counting sort by row
    (``coo_tocsr``) followed by a sort of every row (``csr_sort_indices``); the numpy path (the
    reference, and the fallback if scipy's kernels are missing) sorts combined (row, dst) keys.
    Both return identical arrays.
    """
    nnz = len(src_local)
    if nnz == 0:
        return np.zeros(num_rows + 1, np.int64), np.zeros(0, np.int64)
    if use_scipy:
        try:
            from scipy.sparse import _sparsetools
        except ImportError:  # pragma: no cover - scipy is a dependency
            use_scipy = False
    num_cols = int(dst.max()) + 1
    if use_scipy:
        idx = np.int32 if max(num_rows, num_cols, nnz) < (1 << 31) else np.int64
        rows = _as_signed(src_local, idx)
        cols = _as_signed(dst, idx)
        indptr = np.empty(num_rows + 1, idx)
        indices = np.empty(nnz, idx)
        data_out = np.empty(nnz, np.int8)
        _sparsetools.coo_tocsr(num_rows, num_cols, nnz, rows, cols, np.zeros(nnz, np.int8),
                               indptr, indices, data_out)
        del rows, cols
        _sparsetools.csr_sort_indices(num_rows, indptr, indices, data_out)
        del data_out
        indptr = indptr.astype(np.int64, copy=False)
        if dedup:
            dup = np.empty(nnz, bool)
            dup[0] = False
            np.equal(indices[1:], indices[:-1], out=dup[1:])
            starts = indptr[:-1]
            dup[starts[starts < nnz]] = False  # the first entry of a row is never a duplicate
            dropped = np.flatnonzero(dup)
            if dropped.size:
                rows_of = np.searchsorted(indptr, dropped, side="right") - 1
                removed = np.zeros(num_rows + 1, np.int64)
                np.cumsum(np.bincount(rows_of, minlength=num_rows), out=removed[1:])
                del rows_of, dropped
                np.logical_not(dup, out=dup)
                indices = indices[dup]
                indptr = indptr - removed
        return indptr, indices
    dst_bits = max(_bit_length(num_cols - 1), 1)
    if _bit_length(max(num_rows - 1, 0)) + dst_bits > 64:
        raise ValueError(f"Block of {num_rows} rows x {num_cols} columns does not fit 64-bit sort keys")
    keys = (src_local.astype(np.uint64) << np.uint64(dst_bits)) | dst.astype(np.uint64)
    keys.sort()
    if dedup and nnz > 1:
        keep = np.empty(nnz, bool)
        keep[0] = True
        np.not_equal(keys[1:], keys[:-1], out=keep[1:])
        keys = keys[keep]
    rows = (keys >> np.uint64(dst_bits)).astype(np.int64)
    indptr = np.zeros(num_rows + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=num_rows), out=indptr[1:])
    indices = (keys & np.uint64((1 << dst_bits) - 1)).astype(np.int64)
    return indptr, indices


class ProgressMeter:
    """Progress of a long job on stderr: counts, rate and ETA per task, or nothing.

    On a terminal it is a rich progress bar (count, rate, elapsed time, time remaining). Elsewhere (a
    log file of a build run under ``nohup``) it prints one plain line per task every ``interval``
    seconds and when the task completes: ``name: done/total (pct) rate/s, elapsed, ETA``.
    ``unit`` names what is counted (``edges``, ``B``); byte counts print with binary prefixes.
    """

    def __init__(self, enabled: bool, description: str, *, interval: float = 30.0, stream=None):
        self._bar = None
        self._plain = False
        self._stream = stream
        self._description = description
        self._interval = interval
        self._tasks: dict[str, dict] = {}
        if not enabled:
            return
        stream = sys.stderr if stream is None else stream
        self._stream = stream
        if not getattr(stream, "isatty", lambda: False)():
            self._plain = True
            return
        try:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                ProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.text import Text
        except ImportError:  # pragma: no cover - rich is a dependency
            self._plain = True
            return
        from rich.markup import escape

        class RateColumn(ProgressColumn):
            def render(self, task):
                speed = task.finished_speed or task.speed
                if speed is None and task.elapsed:  # too few updates for rich's moving estimate
                    speed = task.completed / task.elapsed
                unit = task.fields.get("unit", "")
                if speed is None:
                    return Text("?/s", style="progress.data.speed")
                text = format_bytes(speed) if unit == "B" else f"{speed:,.0f} {unit}".rstrip()
                return Text(f"{text}/s", style="progress.data.speed")

        self._bar = Progress(TextColumn(f"{escape(description)} [progress.description]{{task.description}}"),
                             BarColumn(), MofNCompleteColumn(), RateColumn(), TimeElapsedColumn(),
                             TextColumn("ETA"), TimeRemainingColumn(), console=Console(file=stream),
                             transient=False)
        self._bar.start()

    @property
    def enabled(self) -> bool:
        return self._bar is not None or self._plain

    def task(self, name: str, total: int | None, unit: str = "") -> None:
        now = time.perf_counter()
        state = {"total": total, "done": 0, "t0": now, "last": now, "unit": unit, "id": None}
        if self._bar is not None:
            state["id"] = self._bar.add_task(name, total=total, unit=unit)
        self._tasks[name] = state

    def advance(self, name: str, amount: int) -> None:
        state = self._tasks.get(name)
        if state is None:
            return
        state["done"] += amount
        if self._bar is not None:
            self._bar.advance(state["id"], amount)
        elif self._plain:
            now = time.perf_counter()
            complete = state["total"] is not None and state["done"] >= state["total"]
            if now - state["last"] >= self._interval or complete and not state.get("reported"):
                state["last"] = now
                state["reported"] = complete
                self._print(name, state, now)

    def update(self, name: str, done: int, total: int | None = None) -> None:
        """Set a task's count (and total) instead of advancing it."""
        state = self._tasks.get(name)
        if state is None:
            return
        if total is not None:
            self.total(name, total)
        self.advance(name, done - state["done"])

    def total(self, name: str, total: int) -> None:
        state = self._tasks.get(name)
        if state is None:
            return
        state["total"] = total
        if self._bar is not None:
            self._bar.update(state["id"], total=total)

    def _count(self, value: float, unit: str) -> str:
        return format_bytes(value) if unit == "B" else f"{value:,.0f}"

    def _print(self, name: str, state: dict, now: float) -> None:
        elapsed = now - state["t0"]
        done, total, unit = state["done"], state["total"], state["unit"]
        rate = done / elapsed if elapsed > 0 else 0.0
        line = f"{self._description} {name}: {self._count(done, unit)}"
        if total:
            line += f"/{self._count(total, unit)} ({100 * done / total:.1f}%)"
        rate_text = format_bytes(rate) if unit == "B" else f"{rate:,.0f} {unit}".rstrip()
        line += f", {rate_text}/s, elapsed {_clock(elapsed)}"
        if total and rate > 0 and done < total:
            line += f", ETA {_clock((total - done) / rate)}"
        print(line, file=self._stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        self._plain = False


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class _SequentialSection:
    """Rows of a fixed-size section written in order through ``pwrite``, with a running CRC-32."""

    def __init__(self, kind: SectionKind, offset: int, rows: int, row_bytes: int, fill: bytes):
        self.kind = kind
        self.offset = offset
        self.rows = rows
        self.row_bytes = row_bytes
        self.fill = fill  # one row's default bytes
        self.cursor = 0
        self.crc = 0

    @property
    def name(self) -> str:
        return self.kind.name.lower()

    def write(self, fd: int, start: int, data: np.ndarray) -> None:
        if start != self.cursor:
            raise ValueError(f"{self.name} rows must be written in order: next row is {self.cursor}, "
                             f"not {start}")
        count = data.shape[0] if data.ndim else 1
        if start + count > self.rows:
            raise ValueError(f"{self.name} rows {start}..{start + count} exceed the {self.rows} nodes")
        raw = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
        if len(raw) != count * self.row_bytes:
            raise ValueError(f"{self.name} rows hold {len(raw)} bytes, expected {count * self.row_bytes}")
        _pwrite_all(fd, raw, self.offset + start * self.row_bytes)
        self.crc = zlib.crc32(raw, self.crc)
        self.cursor += count

    def fill_rest(self, fd: int) -> None:
        """Write the default row into every row not yet written."""
        rows_per_chunk = max(CHUNK_BYTES // max(self.row_bytes, 1), 1)
        while self.cursor < self.rows and self.row_bytes:
            count = min(rows_per_chunk, self.rows - self.cursor)
            chunk = np.frombuffer(self.fill * count, np.uint8)
            self.write(fd, self.cursor, chunk.reshape(count, self.row_bytes))
        self.cursor = self.rows


def _write_all(f, array: np.ndarray) -> None:
    view = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    while len(view):
        view = view[f.write(view):]


def _pwrite_all(fd: int, data, offset: int) -> None:
    view = memoryview(data).cast("B")
    while len(view):
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def _cleanup(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)


class _SpillCodec:
    """Spilled edges: two streams per partition, sources and destinations, u32 while every node id
    fits 32 bits, else u64 (decided up front). Grouping by partition is a counting sort."""

    def __init__(self, wide: bool, use_scipy: bool, num_nodes: int | None):
        self.wide = wide
        self.id_dtype = np.dtype("<u8" if wide else "<u4")
        self.edge_bytes = 2 * self.id_dtype.itemsize
        self.use_scipy = use_scipy
        # scipy's counting sort carries the sources as its (signed) column index array
        self.index_dtype = np.dtype(np.int32 if not wide and num_nodes is not None and num_nodes <= 1 << 31
                                    else np.int64)

    def pack(self, src: np.ndarray, dst: np.ndarray, mirror: bool) -> tuple[np.ndarray, np.ndarray]:
        if mirror:
            return np.concatenate([src, dst]), np.concatenate([dst, src])
        return src, dst

    def group(self, src: np.ndarray, dst: np.ndarray, groups: np.ndarray, num_groups: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Edges reordered by group (stable), and the count of each group."""
        n = len(src)
        if self.use_scipy and n < 1 << 31:
            try:
                from scipy.sparse import _sparsetools
            except ImportError:  # pragma: no cover - scipy is a dependency
                pass
            else:
                idx = self.index_dtype
                offsets = np.empty(num_groups + 1, idx)
                grouped_src = np.empty(n, idx)
                grouped_dst = np.empty(n, dst.dtype)
                _sparsetools.coo_tocsr(num_groups, int(np.iinfo(idx).max), n, groups.astype(idx),
                                       _as_signed(src, idx), np.ascontiguousarray(dst), offsets, grouped_src,
                                       grouped_dst)
                return grouped_src.view(self.id_dtype), grouped_dst, np.diff(offsets)
        order = np.argsort(groups.astype(np.uint8 if num_groups <= 256 else np.uint16), kind="stable")
        return src[order], dst[order], np.bincount(groups, minlength=num_groups)


class _SpillFiles:
    """The two streams (sources, destinations) of one spill partition, appended to."""

    def __init__(self, base: str):
        self.base = base
        self.files = (open(base + ".src", "ab", buffering=0), open(base + ".dst", "ab", buffering=0))

    def write(self, src: np.ndarray, dst: np.ndarray) -> None:
        _write_all(self.files[0], src)
        _write_all(self.files[1], dst)

    def close(self) -> None:
        for f in self.files:
            f.close()


def _read_into(path: str, array: np.ndarray) -> None:
    with open(path, "rb", buffering=0) as f:
        view = memoryview(array.reshape(-1).view(np.uint8))
        while len(view):
            got = f.readinto(view)
            if not got:
                raise OSError(f"Spill file {path} is short")  # pragma: no cover
            view = view[got:]


def _remove_spill(base: str) -> None:
    for suffix in (".src", ".dst"):
        os.remove(base + suffix)


class ImageWriter:
    """Build a storage image from streamed edge chunks and row chunks of node data.

    Parameters
    ----------
    path:
        The image to create (replaced atomically when :meth:`finalize` succeeds).
    num_nodes:
        N. ``None``: the largest node id seen + 1, known only at :meth:`finalize` (node data
        cannot be written before then; use ``num_nodes`` when there are features).
    feature_dim, feature_dtype:
        F and the element type of the features section (``fp32``, ``fp16``, ``bf16``, ``int8``).
    num_classes:
        C. ``None``: the largest label written + 1.
    symmetrize:
        Add the reverse of every edge (sets the header's symmetrized flag).
    drop_self_loops, drop_duplicates:
        Drop edges ``v -> v`` / repeated ``(u, v)`` entries (after symmetrizing); each sets its flag.
    memory_budget:
        Bytes the writer may use for edge data (spill buffers, block builds). A block never holds
        more edges than this allows, so the edge list may be any multiple of it.
    index_dtype:
        Force the indices element type (default: u32 up to 2^32 nodes, else u64).
    int8_scale:
        Quantization scale for float features written into an int8 image.
    flags:
        Extra header flags (for a source known to be symmetric, for example).
    progress:
        Show a rich progress bar on stderr.
    expected_edges:
        Edges the caller will add (only sizes the progress bar).
    temp_dir:
        Where the temporary directory goes (default: next to the output).
    check_disk:
        With ``expected_edges``, refuse to start (:class:`DiskFullError`) when the file system clearly
        lacks the room for the spill files and the image.

    Disk: the spill files hold every (mirrored) edge, 8 bytes each (16 past 2^32 nodes), next to
    the image being written; they are deleted block by block as the sort consumes them. The peak of
    spill files plus image is in ``stats["disk_peak_bytes"]``.

    Raises
    ------
    ValueError
        A bad parameter, a node id out of range, rows written out of order.
    DiskFullError
        The file system filled up (or clearly would); nothing of the build is left behind.
    MemoryBudgetError
        One node's adjacency list does not fit the memory budget; nothing is left behind.
    """

    def __init__(self, path: str | os.PathLike, num_nodes: int | None = None, *, feature_dim: int = 0,
                 feature_dtype: FeatureDtype | str = FeatureDtype.FP32, num_classes: int | None = None,
                 symmetrize: bool = False, drop_self_loops: bool = False, drop_duplicates: bool = False,
                 memory_budget: int | str = DEFAULT_MEMORY_BUDGET, index_dtype: IndexDtype | None = None,
                 int8_scale: float | None = None, flags: int = 0, progress: bool = False,
                 expected_edges: int | None = None, temp_dir: str | os.PathLike | None = None,
                 use_scipy: bool = True, check_disk: bool = True):
        memory_budget = parse_size(memory_budget)
        if memory_budget < MIN_MEMORY_BUDGET:
            raise ValueError(f"Memory budget must be at least {MIN_MEMORY_BUDGET} bytes, not {memory_budget}")
        if num_nodes is not None and (not isinstance(num_nodes, (int, np.integer)) or num_nodes < 0):
            raise ValueError(f"Node count must be a non-negative integer, not {num_nodes!r}")
        if not isinstance(feature_dim, (int, np.integer)) or feature_dim < 0:
            raise ValueError(f"Feature dimension must be a non-negative integer, not {feature_dim!r}")
        if num_classes is not None and not 0 <= num_classes < 1 << 31:
            raise ValueError(f"Class count must be in [0, 2^31), not {num_classes!r}")
        if flags & ~FLAGS_KNOWN:
            raise ValueError(f"Unknown header flags {flags:#x}")
        self.path = os.fspath(path)
        self.num_nodes = None if num_nodes is None else int(num_nodes)
        self.feature_dim = int(feature_dim)
        self.feature_dtype = FeatureDtype.parse(feature_dtype)
        self.num_classes = num_classes
        self.symmetrize = bool(symmetrize)
        self.drop_self_loops = bool(drop_self_loops)
        self.drop_duplicates = bool(drop_duplicates)
        self.memory_budget = memory_budget
        self.index_dtype = None if index_dtype is None else IndexDtype(index_dtype)
        self.int8_scale = int8_scale
        self.flags = int(flags)
        self.use_scipy = use_scipy
        self.stats: dict[str, float | int] = {
            "edges_added": 0, "self_loops_dropped": 0, "edges_spilled": 0, "duplicates_dropped": 0,
            "blocks": 0, "redistributed_edges": 0, "max_block_edges": 0,
            "seconds_add": 0.0, "seconds_load": 0.0, "seconds_sort": 0.0, "seconds_write": 0.0,
            "spill_peak_bytes": 0, "disk_peak_bytes": 0,
        }
        self._spill_bytes = 0
        self._max_id = -1
        self._label_max = -1
        self._split_counts = np.zeros(4, np.int64)
        self._finished = False
        self._t0 = time.perf_counter()

        out_dir = os.path.dirname(os.path.abspath(self.path))
        base = os.path.basename(self.path)
        self._tmp = tempfile.mkdtemp(prefix=f".{base}.build-", dir=temp_dir or out_dir)
        self.temp_dir = self._tmp
        self._cleanup = weakref.finalize(self, _cleanup, self._tmp)
        self._image_tmp = os.path.join(self._tmp, "image")
        self._fd = os.open(self._image_tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

        # Spill: one u64 word per edge while every id fits 32 bits (decided up front).
        self._codec = _SpillCodec(self.num_nodes is None or self.num_nodes > 1 << 32, use_scipy, self.num_nodes)
        if self.num_nodes is not None and self.num_nodes > 1:
            self._part_shift = max(_bit_length(self.num_nodes - 1) - _bit_length(MAX_PARTITIONS - 1), 0)
            self._num_parts = ((self.num_nodes - 1) >> self._part_shift) + 1
        else:  # unknown N: one partition, redistributed at finalize once N is known
            self._part_shift = 64
            self._num_parts = 1
        self._part_counts = np.zeros(self._num_parts, np.int64)
        self._part_files: dict[int, _SpillFiles] = {}
        self._add_slice = max(memory_budget // ADD_BYTES_PER_EDGE, 1024)

        self._node_sections: dict[SectionKind, _SequentialSection] = {}
        if self.num_nodes is not None:
            self._open_node_sections()
        self._progress = ProgressMeter(progress, os.path.basename(self.path))
        self._progress.task("edges in", expected_edges, "edges")
        if check_disk and expected_edges:
            try:
                self._check_disk(int(expected_edges))
            except BaseException:
                self.abort()
                raise

    def estimate_disk(self, expected_edges: int) -> int:
        """Upper bound of the build's peak disk use for ``expected_edges`` added edges (bytes)."""
        spilled = expected_edges * (2 if self.symmetrize else 1)
        n = self.num_nodes if self.num_nodes is not None else 0
        layout = layout_sections(n, 0, self.feature_dim, self.feature_dtype, IndexDtype.U32)
        before_indices = layout[SectionKind.INDICES][0]
        # The spill files shrink block by block while the indices (at most as many entries,
        # each at most as wide) grow: the peak is all spill files plus the node sections.
        return spilled * self._codec.edge_bytes + before_indices

    def _check_disk(self, expected_edges: int) -> None:
        need = self.estimate_disk(expected_edges)
        free = free_disk(self._tmp)
        if need > free:
            raise DiskFullError(
                f"not enough disk for {self.path}: the build needs up to {format_bytes(need)} in "
                f"{os.path.dirname(self._tmp)} (spill files of {expected_edges:,} edges, then the image), "
                f"{format_bytes(free)} are free")

    def _disk_full(self, err: OSError, phase: str) -> DiskFullError:
        try:
            free = format_bytes(free_disk(os.path.dirname(self._tmp)))
        except OSError:  # pragma: no cover
            free = "unknown"
        return DiskFullError(
            f"disk full while {phase} {self.path} ({err.strerror or err}): {format_bytes(self._disk_now())} "
            f"of spill files and image were written to {os.path.dirname(self._tmp)}, {free} free now; "
            f"the partial image and spill files were removed")

    def _disk_now(self) -> int:
        image = 0
        if self._fd is not None:
            try:
                image = os.fstat(self._fd).st_blocks * 512
            except OSError:  # pragma: no cover
                image = 0
        return self._spill_bytes + image

    def _note_disk(self) -> None:
        self.stats["spill_peak_bytes"] = max(self.stats["spill_peak_bytes"], self._spill_bytes)
        self.stats["disk_peak_bytes"] = max(self.stats["disk_peak_bytes"], self._disk_now())

    @contextlib.contextmanager
    def _guard(self, phase: str):
        """Turn a full disk into :class:`DiskFullError` with the build removed."""
        try:
            yield
        except OSError as err:
            if err.errno not in _DISK_FULL_ERRNOS:
                raise
            error = self._disk_full(err, phase)
            self.abort()
            raise error from err

    # ---- lifetime
    def __enter__(self) -> ImageWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            if not self._finished:
                self.finalize()
        else:
            self.abort()

    def abort(self) -> None:
        """Drop everything written so far (the output path is left untouched)."""
        self._progress.close()
        self._close_parts()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._finished = True
        self._cleanup()

    def _close_parts(self) -> None:
        for f in self._part_files.values():
            f.close()
        self._part_files = {}

    # ---- node data
    def node_progress(self, total: int):
        """A progress task for ``total`` node rows: returns the callable that advances it."""
        self._progress.task("node data", total, "nodes")
        return lambda count: self._progress.advance("node data", count)

    def _open_node_sections(self) -> None:
        layout = layout_sections(self.num_nodes, 0, self.feature_dim, self.feature_dtype, IndexDtype.U32)
        row_bytes = self.feature_dim * self.feature_dtype.itemsize
        self._node_sections = {
            SectionKind.FEATURES: _SequentialSection(SectionKind.FEATURES, layout[SectionKind.FEATURES][0],
                                                     self.num_nodes, row_bytes, bytes(row_bytes)),
            SectionKind.LABELS: _SequentialSection(SectionKind.LABELS, layout[SectionKind.LABELS][0],
                                                   self.num_nodes, 4, np.int32(-1).tobytes()),
            SectionKind.SPLIT: _SequentialSection(SectionKind.SPLIT, layout[SectionKind.SPLIT][0],
                                                  self.num_nodes, 1, b"\0"),
        }

    def _node_section(self, kind: SectionKind) -> _SequentialSection:
        if self._finished:
            raise ValueError("The image is already finalized")
        if self.num_nodes is None:
            raise ValueError(f"Writing {kind.name.lower()} needs the node count: pass num_nodes to the writer")
        return self._node_sections[kind]

    def _row_chunks(self, rows: np.ndarray, row_bytes: int):
        step = max(self.memory_budget // max(4 * row_bytes, 1), 1)
        for start in range(0, rows.shape[0], step):
            yield start, rows[start:start + step]

    def write_features(self, start: int, rows) -> None:
        """Feature rows ``start, start + 1, ...`` (``(n, F)``, storage or float values, see
        :func:`~smartsage.spec.image.encode_features`). Rows must come in order."""
        section = self._node_section(SectionKind.FEATURES)
        rows = np.asarray(rows)
        if rows.ndim != 2 or rows.shape[1] != self.feature_dim:
            raise ValueError(f"Feature rows must have shape (n, {self.feature_dim}), not {rows.shape}")
        for offset, chunk in self._row_chunks(rows, max(section.row_bytes, 1)):
            encoded = encode_features(chunk, self.feature_dtype, self.int8_scale)
            with self._guard("writing features of"):
                section.write(self._fd, start + offset, encoded)

    def write_labels(self, start: int, labels) -> None:
        """Labels of nodes ``start, start + 1, ...`` (-1: unlabeled). Must come in order."""
        section = self._node_section(SectionKind.LABELS)
        labels = np.asarray(labels)
        if labels.ndim != 1 or (labels.size and labels.dtype.kind not in "iu"):
            raise ValueError(f"Labels must be a 1-D integer array, not {labels.dtype} {labels.shape}")
        if labels.size:
            low, high = int(labels.min()), int(labels.max())
            if low < -1 or high >= 1 << 31:
                raise ValueError(f"Labels must lie in [-1, 2^31), found {low if low < -1 else high}")
            if self.num_classes is not None and high >= self.num_classes:
                raise ValueError(f"Label {high} is outside [0, {self.num_classes}) classes")
            self._label_max = max(self._label_max, high)
        with self._guard("writing labels of"):
            section.write(self._fd, start, labels.astype("<i4", copy=False))

    def write_split(self, start: int, codes) -> None:
        """Split codes (:class:`~smartsage.spec.image.Split`) of nodes ``start, ...``. In order."""
        section = self._node_section(SectionKind.SPLIT)
        codes = np.asarray(codes)
        if codes.ndim != 1 or (codes.size and codes.dtype.kind not in "iub"):
            raise ValueError(f"Split codes must be a 1-D integer array, not {codes.dtype} {codes.shape}")
        if codes.size and (int(codes.min()) < 0 or int(codes.max()) > 3):
            raise ValueError("Split codes must be 0 (none), 1 (train), 2 (val) or 3 (test)")
        codes = codes.astype("u1", copy=False)
        with self._guard("writing the split of"):
            section.write(self._fd, start, codes)
        self._split_counts += np.bincount(codes, minlength=4)[:4]

    # ---- edges
    def add_edges(self, src, dst) -> None:
        """Append directed edges ``src[i] -> dst[i]`` (integer arrays or sequences, any length)."""
        if self._finished:
            raise ValueError("The image is already finalized")
        src = np.asarray(src)
        dst = np.asarray(dst)
        if src.shape != dst.shape or src.ndim != 1:
            raise ValueError(f"Edge sources and destinations must be 1-D arrays of one length, not "
                             f"{src.shape} and {dst.shape}")
        if src.size == 0:
            return
        for array in (src, dst):
            if array.dtype.kind not in "iu":
                raise ValueError(f"Node ids must be integers, not {array.dtype}")
        t0 = time.perf_counter()
        with self._guard("spilling edges of"):
            for start in range(0, len(src), self._add_slice):
                self._add_slice_edges(src[start:start + self._add_slice], dst[start:start + self._add_slice])
        self.stats["seconds_add"] += time.perf_counter() - t0

    def _add_slice_edges(self, src: np.ndarray, dst: np.ndarray) -> None:
        n_in = len(src)
        low = min(int(src.min()), int(dst.min()))
        high = max(int(src.max()), int(dst.max()))
        if low < 0:
            raise ValueError(f"Node ids must not be negative, found {low}")
        if self.num_nodes is not None and high >= self.num_nodes:
            raise ValueError(f"Node id {high} is out of range for {self.num_nodes} nodes")
        if high >= 1 << 63:
            raise ValueError(f"Node id {high} does not fit 63 bits")
        self._max_id = max(self._max_id, high)
        src = src.astype(self._codec.id_dtype, copy=False)
        dst = dst.astype(self._codec.id_dtype, copy=False)
        if self.drop_self_loops:
            keep = src != dst
            if not keep.all():
                src, dst = src[keep], dst[keep]
        self.stats["edges_added"] += n_in
        self.stats["self_loops_dropped"] += n_in - len(src)
        n = len(src) * (2 if self.symmetrize else 1)
        if n == 0:
            self._progress.advance("edges in", n_in)
            return
        if self._num_parts > 1:
            part = src >> self._codec.id_dtype.type(self._part_shift)
            if self.symmetrize:
                part = np.concatenate([part, dst >> self._codec.id_dtype.type(self._part_shift)])
        src, dst = self._codec.pack(src, dst, self.symmetrize)
        if self._num_parts == 1:
            self._spill(0, src, dst)
        else:
            src, dst, counts = self._codec.group(src, dst, part, self._num_parts)
            del part
            start = 0
            for index in np.flatnonzero(counts):
                end = start + int(counts[index])
                self._spill(int(index), src[start:end], dst[start:end])
                start = end
        self.stats["edges_spilled"] += n
        self._progress.advance("edges in", n_in)

    def _part_path(self, level: str, index: int) -> str:
        return os.path.join(self._tmp, f"edges-{level}-{index}.bin")

    def _spill(self, index: int, src: np.ndarray, dst: np.ndarray) -> None:
        files = self._part_files.get(index)
        if files is None:
            files = self._part_files[index] = _SpillFiles(self._part_path("0", index))
        files.write(src, dst)
        self._part_counts[index] += len(src)
        self._spill_bytes += len(src) * self._codec.edge_bytes

    # ---- finalize
    def finalize(self) -> ImageHeader:
        """Sort, write indptr and indices, complete the node sections, write the header, rename."""
        if self._finished:
            raise ValueError("The image is already finalized")
        try:
            with self._guard("sorting the edges of"):
                self._note_disk()
                header = self._finalize()
        except BaseException:
            self.abort()
            raise
        self._finished = True
        self._progress.close()
        self._cleanup()
        self.stats["seconds"] = time.perf_counter() - self._t0
        return header

    def _finalize(self) -> ImageHeader:
        self._close_parts()
        if self.num_nodes is None:
            inferred = self._max_id + 1
            if inferred > max(64 * self.stats["edges_spilled"], 1 << 24):
                raise ValueError(
                    f"The largest node id {self._max_id} would make an image of {inferred} nodes for "
                    f"{self.stats['edges_spilled']} edges; pass the node count (num_nodes, --num-nodes) "
                    f"if that is intended")
            self.num_nodes = inferred
            self._open_node_sections()
        n = self.num_nodes
        index_dtype = self.index_dtype or IndexDtype.for_num_nodes(n)
        if index_dtype is IndexDtype.U32 and n > 1 << 32:
            raise ValueError(f"u32 indices cannot address {n} nodes")
        layout = layout_sections(n, 0, self.feature_dim, self.feature_dtype, index_dtype)
        indptr_offset = layout[SectionKind.INDPTR][0]
        indices_offset = layout[SectionKind.INDICES][0]

        # Top-level partitions, in node order, as (file, edges, first node, end node).
        parts = []
        for index in range(self._num_parts):
            lo = index << self._part_shift if self._part_shift < 64 else 0
            hi = min((index + 1) << self._part_shift, n) if self._part_shift < 64 else n
            if lo >= n:
                break
            path = self._part_path("0", index) if self._part_counts[index] else None
            parts.append((path, int(self._part_counts[index]), lo, hi))
        if n == 0 and parts == []:
            parts.append((None, 0, 0, 0))
        self._progress.task("sorting", int(self._part_counts.sum()), "edges")

        self._indptr_crc = 0
        self._indices_crc = 0
        self._edges_written = 0
        self._indices_pos = indices_offset
        self._indptr_pos = indptr_offset
        self._write_indptr(np.zeros(1, np.int64))
        self._index_dtype = index_dtype
        pending: list[tuple[str | None, int, int, int]] = []
        for part in parts:
            self._plan(part, pending)
        self._flush_block(pending)

        if self._edges_written != self._indptr_written_last:
            raise AssertionError("indptr does not end at the edge count")  # pragma: no cover
        self.stats["duplicates_dropped"] = self.stats["edges_spilled"] - self._edges_written

        for section in self._node_sections.values():
            section.fill_rest(self._fd)
        e = self._edges_written
        labels_max = self._label_max
        num_classes = self.num_classes if self.num_classes is not None else labels_max + 1
        flags = self.flags
        flags |= FLAG_SYMMETRIZED if self.symmetrize else 0
        flags |= FLAG_NO_SELF_LOOPS if self.drop_self_loops else 0
        flags |= FLAG_NO_DUPLICATES if self.drop_duplicates else 0
        final = layout_sections(n, e, self.feature_dim, self.feature_dtype, index_dtype)
        crcs = {
            SectionKind.INDPTR: self._indptr_crc,
            SectionKind.FEATURES: self._node_sections[SectionKind.FEATURES].crc,
            SectionKind.LABELS: self._node_sections[SectionKind.LABELS].crc,
            SectionKind.SPLIT: self._node_sections[SectionKind.SPLIT].crc,
            SectionKind.INDICES: self._indices_crc,
        }
        sections = tuple(Section(kind, offset, length, count, crcs[kind])
                         for kind, (offset, length, count) in final.items())
        for kind, (offset, _, _) in final.items():
            assert offset == layout[kind][0], "sections before indices must not depend on E"
        counts = self._split_counts
        header = ImageHeader(n, e, self.feature_dim, self.feature_dtype, index_dtype, num_classes, flags,
                             int(counts[1]), int(counts[2]), int(counts[3]), sections)
        os.ftruncate(self._fd, header.file_size)
        page = header.pack()
        assert len(page) == HEADER_SIZE
        _pwrite_all(self._fd, page, 0)
        self._note_disk()
        os.close(self._fd)
        self._fd = None
        os.replace(self._image_tmp, self.path)
        return header

    def _cost(self, edges: int, rows: int) -> int:
        return edges * BLOCK_BYTES_PER_EDGE[self._codec.edge_bytes] + rows * BLOCK_BYTES_PER_ROW

    def _plan(self, part: tuple[str | None, int, int, int], pending: list) -> None:
        """Queue a partition for a block, redistributing it first if it alone exceeds the budget."""
        path, edges, lo, hi = part
        if self._cost(edges, hi - lo) > self.memory_budget and hi - lo == 1:
            raise MemoryBudgetError(
                f"memory budget {format_bytes(self.memory_budget)} is too small for {self.path}: node {lo} "
                f"has {edges:,} entries before duplicates are dropped and its adjacency list is sorted in "
                f"memory at once, which needs {format_bytes(self._cost(edges, 1))}; raise the budget")
        if self._cost(edges, hi - lo) > self.memory_budget and hi - lo > 1:
            self._flush_block(pending)
            for sub in self._redistribute(part):
                self._plan(sub, pending)
            return
        cost = sum(self._cost(p[1], p[3] - p[2]) for p in pending)
        if pending and cost + self._cost(edges, hi - lo) > self.memory_budget:
            self._flush_block(pending)
        pending.append(part)

    def _redistribute(self, part: tuple[str | None, int, int, int]):
        """Split a partition file into up to MAX_PARTITIONS finer node ranges (one streamed pass)."""
        path, edges, lo, hi = part
        span = hi - lo
        shift = max(_bit_length(span - 1) - _bit_length(MAX_PARTITIONS - 1), 0)
        count = ((span - 1) >> shift) + 1
        level = f"{lo}-{hi}"
        files: dict[int, object] = {}
        sub_counts = np.zeros(count, np.int64)
        if path is not None:
            step = max(self.memory_budget // ADD_BYTES_PER_EDGE, 1024)
            try:
                with open(path + ".src", "rb") as f_src, open(path + ".dst", "rb") as f_dst:
                    while True:
                        src = np.fromfile(f_src, self._codec.id_dtype, count=step)
                        dst = np.fromfile(f_dst, self._codec.id_dtype, count=step)
                        if not len(src):
                            break
                        sub = (src - src.dtype.type(lo)) >> src.dtype.type(shift)
                        src, dst, counts = self._codec.group(src, dst, sub, count)
                        del sub
                        start = 0
                        for index in np.flatnonzero(counts):
                            end = start + int(counts[index])
                            g = files.get(index)
                            if g is None:
                                g = files[index] = _SpillFiles(self._part_path(level, int(index)))
                            g.write(src[start:end], dst[start:end])
                            start = end
                        sub_counts += counts
                        self._spill_bytes += len(src) * self._codec.edge_bytes
                        self._note_disk()
            finally:
                for g in files.values():
                    g.close()
            _remove_spill(path)
            self._spill_bytes -= edges * self._codec.edge_bytes
            self.stats["redistributed_edges"] += edges
        subs = []
        for index in range(count):
            sub_lo = lo + (index << shift)
            sub_hi = min(lo + ((index + 1) << shift), hi)
            sub_path = self._part_path(level, index) if sub_counts[index] else None
            subs.append((sub_path, int(sub_counts[index]), sub_lo, sub_hi))
        return subs

    def _flush_block(self, pending: list) -> None:
        """Build the CSR rows of the queued partitions (consecutive node ranges) and write them."""
        if not pending:
            return
        lo, hi = pending[0][2], pending[-1][3]
        total = sum(p[1] for p in pending)
        self._note_disk()  # the peak: every spill file left, and the indices written so far
        t0 = time.perf_counter()
        src_local = np.empty(total, self._codec.id_dtype)
        dst = np.empty(total, self._codec.id_dtype)
        at = 0
        for path, edges, _, _ in pending:
            if path is None:
                continue
            _read_into(path + ".src", src_local[at:at + edges])
            _read_into(path + ".dst", dst[at:at + edges])
            _remove_spill(path)
            self._spill_bytes -= edges * self._codec.edge_bytes
            at += edges
        pending.clear()
        src_local -= src_local.dtype.type(lo)
        t1 = time.perf_counter()
        indptr_local, indices = csr_block(src_local, dst, hi - lo, self.drop_duplicates, self.use_scipy)
        del src_local, dst
        t2 = time.perf_counter()
        self.stats["blocks"] += 1
        self.stats["max_block_edges"] = max(self.stats["max_block_edges"], total)
        out = _as_unsigned(indices, self._index_dtype.numpy_dtype)
        del indices
        raw = memoryview(out.reshape(-1).view(np.uint8))
        _pwrite_all(self._fd, raw, self._indices_pos)
        self._indices_crc = zlib.crc32(raw, self._indices_crc)
        self._indices_pos += len(raw)
        del raw, out
        self._write_indptr(indptr_local[1:] + self._edges_written)
        self._edges_written += int(indptr_local[-1])
        self._note_disk()
        self._progress.advance("sorting", total)
        self.stats["seconds_load"] += t1 - t0
        self.stats["seconds_sort"] += t2 - t1
        self.stats["seconds_write"] += time.perf_counter() - t2

    def _write_indptr(self, values: np.ndarray) -> None:
        raw = memoryview(values.astype("<u8").view(np.uint8))
        _pwrite_all(self._fd, raw, self._indptr_pos)
        self._indptr_crc = zlib.crc32(raw, self._indptr_crc)
        self._indptr_pos += len(raw)
        if len(values):
            self._indptr_written_last = int(values[-1])
