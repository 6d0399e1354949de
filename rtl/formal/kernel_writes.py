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
  the node list), and its place's device address is ``nodes_ptr + base x id size``;
- the node-list pointer it hands the lanes and the prefetcher, and the node-list, self and sum
  pointers it hands the aggregator, are the latched ones.

Assumed: the buffers do not wrap around the 64-bit address space (``ptr + bytes <= 2**64``, the
host's allocator guarantees it).

Proved by k-induction (depth 2, ``smtbmc z3``; see :data:`smartsage.rtl.formal.CHECKS`), with
invariants on the sequencer's registers reached through :func:`inner` (the properties themselves
read its ports only), one property per run in :data:`PART_ORDER` (:func:`ordered_parts`). A
bounded run cannot stand in: the first count is written about 40 cycles after ``ap_start`` (16
descriptor reads, the header reads, two RNG key latencies).

Not covered (the rest of the kernel's part, each argued, not proved):

- the lanes' appends: proved of each lane's collector by :mod:`.lane_appends` (every append in its
  job's slots, given jobs as this module proves them, each job's place ``nodes_ptr + base x id
  size`` proved here with the job, ``job_address``); the edge streamer passes it to its collector
  unchanged (argued);
- the kernel's wiring (``sequencer.nodes_ptr`` / ``wide_ids`` to every lane, jobs through the
  dispatcher unchanged: kernel.py);
- the aggregator's row addresses (its rows lie in ``self[0..entries)`` / ``sum[0..entries)`` by
  construction, and the sequencer checks ``entries x row bytes`` against both capacities before
  it starts it); here only its pointers are checked to be the latched ones.

``sequencer_descriptor`` ties the ``buffers`` port to memory: the harness answers the descriptor
reads from free words at a free 8-aligned address (in request order) and asserts that whenever the
sequencer offers a write or a job, ``buffers`` holds exactly the pointer and capacity fields of
those words. Also k-induction (depth 2).
"""

from __future__ import annotations

from amaranth.hdl import Array, Assert, Assume, Cat, Const, Module, Mux, Signal
from amaranth.hdl._ast import Assign
from amaranth.lib import data

from smartsage.spec.config import CONFIGS
from smartsage.spec.descriptor import DESCRIPTOR_FIELDS, DESCRIPTOR_SIZE

from ..command_sequencer import CommandSequencer, OutputBuffers
from ..image_header import field_span
from ..node_list_collector import id_offset
from ..rng import MIX32_LATENCY
from .common import Harness, Queue, drive_inputs

__all__ = ["PartsHarness", "SequencerWritesHarness", "SequencerDescriptorHarness", "BROKEN_SEQUENCER_WRITES",
           "BROKEN_SEQUENCER_DESCRIPTOR", "INDUCTION_ONLY_VARIANTS", "FORMAL_KERNEL_CONFIG", "build", "inner"]

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
        (self.counts_base, self.frontier_index, self.frontier_size, self.counts_end, self.counts_fit, self.key_wait,
         self.written, self.nodes_room, self.count_address, self.frontier_end, self.fetching_descriptor,
         self.fetching_header, self.hop, self.last_hop, self.room_wide, self.room_exact, self.room_current,
         self.room, self.prefetching, self.result_index, self.frontier_last, self.hop_advance, self.frontier_empty,
         self.node_address) = inner(
            m, "counts_base", "frontier_index", "frontier_size", "counts_end", "counts_fit", "key_wait", "written",
            "nodes_room", "count_address", "frontier_end", "fetching_descriptor", "fetching_header", "hop",
            "last_hop", "room_wide", "room_exact", "room_current", "room", "prefetching", "result_index",
            "frontier_last", "hop_advance", "frontier_empty", "node_address")
        offset, size = field_span(DESCRIPTOR_FIELDS, "num_hops")
        word, = inner(m, f"desc_word{offset // 8}")
        self.num_hops = word[(offset % 8) * 8:(offset % 8 + size) * 8]
        self.check_bad, self.check_live, self.checks_failed = self._check_flags   # the registered checks, their
        # sources and the flag COMMAND_KEY decides on
        self.head_count = self._head_count
        self.wide_nodes, self.wide_decoded = self._wide_nodes
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


class _DescriptorSkewed(_ObservedSequencer):
    """Broken: fetches the descriptor one word past its address (each field read from the next)."""

    def elaborate(self, platform):
        argument = self.descriptor
        skewed = Signal(64, name="descriptor_skewed")
        self.__dict__["descriptor"] = skewed
        try:
            m = super().elaborate(platform)
        finally:
            self.__dict__["descriptor"] = argument
        m.d.comb += skewed.eq(argument + 8)
        return m


class PartsHarness(Harness):
    """A harness whose properties are proved in :func:`ordered_parts` (``part``: the one to assert, or
    None for all); :meth:`start` gives the frame with the block in it, every input free."""

    def __init__(self, block, inductive_only: bool = False, part: int | None = None):
        super().__init__(block, inductive_only)
        self.part = part

    def start(self, platform):
        m, steps = self.frame()
        dut = self.instantiate(m, self.block, platform)
        drive_inputs(self, m, dut, "in_")
        return m, steps, dut


class SequencerWritesHarness(PartsHarness):
    def elaborate(self, platform):
        m, steps, dut = self.start(platform)
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
        in_state = {name: dut.state == code for name, code in dut.state_code.items()}
        hopping = ((in_state["COMMAND_KEY"] & ~dut.checks_failed) | in_state["HOP"] | in_state["FRONTIER"]
                   | in_state["HOP_WAIT"] | in_state["HOP_DRAIN"])
        # In proof order (PART_ORDER): first the invariants on the sequencer's registers that make
        # the port properties inductive, then the port properties themselves.
        properties = {
            # the fetches' flags are their states (the fetched words land only then), and so is
            # the walk's (FRONTIER's hand-off reads it, not the state)
            "fetch_flags": (dut.fetching_descriptor == in_state["DESCRIPTOR"])
                           & (dut.fetching_header == in_state["IMAGE"]) & (dut.prefetching == in_state["FRONTIER"]),
            # the last hop's flag is set with the hop
            "last_hop": ~hopping | (dut.last_hop == (dut.hop == dut.num_hops)),
            # the checks are registered the cycle before CHECK, and their OR in CHECK's cycle, for
            # COMMAND_KEY to decide on
            "checks_registered": (~(in_state["CHECK"] | in_state["COMMAND_KEY"]) | (dut.check_bad == dut.check_live))
                                 & (~in_state["COMMAND_KEY"] | (dut.checks_failed == dut.check_bad.any())),
            # counts_ptr was checked aligned before the first hop
            "counts_ptr_aligned": ~hopping | (b.counts_ptr[:6] == 0),
            # the result header is written only from an aligned result_ptr (checked before RESULT)
            "result_ptr_aligned": ~in_state["RESULT"] | (b.result_ptr[:6] == 0),
            # the frontier's "empty" flag is loaded with its size
            "frontier_empty": ~hopping | (dut.frontier_empty == (dut.frontier_size == 0)),
            # the walk's end is a register kept equal to the compare it replaces, stepped from the
            # frontier's last index (loaded in HOP)
            "frontier_end": ~in_state["FRONTIER"] | ((dut.frontier_end == (dut.frontier_index == dut.frontier_size))
                                                     & (dut.frontier_last == (dut.frontier_size - 1)[:64])),
            # the hop's counts end and its check settle while key_wait counts down from
            # MIX32_LATENCY + 1: as HOP is entered from COMMAND_KEY, and in HOP_DRAIN's second
            # cycle, after the hop's registers moved on (``hop_advance``, in its first cycle, with
            # key_wait at MIX32_LATENCY + 2; or in FINISH's, when a lane failed as HOP_WAIT ended);
            # HOP_DRAIN hands HOP what is left of the count
            "counts_end": (~dut.hop_advance | (dut.key_wait == MIX32_LATENCY + 2))
                          & (~(in_state["HOP"] | in_state["HOP_DRAIN"]) | (dut.key_wait > MIX32_LATENCY)
                             | ((dut.counts_end == dut.counts_base + dut.frontier_size)
                                & ((dut.key_wait == MIX32_LATENCY) | (dut.counts_fit == dut._fits(
                                    dut.counts_end, b.counts_capacity, "counts"))))),
            # during a hop its counts range [counts_base, counts_base + frontier_size) was checked,
            # and the walk is inside it
            "counts_range": ~in_state["FRONTIER"] | ((dut.counts_base + dut.frontier_size <= b.counts_capacity)
                                                     & (dut.frontier_index <= dut.frontier_size)),
            # the node list's room is what the written entries leave (checked against the capacity
            # before the first hop, stepped with every node)
            "nodes_room": ~hopping | (dut.written + dut.nodes_room == b.nodes_capacity),
            # the node list's room for the head's count, from registers: ``room_wide`` (a cycle ago
            # there was room for two of the largest counts) leaves room for any count; ``room_exact``
            # is the head's check while ``room_current`` (the head and the room are those it was
            # worked out from)
            "room_checks": ~in_state["FRONTIER"] | (
                (~dut.room_wide | (dut.nodes_room >= 2 ** len(dut.head_count) - 1))
                & (~dut.room_current | (dut.room_exact == dut._fits(dut.head_count, dut.nodes_room, "nodes")))
                & (dut.room == (dut.room_wide | (dut.room_current & dut.room_exact)))),
            # the fields' address is stepped, not computed: the walk's entry in FRONTIER, the
            # result header's word in RESULT
            "count_address": (~in_state["FRONTIER"] | (
                dut.count_address == (b.counts_ptr + ((dut.counts_base + dut.frontier_index) << 2))[:64]))
                & (~in_state["RESULT"] | (dut.count_address == Cat(Const(0, 3), dut.result_index, b.result_ptr[6:]))),
            # the id width's flag follows the header word, which holds after IMAGE
            "wide_nodes": ~hopping | (dut.wide_nodes == dut.wide_decoded),
            # the next job's place is stepped with the written entries (loaded in HOP)
            "node_address": ~in_state["FRONTIER"] | (
                dut.node_address == (b.nodes_ptr + id_offset(dut.wide_nodes, dut.written))[:64]),
            # the port properties
            "nodes_ptr": dut.nodes_ptr == b.nodes_ptr,
            "aggregate_pointers": ((parameters.nodes_ptr == b.nodes_ptr) & (parameters.self_ptr == b.self_ptr)
                                   & (parameters.sum_ptr == b.sum_ptr)),
            "job_slots": ~dut.job.valid | ((job.count != 0) & (job.base + job.count <= b.nodes_capacity)),
            # the job's place as a device address, which the lane's collector writes at
            "job_address": ~dut.job.valid | (
                job.node_address == (b.nodes_ptr + id_offset(dut.wide_ids, job.base))[:64]),
            "field_windows": ~dut.fields.valid | count_inside | result_inside,
        }
        assert tuple(properties) == PART_ORDER
        ordered_parts(m, list(properties.items()), self.part)
        return m


#: The order of the sequencer_writes parts (see :func:`ordered_parts`): invariants, then port properties.
PART_ORDER = ("fetch_flags", "last_hop", "checks_registered", "counts_ptr_aligned", "result_ptr_aligned",
              "frontier_empty", "frontier_end", "counts_end", "counts_range", "nodes_room", "room_checks",
              "count_address", "wide_nodes", "node_address", "nodes_ptr", "aggregate_pointers", "job_slots",
              "job_address", "field_windows")


def ordered_parts(m: Module, properties: list, part: int | None):
    """Assert the properties ``[(name, value), ...]``: all of them (``part`` None), or only
    property ``part`` of an ordered decomposition.

    Part ``i`` asserts property ``i``; assumes every earlier property at every step, and every
    later property at the steps before the last (through a register that holds its value of the
    cycle before, 1 from reset). That is k-induction of the conjunction, one property at a time:
    if every part passes, then at any step t every property held before t (induction hypothesis),
    and property 0 holds at t (its part assumes no other property at t), then property 1 (its part
    assumes property 0 at t), and so on. Each part's base case likewise assumes only what the
    earlier parts prove. A solver that proves the conjunction at once must refute a disjunction of
    fourteen failures; here each refutation has the earlier properties at hand (the monolithic check
    took 377-600 s with z3 here, and over 600 s on a CI machine; the parts take seconds each).
    """
    for i, (name, value) in enumerate(properties):
        if part is None or i == part:
            m.d.comb += Assert(value)
        elif i < part:
            m.d.comb += Assume(value)
        else:
            held = Signal(init=1, name=f"{name}_held_before")
            m.d.sync += held.eq(value)
            m.d.comb += Assume(held)


# ---------------------------------------------------------------------------------------------- descriptor

class SequencerDescriptorHarness(Harness):
    """The ``buffers`` port against the descriptor in memory: the harness is the device memory (a
    descriptor of free words at a free 8-aligned address, answers in request order) and asserts that
    whenever the sequencer offers a write or a job, its buffers are the fields of those words."""

    def elaborate(self, platform):
        m, steps = self.frame()
        dut = self.instantiate(m, self.block, platform)
        reads = dut.descriptor_reads
        drive_inputs(self, m, dut, "in_", skip=("descriptor", "descriptor_reads", "reads_idle"))
        descriptor = Cat(Const(0, 3), self.constant(m, steps, 61, "descriptor_word_address"))
        words = [self.constant(m, steps, 64, f"descriptor_word{i}") for i in range(DESCRIPTOR_SIZE // 8)]
        m.d.comb += dut.descriptor.eq(descriptor)

        # the memory: every request queued (its word index, or outside the descriptor), answered in order
        entry = data.StructLayout({"index": range(len(words)), "inside": 1})
        pending = Queue(m, entry, len(words), "descriptor_pending")
        offset = Signal(64, name="request_offset")
        m.d.comb += [
            reads.request.ready.eq(self.free(1, "request_ready")),
            offset.eq(reads.request.payload - descriptor),
            pending.push.eq(reads.request.valid & reads.request.ready),
            pending.data.index.eq(offset[3:]), pending.data.inside.eq((offset < DESCRIPTOR_SIZE) & (offset[:3] == 0)),
            reads.response.valid.eq(self.free(1, "response_valid") & pending.any),
            reads.response.payload.data.eq(Mux(pending.head.inside, Array(words)[pending.head.index],
                                               self.free(64, "response_outside"))),
            reads.response.payload.error.eq(self.free(1, "response_error")),
            reads.response.payload.address.eq(self.free(64, "response_address")),
            pending.pop.eq(reads.response.valid & reads.response.ready),
            dut.reads_idle.eq(~pending.any & self.free(1, "other_reads_idle")),
        ]

        fields = Cat(words)
        b = dut.buffers
        m.d.comb += Assert(~(dut.fields.valid | dut.job.valid)
                           | Cat(*(b[name] == fields[field_span(DESCRIPTOR_FIELDS, name)[0] * 8:][:64]
                                   for name in OutputBuffers.members)).all())

        # invariants: the fetch walks the words in order, each answer lands in its register two
        # cycles later (through the registered answer and its one-hot word)
        asked, answered, descriptor_base, result_valid = inner(
            m.submodules.dut, "descriptor_asked", "descriptor_answered", "descriptor_base", "result_valid")
        registers = inner(m.submodules.dut, *(f"desc_word{i}" for i in range(len(words))))
        # a word lands two cycles after its answer: the answer and a one-hot of its word first
        answer, lands = inner(m.submodules.dut, "descriptor_answer", "descriptor_lands")
        in_state = {name: dut.state == code for name, code in dut.state_code.items()}
        fetching = in_state["DESCRIPTOR"]
        fetching_descriptor, fetching_header, prefetching = inner(
            m.submodules.dut, "fetching_descriptor", "fetching_header", "prefetching")
        m.d.comb += [
            Assert((fetching_descriptor == fetching) & (fetching_header == in_state["IMAGE"])
                   & (prefetching == in_state["FRONTIER"])),
            Assert(in_state["IDLE"] | (descriptor_base == descriptor)),
            Assert(~result_valid | Cat(*(r == w for r, w in zip(registers, words, strict=True))).all()),
            Assert(fetching | in_state["FINISH"] | ~pending.any),
            # (IMAGE's first cycle: the last word lands as ``result_valid`` is set)
            Assert(in_state["IDLE"] | fetching | in_state["FINISH"] | in_state["DONE"] | in_state["IMAGE"]
                   | result_valid),
            Assert(~result_valid | (lands == 0)), Assert(~(fetching & result_valid)),
            Assert(~fetching | ((answered <= asked) & (asked <= len(words)) & (pending.count == asked - answered))),
            Assert(pending.write == (pending.read + pending.count)[:len(pending.write)]),
        ]
        for i, (register, word) in enumerate(zip(registers, words, strict=True)):
            landed = (register == word) | (lands[i] & (answer == word))
            m.d.comb += Assert(~((fetching & (i < answered)) | (in_state["IMAGE"] & ~result_valid)) | landed)
        for slot, stored in enumerate(pending.entries):
            j = Signal(range(len(words)), name=f"pending_age{slot}")
            m.d.comb += j.eq(slot - pending.read)
            m.d.comb += Assert(~(fetching & (j < pending.count))
                               | ((stored.index == answered + j) & stored.inside))
        return m


#: Broken variants: name -> (class, the check it must fail).
#: A broken variant of a k-induction check fails its induction step: from states where every
#: property and invariant held, one step of the broken block breaks one (the counterexample names it).
BROKEN_SEQUENCER_WRITES = {
    "counts_one_past": (_CountsOnePast, "sequencer_writes"),
    "nodes_unchecked": (_NodesUnchecked, "sequencer_writes"),
}
BROKEN_SEQUENCER_DESCRIPTOR = {
    "descriptor_skewed": (_DescriptorSkewed, "sequencer_descriptor"),
}
#: The variants whose only counterexample within the CI budget is an induction step (SymbiYosys:
#: UNKNOWN, "Temporal induction failed", the broken assertion named): no trace from reset reaches a
#: count write or a job in fewer than ~40 cycles, beyond what a bounded run here reaches. Every other
#: broken variant must FAIL from reset.
INDUCTION_ONLY_VARIANTS = frozenset({"counts_one_past", "nodes_unchecked"})


def build(block: str = "sequencer_writes", broken=None, inductive_only: bool = False,
          part: int | None = None) -> Harness:
    """The harness ``block`` around the sequencer of :data:`FORMAL_KERNEL_CONFIG` (or the ``broken``
    class); ``part``: one part of ``sequencer_writes``' ordered decomposition (:func:`ordered_parts`)."""
    dut = (broken or _ObservedSequencer)(FORMAL_KERNEL_CONFIG)
    if block == "sequencer_descriptor":
        assert part is None, "sequencer_descriptor is one check"
        return SequencerDescriptorHarness(dut, inductive_only)
    return SequencerWritesHarness(dut, inductive_only, part)
