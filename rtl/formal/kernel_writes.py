"""The kernel's write-window property, compositionally: "the kernel never writes device memory
outside the descriptor's output buffers" (docs/spec.md, errors; issue 15).

Every device-memory write of the kernel starts as a request of one of three blocks and goes out
through one of two write engines:

- the :class:`~smartsage.rtl.command_sequencer.CommandSequencer`: counts (u32 fields) and the
  result header (u64 fields) on the write combiner's last port; and the node-list slots it reserves
  for each job (``base``, ``count``), which the lanes fill;
- the :class:`~smartsage.rtl.edge_streamer.EdgeStreamer` of each lane: node-list appends (u32/u64
  fields) on its combiner port, at the slots of the jobs it was given;
- the :class:`~smartsage.rtl.feature_aggregator.FeatureAggregator`: self and sum rows through its
  :class:`~smartsage.rtl.beat_writer.BeatWriter` (pointers from the sequencer's parameters).

The engines' part (no strobed byte outside the window every request was inside) is checked by
:mod:`.writers`. This module checks the requesters' part, on their ports:

``sequencer_writes`` (the sequencer, every input free; the output buffers read from its
``buffers`` port, the descriptor's pointers and capacities as it latched them):

- every field it offers (``fields.valid``) is a u32 count inside
  ``[counts_ptr, counts_ptr + 4 counts_capacity)`` or a u64 word inside
  ``[result_ptr, result_ptr + 64)``, naturally aligned;
- every job it offers has ``count >= 1`` and ``base + count <= nodes_capacity`` (its slots lie in
  the node list);
- the node-list pointer it hands the lanes and the prefetcher, and the node-list, self and sum
  pointers it hands the aggregator, are the latched ones.

Assumed: the buffers do not wrap around the 64-bit address space (``ptr + bytes <= 2**64``, the
host's allocator guarantees it).

Proved by k-induction (depth 2, ``smtbmc z3``; see :data:`smartsage.rtl.formal.CHECKS`), with
invariants on the sequencer's registers reached through :func:`inner` (the properties themselves
read its ports only). A bounded run cannot stand in: the first count is written about 40 cycles
after ``ap_start`` (16 descriptor reads, the header reads, two RNG key latencies).

Not covered (the rest of the kernel's part, each argued, not proved):

- the lanes' appends: an :class:`~smartsage.rtl.edge_streamer.EdgeStreamer` writes a job's ids at
  ``nodes_ptr + (base + i) x id size`` for ``i < count`` (the collector's address register and
  its collects FIFO), so inside the node list given the jobs above; its harness (jobs assumed
  inside ``[0, nodes_capacity)``) took over 5 minutes for 4 BMC steps here (its position samplers'
  hash pipelines), too slow to reach an append, and the FIFO's contents keep it from induction;
- the kernel's wiring (``sequencer.nodes_ptr`` / ``wide_ids`` to every lane, jobs through the
  dispatcher unchanged: kernel.py);
- the aggregator's row addresses (its rows lie in ``self[0..entries)`` / ``sum[0..entries)`` by
  construction, and the sequencer checks ``entries x row bytes`` against both capacities before
  it starts it); here only its pointers are checked to be the latched ones;
- the binding of the ``buffers`` port to the descriptor's bytes in memory: the port is the same
  decode of the fetched words (``desc(name)``) that the sequencer's checks and addresses use.
"""

from __future__ import annotations

from amaranth.hdl import Assert, Assume, Const, Module
from amaranth.hdl._ast import Assign

from smartsage.spec.config import CONFIGS

from ..command_sequencer import CommandSequencer
from .common import Harness, drive_inputs

__all__ = ["SequencerWritesHarness", "BROKEN_SEQUENCER_WRITES", "FORMAL_KERNEL_CONFIG", "build", "inner"]

#: The build under proof: the small configuration (64-bit bus, one lane, fanout 16).
FORMAL_KERNEL_CONFIG = CONFIGS["small"]
#: Device addresses are 64 bits: a buffer ends at most here.
ADDRESS_SPACE = 1 << 64


def inner(m: Module, *names: str):
    """The block's registers named ``names`` (for induction invariants; never for a property).

    Raises
    ------
    LookupError
        A name is missing or names several signals.
    """
    found: dict[str, list] = {name: [] for name in names}

    def walk(statements):
        for statement in statements:
            if isinstance(statement, Assign):
                for signal in statement.lhs._lhs_signals():
                    if signal.name in found and all(signal is not s for s in found[signal.name]):
                        found[signal.name].append(signal)
            for _patterns, body, _src_loc in getattr(statement, "cases", ()):
                walk(body)

    walk(m._statements.get("sync", ()))
    for name, signals in found.items():
        if len(signals) != 1:
            raise LookupError(f"{len(signals)} signals named {name!r} in the block, need one")
    return [found[name][0] for name in names]


def _no_wrap(ptr, size_bytes):
    return ptr + size_bytes <= ADDRESS_SPACE


# ---------------------------------------------------------------------------------------------- sequencer

class _ObservedSequencer(CommandSequencer):
    """Keeps a handle on the state the counting invariant names (the hop's counts range)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        fsm = m._generated["fsm"]
        self.state = fsm.state
        self.state_code = fsm.encoding
        (self.counts_base, self.frontier_index, self.frontier_size, self.counts_end,
         self.key_wait) = inner(m, "counts_base", "frontier_index", "frontier_size", "counts_end", "key_wait")
        return m


class _CountsOnePast(_ObservedSequencer):
    """Broken: the counts check lets a hop need one entry more than the capacity (the last count of
    the hop is written one entry past the counts buffer)."""

    def _fits(self, end, capacity, buffer):
        return end <= capacity + 1 if buffer == "counts" else super()._fits(end, capacity, buffer)


class _NodesUnchecked(_ObservedSequencer):
    """Broken: no node-list capacity check (a job's slots may run past the node list)."""

    def _fits(self, end, capacity, buffer):
        return Const(1) if buffer == "nodes" else super()._fits(end, capacity, buffer)


class SequencerWritesHarness(Harness):
    def elaborate(self, platform):
        m, steps = self.frame()
        dut = self.instantiate(m, self.block, platform)
        drive_inputs(self, m, dut, "in_")
        b = dut.buffers
        m.d.comb += [Assume(_no_wrap(b.nodes_ptr, b.nodes_capacity << 3)),
                     Assume(_no_wrap(b.counts_ptr, b.counts_capacity << 2)),
                     Assume(_no_wrap(b.result_ptr, 64))]

        field = dut.fields.payload
        address = field.address
        count_inside = (~field.wide & (address[:2] == 0) & (address >= b.counts_ptr)
                        & (address + 4 <= b.counts_ptr + (b.counts_capacity << 2)))
        result_inside = (field.wide & (address[:3] == 0) & (address >= b.result_ptr)
                         & (address + 8 <= b.result_ptr + 64))
        job = dut.job.payload
        parameters = dut.aggregate_parameters
        m.d.comb += [
            Assert(~dut.fields.valid | count_inside | result_inside),
            Assert(~dut.job.valid | ((job.count != 0) & (job.base + job.count <= b.nodes_capacity))),
            Assert(dut.nodes_ptr == b.nodes_ptr),
            Assert((parameters.nodes_ptr == b.nodes_ptr) & (parameters.self_ptr == b.self_ptr)
                   & (parameters.sum_ptr == b.sum_ptr)),
        ]

        # the invariant that makes the counts property inductive: during a hop its counts range
        # [counts_base, counts_base + frontier_size) was checked, and the walk is inside it
        in_state = {name: dut.state == code for name, code in dut.state_code.items()}
        m.d.comb += [
            Assert(~in_state["FRONTIER"] | ((dut.counts_base + dut.frontier_size <= b.counts_capacity)
                                            & (dut.frontier_index <= dut.frontier_size))),
            # counts_ptr was checked aligned before the first hop
            Assert(~(in_state["COMMAND_KEY"] | in_state["HOP"] | in_state["FRONTIER"] | in_state["HOP_WAIT"]
                     | in_state["HOP_DRAIN"]) | (b.counts_ptr[:6] == 0)),
            # the result header is written only from an aligned result_ptr (checked before RESULT)
            Assert(~in_state["RESULT"] | (b.result_ptr[:6] == 0)),
            Assert(~in_state["HOP"] | (dut.key_wait != 0)
                   | (dut.counts_end == dut.counts_base + dut.frontier_size)),
        ]
        return m


#: Broken variants: name -> (class, the check it must fail).
#: A broken variant of a k-induction check fails its induction step: from states where every
#: property and invariant held, one step of the broken block breaks one (the counterexample names it).
BROKEN_SEQUENCER_WRITES = {
    "counts_one_past": (_CountsOnePast, "sequencer_writes"),
    "nodes_unchecked": (_NodesUnchecked, "sequencer_writes"),
}


def build(broken=None, inductive_only: bool = False) -> Harness:
    """The harness around the sequencer of :data:`FORMAL_KERNEL_CONFIG` (or the ``broken`` class)."""
    return SequencerWritesHarness((broken or _ObservedSequencer)(FORMAL_KERNEL_CONFIG), inductive_only)
