"""The job dispatcher: the sequencer's per-node jobs to the lanes, the lanes in turn."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, ResetInserter, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .free_slot_fifo import FreeSlotFIFO
from .stream_buffer import StreamBuffer

__all__ = ["JobDispatcher", "JOBS_PER_LANE", "node_job_layout", "lane_job_layout"]

#: Jobs a lane's queue holds before its edge streamer takes them. The sequencer hands out one node
#: per cycle, about the lanes' pace on a two-hop batch: deeper queues let it go on while a lane
#: waits for a sampler (the default build's cycle-count test: 3,341 cycles with 4, 3,334 with 8).
JOBS_PER_LANE = 8


def node_job_layout(max_fanout: int) -> data.StructLayout:
    """One node's sampling job: its RNG key H_v after mix32's first xor-shift (``shifted_key``, as the
    prefetcher gives it and a position sampler takes it), degree d, count n = min(d, k), the storage address
    of its first edge (``indices_base + indptr[v] x id size``), its place in the node list
    (``base``, in ids) and that place's device address (``nodes_ptr + base x id size``). The
    sequencer works both addresses out as it forms the job, from its registers, so a lane takes
    them as they are (the adds were a lane's path from the dispatcher's queue, a LUT-RAM read, into
    its stage: 11.0 ns on the ECP5 proxy)."""
    return data.StructLayout({"shifted_key": 32, "degree": 32, "count": range(max_fanout + 1), "edge_address": 64,
                              "base": 64, "node_address": 64})


def lane_job_layout(max_fanout: int) -> data.StructLayout:
    """A job as a lane's queue holds it: :func:`node_job_layout`'s fields and ``dense``, d == n (the
    node's edges are all its sample, d <= k), worked out as the job enters the queue, so no compare
    sits between the queue's LUT-RAM read and the lane's flip-flops (the lane's compare of degree
    and count, behind that read, was an 8.1 ns path on the ECP5 proxy)."""
    return data.StructLayout({**{name: field.shape for name, field in node_job_layout(max_fanout)}, "dense": 1})


class JobDispatcher(wiring.Component):
    """Hands each job to a lane with room in its queue, starting after the lane that took the last.

    Every lane has a queue of :data:`JOBS_PER_LANE` jobs. Jobs enter through a two-entry buffer
    (:class:`~smartsage.rtl.stream_buffer.StreamBuffer`): ``job.ready`` is one of its flip-flops and
    does not depend on ``job.valid`` (the sequencer writes the node's count in the cycle its job is
    taken, so it looks at ``job.ready`` before it offers the count), and the queues' write enables
    start at the buffer, not at the sequencer's decision (on the ECP5 proxy that decision ran through
    the lanes' queue levels into the LUT-RAM's ~50 write enables: the whole kernel's critical path at
    86.5 MHz). The buffer's head goes to a lane whenever some lane has room.

    Parameters
    ----------
    lanes : int
        Edge-streamer lanes (1 or more).
    max_fanout : int
        The largest fanout k of the build (sizes the job's count).

    Members
    -------
    job : ``In(stream.Signature(node_job_layout(max_fanout)))``
    lanes : ``Out(stream.Signature(lane_job_layout(max_fanout))).array(lanes)``
        Each lane's queue, oldest job first (with its ``dense`` flag).
    waiting : ``Out(1)``
        The buffer or some queue holds a job.
    clear : ``In(1)``
        Empties the queues and restarts the turn at lane 0 (a command's start and end).
    """

    def __init__(self, lanes: int, max_fanout: int):
        if not isinstance(lanes, int) or lanes < 1:
            raise TypeError(f"Lanes must be a positive integer, not {lanes!r}")
        if not isinstance(max_fanout, int) or max_fanout < 1:
            raise TypeError(f"Max fanout must be a positive integer, not {max_fanout!r}")
        self._lanes = lanes
        self._max_fanout = max_fanout
        job = stream.Signature(node_job_layout(max_fanout))
        lane_job = stream.Signature(lane_job_layout(max_fanout))
        super().__init__({"job": In(job), "lanes": Out(lane_job).array(lanes), "waiting": Out(1),
                          "clear": In(1)})

    @property
    def lane_count(self) -> int:
        return self._lanes

    @property
    def max_fanout(self) -> int:
        return self._max_fanout

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        layout = node_job_layout(self._max_fanout)
        m.submodules.intake = intake = ResetInserter(self.clear)(StreamBuffer(layout))
        wiring.connect(m, wiring.flipped(self.job), intake.i)
        job = intake.o
        queued = Signal(lane_job_layout(self._max_fanout))
        m.d.comb += [*(getattr(queued, name).eq(getattr(job.payload, name)) for name, _ in layout),
                     queued.dense.eq(job.payload.degree == job.payload.count)]
        queues = []
        for lane in range(lanes):
            queue = FreeSlotFIFO(width=queued.shape().size, depth=JOBS_PER_LANE)
            m.submodules[f"jobs{lane}"] = ResetInserter(self.clear)(queue)
            m.d.comb += queue.w_data.eq(queued)
            queues.append(queue)

        # the lane after the last one served that has room
        last_lane = Signal(range(max(lanes, 2)))
        next_lane = Signal(range(max(lanes, 2)))
        lane_free = Signal()
        with m.Switch(last_lane):
            for last in range(lanes):
                with m.Case(last):
                    for n, lane in enumerate((last + offset) % lanes for offset in range(1, lanes + 1)):
                        with (m.If if n == 0 else m.Elif)(queues[lane].w_rdy):
                            m.d.comb += [next_lane.eq(lane), lane_free.eq(1)]
        m.d.comb += job.ready.eq(lane_free)
        with m.If(job.valid & job.ready):
            with m.Switch(next_lane):
                for lane in range(lanes):
                    with m.Case(lane):
                        m.d.comb += queues[lane].w_en.eq(1)
            m.d.sync += last_lane.eq(next_lane)
        with m.If(self.clear):
            m.d.sync += last_lane.eq(0)

        for queue, out in zip(queues, self.lanes, strict=True):
            m.d.comb += [out.valid.eq(queue.r_rdy), out.payload.eq(queue.r_data), queue.r_en.eq(out.ready)]
        m.d.comb += self.waiting.eq(Cat(~intake.idle, *(queue.r_rdy for queue in queues)).any())
        return m
