"""A lane's part of "the kernel never writes device memory outside the descriptor's output buffers":
every node-list append of the :class:`~smartsage.rtl.node_list_collector.NodeListCollector` lies in
the slots of the job it belongs to, hence in the node list.

``lane_appends`` (the collector of :data:`~.kernel_writes.FORMAL_KERNEL_CONFIG`, answers free at
every step, the write port's ``ready``, ``abandon``, ``clear`` and ``resume`` free):

Assumed, as the edge streamer and the sequencer provide them:

- a job at the head of ``jobs`` stays there, unchanged, until the collector takes it or ``clear``
  empties the queue (``jobs`` is the streamer's collects FIFO, reset with ``clear``);
- a job's place is ``nodes_ptr + base x id size`` with ``count >= 1`` and ``base + count <=
  nodes_capacity`` (what ``sequencer_writes`` proves of every job the sequencer offers, the
  address with it; the dispatcher and the streamer pass jobs on unchanged: argued, see
  docs/synthesis.md);
- ``wide_ids`` changes only in a cycle after one with no job at the head (the sequencer latches it
  from the image header before the hop's first job), ``nodes_ptr`` and ``nodes_capacity`` are a
  command's constants, and the node list does not wrap around the 64-bit address space.

Asserted (in :func:`~.kernel_writes.ordered_parts` order, each property assuming the earlier ones):
four invariants on the collector's three registers (no id of a job appended while none is at the
head; fewer ids appended than the job has; the first-id flag is ``appended == 0``; the next id's
address stepped from the job's), then the
port properties: every append is ``job.address + i x id size`` with ``i < job.count``, of the id
size ``wide_ids`` says, and so inside ``[nodes_ptr, nodes_ptr + nodes_capacity x id size)``,
naturally aligned. Proved by k-induction at depth 2 (``smtbmc z3``).
"""

from __future__ import annotations

from amaranth.hdl import Assume, Mux

from ..node_list_collector import NodeListCollector, id_offset
from .common import Harness, history
from .kernel_writes import ADDRESS_SPACE, FORMAL_KERNEL_CONFIG, PartsHarness, ordered_parts

__all__ = ["LaneAppendsHarness", "BROKEN_LANE_APPENDS", "PART_ORDER", "build"]

#: The lane_appends properties, invariants first (see :func:`~.kernel_writes.ordered_parts`).
PART_ORDER = ("no_job_none_appended", "appended_below_count", "appended_up", "first_flag", "append_address",
              "job_slot", "node_list_window")


class _ObservedCollector(NodeListCollector):
    """The real collector (its registers are reachable as ``_appended``, ``_appended_up``, ``_first`` and
    ``_append_address``)."""


class _PopsLate(NodeListCollector):
    """Broken: a job leaves one id late (its last append lands in the next slot, past the job's)."""

    def _last_of_job(self, appended_up, count):
        return appended_up == count + 1


class _NarrowStride(NodeListCollector):
    """Broken: the next id's address is stepped by 4 bytes even when the ids are u64."""

    def _next_address(self, address, wide_ids):
        return address + 4


class LaneAppendsHarness(PartsHarness):
    def elaborate(self, platform):
        m, steps, dut = self.start(platform)
        nodes_ptr = self.constant(m, steps, 64, "nodes_ptr")
        nodes_capacity = self.constant(m, steps, 32, "nodes_capacity")
        base = self.free(32, "job_base")
        wide = dut.wide_ids
        job, jobs = dut.jobs.payload, dut.jobs
        m.d.comb += Assume(nodes_ptr + (nodes_capacity << 3) <= ADDRESS_SPACE)

        # the job queue: a head stays until taken or cleared; its place lies in the node list
        held = history(m, jobs.valid & ~jobs.ready & ~dut.clear, 1, "job_held")[0]
        previous_job = history(m, job.as_value(), 1, "previous_job")[0]
        with m.If((steps >= 1) & held):
            m.d.comb += [Assume(jobs.valid), Assume(job.as_value() == previous_job)]
        with m.If(jobs.valid):
            m.d.comb += [Assume(job.count != 0), Assume(job.count <= dut.config.max_fanout),
                         Assume(job.address == nodes_ptr + id_offset(wide, base)),
                         Assume(base + job.count <= nodes_capacity)]
        # the id size changes only after a cycle without a job at the head
        no_job_before = history(m, ~jobs.valid, 1, "no_job_before")[0]
        wide_before = history(m, wide, 1, "wide_before")[0]
        with m.If((steps >= 1) & ~no_job_before):
            m.d.comb += Assume(wide == wide_before)

        append = dut.appends.payload
        size = Mux(wide, 8, 4)
        slot_offset = (append.address - job.address)[:64]
        end = nodes_ptr + id_offset(wide, nodes_capacity)
        properties = {
            "no_job_none_appended": jobs.valid | (dut._appended == 0),
            "appended_below_count": ~jobs.valid | (dut._appended < job.count),
            # (after the count bound: a broken collector whose count wraps breaks that one first)
            "appended_up": dut._appended_up == dut._appended + 1,
            "first_flag": dut._first == (dut._appended == 0),
            "append_address": ~jobs.valid | (dut._appended == 0)
                              | (dut._append_address == (job.address + id_offset(wide, dut._appended))[:64]),
            "job_slot": ~dut.appends.valid | (jobs.valid & (append.address >= job.address)
                                              & (slot_offset < id_offset(wide, job.count))
                                              & Mux(wide, slot_offset[:3] == 0, slot_offset[:2] == 0)),
            "node_list_window": ~dut.appends.valid | ((append.wide == wide) & (append.address >= nodes_ptr)
                                                      & (append.address + size <= end)
                                                      & Mux(wide, append.address[:3] == nodes_ptr[:3],
                                                            append.address[:2] == nodes_ptr[:2])),
        }
        assert tuple(properties) == PART_ORDER
        ordered_parts(m, list(properties.items()), self.part)
        return m


BROKEN_LANE_APPENDS = {
    "pops_late": (_PopsLate, "lane_appends"),
    "narrow_stride": (_NarrowStride, "lane_appends"),
}


def build(broken=None, inductive_only: bool = False, part: int | None = None) -> Harness:
    """The ``lane_appends`` harness around the collector of :data:`FORMAL_KERNEL_CONFIG` (or ``broken``)."""
    return LaneAppendsHarness((broken or _ObservedCollector)(FORMAL_KERNEL_CONFIG), inductive_only, part)
