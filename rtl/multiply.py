"""Pipelined multiplication from registered 16x16 products (a DSP each) and registered adder trees.

The kernel multiplies in two places: the bounded draw's 32x32 product (``rng.multiply_pipelined``)
and the feature aggregator's row address ``features_base + id x row_bytes``. Both are built from
:func:`product16` (operands and product registered: the shape a DSP absorbs) and, for the row
address, :func:`multiply_add_low`: every 16x16 partial product that reaches the result's low bits,
summed by a binary tree with one registered adder per level, so that no stage holds more than one
multiplication or one carry chain.
"""

from __future__ import annotations

from amaranth.hdl import Cat, ClockSignal, Instance, Module, Signal, Value

__all__ = ["RegisteredMultipliers", "registered", "product16", "multiply_add_low", "multiply_add_latency",
           "split_accumulate"]


class RegisteredMultipliers:
    """How :func:`product16` builds its products, passed to ``elaborate`` as the platform.

    Without it (``platform=None``: export, Verilator, synth_xilinx) a product is plain Amaranth:
    operand registers, a ``*`` and a product register, the shape Vivado absorbs into a DSP48E2
    (AREG/BREG, MREG or PREG). Yosys 0.23's ``synth_ecp5`` does not absorb registers into an ECP5
    ``MULT18X18D``, so the ECP5 timing proxy elaborates with ``RegisteredMultipliers("ecp5")``: the
    same two stages as one ``MULT18X18D`` instance with its input and output registers on (one
    clock enable, as the plain form's). Same function, same latency.

    It also asks for one-hot state machines (``fsm_encoding``, :mod:`~smartsage.rtl.fsm_encoding`),
    which Yosys does only when told and Vivado does by itself."""

    #: The state encoding Yosys gives the blocks' FSMs (``fsm_encoding`` attribute).
    fsm_encoding = "one-hot"

    def __init__(self, family: str):
        if family != "ecp5":
            raise ValueError(f"No registered multiplier primitive for {family!r}; known: ecp5")
        self.family = family


def registered(m: Module, value: Value, enable: Value, name: str) -> Signal:
    """``value`` in a register named ``name`` that loads when ``enable`` is high (a pipeline stage).

    The register is reset-less: a pipeline's data is qualified by its valid bits or its known
    latency, so a (synchronous) reset of the block need not reach it, and the reset net's fan-out
    stays with the control registers."""
    reg = Signal(len(value), name=name, reset_less=True)
    with m.If(enable):
        m.d.sync += reg.eq(value)
    return reg


def product16(m: Module, a: Value, b: Value, enable: Value, name: str, platform) -> Signal:
    """The 32-bit product of two values of at most 16 bits, two enabled cycles later (operands, then
    product)."""
    a, b = Value.cast(a), Value.cast(b)
    assert len(a) <= 16 and len(b) <= 16, (len(a), len(b))
    if isinstance(platform, RegisteredMultipliers):
        product = Signal(36, name=f"{name}_p")
        ports = {f"i_A{i}": (a[i] if i < len(a) else 0) for i in range(18)}
        ports.update({f"i_B{i}": (b[i] if i < len(b) else 0) for i in range(18)})
        ports.update({f"i_C{i}": 0 for i in range(18)})
        ports.update({f"o_P{i}": product[i] for i in range(36)})
        m.submodules[f"{name}_dsp"] = Instance(
            "MULT18X18D",
            p_REG_INPUTA_CLK="CLK0", p_REG_INPUTA_CE="CE0", p_REG_INPUTA_RST="RST0",
            p_REG_INPUTB_CLK="CLK0", p_REG_INPUTB_CE="CE0", p_REG_INPUTB_RST="RST0",
            p_REG_INPUTC_CLK="NONE", p_REG_PIPELINE_CLK="NONE",
            p_REG_OUTPUT_CLK="CLK0", p_REG_OUTPUT_CE="CE0", p_REG_OUTPUT_RST="RST0",
            p_GSR="DISABLED", p_RESETMODE="SYNC", p_MULT_BYPASS="DISABLED",
            i_CLK0=ClockSignal("sync"), i_CE0=enable, i_RST0=0, i_SIGNEDA=0, i_SIGNEDB=0, i_SOURCEA=0,
            i_SOURCEB=0, **ports)
        return product[:32]
    ra = registered(m, a, enable, f"{name}_a")
    rb = registered(m, b, enable, f"{name}_b")
    return registered(m, (ra * rb)[:32], enable, f"{name}_p")


def _digits(value: Value) -> list[Value]:
    return [value[i:i + 16] for i in range(0, len(value), 16)]


def _terms(a_width: int, b_width: int, width: int) -> int:
    return sum(1 for i in range(0, a_width, 16) for j in range(0, b_width, 16) if i + j < width)


def multiply_add_latency(a_width: int, b_width: int, width: int) -> int:
    """Enabled cycles of :func:`multiply_add_low` for these operand and result widths: two for the
    products, one per level of the tree over the partial products and the addend."""
    terms = _terms(a_width, b_width, width) + 1
    return 2 + (terms - 1).bit_length()


def multiply_add_low(m: Module, a: Value, b: Value, c: Value, width: int, enable: Value, name: str,
                     platform) -> Signal:
    """``(a * b + c) mod 2^width``, :func:`multiply_add_latency` enabled cycles later (``c`` is taken
    when ``a`` and ``b`` are). Every 16x16 partial product whose weight is below ``2^width`` is a
    :func:`product16`; the addend waits beside them; a binary tree of registered ``width``-bit adders
    sums them."""
    a, b, c = Value.cast(a), Value.cast(b), Value.cast(c)
    terms = []
    for i, ai in enumerate(_digits(a)):
        for j, bj in enumerate(_digits(b)):
            shift = 16 * (i + j)
            if shift < width:
                product = product16(m, ai, bj, enable, f"{name}_p{i}{j}", platform)
                terms.append((product << shift)[:width])
    addend = registered(m, c[:width], enable, f"{name}_c0")
    terms.append(registered(m, addend, enable, f"{name}_c1"))
    level = 0
    while len(terms) > 1:
        summed = [registered(m, (terms[k] + terms[k + 1])[:width], enable, f"{name}_s{level}_{k // 2}")
                  for k in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            summed.append(registered(m, terms[-1], enable, f"{name}_s{level}_pass"))
        terms, level = summed, level + 1
    assert 2 + level == multiply_add_latency(len(a), len(b), width), (len(a), len(b), width, level)
    return terms[0]


def split_accumulate(m: Module, accumulator: Signal, addend: Value, split: int) -> Signal:
    """``accumulator`` += ``addend`` in every cycle as two carry chains: bits below ``split`` and the
    rest, the low chain's carry-out registered into the high chain's carry-in (a chain as long as
    the accumulator was 9.3 ns on the ECP5 proxy). Returns the carry register: ``accumulator +
    (carry << split)`` is the running sum, so the accumulator is exact one cycle after the last
    nonzero addend. Whoever loads the accumulator clears the carry with it (statements after this
    call win)."""
    width = len(accumulator)
    if not 0 < split < width:
        raise ValueError(f"split_accumulate: split {split!r} must lie inside the accumulator's {width} bits")
    carry = Signal(name=f"{accumulator.name}_carry")
    low_sum = accumulator[:split] + addend[:split]
    high, high_addend = accumulator[split:], addend[split:width]
    m.d.sync += [accumulator[:split].eq(low_sum[:split]), carry.eq(low_sum[split]),
                 # high + high_addend + carry as one chain: (2 high + c + 2 high_addend + c) / 2
                 accumulator[split:].eq((Cat(carry, high) + Cat(carry, high_addend))[1:width - split + 1])]
    return carry
