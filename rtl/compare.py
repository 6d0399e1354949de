"""Compares of a wide value against a narrow bound, without a carry chain as wide as the value.

``value <= bound`` for a 64-bit ``value`` and a 16-bit ``bound`` is a 64-bit subtraction if written
as such (a carry chain in front of whatever the result enables). When the bound is narrow, the same
answer is "the value's high bits are zero, and its low bits compare": a wide OR (a LUT tree, a few
levels) beside a short carry chain.
"""

from __future__ import annotations

from amaranth.hdl import Const, Value

__all__ = ["at_most", "below"]


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
