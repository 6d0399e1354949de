"""Pipelined IEEE-754 binary32 adder.

The adder behind the exact near-storage aggregation (docs/spec.md, section 4): one addition per
cycle, round to nearest even, subnormal inputs and outputs kept (no flush to zero), signed zeros,
infinities and overflow per IEEE-754, and every NaN result written as the canonical quiet NaN
``0x7FC00000``. See docs/fp32-adder.md for the stage contents and the verification.

The datapath is six combinational steps; a register is placed after the steps listed in
:data:`STAGE_BOUNDARIES` for the chosen latency, so the latency (in cycles, from an input beat to its
result beat) is exactly the ``latency`` parameter.

==========  ==========================================================================================
step        contents
==========  ==========================================================================================
1 unpack    classify (zero, subnormal, infinity, NaN), compare magnitudes and swap so that the operand
            of larger magnitude comes first, exponent difference, special-value result (NaN, infinity)
2 align     shift the smaller significand right by the exponent difference (clamped at 27), OR-ing
            the bits shifted out into a sticky bit kept in the least significant position
3 add       27-bit (24 + guard, round, sticky) add or subtract, giving a 28-bit sum with carry
4 lzc       leading-zero count of the sum (tree), normalisation shift clamped so the exponent does not
            go below the subnormal exponent, exponent of the result before rounding
5 shift     normalisation: one right shift on carry (sticky kept), else a left shift by the count
6 round     round to nearest even; the increment ripples from the fraction into the exponent, which
            also gives subnormal -> normal and largest finite -> infinity; pack, special values, zeros
==========  ==========================================================================================
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = [
    "CANONICAL_NAN", "DEFAULT_LATENCY", "MAX_LATENCY", "STAGE_BOUNDARIES",
    "Fp32Adder", "adder_input_layout", "adder_output_layout", "leading_zero_count",
]

#: The one NaN the adder produces (docs/spec.md, section 4: the NaN rule).
CANONICAL_NAN = 0x7FC00000

#: For each supported latency, the steps (1..6, see the module docstring) followed by a register.
#: The last step is always registered, so the result port is a register output.
STAGE_BOUNDARIES: dict[int, tuple[int, ...]] = {
    1: (6,),
    2: (3, 6),
    3: (2, 4, 6),
    4: (2, 3, 5, 6),
    5: (1, 2, 3, 5, 6),
    6: (1, 2, 3, 4, 5, 6),
}

MAX_LATENCY = max(STAGE_BOUNDARIES)

#: The default: steps 4 (leading-zero count) and 5 (normalisation shift) share a stage.
DEFAULT_LATENCY = 5

_FRAC_BITS = 23
_SIG_BITS = _FRAC_BITS + 1          # significand with its hidden bit
_EXT_BITS = _SIG_BITS + 3           # significand, guard, round and sticky position
_EXP_MAX = 0xFF


def adder_input_layout(tag_width: int) -> data.StructLayout:
    """Payload of the adder's input stream: operands ``a``, ``b`` (binary32 bit patterns) and ``tag``."""
    return data.StructLayout({"a": unsigned(32), "b": unsigned(32), "tag": unsigned(tag_width)})


def adder_output_layout(tag_width: int) -> data.StructLayout:
    """Payload of the adder's output stream: ``sum`` (binary32 bit pattern) and the input's ``tag``."""
    return data.StructLayout({"sum": unsigned(32), "tag": unsigned(tag_width)})


def leading_zero_count(m: Module, value: Value, *, name: str = "lzc") -> Value:
    """Count of leading zeros of ``value``, built as a balanced tree of combinational signals in ``m``.

    Parameters
    ----------
    m : Module
        Module that receives the tree's signals (comb domain).
    value : Value
        The operand; its most significant bit is the first one counted.
    name : str
        Prefix of the tree's signal names.

    Returns
    -------
    Value
        Unsigned, ``len(value)`` when ``value`` is zero, else the number of zeros above the highest
        one. Its width is ``ceil(log2(len(value) + 1))`` or more.

    Raises
    ------
    ValueError
        If ``value`` has width 0.
    """
    value = Value.cast(value)
    width = len(value)
    if width == 0:
        raise ValueError("Leading-zero count needs an operand of width at least 1, not 0")
    size = 1
    while size < width + 1:
        size *= 2
    # Ones below the operand bound the count by `width` (the count of an all-zero operand).
    padded = Cat(Const((1 << (size - width)) - 1, size - width), value)

    def count(bits: Value, path: str) -> tuple[Value, Value]:
        # (all bits zero, leading-zero count of `bits`, width log2(len(bits))). Every node is a
        # signal: each is used twice above it, and a shared expression would be lowered twice.
        if len(bits) == 1:
            return ~bits[0], Const(0, 0)
        half = len(bits) // 2
        low_zero, low_count = count(bits[:half], path + "l")
        high_zero, high_count = count(bits[half:], path + "h")
        zero = Signal(name=f"{name}_zero{path}")
        counted = Signal(len(high_count) + 1, name=f"{name}_count{path}")
        m.d.comb += [
            zero.eq(high_zero & low_zero),
            counted.eq(Mux(high_zero, Cat(low_count, Const(1, 1)), Cat(high_count, Const(0, 1)))),
        ]
        return zero, counted

    return count(padded, "_")[1]


class Fp32Adder(wiring.Component):
    """Fully pipelined IEEE-754 binary32 adder, one addition per cycle.

    Exact IEEE-754 addition with round to nearest, ties to even: subnormal inputs and results
    (no flush to zero), ``x + (-x) = +0``, ``-0 + -0 = -0``, ``inf + -inf = NaN``, overflow to
    infinity. Every NaN result, whatever the operands' signs and payloads (quiet or signalling),
    is the canonical quiet NaN ``0x7FC00000`` (docs/spec.md, section 4).

    The streams have no backpressure (``always_ready``): a beat enters whenever ``i.valid`` is high
    and its result leaves exactly ``latency`` cycles later with ``o.valid`` high and the same
    ``tag``. The consumer must take every result beat; a scheduler keeps that true by issuing only
    what it can accept ``latency`` cycles later (docs/fp32-adder.md). The tag is side-band data the
    adder carries unchanged, e.g. the feature lane whose accumulator the result belongs to.

    Parameters
    ----------
    latency : int
        Pipeline depth in cycles, 1 to 6 (default 5); the registers sit after the steps given in
        :data:`STAGE_BOUNDARIES`.
    tag_width : int
        Width of the side-band tag carried from input to output (0 for none).

    Members
    -------
    i : ``In(stream.Signature(adder_input_layout(tag_width), always_ready=True))``
        Operands ``a`` and ``b`` (binary32 bit patterns) and ``tag``.
    o : ``Out(stream.Signature(adder_output_layout(tag_width), always_ready=True))``
        ``sum`` (binary32 bit pattern of ``a + b``) and the input's ``tag``.

    Raises
    ------
    TypeError
        If ``latency`` or ``tag_width`` is not an integer.
    ValueError
        If ``latency`` is outside 1..6 or ``tag_width`` is negative.
    """

    def __init__(self, *, latency: int = DEFAULT_LATENCY, tag_width: int = 0):
        try:
            self._check_parameters(latency, tag_width)
        except (TypeError, ValueError):
            self._MustUse__silence = True   # a component never built is not an "unused" one
            raise
        self._latency = latency
        self._tag_width = tag_width
        super().__init__({
            "i": In(stream.Signature(adder_input_layout(tag_width), always_ready=True)),
            "o": Out(stream.Signature(adder_output_layout(tag_width), always_ready=True)),
        })

    @staticmethod
    def _check_parameters(latency, tag_width):
        if not isinstance(latency, int) or isinstance(latency, bool):
            raise TypeError(f"Adder latency must be an integer, not {latency!r}")
        if latency not in STAGE_BOUNDARIES:
            raise ValueError(f"Adder latency must be between 1 and {MAX_LATENCY} cycles, not {latency}")
        if not isinstance(tag_width, int) or isinstance(tag_width, bool):
            raise TypeError(f"Tag width must be an integer, not {tag_width!r}")
        if tag_width < 0:
            raise ValueError(f"Tag width must be zero or positive, not {tag_width}")

    @property
    def latency(self) -> int:
        """Cycles from an input beat to its result beat."""
        return self._latency

    @property
    def tag_width(self) -> int:
        """Width of the side-band tag."""
        return self._tag_width

    def elaborate(self, platform):
        m = Module()
        boundaries = STAGE_BOUNDARIES[self._latency]

        def wire(name: str, value) -> Signal:
            # A named combinational signal. Every value used more than once goes through one: the
            # netlist builder lowers a shared expression once per use, so an unregistered datapath
            # built from bare expressions grows exponentially (Verilog of 400k lines at latency 1).
            signal = Signal(Value.cast(value).shape(), name=name)
            m.d.comb += signal.eq(value)
            return signal

        def stage(step: int, values: dict[str, Value]) -> dict[str, Value]:
            # The values leaving `step`: registers if the latency places a boundary there, else
            # wires. Only `valid` is reset; the datapath registers are reset-less (they matter only
            # when valid).
            if step not in boundaries:
                return {name: wire(f"s{step}_{name}", value) for name, value in values.items()}
            registered = {}
            for name, value in values.items():
                reg = Signal(Value.cast(value).shape(), name=f"s{step}_{name}", reset_less=name != "valid")
                m.d.sync += reg.eq(value)
                registered[name] = reg
            return registered

        # Step 1: unpack, classify, compare and swap (the larger magnitude becomes "big").
        a, b = self.i.payload.a, self.i.payload.b
        a_exp, b_exp = a[23:31], b[23:31]
        a_nan = (a_exp == _EXP_MAX) & (a[:23] != 0)
        b_nan = (b_exp == _EXP_MAX) & (b[:23] != 0)
        a_inf = (a_exp == _EXP_MAX) & (a[:23] == 0)
        b_inf = (b_exp == _EXP_MAX) & (b[:23] == 0)
        subtract = a[31] ^ b[31]
        swap = wire("swap", b[:31] > a[:31])
        big = wire("big", Mux(swap, b, a))
        small = wire("small", Mux(swap, a, b))
        big_exp, small_exp = big[23:31], small[23:31]
        # Effective exponents: a subnormal has the exponent of the smallest normal (field 1).
        big_eexp = wire("big_eexp", Mux(big_exp == 0, 1, big_exp))
        small_eexp = wire("small_eexp", Mux(small_exp == 0, 1, small_exp))
        v = stage(1, {
            "valid": self.i.valid,
            "tag": self.i.payload.tag,
            "sign": big[31],
            "subtract": subtract,
            "is_nan": a_nan | b_nan | (a_inf & b_inf & subtract),
            "is_inf": a_inf | b_inf,
            "big_eexp": big_eexp,
            "big_sig": Cat(big[:23], big_exp != 0),
            "small_sig": Cat(small[:23], small_exp != 0),
            "exp_diff": (big_eexp - small_eexp)[:8],
        })

        # Step 2: align the smaller significand; bits shifted out become a sticky LSB.
        shift = wire("align_shift", Mux(v["exp_diff"] > _EXT_BITS, _EXT_BITS, v["exp_diff"]))
        small_ext = Cat(Const(0, 3), v["small_sig"])
        shifted = wire("aligned", Cat(Const(0, _EXT_BITS), small_ext) >> shift)   # 2 * _EXT_BITS wide
        sticky = shifted[:_EXT_BITS] != 0
        aligned = shifted[_EXT_BITS:2 * _EXT_BITS] | sticky
        v = stage(2, {
            **{k: v[k] for k in ("valid", "tag", "sign", "subtract", "is_nan", "is_inf", "big_eexp")},
            "big_ext": Cat(Const(0, 3), v["big_sig"]),
            "small_ext": aligned,
        })

        # Step 3: add or subtract (big >= small, so the difference is never negative).
        total = Mux(v["subtract"],
                    v["big_ext"] - v["small_ext"],
                    v["big_ext"] + v["small_ext"])[:_EXT_BITS + 1]
        v = stage(3, {
            **{k: v[k] for k in ("valid", "tag", "sign", "subtract", "is_nan", "is_inf", "big_eexp")},
            "sum": total,
        })

        # Step 4: leading-zero count and exponent before rounding.
        carry = v["sum"][_EXT_BITS]
        lz = leading_zero_count(m, v["sum"][:_EXT_BITS], name="sum_lzc")
        max_shift = wire("max_shift", v["big_eexp"] - 1)   # keeps the exponent >= the subnormal one
        left_shift = wire("left_shift", Mux(lz > max_shift, max_shift, lz)[:8])
        exp_pre = Mux(carry, v["big_eexp"] + 1, v["big_eexp"] - left_shift)[:9]
        v = stage(4, {
            **{k: v[k] for k in ("valid", "tag", "sign", "subtract", "is_nan", "is_inf", "sum")},
            "carry": carry,
            "left_shift": left_shift,
            "exp_pre": exp_pre,
            "is_zero": v["sum"] == 0,
        })

        # Step 5: normalise. The right shift on carry keeps the lost bit in the sticky position.
        s = v["sum"]
        right = Cat(s[0] | s[1], s[2:_EXT_BITS + 1])
        left = (s[:_EXT_BITS] << v["left_shift"])[:_EXT_BITS]
        v = stage(5, {
            **{k: v[k] for k in ("valid", "tag", "sign", "subtract", "is_nan", "is_inf", "is_zero")},
            "norm": Mux(v["carry"], right, left),
            "exp_pre": v["exp_pre"],
        })

        # Step 6: round to nearest even and pack. A result without its hidden bit is subnormal
        # (exponent field 0); the rounding increment carries into the exponent on its own.
        norm = v["norm"]
        frac = norm[3:3 + _FRAC_BITS]
        hidden = norm[_EXT_BITS - 1]
        guard = norm[2]
        round_sticky = norm[1] | norm[0]
        round_up = wire("round_up", guard & (round_sticky | norm[3]))
        exp_field = wire("exp_field", Mux(hidden, v["exp_pre"][:8], 0))
        sign = wire("result_sign", v["sign"] & ~(v["is_zero"] & v["subtract"]))   # x + -x = +0 (RNE)
        rounded = wire("rounded", (Cat(frac, exp_field) + round_up)[:31])
        overflow = wire("overflow", v["exp_pre"] >= _EXP_MAX)
        result = Mux(v["is_nan"], CANONICAL_NAN,
                     Mux(v["is_inf"] | overflow, Cat(Const(0, 23), Const(_EXP_MAX, 8), v["sign"]),
                         Cat(rounded, sign)))
        v = stage(6, {"valid": v["valid"], "tag": v["tag"], "sum": result})

        m.d.comb += [
            self.o.valid.eq(v["valid"]),
            self.o.payload.sum.eq(v["sum"]),
            self.o.payload.tag.eq(v["tag"]),
        ]
        return m
