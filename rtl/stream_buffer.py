"""A two-entry stream buffer: cuts every combinational path between a producer and its consumer."""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

__all__ = ["StreamBuffer"]


class StreamBuffer(wiring.Component):
    """``o`` replays ``i`` one cycle later, at full throughput, with ``i.ready`` and ``o.valid`` both
    from registers (a 2-entry FIFO's level), so no ready/valid chain runs through it: the timing
    proxy's paths end at its input and start at its output. Costs one cycle of latency.

    Parameters
    ----------
    shape : shape-like
        The payload's shape (a layout, or a width).

    Members
    -------
    i : ``In(stream.Signature(shape))``
    o : ``Out(stream.Signature(shape))``
    idle : ``Out(1)``
        Nothing held.
    """

    def __init__(self, shape):
        self._shape = shape
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape)), "idle": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = fifo = SyncFIFO(width=self.o.payload.as_value().shape().width, depth=2)
        m.d.comb += [
            fifo.w_data.eq(self.i.payload), fifo.w_en.eq(self.i.valid), self.i.ready.eq(fifo.w_rdy),
            self.o.payload.eq(fifo.r_data), self.o.valid.eq(fifo.r_rdy), fifo.r_en.eq(self.o.ready),
            self.idle.eq(~fifo.r_rdy),
        ]
        return m
