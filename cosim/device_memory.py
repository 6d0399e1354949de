"""Device memory (the FPGA's DDR) for descriptors and output buffers, with guard checking.

A flat ``uint8`` numpy array, as :func:`smartsage.spec.golden.run_command` takes it, so the scoreboard
runs the golden model on a copy with the same layout. The host side lays out the descriptor, the
node list, the counts and the result header with guard regions between and around them; after every
command :meth:`DeviceMemory.check_untouched` proves that no byte outside the output buffers changed.
"""

from __future__ import annotations

import numpy as np

from .axi_responder import RESP_DECERR, RESP_OKAY, RESP_SLVERR, ReadRequest, WriteRequest

__all__ = ["DeviceMemory"]


class DeviceMemory:
    """Byte-addressed device memory served to an AXI4 read/write master.

    Parameters
    ----------
    size : int
        Bytes; addresses at or past ``size`` answer DECERR.
    fill : int
        Value of every byte initially (a pattern the guards are checked against).
    """

    def __init__(self, size: int, fill: int = 0xA5):
        if size <= 0 or size % 64:
            raise ValueError(f"Device memory size must be a positive multiple of 64, not {size!r}")
        self.data = np.full(size, fill, np.uint8)
        self.read_error_ranges: list[tuple[int, int]] = []
        self.write_error_ranges: list[tuple[int, int]] = []
        self.writes: list[tuple[int, int]] = []  # (address, bytes) of every strobed byte run
        self.write_failures: list[tuple[int, int]] = []  # strobed [first, last + 1) of bursts answered SLVERR

    @property
    def size(self) -> int:
        return self.data.size

    def read(self, request: ReadRequest) -> tuple[bytes, int]:
        start, end = request.address, request.address + request.nbytes
        for lo, hi in self.read_error_ranges:
            if start < hi and end > lo:
                return bytes(request.nbytes), RESP_SLVERR
        if end > self.size:
            return bytes(request.nbytes), RESP_DECERR
        return self.data[start:end].tobytes(), RESP_OKAY

    def write(self, request: WriteRequest) -> int:
        """Apply a burst's strobed bytes; an error range touched fails the whole burst (nothing written)
        and records the burst's strobed span in ``write_failures``."""
        strobed = [request.address + beat * request.beat_bytes + byte
                   for beat, strobe in enumerate(request.strobes)
                   for byte in range(request.beat_bytes) if strobe >> byte & 1]
        for lo, hi in self.write_error_ranges:
            if any(lo <= address < hi for address in strobed):
                self.write_failures.append((min(strobed), max(strobed) + 1))
                return RESP_SLVERR
        if request.address + request.beats * request.beat_bytes > self.size:
            return RESP_DECERR
        for beat, (word, strobe) in enumerate(zip(request.data, request.strobes, strict=True)):
            base = request.address + beat * request.beat_bytes
            raw = word.to_bytes(request.beat_bytes, "little")
            for byte in range(request.beat_bytes):
                if strobe >> byte & 1:
                    self.data[base + byte] = raw[byte]
                    self.writes.append((base + byte, 1))
        return RESP_OKAY

    def check_untouched(self, before: np.ndarray, buffers: list[tuple[int, int]]) -> list[int]:
        """Addresses outside ``buffers`` ((start, bytes) pairs) whose bytes differ from ``before``."""
        allowed = np.zeros(self.size, bool)
        for start, nbytes in buffers:
            allowed[start:start + nbytes] = True
        changed = np.flatnonzero((self.data != before) & ~allowed)
        written = {address for address, _ in self.writes}
        stray = sorted({a for a in written if not allowed[a]} | set(changed.tolist()))
        return stray
