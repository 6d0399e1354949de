"""Harnesses of the two burst writers: :class:`~smartsage.rtl.write_combiner.WriteCombiner` (fields
merged into strobed beats) and :class:`~smartsage.rtl.beat_writer.BeatWriter` (byte pieces merged
into strobed beats).

Each drives every input from a free port, picks a buffer window ``[lo, hi)`` once (any below
``FORMAL_ADDRESS_BITS``, held for the trace), assumes every request lies inside it (a naturally
aligned u32/u64 field for the combiner; 1..bus-width bytes at any address for the beat writer) and
adds the AXI4 write-master monitor of :mod:`.axi_write`: handshake stability, INCR full-width bursts
of at most 16 beats not crossing 4 KiB, W bursts of exactly AWLEN + 1 beats with WLAST on the last,
never more bursts in flight than configured, and no strobed byte outside the window.

Proof or bound: the outstanding bound (with the invariant "bursts in flight == level of the block's
in-flight FIFO"), AWVALID only while fewer are in flight, the constant AWSIZE / AWBURST, and for the
combiner (AW presented from registers) the AW handshake's stability and alignment are proved by
k-induction (``write_combiner``, ``beat_writer``). Everything else depends on the contents of the
blocks' beat and run FIFOs (memories the ports cannot constrain), so it is a bounded check from
reset (``*_bounded``); see :data:`smartsage.rtl.formal.CHECKS` for the depths and why.
"""

from __future__ import annotations

from amaranth.hdl import Assume

from .. import write_combiner
from ..beat_writer import WRITE_BURST_BEATS, BeatWriter
from ..write_combiner import MAX_BURST, WriteCombiner
from .axi_write import axi_write_master_properties
from .common import FORMAL_ADDRESS_BITS, FORMAL_OUTSTANDING, Harness, Observed, OneTooMany, fifo_invariants, patched

__all__ = ["WriteCombinerHarness", "BeatWriterHarness", "BROKEN_WRITE_COMBINER", "BROKEN_BEAT_WRITER"]

#: Input ports of the combiner under proof (two: the round robin between ports is exercised).
FORMAL_COMBINER_PORTS = 2
#: The combiner under proof is built without its edge registers (``WriteCombiner(edge_registers=False)``:
#: the register slice at each port and the flush's flip-flops). They delay inputs that are free here by
#: one cycle and change nothing else (the slice is a :class:`~smartsage.rtl.stream_buffer.StreamBuffer`:
#: in order, nothing lost, its ``idle`` added to the flush's and the block's), so the traces of the
#: logic behind them are those checked here, a cycle later; left in, the bounded check's 8 steps (the
#: 9th took minutes) reached no third burst, and the outstanding bound's broken variant passed.
COMBINER_EDGE_REGISTERS = False


class _WriterHarness(Harness):
    """The frame of both writers: the window, the monitor; ``requests`` adds the request assumptions."""

    max_beats = 16

    def window(self, m, steps):
        lo = self.constant(m, steps, FORMAL_ADDRESS_BITS - 1, "window_lo")
        hi = self.constant(m, steps, FORMAL_ADDRESS_BITS - 1, "window_hi")
        m.d.comb += Assume(lo <= hi)
        return lo, hi

    def monitor(self, m, steps, dut, window, aw_registered):
        axi_write_master_properties(
            m, steps, dut.bus, data_bytes=dut.data_width // 8, max_beats=self.max_beats,
            outstanding=FORMAL_OUTSTANDING, in_flight_fifo=dut.in_flight_fifo, window=window,
            bounded=not self.inductive_only, aw_registered=aw_registered)
        fifo_invariants(m, dut)   # for the induction


class _WlastDropped:
    """Broken: WLAST never set (a burst's beats run into the next burst's)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.comb += self.bus.wlast.eq(0)
        return m


class _FullStrobe:
    """Broken: strobes every byte of every beat (the bytes beside a field or piece escape its buffer)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.comb += self.bus.wstrb.eq(-1)
        return m


def _broken(mixin, block):
    return type(f"{mixin.__name__}{block.__name__}", (mixin, block), {"__doc__": mixin.__doc__})


# ---------------------------------------------------------------------------------------------- combiner

class _ObservedWriteCombiner(Observed, WriteCombiner):
    pass


class _CombinerCrosses4K(_ObservedWriteCombiner):
    """Broken: built believing pages are 8 KiB (a run continues across a 4 KiB boundary)."""

    def elaborate(self, platform):
        with patched(write_combiner, BURST_BOUNDARY=8192):
            return super().elaborate(platform)


class WriteCombinerHarness(_WriterHarness):
    max_beats = MAX_BURST

    def elaborate(self, platform):
        m, steps, dut = self.frame_with_bus(platform)
        lo, hi = self.window(m, steps)
        for number, port in enumerate(dut.fields):
            valid = self.free(1, f"field{number}_valid")
            m.d.comb += [port.valid.eq(valid),
                         port.payload.address.eq(self.free(FORMAL_ADDRESS_BITS, f"field{number}_address")),
                         port.payload.data.eq(self.free(64, f"field{number}_data")),
                         port.payload.wide.eq(self.free(1, f"field{number}_wide"))]
            size = 4 << port.payload.wide
            address = port.payload.address
            m.d.comb += Assume(~valid | ((address & (size - 1) == 0) & (address >= lo) & (address + size <= hi)))
        m.d.comb += [dut.flush.eq(self.free(1, "flush")), dut.clear.eq(self.free(1, "clear"))]
        self.monitor(m, steps, dut, (lo, hi), aw_registered=True)
        return m


# ---------------------------------------------------------------------------------------------- beat writer

class _ObservedBeatWriter(Observed, BeatWriter):
    pass


class BeatWriterHarness(_WriterHarness):
    max_beats = WRITE_BURST_BEATS

    def elaborate(self, platform):
        m, steps, dut = self.frame_with_bus(platform)
        lo, hi = self.window(m, steps)
        piece = dut.piece
        valid = self.free(1, "piece_valid")
        m.d.comb += [piece.valid.eq(valid),
                     piece.payload.address.eq(self.free(FORMAL_ADDRESS_BITS, "piece_address")),
                     piece.payload.data.eq(self.free(dut.data_width, "piece_data")),
                     piece.payload.nbytes.eq(self.free(len(piece.payload.nbytes), "piece_nbytes")),
                     piece.payload.flush.eq(self.free(1, "piece_flush")),
                     dut.discard.eq(self.free(1, "discard"))]
        nbytes, address = piece.payload.nbytes, piece.payload.address
        m.d.comb += Assume(~valid | ((nbytes >= 1) & (nbytes <= dut.data_width // 8) & (address >= lo)
                                     & (address + nbytes <= hi)))
        self.monitor(m, steps, dut, (lo, hi), aw_registered=False)
        return m


#: Broken variants: name -> (class, the check it must fail).
BROKEN_WRITE_COMBINER = {
    "wlast_dropped": (_broken(_WlastDropped, _ObservedWriteCombiner), "write_combiner_bounded"),
    "crosses_4k": (_CombinerCrosses4K, "write_combiner_bounded"),
    "full_strobe": (_broken(_FullStrobe, _ObservedWriteCombiner), "write_combiner_bounded"),
    "too_many_outstanding": (_broken(OneTooMany, _ObservedWriteCombiner), "write_combiner_bounded"),
}
BROKEN_BEAT_WRITER = {
    "wlast_dropped": (_broken(_WlastDropped, _ObservedBeatWriter), "beat_writer_bounded"),
    "full_strobe": (_broken(_FullStrobe, _ObservedBeatWriter), "beat_writer_bounded"),
    "too_many_outstanding": (_broken(OneTooMany, _ObservedBeatWriter), "beat_writer_bounded"),
}
DEFAULT_CLASSES = {"write_combiner": _ObservedWriteCombiner, "beat_writer": _ObservedBeatWriter}
