"""Formal harnesses (SymbiYosys) for the control block, the read engines, the burst writers and the sequencer.

Each harness instantiates one block of the kernel unchanged, drives every input from a free
top-level port (the solver picks any value each cycle), constrains only what the block's environment
guarantees (``Assume``: reset is released, an AXI slave answers only what was asked and holds its
answer until taken, requests lie inside a buffer window), and asserts properties on the block's
*ports*. One module per block:

- :mod:`.control`: :class:`~smartsage.rtl.control.ControlRegisters` (AXI4-Lite, ``ap_ctrl_hs``);
- :mod:`.read_engine`: :class:`~smartsage.rtl.read_stream.ReadStream` (single-beat reads);
- :mod:`.burst_reader`: :class:`~smartsage.rtl.burst_reader.BurstReader` (AR rules, 4 KiB and
  256-beat split, outstanding bound, the answer beats in order with the right ``last``);
- :mod:`.writers`: :class:`~smartsage.rtl.write_combiner.WriteCombiner` and
  :class:`~smartsage.rtl.beat_writer.BeatWriter` through the AXI4 write-master monitor of
  :mod:`.axi_write` (handshakes, burst rules, WLAST, outstanding bound, no strobed byte outside the
  window every request was inside: the blocks' part of "the kernel never writes outside the
  descriptor's buffers");
- :mod:`.kernel_writes`: :class:`~smartsage.rtl.command_sequencer.CommandSequencer`'s part of that
  property (counts and result-header fields, the jobs' node-list slots, inside the buffers it
  latched: its ``buffers`` port), by k-induction;
- :mod:`.lane_appends`: a lane's part (:class:`~smartsage.rtl.node_list_collector.NodeListCollector`:
  every node-list append in its job's slots), by k-induction.

Invariants that make a property inductive may name a block's inside (reached through a subclass that
keeps a handle, :class:`.common.Observed`); everything asserted as a property is a port property.
:data:`BROKEN` lists deliberately broken variants of each block; a test checks that each fails.
"""

from __future__ import annotations

from ..control import ControlRegisters
from . import burst_reader, kernel_writes, lane_appends, read_engine, writers
from .common import (
    FORMAL_DATA_WIDTH,
    FORMAL_OUTSTANDING,
    FormalCheck,
    FormalResult,
    FormalToolMissing,
    Harness,
    run_check,
    tools_available,
)
from .control import BROKEN_CONTROL, ControlHarness

__all__ = ["FormalCheck", "FormalResult", "FormalToolMissing", "CHECKS", "BROKEN", "harness", "run_check",
           "tools_available", "FORMAL_DATA_WIDTH", "FORMAL_OUTSTANDING"]

#: The engine of the prove checks of the burst engines: with the z3 here, ``smtbmc z3`` did not finish
#: the first induction step of the burst reader in minutes; ``--unroll`` (memories unrolled into
#: registers) proves it in seconds.
UNROLLED = "smtbmc --unroll z3"
#: The engine of their bounded checks: ABC's bit-level BMC reached 2-3 more steps than smtbmc in the
#: same time (smtbmc --unroll z3 took over a minute per step from step 3 on). This SymbiYosys cannot
#: turn ABC's witness into a trace when the design has assumptions, so a failure names the frame
#: only; rerun with ``smtbmc --unroll z3`` at that depth for the trace.
ABC_BMC = "abc bmc3"


def _checks(block, prove_depth, prove_why, bmc_depth, bmc_why, prove_engine=UNROLLED, bmc_engine=ABC_BMC):
    """The prove check ``block`` and the bounded check ``block_bounded``."""
    return {block: FormalCheck(block, block, "prove", prove_depth, prove_why, prove_engine),
            f"{block}_bounded": FormalCheck(f"{block}_bounded", block, "bmc", bmc_depth, bmc_why, bmc_engine)}


_FIFO_INVARIANT = "k-induction closes with the invariant bursts in flight == level of the block's in-flight FIFO"

#: The sequencer's and the lanes' parts of "the kernel never writes outside the descriptor's buffers"
#: (kernel_writes, lane_appends).
KERNEL_WRITES_CHECKS = {
    "sequencer_writes": FormalCheck(
        "sequencer_writes", "sequencer_writes", "prove", 2,
        "a whole-kernel BMC reaches the first write only at step 38 (119 s here) and a BMC of the sequencer "
        "alone reached step 23 in 10 minutes, so the property is proved by k-induction instead, on the "
        "sequencer's ports (every input free, the buffers from its buffers port): k-induction closes at depth 2 "
        "with eleven invariants on its registers (the descriptor, header and walk flags equal their states; the "
        "last-hop flag equals hop == num_hops; the section-5 checks registered; counts_ptr aligned in the "
        "hop states and result_ptr in RESULT; the walk's end flag; counts_end and the registered counts "
        "check; in FRONTIER counts_base + "
        "frontier_size <= counts_capacity and frontier_index <= frontier_size; written + room == "
        "nodes_capacity; the registered room checks (room_wide leaves room for the largest count, room_exact "
        "is the head's check while room_current; room is their verdict); the count's address is "
        "counts_ptr + 4 (counts_base + frontier_index)). Proved one "
        "property per run, in order, each run assuming the earlier ones (kernel_writes.ordered_parts): as "
        "one run z3 took 377 s here and over 600 s on a CI machine; the nineteen parts take about a minute",
        parts=kernel_writes.PART_ORDER),
    "sequencer_descriptor": FormalCheck(
        "sequencer_descriptor", "sequencer_descriptor", "prove", 2,
        "the harness is the device memory (a descriptor of free words at a free 8-aligned address, every "
        "read answered in order from a queue of the word indices asked); k-induction closes at depth 2 with "
        "invariants tying the fetch to the sequencer's registers (descriptor_base is the argument outside "
        "IDLE; while fetching, queued entries are the words answered + j and every word answered is in its "
        "register; once result_valid every register holds its word; the queue is empty outside DESCRIPTOR "
        "and FINISH); about 13 s here"),
    "lane_appends": FormalCheck(
        "lane_appends", "lane_appends", "prove", 2,
        "the collector's appends against the job at its head (jobs as the streamer's FIFO and the "
        "sequencer's proved job slots provide them, answers free); k-induction closes at depth 2 with four "
        "invariants on its three registers (no id appended while no job is at the head; appended < count; "
        "the job-end register appended_up == appended + 1; the next id's address is the job's + appended x "
        "id size); one property per run, in order "
        "(kernel_writes.ordered_parts)",
        parts=lane_appends.PART_ORDER),
}

CHECKS: dict[str, FormalCheck] = {
    "control": FormalCheck(
        "control", "control", "prove", 6,
        "k-induction closes: every property relates the ports at most four cycles apart"),
    **_checks(
        "read_engine", 4,
        "k-induction closes with the invariant in-flight count == level of the block's in-flight FIFO", 10,
        "the response payload comes from the FIFO's memory, which induction cannot constrain; with 2 in "
        "flight every (pending, FIFO level, read and write pointer) configuration is reachable from reset "
        "in at most 6 cycles (pointer offset 1: 2 cycles, 2 fills, 1 pending, 1 to answer), so 10 steps "
        "cover every reachable control state plus the property's one-cycle window; data are free at every step",
        prove_engine="smtbmc z3", bmc_engine="smtbmc z3"),
    **_checks(
        "burst_reader", 4,
        "k-induction closes for the AR handshake (ARADDR / ARLEN registers held while ARVALID waits) with "
        "the invariant FIFO level <= depth", 6,
        "the split, tiling and labels come from the block's cursor registers and FIFO memory; 6 steps from "
        "reset (the 7th took minutes here) cover a request accepted, planned (a cycle in its two-entry "
        "buffer), split at a 256-beat or 4 KiB boundary (first AR at step 3, the next at 4), bursts presented "
        "and the first beats answered, with every "
        "address and length free; longer traces (more requests queued, a full 256-beat answer) are not covered"),
    **_checks(
        "write_combiner", 4, _FIFO_INVARIANT, 9,
        "the properties that read the block's beat and run FIFOs (memories) cannot be made inductive from the "
        "ports; 9 steps from reset (26 s here) reach the first AW and W at step 6 (input FIFO, open beat, "
        "flush, the run FIFO's write counted a cycle late, run FIFO, AW register; at 8 steps, one fewer "
        "since the late count, the outstanding bound's broken variant passed): runs of 1-2 beats from either "
        "port, a run ending at a 4 KiB boundary or a window edge, 3 runs loaded in turn (the outstanding "
        "bound), every address, window and strobe free. Not covered: runs of 3 or more beats, a 16-beat run "
        "(AWLEN <= 15 then rests on the run length's construction), answers to more than the first bursts"),
    **_checks(
        "beat_writer", 4, _FIFO_INVARIANT, 8,
        "the properties that read the block's beat and burst FIFOs cannot be made inductive from the ports; "
        "8 steps from reset (12 s here) reach the first AW and W at step 4 (a piece waits one cycle in the "
        "input buffer, a merged beat one cycle in the two-entry buffer before it joins a burst) and cover "
        "pieces of 1..16 bytes at any alignment (spanning two beats), short bursts, bursts queued up to the "
        "outstanding bound, answers, every address, window and strobe free. Not covered: bursts of 3 or more "
        "beats, a 16-beat burst"),
    **KERNEL_WRITES_CHECKS,
}

#: Broken variants: block -> variant -> (class, the check it must fail).
BROKEN: dict[str, dict[str, tuple[type, str]]] = {
    "control": BROKEN_CONTROL,
    "read_engine": read_engine.BROKEN_READ_ENGINE,
    "burst_reader": burst_reader.BROKEN_BURST_READER,
    "write_combiner": writers.BROKEN_WRITE_COMBINER,
    "beat_writer": writers.BROKEN_BEAT_WRITER,
    "sequencer_writes": kernel_writes.BROKEN_SEQUENCER_WRITES,
    "sequencer_descriptor": kernel_writes.BROKEN_SEQUENCER_DESCRIPTOR,
    "lane_appends": lane_appends.BROKEN_LANE_APPENDS,
}


def harness(block: str, variant: str | None = None, inductive_only: bool = False,
            part: int | None = None) -> Harness:
    """The harness of ``block`` around the real block, or around the broken ``variant``; ``part``
    selects one part of a check proved in parts (:attr:`FormalCheck.parts`).

    Raises
    ------
    KeyError
        Unknown block or variant (the message lists the known ones).
    """
    if block not in BROKEN:
        raise KeyError(f"No formal harness for block {block!r}; known: {', '.join(BROKEN)}")
    if variant is not None and variant not in BROKEN[block]:
        raise KeyError(f"No broken variant {variant!r} of {block!r}; known: {', '.join(BROKEN[block])}")
    broken = BROKEN[block][variant][0] if variant else None
    if part is not None and block not in ("sequencer_writes", "lane_appends"):
        raise ValueError(f"{block!r} is proved in one run, not in parts")
    if block == "control":
        return ControlHarness((broken or ControlRegisters)(), inductive_only)
    if block == "read_engine":
        cls = broken or read_engine.ObservedReadStream
        return read_engine.ReadEngineHarness(cls(FORMAL_DATA_WIDTH, FORMAL_OUTSTANDING), inductive_only)
    if block == "burst_reader":
        cls = broken or burst_reader.DEFAULT_CLASS
        return burst_reader.BurstReaderHarness(
            cls(burst_reader.FORMAL_READER_DATA_WIDTH, FORMAL_OUTSTANDING), inductive_only)
    if block == "lane_appends":
        return lane_appends.build(broken, inductive_only, part)
    if block in ("sequencer_writes", "sequencer_descriptor"):
        return kernel_writes.build(block, broken, inductive_only, part)
    if block == "write_combiner":
        cls = broken or writers.DEFAULT_CLASSES[block]
        return writers.WriteCombinerHarness(
            cls(FORMAL_DATA_WIDTH, FORMAL_OUTSTANDING, writers.FORMAL_COMBINER_PORTS, writers.COMBINER_EDGE_REGISTERS),
            inductive_only)
    cls = broken or writers.DEFAULT_CLASSES[block]
    return writers.BeatWriterHarness(cls(FORMAL_DATA_WIDTH, FORMAL_OUTSTANDING), inductive_only)
