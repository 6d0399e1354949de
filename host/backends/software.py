"""Software baselines: what a user runs without the device, with the same results.

Both baselines run the golden model's sampling and aggregation on the host (so they produce the
identical node lists, counts and sums for the same seed) but read the image the way a host-side
sampler does, through an instrumented view of the image:

``mmap``
    Sampling and gathering through a memory-mapped image and the page cache, like PyG on a memmap.
    Every distinct 4 KiB page a batch touches for the first time since the cache was dropped is a
    storage read of a whole page (the kernel's readahead is disabled with ``MADV_RANDOM``, so the model
    is a lower bound of what the OS reads).
``direct``
    ``O_DIRECT``: each gather computes the distinct pages it needs, coalesces runs of adjacent pages and
    reads them with a deep queue of aligned ``preadv`` calls from a thread pool (SmartSAGE's own software
    fix). There is no page cache: every batch reads what it needs.

``dram``
    The upper bound: the whole image copied into this process's memory when the sampler opens (one
    sequential read of the file), then no storage reads at all.

The file-backed ones can start cold (``posix_fadvise(POSIX_FADV_DONTNEED)`` on the image) and count storage reads,
bytes read from storage and bytes sent to the host (for a host-side sampler, everything read from
storage crosses the link to the host).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import mmap
import os
import time

import numpy as np

from smartsage.spec import golden
from smartsage.spec.config import CONFIGS, KernelConfig
from smartsage.spec.descriptor import Status
from smartsage.spec.image import PAGE_SIZE, GraphImage, SectionKind

from ..driver import DeviceBatch, DeviceError

__all__ = ["IOCounters", "MmapSampler", "DirectSampler", "DramSampler", "InMemoryImage", "drop_page_cache",
           "sample_mmap", "sample_direct"]


def drop_page_cache(path: str | os.PathLike) -> None:
    """Evict the file's clean pages from the page cache, for a cold-cache measurement."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@dataclasses.dataclass
class IOCounters:
    """The I/O report every backend gives: storage reads, bytes from storage, bytes to the host."""

    storage_reads: int | None = 0   # read requests issued to storage (pages for mmap, coalesced runs for direct)
    storage_pages: int | None = 0   # distinct 4 KiB pages read (None: not counted by this backend)
    storage_bytes: int = 0      # bytes read from storage
    bytes_to_host: int = 0      # bytes that crossed the link to the host

    def add(self, other: IOCounters) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


class _SectionView:
    """Array-like over one image section whose ``__getitem__`` goes through a page reader."""

    def __init__(self, reader: _PageReader, kind: SectionKind, array: np.ndarray):
        self._reader = reader
        self._kind = kind
        self._array = array          # the mmap view: shape, dtype, and the mmap baseline's data path
        self.shape = array.shape
        self.dtype = array.dtype
        self.ndim = array.ndim
        self._base = reader.image.header.section(kind).offset
        self._row_bytes = array.dtype.itemsize * (array.shape[1] if array.ndim == 2 else 1)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index):
        rows = np.asarray(index)
        if rows.dtype.kind not in "iu":
            raise TypeError(f"section views take integer row indices, not {rows.dtype}")
        flat = rows.reshape(-1).astype(np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= self.shape[0]):
            raise IndexError(f"row index out of range for section {self._kind.name.lower()} of {self.shape[0]}")
        values = self._reader.gather(self, flat)
        return values.reshape(rows.shape + self.shape[1:])


class _PageReader:
    """Duck-types the parts of :class:`GraphImage` that the golden model reads."""

    def __init__(self, image: GraphImage):
        self.image = image
        self.header = image.header
        self.buffer = image.buffer
        self.num_nodes = image.num_nodes
        self.feature_dim = image.feature_dim
        self.feature_dtype = image.feature_dtype
        self.io = IOCounters()
        self.indptr = _SectionView(self, SectionKind.INDPTR, image.indptr)
        self.indices = _SectionView(self, SectionKind.INDICES, image.indices)
        self.features = _SectionView(self, SectionKind.FEATURES, image.features)

    @staticmethod
    def pages_of(view: _SectionView, rows: np.ndarray) -> np.ndarray:
        """Distinct storage pages holding the given rows of a section (sorted)."""
        if rows.size == 0 or view._row_bytes == 0:
            return np.zeros(0, np.int64)
        start = view._base + rows * view._row_bytes
        first = start // PAGE_SIZE
        last = (start + view._row_bytes - 1) // PAGE_SIZE
        span = int((last - first).max()) + 1
        pages = (first[:, None] + np.arange(span)[None, :])
        pages = np.where(pages <= last[:, None], pages, first[:, None])
        return np.unique(pages)

    def gather(self, view: _SectionView, rows: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class _MmapReader(_PageReader):
    """Reads through the mmap; a page is a storage read the first time it is touched since the drop."""

    def __init__(self, image: GraphImage):
        super().__init__(image)
        self._resident = np.zeros(0, np.int64)
        try:
            image._mmap.madvise(mmap.MADV_RANDOM)
        except (AttributeError, OSError):
            pass

    def drop(self) -> None:
        self._resident = np.zeros(0, np.int64)

    def gather(self, view, rows):
        pages = self.pages_of(view, rows)
        new = np.setdiff1d(pages, self._resident, assume_unique=True)
        if new.size:
            self._resident = np.union1d(self._resident, new)
            self.io.storage_reads += int(new.size)
            self.io.storage_pages += int(new.size)
            self.io.storage_bytes += int(new.size) * PAGE_SIZE
            self.io.bytes_to_host += int(new.size) * PAGE_SIZE
        return np.asarray(view._array[rows])


class _DirectReader(_PageReader):
    """Reads the pages each gather needs with O_DIRECT, coalesced, from a thread pool (deep queue)."""

    def __init__(self, image: GraphImage, queue_depth: int = 64, max_run_pages: int = 32):
        super().__init__(image)
        if queue_depth < 1:
            raise ValueError(f"Queue depth must be a positive integer, not {queue_depth!r}")
        self.queue_depth = queue_depth
        self.max_run_pages = max_run_pages
        self._fd = os.open(image.path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=queue_depth)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        os.close(self._fd)

    def _runs(self, pages: np.ndarray) -> list[tuple[int, int, int]]:
        """(first page, page count, slot of the first page) of coalesced runs of adjacent pages."""
        breaks = np.flatnonzero(np.diff(pages) != 1) + 1
        runs = []
        for group_start, group in zip(np.concatenate([[0], breaks]), np.split(pages, breaks), strict=True):
            for off in range(0, group.size, self.max_run_pages):
                runs.append((int(group[off]), min(self.max_run_pages, group.size - off), int(group_start) + off))
        return runs

    def _read_run(self, buffer: mmap.mmap, first_page: int, count: int, slot: int) -> None:
        want = count * PAGE_SIZE
        view = memoryview(buffer)[slot * PAGE_SIZE:slot * PAGE_SIZE + want]
        done = 0
        while done < want:
            got = os.preadv(self._fd, [view[done:]], first_page * PAGE_SIZE + done)
            if got <= 0:
                raise OSError(f"short O_DIRECT read at page {first_page} of {self.image.path}")
            done += got

    def gather(self, view, rows):
        pages = self.pages_of(view, rows)
        if pages.size == 0:
            return np.asarray(view._array[rows])  # empty gather or zero-width rows: nothing to read
        # Anonymous mmap memory is page-aligned, as O_DIRECT requires.
        buffer = mmap.mmap(-1, pages.size * PAGE_SIZE)
        try:
            runs = self._runs(pages)
            # queue_depth workers each read an interleaved share of the runs back to back: as many reads
            # in flight as workers, and one task per worker rather than per read (Python's per-task
            # cost would otherwise bound the read rate, not the disk).
            shares = [runs[w::self.queue_depth] for w in range(min(self.queue_depth, len(runs)))]
            list(self._pool.map(lambda share: [self._read_run(buffer, *run) for run in share], shares))
            self.io.storage_reads += len(runs)
            self.io.storage_pages += int(pages.size)
            self.io.storage_bytes += int(pages.size) * PAGE_SIZE
            self.io.bytes_to_host += int(pages.size) * PAGE_SIZE
            data = np.frombuffer(buffer, np.uint8).copy()
        finally:
            buffer.close()
        # Byte offset of each row inside the buffer: rows that straddle pages are contiguous there,
        # since both their pages are read and adjacent pages occupy adjacent slots.
        start = view._base + rows * view._row_bytes
        slot = np.searchsorted(pages, start // PAGE_SIZE)
        offset = slot * PAGE_SIZE + start % PAGE_SIZE
        out = np.empty((rows.size, view._row_bytes), np.uint8)
        span = np.arange(view._row_bytes)
        for lo in range(0, rows.size, 4096):
            out[lo:lo + 4096] = data[offset[lo:lo + 4096, None] + span]
        values = out.view(view.dtype)
        return values.reshape((rows.size,) + view.shape[1:])


class InMemoryImage(GraphImage):
    """A :class:`GraphImage` copied into this process's anonymous memory (the DRAM-only baseline).

    The file is read once, sequentially, when the image opens; afterwards the views point into the
    copy and reading them never touches storage. The copy costs the file's size in resident memory.
    """

    def __init__(self, path: str | os.PathLike, chunk_bytes: int = 64 << 20):
        super().__init__(path)
        copy = mmap.mmap(-1, self.file_size)
        try:
            view = memoryview(copy)
            with open(self.path, "rb", buffering=0) as file:
                done = 0
                while done < self.file_size:
                    got = file.readinto(view[done:done + chunk_bytes])
                    if not got:
                        raise OSError(f"{self.path} ended at byte {done} of {self.file_size} while copying it")
                    done += got
            view.release()
        except BaseException:
            copy.close()
            self.close()
            raise
        self._mmap.close()
        self._mmap = copy


class _MemoryReader(_PageReader):
    """Reads straight from an :class:`InMemoryImage`: nothing is a storage read."""

    def gather(self, view, rows):
        return np.asarray(view._array[rows])


class _SoftwareSampler:
    """Runs the golden model over an instrumented image; the front end of both baselines."""

    name = "software"

    def __init__(self, image: str | os.PathLike | GraphImage, config: KernelConfig = CONFIGS["default"],
                 cold: bool = True, cold_each_batch: bool = False):
        self._owns_image = not isinstance(image, GraphImage)
        self.image = GraphImage(image) if self._owns_image else image
        self.config = config
        self.io = IOCounters()
        #: Drop the page cache before every batch: the steady state of a graph far larger than the
        #: host's memory, where no page survives from one batch to the next.
        self.cold_each_batch = cold_each_batch
        self.reader = None
        if cold:
            self.drop_cache()
        self.reader = self._make_reader()

    def _make_reader(self) -> _PageReader:
        raise NotImplementedError

    def drop_cache(self) -> None:
        drop_page_cache(self.image.path)

    def sample(self, targets, fanouts, seed: int, aggregate: bool = False) -> DeviceBatch:
        """One mini-batch with the golden semantics; raises :class:`DeviceError` on a non-OK status."""
        if self.cold_each_batch:
            self.drop_cache()
        before = dataclasses.replace(self.reader.io)
        started = time.perf_counter()
        result = golden.sample(self.reader, targets, fanouts, seed, aggregate=aggregate, config=self.config)
        seconds = time.perf_counter() - started
        #: Wall seconds of the last command's phases: sampling (indptr and indices reads, the draws)
        #: and aggregation (gathering the feature rows, the sums).
        self.last_phases = {"sampling": seconds - result.stats.aggregate_seconds,
                            "aggregation": result.stats.aggregate_seconds}
        if result.header.status != Status.OK:
            raise DeviceError(result.header)
        spent = IOCounters(*(getattr(self.reader.io, f.name) - getattr(before, f.name)
                             for f in dataclasses.fields(IOCounters)))
        self.io.add(spent)
        result.header.storage_bytes = spent.storage_bytes
        sizes = [len(f) for f in golden.hop_frontiers(result.node_list, result.counts, len(targets), fanouts)]
        return DeviceBatch(
            targets=np.asarray(result.node_list[:len(targets)]), fanouts=tuple(fanouts), seed=seed,
            header=result.header, counts=result.counts, node_list=result.node_list, frontier_sizes=sizes,
            self_rows=result.self_rows, sums=result.sums, bytes_to_host=spent.bytes_to_host)

    def close(self) -> None:
        if self._owns_image:
            self.image.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class MmapSampler(_SoftwareSampler):
    """The ``mmap`` baseline (see the module docstring).

    ``forget_each_batch``: count every page a batch touches as a storage read, without dropping the
    page cache (the accounting of an image far larger than the sampler's memory, where no page is
    assumed to survive from one batch to the next; the kernel's I/O counters then tell how many
    really came from the disk).
    """

    name = "mmap"

    def __init__(self, image, config: KernelConfig = CONFIGS["default"], cold: bool = True,
                 cold_each_batch: bool = False, forget_each_batch: bool = False):
        self.forget_each_batch = forget_each_batch
        super().__init__(image, config, cold, cold_each_batch)

    def sample(self, targets, fanouts, seed: int, aggregate: bool = False) -> DeviceBatch:
        if self.forget_each_batch:
            self.reader.drop()
        return super().sample(targets, fanouts, seed, aggregate)

    def _make_reader(self) -> _PageReader:
        return _MmapReader(self.image)

    def drop_cache(self) -> None:
        super().drop_cache()
        if self.reader is not None:
            self.reader.drop()


class DirectSampler(_SoftwareSampler):
    """The ``direct`` (O_DIRECT, deep queue) baseline (see the module docstring)."""

    name = "direct"

    def __init__(self, image, config: KernelConfig = CONFIGS["default"], cold: bool = True,
                 cold_each_batch: bool = False, queue_depth: int = 64):
        self.queue_depth = queue_depth
        super().__init__(image, config, cold, cold_each_batch)

    def _make_reader(self) -> _PageReader:
        return _DirectReader(self.image, self.queue_depth)

    def close(self) -> None:
        self.reader.close()
        super().close()


class DramSampler(_SoftwareSampler):
    """The ``dram`` baseline: the image in this process's memory (see the module docstring)."""

    name = "dram"

    def __init__(self, image: str | os.PathLike, config: KernelConfig = CONFIGS["default"], **_options):
        super().__init__(InMemoryImage(image), config, cold=False)
        self._owns_image = True
        #: The one sequential read of the whole file that loaded the image (not a per-batch cost).
        self.load_bytes = self.image.file_size

    def _make_reader(self) -> _PageReader:
        return _MemoryReader(self.image)

    def drop_cache(self) -> None:
        pass  # nothing is cached: everything is in memory


def _sample_with(sampler_class, image, targets, fanouts, seed, aggregate, config):
    """``smartsage sample --backend mmap|direct``: the golden result type, read through the baseline."""
    with sampler_class(image.path, config) as sampler:
        result = golden.sample(sampler.reader, targets, fanouts, seed, aggregate=aggregate, config=config)
        result.header.storage_bytes = sampler.reader.io.storage_bytes
        return result


def sample_mmap(image, targets, fanouts, seed, aggregate, config):
    return _sample_with(MmapSampler, image, targets, fanouts, seed, aggregate, config)


def sample_direct(image, targets, fanouts, seed, aggregate, config):
    return _sample_with(DirectSampler, image, targets, fanouts, seed, aggregate, config)
