"""A two-entry stream buffer: cuts every combinational path between a producer and its consumer."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .register_copies import lut_copies

__all__ = ["StreamBuffer"]


class StreamBuffer(wiring.Component):
    """``o`` replays ``i`` one cycle later, at full throughput, with ``i.ready``, ``o.valid`` and
    ``o.payload`` all from registers, so no ready/valid chain runs through it and its output starts at
    flip-flops (not at a memory's read port): the timing proxy's paths end at its input and start at
    its output. Costs one cycle of latency.

    A skid buffer: ``o`` shows the head register; the second (skid) register keeps the payload that
    arrives in the cycle the consumer stalls (it follows the input while empty, so no handshake
    enables it), and ``i.ready`` is low while it is full.

    Parameters
    ----------
    shape : shape-like
        The payload's shape (a layout, or a width).
    load_groups : int
        The head's payload registers in this many groups, each loaded through its own copy of the
        head's load decision (``~o.valid | o.ready``; :func:`~smartsage.rtl.register_copies.lut_copies`,
        LUT4 instances named ``head_load<i>_lut`` on the ECP5 proxy), so that the consumer's ready does
        not reach every payload register through one net. 1 (the default): one decision.

    Members
    -------
    i : ``In(stream.Signature(shape))``
    o : ``Out(stream.Signature(shape))``
    idle : ``Out(1)``
        Nothing held.
    next_head : ``Out(shape)``
        What ``o.payload`` shows in the next cycle if the head leaves now (or is empty): the skid's
        payload, else the input's. For a consumer that works out, a cycle ahead, something of the
        record it will hold.
    """

    def __init__(self, shape, load_groups: int = 1):
        if not isinstance(load_groups, int) or load_groups < 1:
            raise ValueError(f"StreamBuffer: load_groups must be a positive integer, not {load_groups!r}")
        self._shape = shape
        self._load_groups = load_groups
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape)), "idle": Out(1),
                          "next_head": Out(shape)})

    def elaborate(self, platform):
        m = Module()
        # the payload registers are read only while their valid flag is set, so a reset need not
        # reach them (it reaches the two flags only)
        head = Signal(self._shape, name="head", reset_less=True)
        skid = Signal(self._shape, name="skid", reset_less=True)
        head_valid = Signal()
        skid_valid = Signal()
        m.d.comb += [
            self.o.payload.eq(head), self.o.valid.eq(head_valid), self.i.ready.eq(~skid_valid),
            self.idle.eq(~head_valid), self.next_head.eq(Mux(skid_valid, skid, self.i.payload)),
        ]
        with m.If(~head_valid | self.o.ready):
            # the head is free (or leaves): the skid's payload first, else the input's
            m.d.sync += [head_valid.eq(skid_valid | self.i.valid), skid_valid.eq(0)]
        with m.Elif(self.i.valid & ~skid_valid):
            m.d.sync += skid_valid.eq(1)
        if self._load_groups == 1:
            with m.If(~head_valid | self.o.ready):
                m.d.sync += head.eq(self.next_head)
        else:
            loads = lut_copies(m, platform, "head_load", lambda valid, ready: ~valid | ready,
                               [head_valid, self.o.ready], self._load_groups)
            bits, value = Value.cast(head), Value.cast(self.next_head)
            width = len(bits)
            for group, load in enumerate(loads):
                part = slice(group * width // self._load_groups, (group + 1) * width // self._load_groups)
                m.d.sync += bits[part].eq(Mux(load, value[part], bits[part]))
        # the skid register follows the input while it is empty (it is read only once skid_valid is
        # set, and then holds), so its enable is one flip-flop, not the producer's valid
        with m.If(~skid_valid):
            m.d.sync += skid.eq(self.i.payload)
        return m
