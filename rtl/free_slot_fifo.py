"""A synchronous FIFO whose memory is written in every cycle, at its free slot."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["FreeSlotFIFO"]


class FreeSlotFIFO(wiring.Component):
    """:class:`amaranth.lib.fifo.SyncFIFO`'s ports and behaviour, with a memory one slot larger than
    ``depth`` whose write port is enabled in every cycle, and optionally a one-bit flag per entry
    kept in flip-flops whose next head's value is known before the head leaves (``next_flag``), and
    the head's low bits in a register (``r_head``).

    With one slot more than it may hold, the write pointer always names a free slot, so writing the
    input there in every cycle changes nothing that can be read; ``w_en`` moves the pointer and the
    level only. In a LUT-RAM FIFO the write enable reaches every RAM cell of the FIFO's width (on
    the ECP5 proxy a 200-bit entry is 50 cells), so a producer's handshake decision in front of
    ``w_en`` fanned out to all of them (a lane's job offer: 12.2 ns on the proxy); here it reaches
    the two pointers. ``w_rdy`` and ``r_rdy`` are flip-flops, not compares of the level.

    Parameters
    ----------
    width : int
    depth : int
        Entries it holds at most (the memory has ``depth + 1``).
    next_flag : bool
        Add ``w_flag`` and ``next_flag``: a consumer that registers something of its head (a burst's
        "one beat", say) works it out for the next head a cycle ahead, from flip-flops, instead of
        behind the memory's read.
    head_bits : int
        Add ``r_head``: the head entry's low ``head_bits`` bits, from a register (the entries' low bits
        are kept in a shift register too), for a consumer whose wide logic they select: a read engine's
        word select from the in-flight FIFO's LUT-RAM read was 8.3 ns of the ``default`` build's
        16.0 ns worst path on the ECP5 proxy (the read pointer to the RAM, and the RAM's output
        across the die to the beat's multiplexers).

    Members
    -------
    w_data : ``In(width)``; w_en : ``In(1)``; w_rdy : ``Out(1)``
        A write is taken when ``w_en & w_rdy`` (``w_rdy``: fewer than ``depth`` entries).
    r_data : ``Out(width)``; r_en : ``In(1)``; r_rdy : ``Out(1)``
        The oldest entry, valid while ``r_rdy``; it leaves when ``r_en & r_rdy``.
    level : ``Out(range(depth + 1))``
    w_flag : ``In(1)``; next_flag : ``Out(1)`` (with ``next_flag=True``)
        The flag written with ``w_data``; the flag of the entry that is the head after a read now: the
        entry behind the head, or the one written now when the head is alone (meaningless otherwise).
    r_head : ``Out(head_bits)`` (with ``head_bits``)
        ``r_data``'s low ``head_bits`` bits, valid while ``r_rdy``, from a register.
    w_pending : ``Out(1)`` (with ``late_write=True``)
        An entry written in the cycle before, not yet counted in ``level`` nor readable.
    r_pending : ``Out(1)`` (with ``late_read=True``)
        The entry read in the cycle before, still counted in ``level`` (not readable again).

    With ``late_write=True`` a write is counted a cycle after it is taken: ``w_en & w_rdy`` goes to a
    flip-flop (``w_pending``) that moves the write pointer and the level in the next cycle, and the
    input of that next cycle is written at the slot after the pending one. So the producer's
    handshake decision reaches one flip-flop, not the pointer, level and ready flags (the write
    combiner's push -> its beat and run FIFOs' levels, four levels and 8.3-8.4 ns on the ECP5
    proxy); the entry is readable a cycle later, and ``w_rdy`` means fewer than ``depth - 1``
    entries (with the one pending, at most ``depth`` are held).

    With ``late_read=True`` a read is counted a cycle after it is taken, likewise: ``r_en & r_rdy``
    goes to a flip-flop (``r_pending``) that moves the level in the next cycle (the read pointer
    steps with the take, so it names the head). The consumer's handshake decision reaches that
    flip-flop, the pointer's step and ``r_rdy`` (the last select of its next value), not the level
    (the write combiner's burst intake -> its run FIFOs' levels, three and four levels and 7.4-7.7 ns
    on the ECP5 proxy). ``r_rdy`` stays true across back-to-back reads while a second
    entry is counted; ``w_rdy`` sees the room a read frees a cycle later.
    """

    def __init__(self, *, width: int, depth: int, next_flag: bool = False, head_bits: int = 0,
                 late_write: bool = False, late_read: bool = False):
        if not isinstance(width, int) or width < 1:
            raise TypeError(f"FIFO width must be a positive integer, not {width!r}")
        if not isinstance(depth, int) or depth < 1:
            raise TypeError(f"FIFO depth must be a positive integer, not {depth!r}")
        if not isinstance(head_bits, int) or not 0 <= head_bits <= width:
            raise TypeError(f"FIFO head bits must be an integer in 0..width ({width}), not {head_bits!r}")
        if late_write and (next_flag or head_bits or depth < 2):
            raise TypeError("a late-write FIFO holds at least 2 entries and has no next_flag or head_bits")
        if late_read and (next_flag or head_bits):
            raise TypeError("a late-read FIFO has no next_flag or head_bits")
        self._width, self._depth, self._next_flag, self._head_bits = width, depth, next_flag, head_bits
        self._late_write, self._late_read = late_write, late_read
        members = {"w_data": In(width), "w_en": In(1), "w_rdy": Out(1, init=1),
                   "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1), "level": Out(range(depth + 1))}
        if next_flag:
            members |= {"w_flag": In(1), "next_flag": Out(1)}
        if head_bits:
            members["r_head"] = Out(head_bits)
        if late_write:
            members["w_pending"] = Out(1)
        if late_read:
            members["r_pending"] = Out(1)
        super().__init__(members)

    @property
    def depth(self) -> int:
        return self._depth

    @property
    def late_write(self) -> bool:
        return self._late_write

    @property
    def late_read(self) -> bool:
        return self._late_read

    def elaborate(self, platform):
        slots = self._depth + 1
        m = Module()
        m.submodules.storage = storage = Memory(shape=self._width, depth=slots, init=[])
        write, read = storage.write_port(), storage.read_port(domain="comb")
        w_ptr, r_ptr = Signal(range(slots)), Signal(range(slots))
        push, pop = Signal(), Signal()
        m.d.comb += [write.data.eq(self.w_data), write.en.eq(1), self.r_data.eq(read.data)]
        taken = self.r_en & self.r_rdy
        # (with late reads the read pointer still steps with the take, so it names the head, and the
        # pending read's flip-flop moves the level only)
        m.d.comb += read.addr.eq(r_ptr)
        if self._late_read:
            m.d.sync += self.r_pending.eq(taken)
            m.d.comb += pop.eq(self.r_pending)
        else:
            m.d.comb += pop.eq(taken)
        if self._late_write:
            # the taken write in a flip-flop; the next input goes to the slot after the pending one
            # (the pointer plus one, a register stepped with it)
            w_next = Signal(range(slots), init=1)
            m.d.sync += self.w_pending.eq(self.w_en & self.w_rdy)
            m.d.comb += [push.eq(self.w_pending), write.addr.eq(Mux(self.w_pending, w_next, w_ptr))]
            with m.If(push):
                m.d.sync += w_next.eq(Mux(w_next == slots - 1, 0, w_next + 1))
        else:
            m.d.comb += [push.eq(self.w_en & self.w_rdy), write.addr.eq(w_ptr)]
        # the two flags are flip-flops (a level compare in front of the consumers' and producers'
        # handshakes was a LUT level of the kernel's worst paths): set from the level and the
        # handshakes of the cycle, as the level itself is
        if self._late_read:
            # entries counted in the next cycle (level + push - pop), less the one taken now: the take
            # and the push pick between two compares of flip-flops at the last LUT (the push in the
            # compares' sum put a lane's job handshake in front of a carry chain into its tickets
            # FIFO's ``r_rdy``, eight levels and 8.8-9.3 ns on ``small``'s ECP5 proxy)
            # (no carry chain either: the level's compares with 1, 2 and 3 are ORs of its bits)
            level = Cat(self.level, Const(0, 2))   # (two bits wider: a one-entry FIFO's level is one bit)
            at_least = {1: level.any(), 2: level[1:].any(), 3: level[2:].any() | (level[1] & level[0])}
            one_kept, two_kept = Signal(), Signal()    # (of the counted entries, after the pending read)
            m.d.comb += [one_kept.eq(Mux(pop, at_least[2], at_least[1])),
                         two_kept.eq(Mux(pop, at_least[3], at_least[2]))]
            m.d.sync += self.r_rdy.eq(Mux(taken, Mux(push, one_kept, two_kept), push | one_kept))
        else:
            with m.If(push):
                m.d.sync += self.r_rdy.eq(1)
            with m.Elif(pop):
                m.d.sync += self.r_rdy.eq(self.level != 1)
        if self._late_write:
            # fewer than depth - 1 counted: room for the pending entry and one more
            with m.If(pop & ~push):
                m.d.sync += self.w_rdy.eq(self.level <= self._depth - 1)
            with m.Elif(push & ~pop):
                m.d.sync += self.w_rdy.eq(self.level < self._depth - 2)
        else:
            with m.If(pop):
                m.d.sync += self.w_rdy.eq(1)
            with m.Elif(push):
                m.d.sync += self.w_rdy.eq(self.level != self._depth - 1)
        with m.If(push):
            m.d.sync += w_ptr.eq(Mux(w_ptr == slots - 1, 0, w_ptr + 1))
        with m.If(taken):
            m.d.sync += r_ptr.eq(Mux(r_ptr == slots - 1, 0, r_ptr + 1))
        # the level's next values are worked out from the register alone and picked by the two
        # handshakes (``level + push - pop`` put them at the foot of two carry chains: a sampler's
        # FIFO level behind the lane's read port, and the read stream's tags level behind the
        # samplers' flags, were 8.2-8.3 ns paths of the whole kernel's ECP5 proxy)
        level_up, level_down = self.level + 1, self.level - 1
        m.d.sync += self.level.eq(Mux(push == pop, self.level, Mux(push, level_up, level_down)))
        if self._next_flag:
            # the flags in flip-flops, one per slot, read at the slot behind the head (a register
            # stepped with the read pointer)
            flags = Signal(slots)
            r_next = Signal(range(slots), init=1 % slots)
            with m.If(push):
                m.d.sync += flags.bit_select(w_ptr, 1).eq(self.w_flag)
            with m.If(pop):
                m.d.sync += r_next.eq(Mux(r_next == slots - 1, 0, r_next + 1))
            m.d.comb += self.next_flag.eq(Mux(self.level == 1, self.w_flag, flags.bit_select(r_next, 1)))
        if self._head_bits:
            # the entries' low bits also in a shift register of ``depth`` fields whose first is the
            # head's: a read shifts it by one. As in the memory, the free field after the last held
            # one takes the input in every cycle, so the write's handshake enables nothing here (with
            # it, a lane's position valids -> its tags FIFO's fields were 15.4 ns on ``default``'s
            # ECP5 proxy), and no field is picked by a pointer (an 18-entry pick by the slot behind
            # the head, in front of the head's register: 10.5 ns on ``small``'s)
            bits = self._head_bits
            low = self.w_data[:bits]
            fields = [Signal(bits, name=f"head_field{i}") for i in range(self._depth)]
            for i, field in enumerate(fields):
                following = fields[i + 1] if i + 1 < self._depth else low
                m.d.sync += field.eq(Mux(pop, Mux(self.level == i + 1, low, following),
                                         Mux(self.level == i, low, field)))
            m.d.comb += self.r_head.eq(fields[0])
        return m
