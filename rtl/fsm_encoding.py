"""How a block's state machines are encoded where the platform asks for it (the ECP5 timing proxy).

Amaranth encodes an FSM's state in binary, and Yosys' ``fsm`` pass leaves every Amaranth FSM alone
(each state register has an initial value, and ``fsm_detect`` skips such registers), so on the ECP5
proxy each state test was a compare of the whole state register, two LUT levels in front of every
decision, and the kernel's worst paths started at ``sequencer.fsm_state``. Vivado extracts and
re-encodes FSMs by itself (``fsm_extraction`` auto, one-hot for most); Yosys does when the state
register carries an ``fsm_encoding`` attribute. :func:`encode_states` sets it, from the platform's
``fsm_encoding`` (:class:`~smartsage.rtl.multiply.RegisteredMultipliers` on the proxy), and does
nothing without a platform (export, simulation, synth_xilinx): the exported Verilog is unchanged.
The encoding does not change what the FSM does: the reset state is the initial one.
"""

from __future__ import annotations

__all__ = ["encode_states"]


def encode_states(fsm, platform) -> None:
    """Mark ``fsm``'s state register (``with m.FSM() as fsm``) with the platform's encoding."""
    encoding = getattr(platform, "fsm_encoding", None)
    if encoding is not None:
        fsm.state.attrs["fsm_encoding"] = encoding
