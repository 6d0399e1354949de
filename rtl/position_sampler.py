"""Edge positions of one node's sample: all of them, or Robert Floyd's k-subset (docs/spec.md s. 2)."""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from smartsage.spec import rng as spec_rng
from smartsage.spec.descriptor import SPEC_MAX_FANOUT

from .delay_line import delay_line
from .free_slot_fifo import FreeSlotFIFO
from .register_copies import and_copies, register_copies
from .rng import (
    MIX32_LATENCY,
    MULTIPLY_LATENCY,
    RejectionThreshold,
    mix32_first_shift,
    mix32_pipelined,
    multiply_pipelined,
)

__all__ = ["PositionRequest", "PositionSampler", "DRAW_LATENCY", "POSITION_BUFFER", "ISSUE_COPIES"]

#: Stages from a draw's issue to its decision (two mix32 rounds, the bounded product, the decision).
DRAW_LATENCY = 2 * MIX32_LATENCY + MULTIPLY_LATENCY + 1
#: Entries of a sampler's output FIFO: a position taken frees room for a draw issued the next cycle
#: and decided :data:`DRAW_LATENCY` cycles later, in the FIFO a cycle after that, and the room for it
#: is known from a flag registered a cycle before (one place short); with this many places the
#: loop streams one position per cycle.
POSITION_BUFFER = DRAW_LATENCY + 5

#: Copies of the issue decision's last AND (``and_copies``): the pipeline's valid, ``reserved`` and
#: ``left``; the draw counter ``next_c``; mix32's input ``keyed_c``.
ISSUE_COPIES = 3

#: One node to sample: its RNG key H_v after mix32's first xor-shift (``shifted_key`` is
#: ``mix32_first_shift(H_v)``, ``H_v ^ (H_v >> 16)``), its degree d (>= 1) and the hop's fanout k.
#: The xor-shift is linear, so mix32's first step of ``H_v ^ c`` is ``shifted_key ^ (c ^ (c >> 16))``:
#: the sampler never needs H_v itself, and a requester that shifts the key where it stages the node
#: puts no LUT between its register and the sampler's first mix32 register.
PositionRequest = data.StructLayout({"shifted_key": 32, "degree": 32, "fanout": 16})


class PositionSampler(wiring.Component):
    """Emits the ordered edge positions of one node's sample, bit-exact with the golden model.

    d <= k: positions 0..d-1 (no draws). d > k: for j = d-k .. d-1, t = bounded(j + 1) (Lemire's
    multiply-shift with exact rejection, draw indices from 0), then ``j if t in S else t`` is
    appended to S (Floyd). S is a ``max_fanout``-entry register set compared in parallel.

    The draws are pipelined, one position per cycle in steady state, over :data:`DRAW_LATENCY`
    stages (for the ECP5 timing proxy's 150 MHz, no stage holds more than one 16x16 multiplication
    or one carry chain): ``mix32(H_v ^ c)`` (:data:`~smartsage.rtl.rng.MIX32_LATENCY` stages, its
    first xor-shift a register loaded with ``shifted_key ^ (c ^ (c >> 16))`` in front of the first
    adder stage),
    ``mix32(. ^ DRAW_SALT)`` (as many), the product by ``j + 1``
    (:data:`~smartsage.rtl.rng.MULTIPLY_LATENCY`), then a decision stage that holds the product and
    whether ``low < n``. No stage waits (no pipeline enable to fan out): draws are issued
    speculatively with consecutive indices c, and only while the output FIFO
    (:data:`POSITION_BUFFER` entries) has room for every draw in flight, so an accepted draw always
    goes out. When the decision stage finds ``low < n`` (probability n / 2^32 per draw) it holds
    that draw aside, flushes the draws behind it and waits for the exact threshold (a ~35-cycle
    divider); a rejected draw is redrawn from (j, c + 1), an accepted one returns to the decision
    stage and the draws resume from (j + 1, c + 1). Positions leave through the FIFO, so neither
    ``ready`` nor the membership test reaches the consumer's logic in the same cycle.

    Parameters
    ----------
    max_fanout : int
        Largest fanout accepted (size of the distinct-position set).
    draws_only : bool
        The requester offers only nodes with ``degree > fanout`` (a lane's dense jobs, d <= k, go
        straight to the index reads): the listing mode is left out, and taking a request sets the
        drawing mode without a 32-bit compare of the request's degree and fanout (on the ECP5 proxy
        that compare, behind the lane's job stage, was a 10.4 ns path). Default False.

    Members
    -------
    request : ``In(stream.Signature(PositionRequest))``
        One node; ``degree`` must be >= 1 (above ``fanout`` when ``draws_only``) and ``fanout`` in
        1..max_fanout.
    positions : ``Out(stream.Signature(32))``
        min(degree, fanout) positions, in sample order.
    ready_unless_taken : ``Out(1)``
        ``request.ready`` of the next cycle if this cycle takes no request (one taken leaves it low),
        for a requester that keeps its own registered copy of whether the sampler it offers to is
        ready (the sampler's reset, in the next cycle, clears ``request.ready`` whatever this says).
    """

    def __init__(self, max_fanout: int, draws_only: bool = False):
        if not isinstance(max_fanout, int) or not 1 <= max_fanout <= SPEC_MAX_FANOUT:
            raise ValueError(f"Max fanout must be an integer in 1..{SPEC_MAX_FANOUT}, not {max_fanout!r}")
        self._max_fanout = max_fanout
        self._draws_only = bool(draws_only)
        super().__init__({
            "request": In(stream.Signature(PositionRequest)),
            "positions": Out(stream.Signature(32)),
            "ready_unless_taken": Out(1),
        })

    @property
    def max_fanout(self) -> int:
        return self._max_fanout

    def elaborate(self, platform):
        m = Module()
        m.submodules.threshold = threshold = RejectionThreshold()
        m.submodules.out = out = FreeSlotFIFO(width=32, depth=POSITION_BUFFER)

        # The node's registers are reset-less: they follow the request while the sampler is not busy
        # (so in the cycle after any reset) and are read only while it is; the samplers' reset (a lane's
        # flip-flop, set by the kernel's reset or the sequencer's ``reset_samplers``) so reaches the control
        # flags only, not ~700 flip-flops per sampler (on the ECP5 proxy that net, into the registers,
        # was an 11.8 ns path of the whole kernel)
        shifted_key = Signal(32, reset_less=True)    # mix32_first_shift(H_v)
        # positions still to list (d <= k): loaded with d itself, not d - 1, so no subtraction sits
        # between the lane's job stage (a LUT-RAM read) and these registers (11.2 ns on the proxy)
        to_list = Signal(32, reset_less=True)
        degree = Signal(32, reset_less=True)
        sequential = Signal(32, reset_less=True)
        busy = Signal()
        busy_next = Signal()    # (set and cleared below; ``request.ready`` is registered from it)
        busy_kept = Signal()    # ``busy_next`` if no request is taken (a request is taken only while idle)
        m.d.comb += [busy_next.eq(busy), busy_kept.eq(busy)]
        m.d.sync += busy.eq(busy_next)
        listing = Signal()      # d <= k: the positions 0..d-1 go out
        drawing = Signal()      # d > k: Floyd's draws
        drawing_next = Signal()  # (set and cleared below, as ``busy_next``)
        m.d.comb += drawing_next.eq(drawing)
        m.d.sync += drawing.eq(drawing_next)
        # the next draw to issue: its position index is j = d - left (positions without a draw issued),
        # its draw index next_c. Only these 37 bits and mix32's input (below) are loaded by a
        # request, an issue and the held draw's return (j is worked out into the issue register), so
        # the flags that pick among those loads fan out to few registers.
        left = Signal(range(self.max_fanout + 1), reset_less=True)
        # left != 0, a flip-flop loaded where ``left`` is (from compares of the registers ``left`` is
        # loaded from), so the issue decision is an AND of flip-flops (``left`` -> its
        # compare -> ``issue`` -> the issue registers' enables was 8.0 ns on the ECP5 proxy)
        left_any = Signal(reset_less=True)
        next_c = Signal(32, reset_less=True)
        # mix32's first xor-shift of H_v ^ next_c, loaded wherever next_c is (equal to
        # ``shifted_key ^ mix32_first_shift(next_c)`` in every cycle), so mix32's first adders start at
        # flip-flops: next_c -> that LUT -> a net to some thirteen adder inputs -> the adders was
        # 7.3-8.6 ns on the whole kernel's ECP5 proxy, the most frequent path of its runs. A request
        # loads it with its ``shifted_key`` as is (c = 0)
        keyed_c = Signal(32, reset_less=True)
        # (a chosen position is read only while its valid bit is set)
        chosen = Array(Signal(32, name=f"chosen{i}", reset_less=True) for i in range(self.max_fanout))
        chosen_valid = Signal(self.max_fanout)  # thermometer: chosen[i] holds a position
        count = Signal(range(self.max_fanout + 1), reset_less=True)
        # positions in the output FIFO plus draws issued and not yet decided: a draw is issued only
        # while this is below the FIFO's depth, so every decided draw finds room and no stage waits
        reserved = Signal(range(POSITION_BUFFER + 1))

        # the draw pipeline: free-running (no enable); valid, n = j + 1 and c ride along the data
        issue = Signal()
        flush = Signal()        # drop every draw behind the decision stage
        # ``h_busy``: a draw is held aside for its exact threshold (below). Set and cleared as
        # ``h_busy_next``; a copy of its own (``h_holding``) enables the held draw's ~170 registers,
        # so the flag's net into the draw counter (``next_c``) is short (as one flip-flop it was an
        # 8.0 ns, one-LUT path on the ECP5 proxy)
        h_busy_next = Signal()
        h_busy, h_holding = register_copies(m, platform, "h_busy", h_busy_next, 2)
        m.d.comb += h_busy_next.eq(h_busy)
        # drawing, no draw held and room for one more draw, one flip-flop (``drawing_next &
        # ~h_busy_next`` and ``reserved`` below POSITION_BUFFER - 1 a cycle before: it grows by at most
        # one a cycle, so it is below POSITION_BUFFER now), so the issue decision is an AND of two
        # flip-flops, this and ``left_any`` (the mode and the flags in front of it made ``drawing`` /
        # ``h_busy`` -> ``left``, ``next_c`` and ``keyed_c`` four LUT levels, 7.6-8.6 ns on the whole
        # kernel's ECP5 proxy), and no compare of the count sits between it and its own update
        can_issue = Signal()
        m.d.sync += can_issue.eq(drawing_next & ~h_busy_next & (reserved < POSITION_BUFFER - 1))
        stages = DRAW_LATENCY - 1
        valids = [Signal(name=f"d{i}_valid") for i in range(stages)]
        # (the data registers are reset-less: the valid bits qualify them, and the samplers' reset
        # net reaches the control registers only)
        issue_n = Signal(32, name="d0_n", reset_less=True)
        issue_c = Signal(32, name="d0_c", reset_less=True)
        # (the issue register holds j; from the next stage on the draw's range n = j + 1 rides along)
        m.d.sync += [valids[0].eq(issue), issue_n.eq(degree - left), issue_c.eq(next_c)]
        # (a draw may be issued in the cycle of a flush: it is dropped a cycle later, when a draw is
        # held, and the held draw's return reloads the issue registers it stepped)
        for i in range(1, stages):
            kill = flush | h_busy if i == 1 else flush
            m.d.sync += valids[i].eq(valids[i - 1] & ~kill)
        range_n = Signal(32, name="d1_n", reset_less=True)
        range_c = Signal(32, name="d1_c", reset_less=True)
        m.d.sync += [range_n.eq(issue_n + 1), range_c.eq(issue_c)]
        always = Const(1)
        # (the first round ends in mix32's first xor-shift of the second's input, the salt folded in)
        first_shifted = mix32_pipelined(m, keyed_c, always, name="draw_mix1", shifted=True,
                                        shift_out_with=Const(spec_rng.DRAW_SALT, 32))
        second = mix32_pipelined(m, first_shifted, always, name="draw_mix2", shifted=True)
        at_multiply = 2 * MIX32_LATENCY - 1
        # n and c ride beside the rounds in LUT RAM (rtl/delay_line.py), the pipeline being free
        # running: as registers, stage after stage, they were 1,216 of a sampler's 3,168 flip-flops on
        # the ECP5 proxy. n is read at the product's stage, n and c at the last one.
        at_product = delay_line(m, Cat(range_n, range_c), at_multiply - 1, "draw_nc_product")
        at_last = delay_line(m, at_product, stages - 1 - at_multiply, "draw_nc_last")
        last_n, last_c = at_last[:32], at_last[32:]
        product = multiply_pipelined(m, second, at_product[:32], always, name="draw_mul", platform=platform)

        # the decision stage: takes the last stage's draw every cycle, or the held draw back (below)
        s_valid = Signal()
        s_j, s_c, s_n = (Signal(32, name=f"s_{x}", reset_less=True) for x in "jcn")
        s_m = Signal(64, reset_less=True)
        s_needs = Signal(reset_less=True)     # low < n: the exact threshold decides (read with s_valid)
        s_last = Signal(reset_less=True)      # j == d - 1
        # the held draw: one with low < n waits here for its exact threshold while the pipeline is
        # flushed; it is then dropped (rejected: redrawn from c + 1) or returned to the decision stage
        h_pending = Signal()
        h_j, h_c, h_n = (Signal(32, name=f"h_{x}", reset_less=True) for x in "jcn")
        # (the divider's operand is the held draw's range, offered whether or not it is asked for: the
        # divider's registers follow it while idle, so no handshake sits in front of its negation)
        m.d.comb += threshold.i.payload.eq(h_n)
        h_m = Signal(64, reset_less=True)
        # (the held draw's registers follow the decision stage while none is held: reset-less)
        h_left = Signal(range(self.max_fanout + 1), reset_less=True)   # d - j of the held draw
        h_last = Signal(reset_less=True)
        threshold_known = Signal()
        threshold_rejects = Signal()
        returning = Signal()   # the held draw is accepted: it re-enters the decision stage (a register)
        m.d.sync += returning.eq(0)
        with m.If(returning):
            m.d.sync += [s_valid.eq(1), s_j.eq(h_j), s_c.eq(h_c), s_n.eq(h_n), s_m.eq(h_m),
                         s_needs.eq(0), s_last.eq(h_last)]
        with m.Else():
            m.d.sync += [s_valid.eq(valids[-1] & ~flush), s_j.eq(last_n - 1), s_c.eq(last_c), s_n.eq(last_n),
                         s_m.eq(product), s_needs.eq(product[:32] < last_n), s_last.eq(last_n == degree)]

        candidate = s_m[32:]
        hits = [(chosen[i] == candidate) & chosen_valid[i] for i in range(self.max_fanout)]
        hit = Signal()
        m.d.comb += hit.eq(Cat(*hits).any())
        position = Mux(hit, s_j, candidate)
        emit = Signal()        # the decision stage's draw is accepted: its position goes out
        m.d.comb += [emit.eq(s_valid & ~s_needs), flush.eq(s_valid & s_needs)]

        m.d.comb += [self.positions.valid.eq(out.r_rdy), self.positions.payload.eq(out.r_data),
                     out.r_en.eq(self.positions.ready)]
        taken = self.positions.valid & self.positions.ready

        # ---- request and the sequential mode
        # A request is taken into registers, the mode worked out on the way in (one carry chain): the
        # first draw goes out the next cycle. (The requester's payload should come from its own
        # registers.) While the sampler is not busy its node registers follow the request's payload
        # every cycle (nothing reads them then), so taking a request loads only the three mode flags:
        # the handshake's fan-out is three registers, not the two hundred a load of the node would
        # enable. The next node is taken
        # only once at most two of this one's positions wait in the FIFO (a flag registered from the
        # level a cycle before, "at most one"): a lane whose samplers took nodes as soon as their draws
        # were out would hold work the other lanes could start (on the default build's cycle-count
        # test, 3,334 cycles without this, 3,323 with it). ``ready`` is a flip-flop: not busy in this
        # cycle (``busy_next`` of the cycle before) and that flag (its lane ORs the samplers' ready
        # into its job decision, whose fan-out made ~busy & few_waiting a 9.2 ns path on the ECP5 proxy)
        ready = Signal()
        few_waiting = out.level <= 1
        m.d.comb += self.ready_unless_taken.eq(~busy_kept & few_waiting)
        m.d.sync += ready.eq(~busy_next & few_waiting)
        m.d.comb += self.request.ready.eq(ready)
        req = self.request.payload
        with m.If(~busy):
            m.d.sync += [shifted_key.eq(req.shifted_key), degree.eq(req.degree), count.eq(0), chosen_valid.eq(0),
                         left.eq(req.fanout), left_any.eq(req.fanout[:len(left)] != 0),
                         next_c.eq(0), keyed_c.eq(req.shifted_key)]
            if not self._draws_only:
                m.d.sync += [sequential.eq(0), to_list.eq(req.degree)]
        with m.If(self.request.valid & self.request.ready):
            if self._draws_only:
                m.d.comb += busy_next.eq(1)
                m.d.comb += drawing_next.eq(1)
            else:
                m.d.comb += busy_next.eq(1)
                m.d.comb += drawing_next.eq(req.degree > req.fanout)
                m.d.sync += listing.eq(req.degree <= req.fanout)
        written = Signal()     # a position enters the output FIFO
        # (without the listing mode none of it is built: Yosys keeps a flip-flop that is never set
        # unless it proves it constant, and the listing's end was the whole kernel's critical path
        # on the ECP5 proxy, into ``ready_unless_taken``)
        if not self._draws_only:
            with m.If(listing):
                m.d.comb += [out.w_en.eq(1), out.w_data.eq(sequential), written.eq(out.w_rdy)]
                with m.If(out.w_rdy):
                    m.d.sync += [sequential.eq(sequential + 1), to_list.eq(to_list - 1)]
                    with m.If(to_list == 1):
                        m.d.comb += [busy_next.eq(0), busy_kept.eq(0)]
                        m.d.sync += listing.eq(0)

        # ---- Floyd: output of the decision stage (room was reserved when the draw was issued)
        # (while no draw is held, the held draw's registers follow the decision stage every cycle,
        # whatever the mode: a flush sets the flags only, and the 170 registers' enable is one
        # flip-flop's output)
        with m.If(~h_holding):
            m.d.sync += [h_j.eq(s_j), h_c.eq(s_c), h_n.eq(s_n), h_m.eq(s_m), h_last.eq(s_last),
                         h_left.eq(degree - s_j)]
        # what the held draw's return loads, worked out from the held registers while the threshold is
        # computed (they are stable a cycle after the draw is held, some 35 cycles before it returns):
        # the draw counter after it and mix32's first xor-shift of its key, and the positions left if it
        # is rejected (h_left) or accepted (one fewer), with their "any left" flags
        h_after_c = Signal(32, reset_less=True)
        h_after_keyed = Signal(32, reset_less=True)
        h_left_any = Signal(reset_less=True)
        h_left_less = Signal.like(h_left, reset_less=True)
        h_left_less_any = Signal(reset_less=True)
        m.d.sync += [h_after_c.eq(h_c + 1), h_after_keyed.eq(shifted_key ^ mix32_first_shift(h_c + 1)),
                     h_left_any.eq(h_left != 0), h_left_less.eq(h_left - 1), h_left_less_any.eq(h_left != 1)]
        with m.If(drawing):
            m.d.comb += [out.w_en.eq(emit), out.w_data.eq(position)]
            with m.If(emit):
                with m.Switch(count):
                    for i in range(self.max_fanout):
                        with m.Case(i):
                            m.d.sync += chosen[i].eq(position)
                m.d.sync += [count.eq(count + 1), chosen_valid.eq(Cat(1, chosen_valid[:-1]))]
                with m.If(s_last):
                    m.d.comb += [busy_next.eq(0), busy_kept.eq(0)]
                    m.d.comb += drawing_next.eq(0)

            # slow path: hold the draw, flush the ones behind it, ask for the exact threshold
            with m.If(flush):
                m.d.comb += h_busy_next.eq(1)
                m.d.sync += threshold_known.eq(0)
            with m.If(h_busy & ~h_pending & ~threshold_known):
                m.d.comb += threshold.i.valid.eq(1)
                with m.If(threshold.i.ready):
                    m.d.sync += h_pending.eq(1)
            m.d.comb += threshold.o.ready.eq(h_pending)
            with m.If(threshold.o.valid & h_pending):
                m.d.sync += [h_pending.eq(0), threshold_known.eq(1),
                             threshold_rejects.eq(h_m[:32] < threshold.o.payload),
                             returning.eq(h_m[:32] >= threshold.o.payload)]
        # the held draw's return and the issue, outside the mode's If: ``threshold_known`` is set only
        # while a draw is held in the drawing mode (and cleared here), so it alone is the return's
        # condition, and ``can_issue`` (drawing, no draw held, room) the issue's but for ``left_any``; the two
        # never hold together. The return loads the ``h_after_*`` registers. (With ``drawing`` and
        # ``h_busy & threshold_known`` in front of the issue as an Elif, ``threshold_known`` went
        # through the issue decision into the 70 issue registers: 7.2-9.0 ns on the ECP5 proxy.)
        with m.If(threshold_known):
            m.d.comb += h_busy_next.eq(0)
            m.d.sync += [threshold_known.eq(0), next_c.eq(h_after_c), keyed_c.eq(h_after_keyed)]
            with m.If(threshold_rejects):   # redraw j
                m.d.sync += [left.eq(h_left), left_any.eq(h_left_any)]
            with m.Else():
                m.d.sync += [left.eq(h_left_less), left_any.eq(h_left_less_any)]
        # (the issue's AND copied: one for the pipeline's valid, ``reserved`` and ``left``, one each for
        # the draw counter and mix32's input, so no one net of the decision reaches its ~70 registers:
        # ``left_any`` -> ``issue`` -> ``left``, ``next_c`` was 7.9-8.4 ns at two levels on the proxy)
        issue_copies = and_copies(m, platform, "issue", can_issue, left_any, ISSUE_COPIES)
        m.d.comb += issue.eq(issue_copies[0])
        with m.If(issue):
            m.d.sync += [left.eq(left - 1), left_any.eq(left != 1)]
        with m.If(issue_copies[1]):
            m.d.sync += next_c.eq(next_c + 1)
        with m.If(issue_copies[2]):
            m.d.sync += keyed_c.eq(shifted_key ^ mix32_first_shift(next_c + 1))

        # reserved: +1 for a draw issued or a sequential position written, -1 for a position taken;
        # a flush drops the draws behind the held one (it keeps its place), a rejection drops it.
        # The count's next values are added from the register alone and picked by the three events
        # (no carry chain behind ``issue`` or ``taken``); ``taken`` picks last, between the next value
        # if a position leaves and if none does, each worked out from the sampler's own flip-flops
        # (the consumer's ready, ANDed into ``taken`` across the lane, went through the whole pick:
        # the lane's read port -> ``reserved`` was 7.6-8.5 ns, four LUT levels, on the ECP5 proxy)
        dropped = threshold_known & threshold_rejects
        up = issue | written
        if_kept = Signal.like(reserved)     # no position taken
        if_taken = Signal.like(reserved)    # one position taken
        m.d.comb += [
            if_kept.eq(Mux(flush, out.level + 1,
                           Mux(up & ~dropped, reserved + 1, Mux(~up & dropped, reserved - 1, reserved)))),
            if_taken.eq(Mux(flush, out.level,
                            Mux(~up & dropped, reserved - 2, Mux(up & dropped, reserved - 1,
                                                                 Mux(up, reserved, reserved - 1))))),
        ]
        m.d.sync += reserved.eq(Mux(taken, if_taken, if_kept))
        return m
