"""A fixed delay of a free-running pipeline's data in LUT RAM instead of a chain of flip-flops.

A draw pipeline carries each draw's range and counter beside its mix32 rounds: 64 bits over some
twenty stages, so a chain of registers would be some 1,200 flip-flops per position sampler, a
quarter of the ``small`` build's flip-flops on the ECP5 timing proxy (docs/synthesis.md), and
they spread the lane over the die. The line costs LUTs instead: on the proxy a sampler's two lines
(64 bits, 14 and 4 cycles) are 1,008 fewer flip-flops for about 250 more ``TRELLIS_COMB`` and 32
``TRELLIS_RAMW``: a trade that pays where flip-flops are the scarcer resource. Vivado packs such
a chain into SRL16/SRLC32 shift registers by itself; the ECP5 has none, and Lattice's answer is
this one: a 16-deep distributed RAM written every cycle at a write counter and read
(asynchronously) at a read counter a fixed distance behind, into an output register. The two
counters step every cycle and never reset, so the distance between them holds from power-up on,
and the line's output equals the input ``cycles`` cycles earlier in every cycle, power-up
included (the RAM and the registers start at zero, as a chain of reset-less registers does):
nothing downstream can tell the two apart.

A line longer than 16 cycles is a chain of such sections.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, Value
from amaranth.lib.memory import Memory

from .multiply import registered

__all__ = ["delay_line", "SECTION_DEPTH"]

#: Entries of one section's RAM (an ECP5 ``DPR16X4`` is 16 deep); a section delays 2..16 cycles.
SECTION_DEPTH = 16


def _section(m: Module, value: Value, cycles: int, name: str) -> Signal:
    """``value`` delayed by ``cycles`` (2..SECTION_DEPTH): read ``cycles - 1`` entries behind the
    write, then registered."""
    behind = cycles - 1
    m.submodules[name] = ram = Memory(shape=len(value), depth=SECTION_DEPTH, init=[])
    write, read = ram.write_port(), ram.read_port(domain="comb")
    # the write counter at t mod 16 in cycle t, the read counter at (t - behind) mod 16: it reads
    # the entry written ``behind`` cycles before (or its power-up zero)
    w_addr = Signal(range(SECTION_DEPTH), name=f"{name}_w_addr", reset_less=True)
    r_addr = Signal(range(SECTION_DEPTH), name=f"{name}_r_addr", reset_less=True,
                    init=(-behind) % SECTION_DEPTH)
    out = Signal(len(value), name=f"{name}_out", reset_less=True)
    m.d.comb += [write.addr.eq(w_addr), write.data.eq(value), write.en.eq(1), read.addr.eq(r_addr)]
    m.d.sync += [w_addr.eq(w_addr + 1), r_addr.eq(r_addr + 1), out.eq(read.data)]
    return out


def delay_line(m: Module, value: Value, cycles: int, name: str) -> Signal:
    """``value`` as it was ``cycles`` cycles before (a free-running delay: no enable, no reset), in
    registers named ``<name>_...``: one register for one cycle, else sections of LUT RAM of up to
    :data:`SECTION_DEPTH` cycles each, every section's output a register (so the RAM's read sits
    between two registers of the line, not in front of its consumer's logic)."""
    if not isinstance(cycles, int) or cycles < 1:
        raise ValueError(f"delay_line: {name} needs a delay of at least one cycle, not {cycles!r}")
    value = Value.cast(value)
    if cycles == 1:
        return registered(m, value, 1, f"{name}_out")
    sections = -(-cycles // SECTION_DEPTH)
    # as even as the sections can be, each 2..16 cycles
    lengths = [cycles // sections + (i < cycles % sections) for i in range(sections)]
    for i, length in enumerate(lengths):
        value = _section(m, value, length, f"{name}{i}" if sections > 1 else name)
    return value
