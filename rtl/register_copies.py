"""Copies of a flag register, or of a decision's last AND, for nets that would otherwise reach
hundreds of loads.

A flag that switches a whole bus (the aggregator's ownership of the storage and device-memory
buses, the prefetcher's of a read engine) drives a multiplexer per bit: as one flip-flop its net
spans the bus, and on the ECP5 timing proxy that net was 5-7 ns of routing in front of whatever
the multiplexed handshake reaches (docs/synthesis.md). :func:`register_copies` gives such a flag
several flip-flops that each load the flag's next value, so that each drives one group of the
loads. Vivado replicates a high-fanout register by itself (``MAX_FANOUT``, ``phys_opt_design``);
Yosys instead merges identical flip-flops (``opt_merge``), so on the proxy platform (``family ==
"ecp5"``) each copy is a ``TRELLIS_FF`` instance (named ``<name><i>_ff``), which Yosys keeps, as the
reset copies of :mod:`~smartsage.rtl.reset_copy` are. Elsewhere (export, Verilator, synth_xilinx,
the formal checks) the copies are one plain register.

The copies equal the flag in every cycle when they load the same next value and reset to the same
value under the same domain's reset: the owner writes the flag as ``flag.eq(flag_next)`` with
``flag_next`` a combinational signal (``flag`` by default, set or cleared where the flag's
decisions are) and passes ``flag_next`` here.

A handshake decision (a combinational AND of flags) that picks the next value of a few hundred
registers cannot be a register; :func:`and_copies` copies its last AND instead: ``count`` ``LUT4``
instances on the proxy (kept as the ``TRELLIS_FF`` copies are), each driving one group of the
registers, so the decision's own nets reach ``count`` LUTs.
"""

from __future__ import annotations

from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal, Signal

__all__ = ["trellis_register", "register_copies", "and_copies", "lut_copies"]


def trellis_register(m: Module, name: str, d, init: int, reset) -> Signal:
    """A one-bit ``TRELLIS_FF`` instance named ``<name>_ff`` of the ``sync`` domain's clock: it loads
    ``d`` in every cycle, is set to ``init`` while ``reset`` (synchronous) is high, and powers up
    at ``init``."""
    q = Signal(init=init, name=name)
    m.submodules[f"{name}_ff"] = Instance("TRELLIS_FF", p_GSR="DISABLED", p_CEMUX="1", p_CLKMUX="CLK",
                                           p_LSRMUX="LSR", p_REGSET="SET" if init else "RESET",
                                           p_SRMODE="LSR_OVER_CE", i_CLK=ClockSignal(), i_DI=d,
                                           i_LSR=reset, i_CE=1, o_Q=q)
    return q


def register_copies(m: Module, platform, name: str, d, count: int, init: int = 0) -> list[Signal]:
    """``count`` one-bit registers named ``<name>0`` .. that load ``d`` in every cycle and reset to
    ``init`` with the ``sync`` domain: ``TRELLIS_FF`` instances on the ECP5 proxy platform; elsewhere
    one plain register named ``name``, ``count`` times."""
    if count < 1:
        raise ValueError(f"register_copies: {name} needs at least one copy, not {count}")
    if getattr(platform, "family", None) == "ecp5":
        return [trellis_register(m, f"{name}{i}", d, init, ResetSignal()) for i in range(count)]
    # one register for every group: Vivado replicates it where it needs to; in simulation and in
    # the formal checks no state exists where two copies differ
    register = Signal(init=init, name=name)
    m.d.sync += register.eq(d)
    return [register] * count


def and_copies(m: Module, platform, name: str, a, b, count: int) -> list[Signal]:
    """``count`` copies of ``a & b`` named ``<name>0`` ..: ``LUT4`` instances named ``<name><i>_lut`` on
    the ECP5 proxy platform; elsewhere one AND named ``name``, ``count`` times."""
    return lut_copies(m, platform, name, lambda x, y: x & y, [a, b], count)


def lut_copies(m: Module, platform, name: str, function, inputs, count: int) -> list[Signal]:
    """``count`` copies of ``function(*inputs)``, a function of one to four 1-bit values made of ``&``,
    ``|``, ``^`` and ``~`` (a decision's last LUT, say ``(dense | ready_ids) & streaming & port_ready``),
    named ``<name>0`` ..: ``LUT4`` instances named ``<name><i>_lut`` on the ECP5 proxy platform (the
    truth table worked out by calling ``function`` on integers); elsewhere one signal named ``name``,
    ``count`` times."""
    if count < 1:
        raise ValueError(f"lut_copies: {name} needs at least one copy, not {count}")
    if not 1 <= len(inputs) <= 4:
        raise ValueError(f"lut_copies: {name} takes one to four inputs, not {len(inputs)}")
    if getattr(platform, "family", None) == "ecp5":
        # row ``index`` of the table is the function of its used inputs' bits (the unused inputs are
        # tied low; their other rows repeat these)
        init = sum(1 << index for index in range(16)
                   if function(*((index >> i) & 1 for i in range(len(inputs)))) & 1)
        padded = [*inputs, *[0] * (4 - len(inputs))]
        pins = {f"i_{pin}": padded[i] for i, pin in enumerate("ABCD")}
        copies = [Signal(name=f"{name}{i}") for i in range(count)]
        for i, z in enumerate(copies):
            m.submodules[f"{name}{i}_lut"] = Instance("LUT4", p_INIT=init, **pins, o_Z=z)
        return copies
    value = Signal(name=name)
    m.d.comb += value.eq(function(*inputs))
    return [value] * count
