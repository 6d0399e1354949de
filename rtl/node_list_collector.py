"""The collector of one lane: the index reads' answers, in order, to node-list appends at each job's place."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream
from amaranth.lib.wiring import In, Out

from smartsage.spec.config import KernelConfig

from .axi import ADDRESS_WIDTH
from .kernel_block import KernelBlock
from .register_copies import register_copies
from .write_combiner import AppendWord

__all__ = ["NodeListCollector", "collect_layout", "answer_layout", "id_offset"]


def id_offset(wide_ids, index):
    """``index`` node ids in bytes (a shift, not a multiplication)."""
    return Mux(wide_ids, index << 3, index << 2)


def collect_layout(max_fanout: int) -> data.StructLayout:
    """A job's place in the node list: its id count and the device address of its first slot
    (``nodes_ptr + base x id size``)."""
    return data.StructLayout({"count": range(max_fanout + 1), "address": ADDRESS_WIDTH})


def answer_layout(data_width: int) -> data.StructLayout:
    """An index read's answer: the beat, the address read, its error flag and how many consecutive
    ids of the beat it brings (from the address on)."""
    return data.StructLayout({"beat": data_width, "address": ADDRESS_WIDTH, "error": 1,
                              "ids": range(data_width // 32 + 1)})


class NodeListCollector(KernelBlock):
    """Appends each answer's ids to the node list, one id per cycle, at the place of the job at the
    head of ``jobs`` (``address + i x id size`` for its i-th id, ``i < count``), job after job.

    The answers come in the order the issuer asked (one lane's reads are answered in order); a job
    leaves ``jobs`` with its last id, an answer leaves ``answers`` with its last id. What it writes
    depends on the jobs alone: the ``lane_appends`` formal check proves that every append of a job
    lies in that job's slots (naturally aligned), whatever the answers.

    Parameters
    ----------
    config : KernelConfig
        Data width and max_fanout of the build.

    Members
    -------
    answers : ``In(stream.Signature(answer_layout(data_width)))``
        The lane's read answers, in request order (the head is held until its last id is appended).
    jobs : ``In(stream.Signature(collect_layout(max_fanout)))``
        The places of the lane's jobs, in the order their reads were issued; ``count`` >= 1.
    appends : ``Out(stream.Signature(AppendWord))``
        Node-list appends (the lane's write-combiner port).
    wide_ids : ``In(1)``
        Node ids are u64 (else u32); held while a job is at the head.
    abandon : ``In(1)``
        The command ends: offer nothing and report no error. The heads may still be taken (never
        appended): ``clear`` must follow in the next cycle, as FINISH provides.
    clear : ``In(1)``
        Forget the ids taken of the head answer and job (a command's start and end; the streamer
        empties both queues at the same time).
    resume : ``In(1)``
        Forget a read error (the next command is taken).
    idle : ``Out(1)``
        No answer or job waits (or stopped by an error).
    failed : ``Out(1)``
        Stopped by a read error until ``resume``.
    storage_error : ``Out(1)``, ``storage_error_address`` : ``Out(64)``
        An errored answer reached the head this cycle, and its address.
    """

    def __init__(self, config: KernelConfig):
        super().__init__(config, {
            "answers": In(stream.Signature(answer_layout(config.data_width))),
            "jobs": In(stream.Signature(collect_layout(config.max_fanout))),
            "appends": Out(stream.Signature(AppendWord)),
            "wide_ids": In(1), "abandon": In(1), "clear": In(1), "resume": In(1),
            "idle": Out(1), "failed": Out(1), "storage_error": Out(1), "storage_error_address": Out(ADDRESS_WIDTH),
        })

    def _next_address(self, address, wide_ids):
        """The next id's address within a job (a hook for the formal checks' broken variants)."""
        return address + Mux(wide_ids, 8, 4)

    def _last_of_job(self, appended_up, count):
        """The id being appended is the job's last, from the ids appended of the job with this one
        (a hook for the broken variants)."""
        return appended_up == count

    def elaborate(self, platform):
        m = Module()
        answers, jobs, appends, wide_ids = self.answers, self.jobs, self.appends, self.wide_ids
        head, job = answers.payload, jobs.payload
        data_bytes, beat_log2 = self.config.data_bytes, self.config.beat_log2

        # stopped by a read error: the flag as two flip-flops that load its next value, one for the
        # collector's own handshakes, one for ``failed`` (which reaches the sequencer and the other
        # lanes: as one flip-flop, the error -> the job's ready -> the job buffer was 9.2-10.8 ns on
        # the ECP5 proxy)
        error_next = Signal()
        error, failed = register_copies(m, platform, "error", error_next, 2)
        m.d.comb += error_next.eq(error)
        taken = Signal(range(data_bytes // 4))             # ids of the head answer
        appended = Signal(range(self.config.max_fanout))   # ids of the job
        # ``appended + 1``, a register stepped beside it: the job's end is an equality of two registers
        # (as ``appended == count - 1``, a carry chain on the job buffer's count sat in front of the
        # job's ready and the buffer's ~100 enables: 8.6-9.0 ns on ``small``'s ECP5 proxy)
        appended_up = Signal(range(self.config.max_fanout + 1), init=1)
        # ``first``: appended == 0, a flip-flop: it picks the append's address (job's or running) in
        # front of the write combiner's beat compares; a copy of its own does (as one flip-flop with
        # the collector's steps too, into the combiner port's beat compare it was 8.3 ns on the ECP5
        # proxy). Set and cleared as ``first_next``
        first_next = Signal()
        first, first_select = register_copies(m, platform, "first", first_next, 2, init=1)
        m.d.comb += first_next.eq(first)
        offset = Signal(beat_log2 + 1)
        append_address = Signal(ADDRESS_WIDTH)       # the next id's, within a job
        # (handles for the formal checks' invariants)
        self._appended, self._first, self._append_address = appended, first, append_address
        self._appended_up = appended_up
        m.d.comb += offset.eq(head.address[:beat_log2] + id_offset(wide_ids, taken))
        wide_id = head.beat.word_select(offset[3:beat_log2], 64) if data_bytes > 8 else head.beat
        narrow_id = head.beat.word_select(offset[2:beat_log2], 32)
        m.d.comb += self.idle.eq(error | (~answers.valid & ~jobs.valid))
        # the append's payload whatever the flags (only its valid is gated: the error flag in front
        # of the address ran into the write combiner port's beat compares, 13.2 ns on the ECP5 proxy)
        m.d.comb += [
            appends.payload.address.eq(Mux(first_select, job.address, append_address)),
            appends.payload.data.eq(Mux(wide_ids, wide_id, narrow_id)),
            appends.payload.wide.eq(wide_ids),
        ]
        # ``abandon`` gates the append's valid and the error report only: the heads' ready flags and
        # the registers' steps do not wait for it, so the sequencer's flag (one net across the chip
        # into each lane) does not run into the answer and job buffers' ~150 enables (the whole
        # ``default`` kernel's critical path on the ECP5 proxy, 10.87 ns). What the collector takes
        # while abandoning is never appended and leaves no trace: ``abandon`` is FINISH, and every
        # FINISH cycle is followed by ``clear`` (the sequencer's job reset a cycle late), which
        # empties both queues and resets the registers stepped here
        offered = Signal()
        m.d.comb += [offered.eq(answers.valid & jobs.valid & ~head.error),
                     appends.valid.eq(offered & ~self.abandon & ~error)]
        with m.If(~error):
            with m.If(answers.valid & head.error & ~self.abandon):
                m.d.comb += [self.storage_error.eq(1), self.storage_error_address.eq(head.address)]
                m.d.comb += error_next.eq(1)
            with m.Elif(offered & appends.ready):
                m.d.comb += first_next.eq(0)
                m.d.sync += [taken.eq(taken + 1), appended.eq(appended + 1), appended_up.eq(appended_up + 1),
                             append_address.eq(self._next_address(appends.payload.address, wide_ids))]
                with m.If(taken == head.ids - 1):
                    m.d.comb += answers.ready.eq(1)
                    m.d.sync += taken.eq(0)
                with m.If(self._last_of_job(appended_up, job.count)):
                    m.d.comb += jobs.ready.eq(1)
                    m.d.comb += first_next.eq(1)
                    m.d.sync += [appended.eq(0), appended_up.eq(1)]
        with m.If(self.clear | error):
            m.d.comb += first_next.eq(1)
            m.d.sync += [taken.eq(0), appended.eq(0), appended_up.eq(1)]
        with m.If(self.resume):  # stopped by an error until the next command
            m.d.comb += error_next.eq(0)
        m.d.comb += self.failed.eq(failed)
        return m
