"""Counter-based RNG pieces in gateware (docs/spec.md section 1; reference ``smartsage.spec.rng``).

``mix32`` builds the combinational lowbias32 round (two 32x32 multiplications), for reference and
tests; the gateware uses :func:`mix32_pipelined`, the same function over :data:`MIX32_LATENCY`
register stages with no multiplier (each constant multiplication an adder tree over the constant's
signed digits, one carry chain per stage), and :func:`multiply_pipelined` for the bounded draw's
32x32 product (four registered 16x16 products, a DSP each, then two adds). The RNG is counter
based, so latency never changes a result. :class:`RejectionThreshold` computes Lemire's rejection
threshold ``(2^32 - n) mod n`` with a small sequential divider: it is needed only when the low word
of the product is below ``n`` (probability n / 2^32), so it lives on a rare slow path.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from smartsage.spec import rng as spec_rng

from .multiply import product16, registered

__all__ = ["mix32", "mix32_first_shift", "mix32_pipelined", "multiply_pipelined", "csd_digits", "MIX32_LATENCY",
           "MULTIPLY_LATENCY", "RejectionThreshold"]

#: Register stages of :func:`mix32_pipelined`: four adder levels per constant multiplication.
MIX32_LATENCY = 8
#: Register stages of :func:`multiply_pipelined`: operands, 16x16 products, middle sum, whole sum.
MULTIPLY_LATENCY = 4


def mix32(x: Value) -> Value:
    """lowbias32 of a 32-bit value, combinational (bit-exact with ``smartsage.spec.rng.mix32``)."""
    x = Value.cast(x)[:32]
    x = x ^ (x >> 16)
    x = (x * spec_rng.MIX_MUL1)[:32]
    x = x ^ (x >> 15)
    x = (x * spec_rng.MIX_MUL2)[:32]
    return x ^ (x >> 16)


def csd_digits(constant: int, width: int = 32) -> list[tuple[int, int]]:
    """The canonical signed-digit form of ``constant`` modulo ``2^width``: (shift, +1 or -1) pairs,
    no two adjacent, most significant first, so that ``sum(sign << shift) == constant (mod 2^width)``
    with the fewest non-zero digits. The first digit is +1 unless the constant is close below
    ``2^width`` (0xFFFFFFFF is -1)."""
    digits, c, shift = [], constant % (1 << width), 0
    while c and shift < width:
        if c & 1:
            digit = 2 - (c & 3)
            digits.append((shift, digit))
            c -= digit
        c >>= 1
        shift += 1
    digits.reverse()
    if digits and digits[0] == (width - 1, -1):  # -2^(width-1) is +2^(width-1) modulo 2^width
        digits[0] = (digits[0][0], 1)
    return digits


def _constant_product_low(m, a, constant, enable, name, post=None):
    """``(a * constant) mod 2^32`` as a registered adder tree over the constant's signed digits (12 and
    13 of them for lowbias32's constants: four levels, one 32-bit carry chain per level and stage).
    Each node is (sign, value) with the contribution ``sign * value``; a pair of like signs adds, of
    unlike signs subtracts, so no negation is needed when the first digit is +1 (both constants').
    ``post`` is applied to the sum before the last register (the xor-shift that follows it)."""
    nodes = [(sign, (a << shift)[:32]) for shift, sign in csd_digits(constant)]
    level = 0
    while len(nodes) > 1:
        last = len(nodes) <= 2
        pairs = []
        for i in range(0, len(nodes) - 1, 2):
            (s1, v1), (s2, v2) = nodes[i], nodes[i + 1]
            value = (v1 + v2 if s1 == s2 else v1 - v2)[:32]
            if last and post is not None:
                value = post(value)
            pairs.append((s1, registered(m, value, enable, f"{name}_l{level}_{i // 2}")))
        if len(nodes) % 2:
            pairs.append((nodes[-1][0], registered(m, nodes[-1][1], enable, f"{name}_l{level}_pass")))
        nodes, level = pairs, level + 1
    assert nodes[0][0] == 1 and level == MIX32_LATENCY // 2, (constant, level)
    return nodes[0][1]


def mix32_first_shift(x: Value) -> Value:
    """lowbias32's first step, ``x ^ (x >> 16)`` (one LUT per bit in front of the first adder stage)."""
    x = Value.cast(x)[:32]
    return x ^ (x >> 16)


def mix32_pipelined(m: Module, x: Value, enable: Value, name: str = "mix", shifted: bool = False,
                    shift_out_with=None) -> Signal:
    """lowbias32 of ``x`` (bit-exact with ``mix32``), :data:`MIX32_LATENCY` cycles later: every stage
    moves when ``enable`` is high (the caller's pipeline enable), so the result belongs to the ``x``
    presented :data:`MIX32_LATENCY` enabled cycles before. No multiplier: each constant multiplication
    is a four-level adder tree over the constant's signed digits (:func:`csd_digits`), one adder per
    stage; each xor-shift shares a stage with the adder next to it. With ``shifted`` the caller
    presents ``mix32_first_shift(x)`` instead of ``x`` (a register of its own, so that the first
    adders start at flip-flops).

    With ``shift_out_with`` (a value, or a constant, presented in the cycle the last stage loads:
    the last enabled cycle before the result's) the result is
    ``mix32_first_shift(mix32(x) ^ shift_out_with)``, the ``shifted`` input of a next mix32 of
    ``mix32(x) ^ shift_out_with``: the xors fold into the last stage's one LUT per bit (bit i below
    16 is ``v[i] ^ w[i] ^ w[i + 16]`` of the last sum v, not ``v[i] ^ v[i + 16]``), so the next
    mix32's first adders start at flip-flops (a register -> the xors -> thirteen adder inputs ->
    the adders was 6.9-7.7 ns between the prefetcher's two node-key rounds on the ECP5 proxy)."""
    x = Value.cast(x)[:32]
    first = _constant_product_low(m, x if shifted else mix32_first_shift(x), spec_rng.MIX_MUL1, enable,
                                  f"{name}_m1")
    if shift_out_with is None:
        def post(v):
            return v ^ (v >> 16)
    else:
        def post(v):
            return mix32_first_shift(v ^ (v >> 16) ^ shift_out_with)
    return _constant_product_low(m, first ^ (first >> 15), spec_rng.MIX_MUL2, enable, f"{name}_m2", post=post)


def multiply_pipelined(m: Module, a: Value, b: Value, enable: Value, name: str = "mul",
                       platform=None) -> Signal:
    """The 64-bit product of two 32-bit values, :data:`MULTIPLY_LATENCY` enabled cycles later: the four
    16x16 products (registered operands and product: :func:`~smartsage.rtl.multiply.product16`, a DSP each), then the
    middle terms summed, then the whole as one 64-bit add (the low and high products do not overlap)."""
    a, b = Value.cast(a)[:32], Value.cast(b)[:32]
    ll = product16(m, a[:16], b[:16], enable, f"{name}_ll", platform)
    lh = product16(m, a[:16], b[16:32], enable, f"{name}_lh", platform)
    hl = product16(m, a[16:32], b[:16], enable, f"{name}_hl", platform)
    hh = product16(m, a[16:32], b[16:32], enable, f"{name}_hh", platform)
    middle = registered(m, lh + hl, enable, f"{name}_mid")
    outer = registered(m, Cat(ll, hh), enable, f"{name}_outer")
    return registered(m, (outer + (middle << 16))[:64], enable, f"{name}_out")


class RejectionThreshold(wiring.Component):
    """``(2^32 - n) mod n`` for 1 <= n < 2^32: a non-restoring divider, one quotient bit per cycle.

    Each step adds or subtracts the divisor by the sign of the partial remainder, a register, so a
    step is one carry chain behind one flip-flop (a restoring divider's step also selects between
    the trial and the difference by the chain's carry-out); a last cycle adds the divisor back to a
    negative remainder, into the output register.

    Members
    -------
    i : ``In(stream.Signature(32))``
        The range ``n``.
    o : ``Out(stream.Signature(32))``
        The threshold, 35 cycles after ``i`` was taken (one more than a restoring divider: the correction).
    """

    def __init__(self):
        super().__init__({"i": In(stream.Signature(32)), "o": Out(stream.Signature(32))})

    def elaborate(self, platform):
        m = Module()
        # (the operands and the step follow the input while idle, the result is read only while
        # ``o.valid``: no reset reaches them, only the three flags)
        divisor = Signal(32, reset_less=True)
        dividend = Signal(32, reset_less=True)
        partial = Signal(signed(34), reset_less=True)   # the partial remainder, in [-n, n)
        result = Signal(32, reset_less=True)   # (not "threshold": the sampler names the instance so)
        step = Signal(range(32), reset_less=True)
        busy = Signal()
        correcting = Signal()

        # while idle (nothing computed or waiting to be taken) the operands follow the input every
        # cycle, so taking it sets ``busy`` only: the handshake enables one register, not a hundred
        m.d.comb += self.i.ready.eq(~busy & ~correcting & ~self.o.valid)
        with m.If(self.i.ready):
            m.d.sync += [
                divisor.eq(self.i.payload),
                dividend.eq(-self.i.payload),  # 2^32 - n, modulo 2^32
                partial.eq(0),
                step.eq(0),
            ]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += busy.eq(1)
        with m.If(busy):
            # 2R + the next dividend bit, minus n when R >= 0, plus n when R < 0: the divisor's bits
            # inverted by the sign and the carry-in entered as a low bit on both operands (one chain)
            subtract = ~partial[-1]
            trial = Cat(dividend[31], partial)
            operand = Cat(divisor, Const(0, 3)) ^ subtract.replicate(35)
            m.d.sync += [partial.eq((Cat(subtract, trial) + Cat(subtract, operand))[1:35]),
                         dividend.eq(dividend << 1), step.eq(step + 1)]
            with m.If(step == 31):
                m.d.sync += [busy.eq(0), correcting.eq(1)]
        with m.If(correcting):
            m.d.sync += [result.eq(Mux(partial[-1], partial + divisor, partial)[:32]),
                         correcting.eq(0), self.o.valid.eq(1)]
        m.d.comb += self.o.payload.eq(result)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m
