"""Compares of a wide value against a narrow bound, without a carry chain as wide as the value; and
a wide equality as a carry chain.

``value <= bound`` for a 64-bit ``value`` and a 16-bit ``bound`` is a 64-bit subtraction if written
as such (a carry chain in front of whatever the result enables). When the bound is narrow, the same
answer is "the value's high bits are zero, and its low bits compare": a wide OR (a LUT tree, a few
levels) beside a short carry chain.

A wide equality, the other way round, is a LUT tree of a few levels (four for 58 bits); on the ECP5
proxy :func:`carry_equal` makes it an AND chain through the slices' carry logic instead (43 ps a
slice, two bits each).
"""

from __future__ import annotations

from amaranth.hdl import Const, Instance, Module, Signal, Value

__all__ = ["at_most", "below", "carry_equal"]

#: A ``CCU2C`` half's table: its LUT4 (and the LUT2 of its A and B, the table's low four rows) is
#: A == B, whatever C and D.
_EQUAL_HALF = sum(1 << row for row in range(16) if (row & 1) == (row >> 1 & 1))


def _split(value, bound):
    value = Value.cast(value)
    bound = Const(bound) if isinstance(bound, int) else Value.cast(bound)
    bits = len(bound)
    if bits >= len(value):
        return Const(1), value, bound
    return value[bits:] == 0, value[:bits], bound


def at_most(value, bound):
    """``value <= bound``, with ``bound`` (a value or a non-negative int) narrower than ``value``."""
    high_zero, low, bound = _split(value, bound)
    return high_zero & (low <= bound)


def below(value, bound):
    """``value < bound``, with ``bound`` (a value or a non-negative int) narrower than ``value``."""
    high_zero, low, bound = _split(value, bound)
    return high_zero & (low < bound)


def carry_equal(m: Module, platform, name: str, a, b):
    """``a == b``: on the ECP5 proxy platform a chain of ``CCU2C`` instances named ``<name><i>_ccu``,
    two bits a slice, whose carry out is an AND of the bits' equalities (the last slice's carry out
    read in the fabric, as Yosys's own adders read theirs; a readout slice of constant inputs made
    nextpnr-ecp5 stop in its carry packing); elsewhere the compare itself.

    A ``CCU2C`` half passes its carry in when its LUT4 is 1, and gives its LUT2 of A and B (the
    LUT4's rows with C = D = 0) otherwise (``cout = LUT4 ? cin : LUT2``, INJECT1 off). With both the
    bits' equality, the carry out is the carry in AND the equality: the chain starts at 1.
    """
    a, b = Value.cast(a), Value.cast(b)
    if len(a) != len(b):
        raise ValueError(f"carry_equal: {name} compares {len(a)} bits with {len(b)}")
    if getattr(platform, "family", None) != "ecp5":
        return a == b
    bits = len(a) + len(a) % 2
    a_bits = [a[i] if i < len(a) else Const(0) for i in range(bits)]
    b_bits = [b[i] if i < len(b) else Const(0) for i in range(bits)]
    carry = Const(1)
    for cell in range(bits // 2):
        carry_out = Signal(name=f"{name}_carry{cell}")
        m.submodules[f"{name}{cell}_ccu"] = Instance(
            "CCU2C", p_INIT0=Const(_EQUAL_HALF, 16), p_INIT1=Const(_EQUAL_HALF, 16), p_INJECT1_0="NO",
            p_INJECT1_1="NO", i_CIN=carry, i_A0=a_bits[2 * cell], i_B0=b_bits[2 * cell], i_C0=0, i_D0=0,
            i_A1=a_bits[2 * cell + 1], i_B1=b_bits[2 * cell + 1], i_C1=0, i_D1=0, o_COUT=carry_out)
        carry = carry_out
    return carry
