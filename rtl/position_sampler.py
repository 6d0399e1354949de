"""Edge positions of one node's sample: all of them, or Robert Floyd's k-subset (docs/spec.md s. 2)."""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from smartsage.spec import rng as spec_rng
from smartsage.spec.descriptor import SPEC_MAX_FANOUT

from .rng import MIX32_LATENCY, MULTIPLY_LATENCY, RejectionThreshold, mix32_pipelined, multiply_pipelined

__all__ = ["PositionRequest", "PositionSampler", "DRAW_LATENCY"]

#: Stages from a draw's issue to its decision (two mix32 rounds, the bounded product, the decision).
DRAW_LATENCY = 2 * MIX32_LATENCY + MULTIPLY_LATENCY + 1

#: One node to sample: its RNG key H_v, its degree d (>= 1) and the hop's fanout k.
PositionRequest = data.StructLayout({"key": 32, "degree": 32, "fanout": 16})


class PositionSampler(wiring.Component):
    """Emits the ordered edge positions of one node's sample, bit-exact with the golden model.

    d <= k: positions 0..d-1 (no draws). d > k: for j = d-k .. d-1, t = bounded(j + 1) (Lemire's
    multiply-shift with exact rejection, draw indices from 0), then ``j if t in S else t`` is
    appended to S (Floyd). S is a ``max_fanout``-entry register set compared in parallel.

    The draws are pipelined, one position per cycle in steady state, over :data:`DRAW_LATENCY`
    stages (for the ECP5 timing proxy's 150 MHz, no stage holds more than one 16x16 multiplication
    or one carry chain): ``mix32(H_v ^ c)`` (:data:`~smartsage.rtl.rng.MIX32_LATENCY` stages),
    ``mix32(. ^ DRAW_SALT)`` (as many), the product by ``j + 1``
    (:data:`~smartsage.rtl.rng.MULTIPLY_LATENCY`), then a decision stage that holds the product and
    whether ``low < n``. Draws are issued speculatively with consecutive indices c (no rejection);
    when the decision stage finds ``low < n`` it stalls for the exact threshold (a ~34-cycle
    divider, probability n / 2^32 per draw) and, on a rejection, flushes the stages before it and
    reissues from (j, c + 1). Positions leave through a two-entry FIFO, so neither ``ready`` nor the
    membership test reaches the consumer's logic in the same cycle.

    Parameters
    ----------
    max_fanout : int
        Largest fanout accepted (size of the distinct-position set).

    Members
    -------
    request : ``In(stream.Signature(PositionRequest))``
        One node; ``degree`` must be >= 1 and ``fanout`` in 1..max_fanout.
    positions : ``Out(stream.Signature(32))``
        min(degree, fanout) positions, in sample order.
    """

    def __init__(self, max_fanout: int):
        if not isinstance(max_fanout, int) or not 1 <= max_fanout <= SPEC_MAX_FANOUT:
            raise ValueError(f"Max fanout must be an integer in 1..{SPEC_MAX_FANOUT}, not {max_fanout!r}")
        self._max_fanout = max_fanout
        super().__init__({
            "request": In(stream.Signature(PositionRequest)),
            "positions": Out(stream.Signature(32)),
        })

    @property
    def max_fanout(self) -> int:
        return self._max_fanout

    def elaborate(self, platform):
        m = Module()
        m.submodules.threshold = threshold = RejectionThreshold()
        m.submodules.out = out = SyncFIFO(width=32, depth=2)

        key = Signal(32)
        last_j = Signal(32)     # degree - 1
        degree = Signal(32)
        sequential = Signal(32)
        busy = Signal()
        floyd = Signal()
        next_j = Signal(33)     # next position index j to issue a draw for
        next_n = Signal(33)     # j + 1, the range of its draw
        next_c = Signal(32)     # its draw index
        chosen = Array(Signal(32, name=f"chosen{i}") for i in range(self.max_fanout))
        chosen_valid = Signal(self.max_fanout)  # thermometer: chosen[i] holds a position
        count = Signal(range(self.max_fanout + 1))

        # the draw pipeline: valid, n = j + 1, c ride along the data stages; all move on ``advance``
        advance = Signal()      # stages move forward this cycle
        issue = Signal()
        stages = DRAW_LATENCY - 1
        valids = [Signal(name=f"d{i}_valid") for i in range(stages)]
        ns = [Signal(32, name=f"d{i}_n") for i in range(stages)]
        cs = [Signal(32, name=f"d{i}_c") for i in range(stages)]
        with m.If(advance):
            m.d.sync += [valids[0].eq(issue), ns[0].eq(next_n), cs[0].eq(next_c)]
            for i in range(1, stages):
                m.d.sync += [valids[i].eq(valids[i - 1]), ns[i].eq(ns[i - 1]), cs[i].eq(cs[i - 1])]
        first = mix32_pipelined(m, key ^ next_c, advance, name="draw_mix1")
        second = mix32_pipelined(m, first ^ spec_rng.DRAW_SALT, advance, name="draw_mix2")
        at_multiply = 2 * MIX32_LATENCY - 1
        product = multiply_pipelined(m, second, ns[at_multiply], advance, name="draw_mul", platform=platform)

        # the decision stage
        s_valid = Signal()
        s_j, s_c, s_n = Signal(32), Signal(32), Signal(32)
        s_m = Signal(64)
        s_needs = Signal()     # low < n: the exact threshold decides
        s_last = Signal()      # j == d - 1
        with m.If(advance):
            m.d.sync += [s_valid.eq(valids[-1]), s_j.eq(ns[-1] - 1), s_c.eq(cs[-1]), s_n.eq(ns[-1]),
                         s_m.eq(product), s_needs.eq(product[:32] < ns[-1]), s_last.eq(ns[-1] == degree)]
        threshold_known = Signal()
        threshold_rejects = Signal()
        threshold_pending = Signal()

        low = s_m[:32]
        candidate = s_m[32:]
        hits = [(chosen[i] == candidate) & chosen_valid[i] for i in range(self.max_fanout)]
        hit = Signal()
        m.d.comb += hit.eq(Cat(*hits).any())
        position = Mux(hit, s_j, candidate)
        reject = Signal()
        decided = Signal()   # the decision stage holds a draw whose fate is known
        m.d.comb += [
            decided.eq(s_valid & (~s_needs | threshold_known)),
            reject.eq(decided & s_needs & threshold_rejects),
        ]
        emit = Signal()
        m.d.comb += emit.eq(decided & ~reject)
        m.d.comb += advance.eq(~s_valid | (emit & out.w_rdy))

        m.d.comb += [self.positions.valid.eq(out.r_rdy), self.positions.payload.eq(out.r_data),
                     out.r_en.eq(self.positions.ready)]

        # ---- request and the sequential mode
        # A request is taken into registers; the next cycle (``starting``) derives the first draw's j
        # and n from them, so no carry chain runs from the requester's registers through to ours.
        starting = Signal()
        fanout = Signal(16)
        fanout_less1 = Signal(16)
        m.d.comb += self.request.ready.eq(~busy)
        with m.If(self.request.valid & self.request.ready):
            req = self.request.payload
            m.d.sync += [key.eq(req.key), degree.eq(req.degree), last_j.eq(req.degree - 1), count.eq(0),
                         fanout.eq(req.fanout), fanout_less1.eq(req.fanout - 1),
                         chosen_valid.eq(0), sequential.eq(0), s_valid.eq(0), *(v.eq(0) for v in valids),
                         threshold_known.eq(0), busy.eq(1), starting.eq(1), next_c.eq(0)]
        with m.If(starting):
            m.d.sync += [starting.eq(0), floyd.eq(degree > fanout),
                         next_j.eq(degree - fanout), next_n.eq(degree - fanout_less1)]
        with m.If(busy & ~starting & ~floyd):
            m.d.comb += [out.w_en.eq(1), out.w_data.eq(sequential)]
            with m.If(out.w_rdy):
                m.d.sync += sequential.eq(sequential + 1)
                with m.If(sequential == last_j):
                    m.d.sync += busy.eq(0)

        # ---- Floyd: output of the decision stage
        with m.If(busy & ~starting & floyd):
            m.d.comb += [out.w_en.eq(emit), out.w_data.eq(position)]
            with m.If(emit & out.w_rdy):
                with m.Switch(count):
                    for i in range(self.max_fanout):
                        with m.Case(i):
                            m.d.sync += chosen[i].eq(position)
                m.d.sync += [count.eq(count + 1), chosen_valid.eq(Cat(1, chosen_valid[:-1])),
                             threshold_known.eq(0)]
                with m.If(s_last):
                    m.d.sync += busy.eq(0)

            # slow path: the exact threshold for the decision stage's range
            with m.If(s_valid & s_needs & ~threshold_known & ~threshold_pending):
                m.d.comb += [threshold.i.valid.eq(1), threshold.i.payload.eq(s_n)]
                with m.If(threshold.i.ready):
                    m.d.sync += threshold_pending.eq(1)
            m.d.comb += threshold.o.ready.eq(threshold_pending)
            with m.If(threshold.o.valid & threshold_pending):
                m.d.sync += [threshold_pending.eq(0), threshold_known.eq(1),
                             threshold_rejects.eq(low < threshold.o.payload)]

            with m.If(reject):
                # flush the speculative draws and redo position j from the next draw index
                m.d.sync += [s_valid.eq(0), *(v.eq(0) for v in valids),
                             threshold_known.eq(0), next_j.eq(s_j), next_n.eq(s_n), next_c.eq(s_c + 1)]
            with m.Elif(advance):
                m.d.comb += issue.eq(next_j != degree)
                with m.If(issue):
                    m.d.sync += [next_j.eq(next_j + 1), next_n.eq(next_n + 1), next_c.eq(next_c + 1)]
        return m
