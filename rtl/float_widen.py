"""Exact widening of fp16 and bf16 feature elements to binary32.

Every binary16 and bfloat16 value is exactly representable in binary32 (docs/spec.md, section 4),
so widening never rounds: bf16 is the top half of a binary32 pattern, and fp16 rebiases its exponent
(15 -> 127) and normalises its subnormals (a leading-zero count of the 10-bit fraction) into binary32
normals. Infinities stay infinities and NaNs stay NaNs. fp32 elements pass through unchanged.

With ``canonical_nan`` (the default) a NaN becomes the canonical quiet NaN ``0x7FC00000``, which
is what the aggregation writes for any NaN result (the NaN rule) and what the first element of a sum
(``acc = x(u_0)``, no addition) must already be. Without it, a NaN keeps its sign and payload, bit
for bit as ``numpy``'s ``astype(np.float32)`` (a signalling NaN stays signalling).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from smartsage.spec.image import FeatureDtype

from .fp32_adder import CANONICAL_NAN, leading_zero_count

__all__ = ["FloatWiden", "widen_to_fp32"]

_FLOAT_DTYPES = (FeatureDtype.FP32, FeatureDtype.FP16, FeatureDtype.BF16)


def _check_dtype(dtype) -> FeatureDtype:
    try:
        parsed = FeatureDtype.parse(dtype)
    except ValueError:
        raise ValueError(f"Widening needs a floating-point feature dtype (fp32, fp16, bf16), "
                         f"not {dtype!r}") from None
    if parsed not in _FLOAT_DTYPES:
        raise ValueError(f"Widening needs a floating-point feature dtype (fp32, fp16, bf16), "
                         f"not {parsed.cli_name}")
    return parsed


def widen_to_fp32(m: Module, value: Value, dtype, *, canonical_nan: bool = True,
                  name: str = "widen") -> Value:
    """Binary32 bit pattern of the element ``value`` of ``dtype``, combinational logic in ``m``.

    Parameters
    ----------
    m : Module
        Module that receives the logic (comb domain).
    value : Value
        The element's bit pattern: 16 bits for fp16 and bf16, 32 for fp32.
    dtype : FeatureDtype or str
        ``fp32``, ``fp16`` or ``bf16``.
    canonical_nan : bool
        Write every NaN as ``0x7FC00000`` (else keep its sign and payload as numpy does).
    name : str
        Prefix of the signal names.

    Returns
    -------
    Value
        32-bit unsigned, the exact binary32 value.

    Raises
    ------
    ValueError
        If ``dtype`` is not a floating-point feature dtype, or ``value`` has the wrong width.
    """
    dtype = _check_dtype(dtype)
    value = Value.cast(value)
    width = 8 * dtype.itemsize
    if len(value) != width:
        raise ValueError(f"A {dtype.cli_name} element is {width} bits wide, not {len(value)}")

    if dtype is FeatureDtype.FP32:
        widened = value
        is_nan = (value[23:31] == 0xFF) & (value[:23] != 0)
    elif dtype is FeatureDtype.BF16:
        widened = Cat(Const(0, 16), value)
        is_nan = (value[7:15] == 0xFF) & (value[:7] != 0)
    else:
        sign, exp, frac = value[15], value[10:15], value[:10]
        # Subnormal: frac * 2^-24; its highest one becomes the hidden bit of a binary32 normal.
        lz = leading_zero_count(m, frac, name=f"{name}_lzc")
        sub_frac = (frac << (lz + 1))[:10]
        sub_exp = (127 - 15) - lz   # frac * 2^-24 = 1.f * 2^(-15 - lz): 2^-24 (lz = 9) gets field 103
        magnitude = Mux(exp == 0x1F, Cat(Const(0, 13), frac, Const(0xFF, 8)),
                        Mux(exp == 0,
                            Mux(frac == 0, 0, Cat(Const(0, 13), sub_frac, sub_exp[:8])),
                            Cat(Const(0, 13), frac, (exp + (127 - 15))[:8])))
        widened = Cat(Value.cast(magnitude)[:31], sign)
        is_nan = (exp == 0x1F) & (frac != 0)
    if canonical_nan:
        widened = Mux(is_nan, CANONICAL_NAN, widened)
    result = Signal(32, name=f"{name}_fp32")
    m.d.comb += result.eq(widened)
    return result


class FloatWiden(wiring.Component):
    """Combinational exact widening of one feature element to binary32.

    Parameters
    ----------
    dtype : FeatureDtype or str
        Element type: ``fp32`` (passed through), ``fp16`` or ``bf16``.
    canonical_nan : bool
        Write every NaN as the canonical quiet NaN ``0x7FC00000`` (default); else keep sign and
        payload bit for bit as ``numpy``'s ``astype(np.float32)``.

    Members
    -------
    i : ``In(16)`` (``In(32)`` for fp32)
        The element's bit pattern.
    o : ``Out(32)``
        The binary32 bit pattern of the same value.

    Raises
    ------
    ValueError
        If ``dtype`` is not a floating-point feature dtype.
    TypeError
        If ``canonical_nan`` is not a bool.
    """

    def __init__(self, dtype, *, canonical_nan: bool = True):
        try:
            self._dtype = _check_dtype(dtype)
            if not isinstance(canonical_nan, bool):
                raise TypeError(f"canonical_nan must be a bool, not {canonical_nan!r}")
        except (TypeError, ValueError):
            self._MustUse__silence = True   # a component never built is not an "unused" one
            raise
        self._canonical_nan = canonical_nan
        super().__init__({"i": In(8 * self._dtype.itemsize), "o": Out(32)})

    @property
    def dtype(self) -> FeatureDtype:
        """Element type of the input."""
        return self._dtype

    @property
    def canonical_nan(self) -> bool:
        """Whether NaNs are written as ``0x7FC00000``."""
        return self._canonical_nan

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.o.eq(widen_to_fp32(m, self.i, self._dtype, canonical_nan=self._canonical_nan))
        return m
