"""Counter-based RNG pieces in gateware (docs/spec.md section 1; reference ``smartsage.spec.rng``).

``mix32`` builds the combinational lowbias32 round (two 32x32 multipliers); callers register its
output, one round per pipeline stage. :class:`RejectionThreshold` computes Lemire's rejection
threshold ``(2^32 - n) mod n`` with a small sequential divider: it is needed only when the low word
of the product is below ``n`` (probability n / 2^32), so it lives on a rare slow path.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from smartsage.spec import rng as spec_rng

__all__ = ["mix32", "RejectionThreshold"]


def mix32(x: Value) -> Value:
    """lowbias32 of a 32-bit value, combinational (bit-exact with ``smartsage.spec.rng.mix32``)."""
    x = Value.cast(x)[:32]
    x = x ^ (x >> 16)
    x = (x * spec_rng.MIX_MUL1)[:32]
    x = x ^ (x >> 15)
    x = (x * spec_rng.MIX_MUL2)[:32]
    return x ^ (x >> 16)


class RejectionThreshold(wiring.Component):
    """``(2^32 - n) mod n`` for 1 <= n < 2^32: a restoring divider, one quotient bit per cycle.

    Members
    -------
    i : ``In(stream.Signature(32))``
        The range ``n``.
    o : ``Out(stream.Signature(32))``
        The threshold, 34 cycles after ``i`` was taken.
    """

    def __init__(self):
        super().__init__({"i": In(stream.Signature(32)), "o": Out(stream.Signature(32))})

    def elaborate(self, platform):
        m = Module()
        divisor = Signal(32)
        dividend = Signal(32)
        remainder = Signal(33)
        step = Signal(range(33))
        busy = Signal()

        m.d.comb += self.i.ready.eq(~busy & ~self.o.valid)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [
                divisor.eq(self.i.payload),
                dividend.eq(-self.i.payload),  # 2^32 - n, modulo 2^32
                remainder.eq(0),
                step.eq(0),
                busy.eq(1),
            ]
        with m.If(busy):
            trial = Signal(34)
            m.d.comb += trial.eq(Value.cast(remainder[:32]).shift_left(1) | dividend[31])
            with m.If(trial >= divisor):
                m.d.sync += remainder.eq(trial - divisor)
            with m.Else():
                m.d.sync += remainder.eq(trial)
            m.d.sync += [dividend.eq(dividend << 1), step.eq(step + 1)]
            with m.If(step == 31):
                m.d.sync += [busy.eq(0), self.o.valid.eq(1)]
        m.d.comb += self.o.payload.eq(remainder[:32])
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m
