"""Copies of the kernel's reset, one per block, so that no single net drives every register's reset.

The kernel's ``sync`` reset reaches some 20,000 flip-flops. As one net it is a path of its own: on
the ECP5 timing proxy, 9.4 ns from ``ap_rst_n`` into the sequencer's and the prefetcher's registers
(nextpnr promotes clocks, not resets, to the global network). The kernel top gives each block a
domain of its own on the kernel's clock whose reset is a copy of the kernel's reset, registered
(:func:`reset_copy`), so each reset net spans one block. Vivado replicates a high-fanout register
by itself (``MAX_FANOUT``, ``phys_opt_design``); Yosys instead merges identical registers
(``opt_merge``), so on the proxy platform (``family == "ecp5"``) each copy is a ``TRELLIS_FF``
instance (named ``<block>_reset_ff``), which Yosys keeps. Elsewhere (export, Verilator,
synth_xilinx) a copy is a plain register.

A block leaves reset one cycle after the kernel's reset falls, all blocks in the same cycle.

A reset that a block drives itself to thousands of its own registers (the feature aggregator's,
held through each command's start and end) is one net however it is copied at the top; on the
proxy :func:`global_reset` puts it on the clock network, through a ``DCCA`` (ECP5's clock buffer),
whose spines reach every slice with one delay, as Vivado's ``opt_design`` puts a high-fanout
reset on a ``BUFG``. Elsewhere the reset is the register itself.
"""

from __future__ import annotations

from amaranth.hdl import Instance, Module, ResetSignal, Signal

from .register_copies import trellis_register

__all__ = ["reset_copy", "global_reset"]


def reset_copy(m: Module, platform, name: str) -> Signal:
    """The ``sync`` domain's reset, registered (high from power-up), as a flip-flop of its own named
    ``name``: a ``TRELLIS_FF`` instance on the ECP5 proxy platform, else a reset-less register."""
    if getattr(platform, "family", None) == "ecp5":
        # REGSET "SET": the flip-flop powers up at 1 (the global set/reset at configuration)
        return trellis_register(m, name, ResetSignal(), init=1, reset=0)
    copy = Signal(init=1, reset_less=True, name=name)
    m.d.sync += copy.eq(ResetSignal())
    return copy


def global_reset(m: Module, platform, name: str, reset: Signal) -> Signal:
    """``reset`` (a register) as seen by its loads: on the ECP5 proxy platform the output of a ``DCCA``
    instance named ``<name>_dcc`` (nextpnr routes a ``DCCA``'s output on one of the global networks
    that reach the fabric), elsewhere ``reset`` itself."""
    if getattr(platform, "family", None) != "ecp5":
        return reset
    buffered = Signal(name=name)
    m.submodules[f"{name}_dcc"] = Instance("DCCA", i_CLKI=reset, i_CE=1, o_CLKO=buffered)
    return buffered
