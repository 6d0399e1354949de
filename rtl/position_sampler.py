"""Edge positions of one node's sample: all of them, or Robert Floyd's k-subset (docs/spec.md s. 2)."""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from smartsage.spec import rng as spec_rng
from smartsage.spec.descriptor import SPEC_MAX_FANOUT

from .rng import RejectionThreshold, mix32

__all__ = ["PositionRequest", "PositionSampler"]

#: One node to sample: its RNG key H_v, its degree d (>= 1) and the hop's fanout k.
PositionRequest = data.StructLayout({"key": 32, "degree": 32, "fanout": 16})


class PositionSampler(wiring.Component):
    """Emits the ordered edge positions of one node's sample, bit-exact with the golden model.

    d <= k: positions 0..d-1 (no draws). d > k: for j = d-k .. d-1, t = bounded(j + 1) (Lemire's
    multiply-shift with exact rejection, draw indices from 0), then ``j if t in S else t`` is
    appended to S (Floyd). S is a ``max_fanout``-entry register set compared in parallel.

    The draws are pipelined, one position per cycle in steady state: stage 1 mixes ``H_v ^ c``,
    stage 2 mixes in the draw salt, stage 3 multiplies by ``j + 1``, stage 4 accepts and tests
    membership. Draws are issued speculatively with consecutive indices c (no rejection); when stage
    4 finds ``low < n`` it stalls for the exact threshold (a ~34-cycle divider, probability n / 2^32
    per draw) and, on a rejection, flushes stages 1-3 and reissues from (j, c + 1).

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

        key = Signal(32)
        degree = Signal(32)
        sequential = Signal(32)
        busy = Signal()
        floyd = Signal()
        next_j = Signal(33)     # next position index j to issue a draw for
        next_c = Signal(32)     # its draw index
        chosen = Array(Signal(32, name=f"chosen{i}") for i in range(self.max_fanout))
        count = Signal(range(self.max_fanout + 1))

        # pipeline registers: valid, j, c per stage
        s1_valid, s2_valid, s3_valid, s4_valid = (Signal(name=f"s{i}_valid") for i in range(1, 5))
        s1_j, s2_j, s3_j, s4_j = (Signal(32, name=f"s{i}_j") for i in range(1, 5))
        s1_c, s2_c, s3_c, s4_c = (Signal(32, name=f"s{i}_c") for i in range(1, 5))
        s1_x = Signal(32)
        s2_r = Signal(32)
        s3_m = Signal(64)
        s4_m = Signal(64)
        threshold_known = Signal()
        threshold_value = Signal(32)
        threshold_pending = Signal()

        n4 = (s4_j + 1)[:32]
        low = s4_m[:32]
        candidate = s4_m[32:]
        needs_threshold = low < n4
        hits = [(chosen[i] == candidate) & (count > i) for i in range(self.max_fanout)]
        hit = Signal()
        m.d.comb += hit.eq(Cat(*hits).any())
        position = Mux(hit, s4_j, candidate)
        reject = Signal()
        decided = Signal()   # stage 4 holds a draw whose fate is known
        m.d.comb += [
            decided.eq(s4_valid & (~needs_threshold | threshold_known)),
            reject.eq(decided & needs_threshold & (low < threshold_value)),
        ]
        emit = Signal()
        m.d.comb += emit.eq(decided & ~reject)
        advance = Signal()   # stages move forward this cycle
        m.d.comb += advance.eq(~s4_valid | (emit & self.positions.ready))

        # ---- request and the sequential mode
        m.d.comb += self.request.ready.eq(~busy)
        with m.If(self.request.valid & self.request.ready):
            req = self.request.payload
            m.d.sync += [key.eq(req.key), degree.eq(req.degree), count.eq(0), sequential.eq(0),
                         s1_valid.eq(0), s2_valid.eq(0), s3_valid.eq(0), s4_valid.eq(0),
                         threshold_known.eq(0),
                         busy.eq(1), floyd.eq(req.degree > req.fanout),
                         next_j.eq(req.degree - req.fanout), next_c.eq(0)]
        with m.If(busy & ~floyd):
            m.d.comb += [self.positions.valid.eq(1), self.positions.payload.eq(sequential)]
            with m.If(self.positions.ready):
                m.d.sync += sequential.eq(sequential + 1)
                with m.If(sequential == degree - 1):
                    m.d.sync += busy.eq(0)

        # ---- Floyd: output of stage 4
        with m.If(busy & floyd):
            m.d.comb += [self.positions.valid.eq(emit), self.positions.payload.eq(position)]
            with m.If(emit & self.positions.ready):
                with m.Switch(count):
                    for i in range(self.max_fanout):
                        with m.Case(i):
                            m.d.sync += chosen[i].eq(position)
                m.d.sync += [count.eq(count + 1), threshold_known.eq(0)]
                with m.If(s4_j == degree - 1):
                    m.d.sync += busy.eq(0)

            # slow path: the exact threshold for stage 4's range
            with m.If(s4_valid & needs_threshold & ~threshold_known & ~threshold_pending):
                m.d.comb += [threshold.i.valid.eq(1), threshold.i.payload.eq(n4)]
                with m.If(threshold.i.ready):
                    m.d.sync += threshold_pending.eq(1)
            m.d.comb += threshold.o.ready.eq(threshold_pending)
            with m.If(threshold.o.valid & threshold_pending):
                m.d.sync += [threshold_pending.eq(0), threshold_known.eq(1),
                             threshold_value.eq(threshold.o.payload)]

            with m.If(reject):
                # flush the speculative draws and redo position j from the next draw index
                m.d.sync += [s1_valid.eq(0), s2_valid.eq(0), s3_valid.eq(0), s4_valid.eq(0),
                             threshold_known.eq(0), next_j.eq(s4_j), next_c.eq(s4_c + 1)]
            with m.Elif(advance):
                issue = next_j < degree
                m.d.sync += [
                    s1_valid.eq(issue), s1_j.eq(next_j), s1_c.eq(next_c), s1_x.eq(mix32(key ^ next_c)),
                    s2_valid.eq(s1_valid), s2_j.eq(s1_j), s2_c.eq(s1_c),
                    s2_r.eq(mix32(s1_x ^ spec_rng.DRAW_SALT)),
                    s3_valid.eq(s2_valid), s3_j.eq(s2_j), s3_c.eq(s2_c), s3_m.eq(s2_r * (s2_j + 1)[:32]),
                    s4_valid.eq(s3_valid), s4_j.eq(s3_j), s4_c.eq(s3_c), s4_m.eq(s3_m),
                ]
                with m.If(issue):
                    m.d.sync += [next_j.eq(next_j + 1), next_c.eq(next_c + 1)]
        return m
