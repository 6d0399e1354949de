"""A synchronous FIFO whose memory is written in every cycle, at its free slot."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .register_copies import trellis_register

__all__ = ["FreeSlotFIFO"]


class FreeSlotFIFO(wiring.Component):
    """:class:`amaranth.lib.fifo.SyncFIFO`'s ports and behaviour, with a memory one slot larger than
    ``depth`` whose write port is enabled in every cycle, and optionally a one-bit flag per entry
    kept in flip-flops whose next head's value is known before the head leaves (``next_flag``).

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
    pointer_copies : int
        The memory as that many memories side by side, each a slice of the width of
        ``ceil(width / pointer_copies)`` bits (the last one the rest; fewer slices where the last
        would be empty), each with a copy of its own of the write and read
        pointers on the ECP5 proxy platform (``TRELLIS_FF`` instances named
        ``w_ptr<i>_<bit>_ff`` and ``r_ptr<i>_<bit>_ff``, which Yosys keeps): in a wide LUT-RAM FIFO
        each pointer bit reaches every RAM cell of the width (a lane's job queue, 66 cells: its
        write address was a 9.6 ns net on the proxy), a copy one slice of them. Elsewhere one pair
        of pointers addresses every slice. With more than one, the FIFO has a ``clear`` input that
        empties it (the copies load it; they are instances, which a ``ResetInserter`` does not
        reach): drive it with the clear of any ``ResetInserter`` around the FIFO.

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
    clear : ``In(1)`` (with ``pointer_copies > 1``)
        Empties the FIFO (its pointers, level and flags), whatever else happens in the cycle.
    """

    def __init__(self, *, width: int, depth: int, next_flag: bool = False, pointer_copies: int = 1):
        if not isinstance(width, int) or width < 1:
            raise TypeError(f"FIFO width must be a positive integer, not {width!r}")
        if not isinstance(depth, int) or depth < 1:
            raise TypeError(f"FIFO depth must be a positive integer, not {depth!r}")
        if not isinstance(pointer_copies, int) or not 1 <= pointer_copies <= width:
            raise TypeError(f"FIFO pointer copies must be an integer in 1..width ({width}), not {pointer_copies!r}")
        self._width, self._depth, self._next_flag = width, depth, next_flag
        self._copies = pointer_copies
        members = {"w_data": In(width), "w_en": In(1), "w_rdy": Out(1, init=1),
                   "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1), "level": Out(range(depth + 1))}
        if next_flag:
            members |= {"w_flag": In(1), "next_flag": Out(1)}
        if pointer_copies > 1:
            members |= {"clear": In(1)}
        super().__init__(members)

    @property
    def depth(self) -> int:
        return self._depth

    def elaborate(self, platform):
        slots = self._depth + 1
        m = Module()
        # the memory's slices of the width: ``pointer_copies`` of them (fewer where the last would
        # be empty, 12 bits in 5 is 4 of 3), each addressed by its own copies
        step = -(-self._width // self._copies)
        slices = range(0, self._width, step)
        copies = len(slices)
        clear = self.clear if self._copies > 1 else 0
        push, pop = Signal(), Signal()
        m.d.comb += [push.eq(self.w_en & self.w_rdy), pop.eq(self.r_en & self.r_rdy)]
        w_ptr, r_ptr = Signal(range(slots)), Signal(range(slots))
        w_next, r_next_ptr = Signal.like(w_ptr), Signal.like(r_ptr)
        m.d.comb += [w_next.eq(Mux(clear, 0, Mux(push, Mux(w_ptr == slots - 1, 0, w_ptr + 1), w_ptr))),
                     r_next_ptr.eq(Mux(clear, 0, Mux(pop, Mux(r_ptr == slots - 1, 0, r_ptr + 1), r_ptr)))]
        if self._copies > 1 and getattr(platform, "family", None) == "ecp5":
            def pointer(name, d):
                return [Cat(trellis_register(m, f"{name}{i}_{bit}", d[bit], 0, ResetSignal())
                            for bit in range(len(d))) for i in range(copies)]
            w_ptrs, r_ptrs = pointer("w_ptr", w_next), pointer("r_ptr", r_next_ptr)
            m.d.comb += [w_ptr.eq(w_ptrs[0]), r_ptr.eq(r_ptrs[0])]
        else:
            m.d.sync += [w_ptr.eq(w_next), r_ptr.eq(r_next_ptr)]
            w_ptrs, r_ptrs = [w_ptr] * copies, [r_ptr] * copies
        for i, low in enumerate(slices):
            high = min(low + step, self._width)
            storage = Memory(shape=high - low, depth=slots, init=[])
            m.submodules["storage" if self._copies == 1 else f"storage{i}"] = storage
            write, read = storage.write_port(), storage.read_port(domain="comb")
            m.d.comb += [write.addr.eq(w_ptrs[i]), write.data.eq(self.w_data[low:high]), write.en.eq(1),
                         read.addr.eq(r_ptrs[i]), self.r_data[low:high].eq(read.data)]
        # the two flags are flip-flops (a level compare in front of the consumers' and producers'
        # handshakes was a LUT level of the kernel's worst paths): set from the level and the
        # handshakes of the cycle, as the level itself is
        with m.If(push):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(pop):
            m.d.sync += self.r_rdy.eq(self.level != 1)
        with m.If(pop):
            m.d.sync += self.w_rdy.eq(1)
        with m.Elif(push):
            m.d.sync += self.w_rdy.eq(self.level != self._depth - 1)
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
            if self._copies > 1:
                with m.If(self.clear):
                    m.d.sync += r_next.eq(r_next.init)
        if self._copies > 1:
            with m.If(self.clear):
                m.d.sync += [self.level.eq(0), self.r_rdy.eq(0), self.w_rdy.eq(1)]
        return m
