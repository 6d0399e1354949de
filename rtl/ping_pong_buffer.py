"""A two-slot stream buffer whose consumer's ready moves two pointers, not the payload registers."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Shape, ShapeCastable, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .register_copies import register_copies

__all__ = ["PingPongBuffer", "SELECT_GROUP"]

#: Payload bits of the output multiplexer one copy of the read pointer drives at most.
SELECT_GROUP = 48


class PingPongBuffer(wiring.Component):
    """:class:`~smartsage.rtl.stream_buffer.StreamBuffer`'s behaviour (``o`` replays ``i`` one cycle
    later at full throughput, ``i.ready`` and ``o.valid`` from registers) for a consumer whose
    ``ready`` is a late decision and whose payload is wide.

    A :class:`StreamBuffer` loads its head register when the consumer takes the head, so the
    consumer's decision enables every payload flip-flop (the command sequencer's FRONTIER hand-off
    into its two head buffers: ~430 enables, 9.4-10.5 ns on the ECP5 proxy). Here the payload waits
    in one of two slots, each following the input while it holds nothing (its enable is its own
    flag), and ``o.payload`` is the slot the read pointer names: taking the head flips the read
    pointer and clears a flag. The output multiplexer's select is the read pointer as several
    flip-flops (:mod:`~smartsage.rtl.register_copies`), one per :data:`SELECT_GROUP` payload bits,
    which is why the buffer is emptied by ``clear`` rather than a ``ResetInserter`` (an inserted
    reset would not reach the copies on the proxy).

    Parameters
    ----------
    shape : shape-like
        The payload's shape, as for :class:`StreamBuffer`.
    head_flags : callable, optional
        A few bits of a payload (``head_flags(view)`` of a payload of ``shape``, made of its bits and
        ``~``, ``&``, ``|``) that the consumer's decision reads: the head's come out of flip-flops
        (``o_flags``), worked out a cycle ahead from what the slots and the read pointer will hold,
        so the decision does not wait for the output multiplexer.

    Members
    -------
    i, o, idle
        As :class:`StreamBuffer`'s.
    clear : ``In(1)``
        Empty the buffer (synchronous; the slots' contents are dropped).
    o_flags : ``Out(n)``
        ``head_flags`` of ``o.payload`` (read while ``o.valid``), from flip-flops; with no
        ``head_flags``, absent.
    """

    def __init__(self, shape, head_flags=None):
        self._shape = shape
        self._head_flags = head_flags
        members = {"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape)), "clear": In(1),
                   "idle": Out(1)}
        if head_flags is not None:
            members["o_flags"] = Out(len(Value.cast(head_flags(Signal(shape)))))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        width = Shape.cast(self._shape).width
        # the slots are read only while they hold a payload, so a reset need not reach them
        slots = [Signal(width, name=f"slot{i}", reset_less=True) for i in range(2)]
        # what is held: ``nonempty`` (the read pointer's slot) and ``full`` (the other one too), so
        # the read pointer's slot holds its payload in every state where ``o.valid`` is high
        nonempty, full = Signal(), Signal()
        read_slot, read_slot_next = Signal(), Signal()
        push = self.i.valid & self.i.ready
        pop = self.o.valid & self.o.ready
        m.d.comb += [self.i.ready.eq(~full), self.o.valid.eq(nonempty), self.idle.eq(~nonempty)]
        slots_next = []
        for index, slot in enumerate(slots):
            # a slot follows the input while it holds nothing; the next payload goes into the read
            # pointer's slot when the buffer is empty, else into the other one
            loads = ~Mux(read_slot == index, nonempty, full)
            with m.If(loads):
                m.d.sync += slot.eq(self.i.payload)
            slots_next.append(Mux(loads, Value.cast(self.i.payload), slot))
        level = nonempty + full + push - pop
        m.d.sync += [nonempty.eq(level != 0), full.eq(level == 2)]
        m.d.comb += read_slot_next.eq(Mux(self.clear, 0, read_slot ^ pop))
        m.d.sync += read_slot.eq(read_slot_next)
        with m.If(self.clear):
            m.d.sync += [nonempty.eq(0), full.eq(0)]
        if self._head_flags is not None:
            # the head's flags in the next cycle: those of the slot the read pointer will name, as it
            # will hold
            as_payload = self._shape if isinstance(self._shape, ShapeCastable) else (lambda value: value)
            flags_next = [Value.cast(self._head_flags(as_payload(slot_next))) for slot_next in slots_next]
            m.d.sync += self.o_flags.eq(Mux(read_slot_next, flags_next[1], flags_next[0]))
        # the output multiplexer, a copy of the read pointer per group of bits
        selects = register_copies(m, platform, "read_slot", read_slot_next, -(-width // SELECT_GROUP))
        m.d.comb += self.o.payload.eq(Cat(
            Mux(select, slots[1][start:start + SELECT_GROUP], slots[0][start:start + SELECT_GROUP])
            for select, start in zip(selects, range(0, width, SELECT_GROUP), strict=True)))
        return m
