"""The storage window (the image file, memory-mapped) with the SSD timing model of ARCHITECTURE.md.

The image is never copied: reads slice the read-only mmap of the file, so images of hundreds of MB
cost nothing to attach. Timing is computed per AXI transaction from the 4 KiB pages it touches:

- a page in the on-board DRAM page cache (LRU, ``cache_bytes``) returns after ``dram_latency_ns``;
- a flash page read starts no earlier than the IOPS ceiling allows (one start every 1/IOPS s),
  completes ``page_latency_us`` later, and its 4 KiB move at ``bandwidth_gbs``; it then enters the
  cache;
- ``ideal`` memory answers after a fixed small latency (``ideal_latency_cycles``), the upper bound.

``starved_cycles`` (in :meth:`StorageModel.stats`) adds up the time, after the first flash read, in
which the IOPS ceiling would have let a page read start but the kernel had asked for none: the
IOPS the kernel's pipeline leaves on the table.

Defaults are the Samsung PM983 3.84 TB (the SmartSSD's SSD): 85 us, 540 K IOPS, 3.2 GB/s.

Besides timing, the model accounts what the kernel asked of its storage, per command
(:class:`ReadAccount`): one *storage read* is one AXI read transaction (one AR handshake on
``m_axi_storage``, whatever its burst length), counted when the kernel issues it; with it the beats,
the bytes (beats x the beat size), and the distinct 4 KiB storage pages the transactions touched.
"""

from __future__ import annotations

import collections
import dataclasses
import mmap
import os

from .axi_responder import RESP_DECERR, RESP_OKAY, RESP_SLVERR, ReadRequest

__all__ = ["SsdTiming", "PM983", "IDEAL", "StorageModel", "ReadAccount", "PAGE_BYTES"]

PAGE_BYTES = 4096


@dataclasses.dataclass(frozen=True)
class SsdTiming:
    """Timing parameters of the storage model.

    Parameters
    ----------
    page_latency_us : float
        Flash read latency of a 4 KiB page.
    iops : float
        Random 4 KiB page reads per second the SSD sustains.
    bandwidth_gbs : float
        Sequential read bandwidth, GB/s.
    cache_bytes : int
        On-board DRAM page cache (0: none).
    dram_latency_ns : float
        Latency of a page-cache hit.
    ideal : bool
        Ideal memory: every read answers after ``ideal_latency_cycles``.
    ideal_latency_cycles : int
        Latency of ideal memory, cycles.
    """

    page_latency_us: float = 85.0
    iops: float = 540_000.0
    bandwidth_gbs: float = 3.2
    cache_bytes: int = 0
    dram_latency_ns: float = 200.0
    ideal: bool = False
    ideal_latency_cycles: int = 2

    def __post_init__(self):
        for name in ("page_latency_us", "iops", "bandwidth_gbs"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SSD timing {name} must be positive, not {getattr(self, name)!r}")
        if self.cache_bytes < 0 or self.ideal_latency_cycles < 1:
            raise ValueError("SSD cache_bytes must be >= 0 and ideal_latency_cycles >= 1")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


PM983 = SsdTiming()
IDEAL = SsdTiming(ideal=True)


@dataclasses.dataclass
class ReadAccount:
    """The AXI read transactions a kernel issued on its storage port (one command's worth).

    Members
    -------
    transactions : int
        AR handshakes: one storage read each, whatever the burst length.
    beats : int
        Data beats requested (sum of ``arlen + 1``).
    bytes : int
        Bytes requested (sum of beats x beat size; the beat size is ``1 << arsize``).
    pages : set of int
        Distinct 4 KiB storage pages (storage address // 4096) the transactions touched.
    """

    transactions: int = 0
    beats: int = 0
    bytes: int = 0
    pages: set[int] = dataclasses.field(default_factory=set)

    def add(self, request: ReadRequest) -> None:
        self.transactions += 1
        self.beats += request.beats
        self.bytes += request.nbytes
        first = request.address // PAGE_BYTES
        last = (request.address + max(request.nbytes, 1) - 1) // PAGE_BYTES
        self.pages.update(range(first, last + 1))

    def to_dict(self) -> dict:
        """The JSON form in co-simulation results (``storage_reads``, ..., ``storage_pages`` as a count)."""
        return {"storage_reads": self.transactions, "storage_beats": self.beats, "storage_read_bytes": self.bytes,
                "storage_pages": len(self.pages)}


class StorageModel:
    """Reads from the memory-mapped image with SSD timing; counts pages, hits and flash reads.

    Parameters
    ----------
    path :
        The image file (mapped read-only; addresses 0.. are file offsets plus ``base``).
    timing : SsdTiming
    clock_mhz : float
        Kernel clock, to turn time into cycles.
    base : int
        Storage address of the image (what the host writes into the ``image`` argument).
    error_ranges :
        (start, end) storage address ranges whose reads answer SLVERR (fault injection).
    """

    def __init__(self, path, timing: SsdTiming, clock_mhz: float, base: int = 0,
                 error_ranges: list[tuple[int, int]] = ()):
        self._file = open(os.fspath(path), "rb")
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        self.size = len(self._map)
        self.timing = timing
        self.base = base
        self.error_ranges = list(error_ranges)
        self.cycles_per_us = clock_mhz
        self._cache: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._cache_pages = timing.cache_bytes // PAGE_BYTES
        self._next_issue = 0.0
        self._next_transfer = 0.0
        self.flash_pages = 0
        self.cache_hits = 0
        self.bytes_read = 0
        self.starved_cycles = 0.0
        self.first_flash_cycle: float | None = None
        self.last_flash_cycle = 0.0
        #: What the kernel issued since :meth:`begin_command` (all of it, when never called).
        self.command = ReadAccount()

    def begin_command(self) -> ReadAccount:
        """Start a new command's accounting; returns the fresh :class:`ReadAccount`."""
        self.command = ReadAccount()
        return self.command

    def accept(self, request: ReadRequest) -> None:
        """The responder's hook: the kernel issued ``request`` (one AR handshake)."""
        self.command.add(request)

    def close(self) -> None:
        self._map.close()
        self._file.close()

    def read(self, request: ReadRequest) -> tuple[bytes, int | list[int]]:
        """The burst's data and its response: one code, or one per beat when only some beats of
        the burst touch an error range (those answer SLVERR, with zero data)."""
        offset = request.address - self.base
        end = offset + request.nbytes
        self.bytes_read += request.nbytes
        if any(request.address < hi and request.address + request.nbytes > lo for lo, hi in self.error_ranges):
            codes = []
            for beat in range(request.beats):
                start = request.address + beat * request.beat_bytes
                bad = any(start < hi and start + request.beat_bytes > lo for lo, hi in self.error_ranges)
                codes.append(RESP_SLVERR if bad else RESP_OKAY)
            if 0 <= offset and end <= self.size:
                data = bytearray(self._map[offset:end])
                for beat, code in enumerate(codes):
                    if code != RESP_OKAY:
                        data[beat * request.beat_bytes:(beat + 1) * request.beat_bytes] = bytes(request.beat_bytes)
                return bytes(data), codes
            return bytes(request.nbytes), RESP_SLVERR
        if offset < 0 or end > self.size:
            return bytes(request.nbytes), RESP_DECERR
        return self._map[offset:end], RESP_OKAY

    def ready_cycle(self, request: ReadRequest) -> int:
        t = self.timing
        now = float(request.cycle)
        if t.ideal:
            return request.cycle + t.ideal_latency_cycles
        ready = now
        first = (request.address - self.base) // PAGE_BYTES
        last = (request.address - self.base + request.nbytes - 1) // PAGE_BYTES
        for page in range(first, last + 1):
            if page in self._cache:
                self._cache.move_to_end(page)
                self.cache_hits += 1
                ready = max(ready, now + t.dram_latency_ns * self.cycles_per_us / 1000)
                continue
            issue = max(now, self._next_issue)
            if self.flash_pages:  # the flash could have started a read earlier: none was asked for
                self.starved_cycles += max(0.0, now - self._next_issue)
            self._next_issue = issue + self.cycles_per_us * 1e6 / t.iops
            done = issue + t.page_latency_us * self.cycles_per_us
            transfer = PAGE_BYTES / (t.bandwidth_gbs * 1e3) * self.cycles_per_us  # cycles to move a page
            self._next_transfer = max(self._next_transfer, done) + transfer
            ready = max(ready, self._next_transfer)
            self.flash_pages += 1
            if self.first_flash_cycle is None:
                self.first_flash_cycle = issue
            self.last_flash_cycle = max(self.last_flash_cycle, self._next_transfer)
            if self._cache_pages:
                self._cache[page] = None
                if len(self._cache) > self._cache_pages:
                    self._cache.popitem(last=False)
        return int(ready + 0.999)

    def stats(self) -> dict:
        return {"flash_pages": self.flash_pages, "cache_hits": self.cache_hits, "bytes_read": self.bytes_read,
                "first_flash_cycle": self.first_flash_cycle, "last_flash_cycle": self.last_flash_cycle,
                "starved_cycles": self.starved_cycles}
