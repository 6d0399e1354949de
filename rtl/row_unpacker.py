"""Beats of byte-range reads (any alignment) to row-aligned units of a chosen power-of-two size."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import ADDRESS_WIDTH, check_data_width
from .burst_reader import beat_layout
from .compare import at_most

__all__ = ["RowUnpacker", "unit_layout"]


def unit_layout(data_width: int) -> data.StructLayout:
    """A unit: the request's bytes ``[k x U, (k + 1) x U)`` in ``data``'s low ``U`` bytes (bytes past the
    request's end are unspecified), ``last`` on the request's final unit, ``error`` when a beat it
    came from was answered with an error (``address`` names that beat)."""
    check_data_width(data_width)
    return data.StructLayout({"data": data_width, "last": 1, "error": 1, "address": ADDRESS_WIDTH})


class RowUnpacker(wiring.Component):
    """Realigns each request's bytes (from :class:`~smartsage.rtl.burst_reader.BurstReader`) into units.

    Two beats are held (the one being read and the next); a unit is taken from the byte pointer
    across both, so a request starting anywhere in a beat, and units straddling beats, cost no extra
    cycle: one unit per cycle, a beat consumed every ``data_width / 8 / U`` units. The unit size
    ``U = 2 ** unit_log2`` bytes (at most one beat) may change between commands; it is registered
    (with the last start of a unit inside one beat, ``data_width / 8 - U``), so it takes effect a
    cycle after it is set (two for the unit's registered compares with that last start: a new size
    must not meet a beat sooner), and no adder of it sits in front of the unit handshake. It must stay
    steady while a request is in the unpacker (it changes between commands): whether a request's
    bytes left fit one unit is worked out as its beat enters a slot, and as each unit is taken.

    Parameters
    ----------
    data_width : int

    Members
    -------
    beats : ``In(stream.Signature(beat_layout(data_width)))``
    units : ``Out(stream.Signature(unit_layout(data_width)))``
    unit_log2 : ``In(range(log2(data_width / 8) + 1))``
    """

    def __init__(self, data_width: int):
        self._data_width = check_data_width(data_width)
        size_log2 = (data_width // 8).bit_length() - 1
        super().__init__({
            "beats": In(stream.Signature(beat_layout(data_width))),
            "units": Out(stream.Signature(unit_layout(data_width))),
            "unit_log2": In(range(size_log2 + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        width = self._data_width
        data_bytes = width // 8
        layout = beat_layout(width)
        # Only the slots' valid flags and ``fresh`` are reset: every other register is written before
        # it is read (a slot's payload and fit with its valid flag, the pointer and the bytes left when
        # ``fresh`` clears, the unit sizes in every cycle), so the aggregate domain's reset reaches
        # three flip-flops here, not ~2 x beat width (8.3-8.5 ns from the reset flip-flop on the ECP5 proxy)
        slots = [Signal(layout, name=f"slot{i}", reset_less=True) for i in range(2)]
        valid = [Signal(name=f"slot{i}_valid") for i in range(2)]
        # whether the slot's request length fits one unit (worked out as its beat enters)
        fits = [Signal(name=f"slot{i}_fits", reset_less=True) for i in range(2)]
        pointer = Signal(range(2 * data_bytes), reset_less=True)  # byte of slot 0 where the next unit starts
        fresh = Signal(init=1)                   # slot 0 starts a request: the pointer is its offset
        left = Signal(32, reset_less=True)       # request bytes not yet unpacked (when not fresh)
        unit_bytes = Signal(range(data_bytes + 1), reset_less=True)
        two_units = Signal(range(2 * data_bytes + 1), reset_less=True)
        last_inside = Signal(range(data_bytes), reset_less=True)   # the last byte a unit may start at within the beat
        m.d.sync += [unit_bytes.eq(Const(1, unit_bytes.shape()) << self.unit_log2),
                     two_units.eq(Const(2, two_units.shape()) << self.unit_log2),
                     last_inside.eq(data_bytes - (Const(1, unit_bytes.shape()) << self.unit_log2))]
        # whether the bytes left after the unit being taken fit the next one (``left`` > U then, so
        # ``left - U <= U`` is ``left <= 2 U``), a register loaded with ``left``
        left_fits = Signal(reset_less=True)
        incoming_fits = at_most(self.beats.payload.length, unit_bytes)

        cur, nxt = slots
        # where the unit starts in slot 0: Mux(fresh, cur.offset, pointer), kept in a register of its
        # own (updated with fresh, pointer and slot 0 below), so the unit's compares start at
        # flip-flops: start + U > beat ⇔ start > last_inside, and start + U >= beat ⇔ start >= last_inside
        # (no adder and no mux in front of the pops that enable the slots' ~2 x beat-width registers).
        # The two compares are flip-flops too (``crosses``, ``beyond``), worked out a cycle ahead: each
        # candidate of start's next value (the next slot 0's offset, the pointer held or stepped, with
        # or without the beat's wrap) is compared with the registered last_inside beside the handshake,
        # and the handshake picks among the one-bit results as it picks start's. They are worked out
        # again in every cycle, so a new unit size reaches them the cycle after last_inside (two after
        # ``unit_log2``), long before a command's first beat (the compares in front
        # of the pops and the slots' multiplexers were ``default``'s worst paths on the ECP5 proxy,
        # ``start`` -> the 512-bit slots, 10.56 ns, six levels with the compare's carry chain)
        start = Signal(range(2 * data_bytes), reset_less=True)
        needs_next = Signal()
        crosses = Signal(reset_less=True)        # the unit reaches the beat's end: slot 0 is done
        beyond = Signal(reset_less=True)         # the unit runs past the beat's end: it needs the next
        last_unit = Signal()

        def compares(value):
            """(value >= last_inside, value > last_inside), registered beside ``start`` as it takes ``value``."""
            return Cat(value >= last_inside, value > last_inside)
        m.d.comb += [
            needs_next.eq(beyond & ~cur.last),
            # the request's bytes left fit this unit: flip-flops (the slot's own compare or the one
            # made as the unit before was taken), so no compare sits between ``fresh`` and the pops
            # that enable the slots' registers (11.8 ns on the ECP5 proxy through a compare here)
            last_unit.eq(Mux(fresh, fits[0], left_fits)),
            self.units.valid.eq(valid[0] & (~needs_next | valid[1])),
            self.units.payload.data.eq(Cat(cur.data, nxt.data).bit_select(Cat(Const(0, 3), start[:-1]), width)),
            self.units.payload.last.eq(last_unit),
            self.units.payload.error.eq(cur.error | (needs_next & nxt.error)),
            self.units.payload.address.eq(Mux(cur.error, cur.address, nxt.address)),
        ]
        fire = self.units.valid & self.units.ready
        after = start + unit_bytes
        # the stepped pointer's two candidates, as the pointer would hold them
        after_wrapped, after_inside = Signal.like(pointer), Signal.like(pointer)
        m.d.comb += [after_wrapped.eq(after - data_bytes), after_inside.eq(after)]
        pops = Signal(2)
        fresh_next, pointer_next = Signal(), Signal.like(pointer)
        pointer_compares = Signal(2)             # compares(pointer_next)
        m.d.comb += [fresh_next.eq(fresh), pointer_next.eq(pointer), pointer_compares.eq(compares(pointer))]
        with m.If(fire):
            with m.If(last_unit):
                m.d.comb += [fresh_next.eq(1), pops.eq(Mux(cur.last, 1, 2))]
            with m.Else():
                m.d.comb += [fresh_next.eq(0), pointer_next.eq(Mux(crosses, after_wrapped, after_inside)),
                             pointer_compares.eq(Mux(crosses, compares(after_wrapped), compares(after_inside))),
                             pops.eq(crosses)]
                m.d.sync += [left.eq(Mux(fresh, cur.length, left) - unit_bytes),
                             left_fits.eq(at_most(Mux(fresh, cur.length, left), two_units))]
        # keep what is not popped, in order, then take the incoming beat behind it
        kept = Signal(2)
        m.d.comb += [kept.eq(valid[0] + valid[1] - pops), self.beats.ready.eq(kept < 2)]
        incoming = self.beats.valid & self.beats.ready
        offset_next = Signal.like(cur.offset)    # slot 0's offset after this cycle
        offset_compares = Signal(2)              # compares(offset_next)
        m.d.comb += [offset_next.eq(cur.offset), offset_compares.eq(compares(cur.offset))]
        with m.Switch(pops):
            with m.Case(0):
                with m.If(incoming):
                    with m.If(~valid[0]):
                        m.d.sync += [slots[0].eq(self.beats.payload), valid[0].eq(1), fits[0].eq(incoming_fits)]
                        m.d.comb += [offset_next.eq(self.beats.payload.offset),
                                     offset_compares.eq(compares(self.beats.payload.offset))]
                    with m.Else():
                        m.d.sync += [slots[1].eq(self.beats.payload), valid[1].eq(1), fits[1].eq(incoming_fits)]
            with m.Case(1):
                m.d.sync += [slots[0].eq(slots[1]), valid[0].eq(valid[1]), valid[1].eq(0), fits[0].eq(fits[1])]
                m.d.comb += [offset_next.eq(nxt.offset), offset_compares.eq(compares(nxt.offset))]
                with m.If(incoming):
                    with m.If(~valid[1]):
                        m.d.sync += [slots[0].eq(self.beats.payload), valid[0].eq(1), fits[0].eq(incoming_fits)]
                        m.d.comb += [offset_next.eq(self.beats.payload.offset),
                                     offset_compares.eq(compares(self.beats.payload.offset))]
                    with m.Else():
                        m.d.sync += [slots[1].eq(self.beats.payload), valid[1].eq(1), fits[1].eq(incoming_fits)]
            with m.Case(2):
                m.d.sync += [valid[0].eq(incoming), valid[1].eq(0), slots[0].eq(self.beats.payload),
                             fits[0].eq(incoming_fits)]
                m.d.comb += [offset_next.eq(self.beats.payload.offset),
                             offset_compares.eq(compares(self.beats.payload.offset))]
        start_compares = Mux(fresh_next, offset_compares, pointer_compares)
        m.d.sync += [fresh.eq(fresh_next), pointer.eq(pointer_next),
                     start.eq(Mux(fresh_next, offset_next, pointer_next)),
                     crosses.eq(start_compares[0]), beyond.eq(start_compares[1])]
        return m
