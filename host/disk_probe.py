"""A built-in probe of this machine's disk with ``O_DIRECT``, for the performance model.

The software baselines (``host/backends/software.py``) read the image with the disk of the machine
they run on; the performance model (:mod:`smartsage.host.perfmodel`) estimates their time from the
same disk's figures, measured here the way the baselines read:

* 4 KiB random reads at queue depths 1, 32 and 64: aligned ``os.preadv`` calls on an ``O_DIRECT``
  file descriptor, issued from a thread pool of ``queue_depth`` workers with ``pool.map`` (one task
  per read, exactly the ``direct`` baseline's issue path, so the Python overhead per read is part of
  the figure);
* 1 MiB sequential reads at queue depth 1 (bandwidth);
* major page faults on the cold file mapped with ``MADV_RANDOM`` (the ``mmap`` baseline's path).

Results are cached as JSON (keyed by the file system's device number) so that every run on one
machine shares one device: :func:`probe_disk` returns the cached figures unless ``refresh=True``.

Entry point: :func:`probe_disk` (a path to an existing file, which is read, or a directory, where a
temporary file is written, read and removed). Returns a :class:`DiskProbe`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import mmap
import os
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["DiskProbe", "probe_disk", "default_cache_path", "DirectIOUnavailable"]

PAGE = 4096
SEQ_BLOCK = 1 << 20


class DirectIOUnavailable(OSError):
    """The file system refuses ``O_DIRECT`` (tmpfs, some overlay file systems)."""


@dataclasses.dataclass
class DiskProbe:
    """Measured figures of one disk.

    Members
    -------
    device : str
        ``st_dev`` of the probed file system, as ``major:minor``.
    path : str
        The file that was read.
    file_bytes : int
        Its size (the span the random reads were drawn from).
    qd1_latency_us : float
        Mean latency of one 4 KiB random read at queue depth 1.
    iops : dict of int to float
        4 KiB random reads per second at each queue depth probed (1, 32, 64).
    seq_bandwidth_gbs : float
        1 MiB sequential reads at queue depth 1, GB/s.
    mmap_fault_us : float
        Mean time of one major page fault on a cold, memory-mapped file with ``MADV_RANDOM`` (the mmap
        sampler's read path: buffered, queue depth 1, no readahead); NaN when not measured.
    reads : int
        Random reads per queue depth.
    when : str
        UTC time of the measurement.
    """

    device: str
    path: str
    file_bytes: int
    qd1_latency_us: float
    iops: dict[int, float]
    seq_bandwidth_gbs: float
    reads: int
    when: str
    mmap_fault_us: float = float("nan")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["iops"] = {str(k): v for k, v in self.iops.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> DiskProbe:
        d = dict(d)
        d["iops"] = {int(k): float(v) for k, v in d["iops"].items()}
        return cls(**d)


def default_cache_path(device: str) -> Path:
    """Where the probe of file-system device ``device`` is cached (``$SMARTSAGE_CACHE`` or ~/.cache)."""
    root = Path(os.environ.get("SMARTSAGE_CACHE", Path.home() / ".cache" / "smartsage"))
    return root / f"disk-probe-{device.replace(':', '-')}.json"


def _device_of(path: Path) -> str:
    st = os.stat(path)
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


def _open_direct(path: Path) -> int:
    flag = getattr(os, "O_DIRECT", None)
    if flag is None:
        raise DirectIOUnavailable(f"O_DIRECT is not available on this platform ({path})")
    try:
        return os.open(path, os.O_RDONLY | flag)
    except OSError as err:
        raise DirectIOUnavailable(f"O_DIRECT open of {path} failed: {err}") from err


def _random_reads(fd: int, pages: np.ndarray, queue_depth: int) -> float:
    """Seconds to read ``pages`` (4 KiB each) with ``queue_depth`` workers, one task per read."""
    buffers = [mmap.mmap(-1, PAGE) for _ in range(queue_depth)]

    def read(args):
        i, page = args
        got = os.preadv(fd, [buffers[i % queue_depth]], int(page) * PAGE)
        if got != PAGE:
            raise OSError(f"short O_DIRECT read at page {page}")

    try:
        if queue_depth == 1:
            start = time.perf_counter()
            for i, page in enumerate(pages):
                read((i, page))
            return time.perf_counter() - start
        with concurrent.futures.ThreadPoolExecutor(max_workers=queue_depth) as pool:
            list(pool.map(read, enumerate(pages[:queue_depth])))     # start the workers
            start = time.perf_counter()
            list(pool.map(read, enumerate(pages)))
            return time.perf_counter() - start
    finally:
        for b in buffers:
            b.close()


def _mmap_faults(path: Path, pages: np.ndarray) -> float:
    """Mean seconds of one major fault: touch random pages of the cold, mapped file (MADV_RANDOM)."""
    with open(path, "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            try:
                m.madvise(mmap.MADV_RANDOM)
            except (AttributeError, OSError):
                pass
            offsets = (np.unique(pages) * PAGE).tolist()
            np.random.default_rng(1).shuffle(offsets)
            start = time.perf_counter()
            for off in offsets:
                m[off]
            seconds = time.perf_counter() - start
        finally:
            m.close()
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return seconds / max(1, len(offsets))


def _sequential(fd: int, size: int, limit: int) -> float:
    """GB/s of 1 MiB sequential reads over the first ``limit`` bytes."""
    buffer = mmap.mmap(-1, SEQ_BLOCK)
    try:
        total = 0
        end = min(size, limit) // SEQ_BLOCK * SEQ_BLOCK
        start = time.perf_counter()
        for offset in range(0, end, SEQ_BLOCK):
            total += os.preadv(fd, [buffer], offset)
        seconds = time.perf_counter() - start
    finally:
        buffer.close()
    return total / seconds / 1e9 if seconds > 0 else float("nan")


def probe_disk(path_or_dir, *, reads: int = 4000, queue_depths=(1, 32, 64), file_bytes: int = 1 << 30,
               seq_bytes: int = 256 << 20, cache: str | os.PathLike | None = None, refresh: bool = False,
               seed: int = 0, faults: int | None = None) -> DiskProbe:
    """Measure (or load the cached figures of) the disk holding ``path_or_dir``.

    Parameters
    ----------
    path_or_dir :
        An existing file of at least 1 MiB (its pages are read at random) or a directory (a temporary
        file of ``file_bytes`` is written there with random data, synced, read and removed).
    reads : int
        4 KiB random reads per queue depth (queue depth 1 uses a quarter of them).
    queue_depths : sequence of int
        Queue depths to probe; 1 must be among them (it gives the latency).
    file_bytes : int
        Size of the temporary file when a directory is given.
    seq_bytes : int
        Bytes read sequentially for the bandwidth figure.
    cache : path or False, optional
        JSON cache file (default :func:`default_cache_path` of the file system's device); False:
        measure without reading or writing any cache.
    refresh : bool
        Measure even when a cached result exists (and overwrite it).
    faults : int, optional
        Major page faults measured on the mapped file (default ``reads // 4``).

    Raises
    ------
    ValueError
        ``reads`` < 1, no queue depth 1, a queue depth < 1, a file smaller than 1 MiB, a missing path.
    DirectIOUnavailable
        The file system refuses ``O_DIRECT``.
    """
    path = Path(path_or_dir)
    if reads < 1:
        raise ValueError(f"Probe reads must be a positive integer, not {reads!r}")
    queue_depths = sorted({int(q) for q in queue_depths})
    if not queue_depths or queue_depths[0] < 1 or 1 not in queue_depths:
        raise ValueError(f"Probe queue depths must be positive and include 1, not {queue_depths!r}")
    if not path.exists():
        raise ValueError(f"Probe path {path} does not exist")
    device = _device_of(path)
    use_cache = cache is not False
    cache_path = Path(cache) if cache not in (None, False) else default_cache_path(device)
    if use_cache and not refresh and cache_path.exists():
        try:
            return DiskProbe.from_dict(json.loads(cache_path.read_text()))
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache is measured again
    temp = None
    if path.is_dir():
        fd_t, temp = tempfile.mkstemp(prefix="smartsage-probe-", dir=path)
        try:
            chunk = np.random.default_rng(seed).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
            for _ in range(max(1, file_bytes >> 20)):
                os.write(fd_t, chunk)
            os.fsync(fd_t)
        finally:
            os.close(fd_t)
        target = Path(temp)
    else:
        target = path
    try:
        size = os.path.getsize(target)
        if size < SEQ_BLOCK:
            raise ValueError(f"Probe file {target} has {size} bytes; at least 1 MiB is needed")
        fd = _open_direct(target)
        try:
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
            rng = np.random.default_rng(seed)
            num_pages = size // PAGE
            iops = {}
            latency_us = float("nan")
            for qd in queue_depths:
                n = max(1, reads // 4) if qd == 1 else reads
                pages = rng.integers(0, num_pages, n)
                seconds = _random_reads(fd, pages, qd)
                iops[qd] = n / seconds
                if qd == 1:
                    latency_us = seconds / n * 1e6
            seq = _sequential(fd, size, seq_bytes)
        finally:
            os.close(fd)
        fault_pages = np.random.default_rng(seed + 1).integers(0, size // PAGE, faults or max(1, reads // 4))
        fault_s = _mmap_faults(target, fault_pages)
    finally:
        if temp is not None:
            os.unlink(temp)
    result = DiskProbe(device=device, path=os.fspath(target), file_bytes=size, qd1_latency_us=latency_us,
                       iops=iops, seq_bandwidth_gbs=seq, reads=reads, mmap_fault_us=fault_s * 1e6,
                       when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if use_cache:
        try:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            cache_path.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
        except OSError:
            pass  # an unwritable cache only costs a re-measurement
    return result
