"""The edge streamer of one lane: its jobs' positions to index reads, the ids to node-list appends.

The *issuer* turns each job's positions into index reads (several jobs' reads in flight at once,
up to ``outstanding_reads``); the *collector* takes the answers in order and appends the ids to
the node list at the job's reserved place (:class:`~smartsage.rtl.node_list_collector.NodeListCollector`,
its own block). A job with d > k runs a position sampler and reads one
id per position; a job with d <= k takes all its d consecutive ids, read a beat at a time
(*dense*: up to data_width / 32 ids per read). Lanes finish their jobs in any order: each id's
place was fixed at dispatch. Addresses are computed once per job (shifts, no multiplications) and
stepped in registers.

A little longer than the ~400 lines of the other blocks: the issuer's two halves (the job stage
with the samplers' turn, and the ticket's reads) share the tickets FIFO and the samplers, and most
of the length is the comments that give each register's timing reason on the ECP5 proxy.
"""

from __future__ import annotations

from amaranth.hdl import (
    Array,
    Cat,
    ClockDomain,
    ClockSignal,
    Const,
    DomainRenamer,
    Module,
    Mux,
    ResetInserter,
    ResetSignal,
    Signal,
)
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from smartsage.spec.config import KernelConfig

from .axi import ADDRESS_WIDTH
from .free_slot_fifo import FreeSlotFIFO
from .job_dispatcher import lane_job_layout
from .kernel_block import KernelBlock, check_kernel_config
from .node_list_collector import NodeListCollector, answer_layout, id_offset
from .node_list_collector import collect_layout as node_list_collector_layout
from .position_sampler import DRAW_LATENCY, MAX_NODES, PositionSampler
from .register_copies import and_copies, lut_copies, register_copies
from .stream_buffer import StreamBuffer
from .tagged_read_stream import ReadPortSignature
from .write_combiner import AppendWord

__all__ = ["EdgeStreamer", "SAMPLERS_PER_LANE", "NODES_PER_SAMPLER", "HEAD_NODE_COPIES", "HEAD_NODE_GROUPS",
           "STAGED_GROUPS", "ANSWER_DEPTH", "id_offset", "ids_tag_shape"]

#: Nodes a lane samples at once (its samplers' node places), taking jobs in turn: a job holds a place
#: for two cycles (request and start), ``position_sampler.DRAW_LATENCY`` to fill the draw pipeline
#: and k to stream. With fanouts of ~10 and about every other job sampled, a lane receives a sampled
#: job every ~8 cycles, so the places must turn one job around every 6. Every place has a ticket
#: slot, so all of them fill their pipelines while earlier tickets stream (with two ticket slots the
#: default build took 1.29 cycles per edge per lane whatever the sampler count; with one per
#: sampler, 1.099).
SAMPLERS_PER_LANE = -(-(DRAW_LATENCY + 2 + 10) // 6)
#: Nodes each position sampler holds, their draws sharing its one draw pipeline (the older job's
#: first, the other in the cycles it leaves): the pipeline's mix32 rounds are most of a sampler's
#: LUTs, and a place's node mostly waits for the lane's one read port, which takes a position a cycle
#: from one node at a time. The lane gives jobs to the samplers' first places in turn, then to their
#: second ones, so consecutive jobs draw on different pipelines (the cycle-count test: 3,323 cycles,
#: as with six samplers of one node).
NODES_PER_SAMPLER = MAX_NODES
#: Copies of a lane's staged node (key and degree, 64 flip-flops each), each loaded in the same way and
#: read by its share of the samplers (as one copy, its nets to six samplers across the lane were
#: 7.6-8.2 ns at no logic level on the whole kernel's ECP5 proxy).
HEAD_NODE_COPIES = 2
#: Groups of each copy of the staged node, each picked by its own copy of the stage's take
#: (:func:`~smartsage.rtl.register_copies.and_copies`).
HEAD_NODE_GROUPS = 4
#: Groups of the rest of a lane's staged job (its count and addresses, 133 flip-flops), likewise.
STAGED_GROUPS = 4
#: Groups of the head answer's and head job's payload registers in front of the collector, each
#: loaded through a copy of its buffer's load decision (:class:`~smartsage.rtl.stream_buffer.StreamBuffer`).
ANSWER_LOAD_GROUPS = 4
COLLECT_LOAD_GROUPS = 2
#: Answers (beats) a lane holds between its read channel and its collector.
ANSWER_DEPTH = 32


class _Place:
    """One node place of a position sampler, as the lane drives it: its request, positions and
    ``ready_unless_taken``."""

    def __init__(self, sampler: PositionSampler, node: int):
        self.request = sampler.request[node]
        self.positions = sampler.positions[node]
        self.ready_unless_taken = sampler.ready_unless_taken[node]


def ids_tag_shape(data_width: int) -> range:
    """The tag of a lane's read: how many consecutive ids of the beat it brings (from the address on)."""
    return range(data_width // 32 + 1)


class EdgeStreamer(KernelBlock):
    """One lane: position samplers for :data:`SAMPLERS_PER_LANE` nodes (:data:`NODES_PER_SAMPLER` each),
    the issuer, an answer FIFO and the collector.

    Parameters
    ----------
    config : KernelConfig
        Data width, max_fanout and outstanding_reads of the build.

    Members
    -------
    job : ``In(stream.Signature(lane_job_layout(config.max_fanout)))``
        The lane's jobs (from the dispatcher's queue, with their ``dense`` flag).
    reads : ``Out(ReadPortSignature(ids_tag_shape(data_width), data_width))``
        Index reads on the lane's storage master; the tag is the ids each read brings.
    appends : ``Out(stream.Signature(AppendWord))``
        Node-list appends (the lane's write-combiner port).
    wide_ids : ``In(1)``
        Node ids are u64 (else u32).
    fanout : ``In(16)``
        The hop's k.
    abandon : ``In(1)``
        The command ends: drop the job and the answers.
    halt : ``In(1)``
        Some lane hit a read error: take no more work from the next cycle (this lane's own error
        too, whether or not it is in ``halt``).
    clear : ``In(1)``
        Empty the FIFOs and counters (a command's start and end).
    reset_samplers : ``In(1)``
        Reset the position samplers (a command's start).
    resume : ``In(1)``
        Forget a read error (the next command is taken).
    idle : ``Out(1)``
        No job, ticket, read or answer left (or stopped by an error).
    failed : ``Out(1)``
        Stopped by a read error until ``resume``.
    storage_error : ``Out(1)``, ``storage_error_address`` : ``Out(64)``
        A read error taken this cycle, and the failing address.
    """

    def __init__(self, config: KernelConfig):
        check_kernel_config(config)
        super().__init__(config, {
            "job": In(stream.Signature(lane_job_layout(config.max_fanout))),
            "reads": Out(ReadPortSignature(ids_tag_shape(config.data_width), config.data_width)),
            "appends": Out(stream.Signature(AppendWord)),
            "wide_ids": In(1), "fanout": In(16),
            "abandon": In(1), "halt": In(1), "clear": In(1), "reset_samplers": In(1), "resume": In(1),
            "idle": Out(1), "failed": Out(1), "storage_error": Out(1), "storage_error_address": Out(ADDRESS_WIDTH),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        data_bytes = cfg.data_bytes
        beat_log2 = data_bytes.bit_length() - 1
        ids_per_beat = data_bytes // 4
        port, appends, jobs = self.reads, self.appends, self.job
        wide_ids, fanout = self.wide_ids, self.fanout
        finishing, job_reset = self.abandon, self.clear

        # A command that ends early (an error mid-sample) can leave positions in the samplers: they
        # are reset when the next command starts. The samplers take jobs in turn, so the others'
        # pipelines fill while one's positions stream.
        # The samplers are reset by one flip-flop of the lane's, a cycle after the sequencer's
        # ``reset_samplers`` or the kernel's reset: their own domain on the lane's clock, so no OR of
        # the two resets sits in front of the samplers' control flags (that LUT, fed by the kernel's
        # reset across the chip, was the whole kernel's critical path on the ECP5 proxy, 14.6 ns).
        # That flip-flop is copied, one per sampler and one for the lane's own turn flag, each loading
        # the same value (equal in every cycle): as one net across the six samplers it was 8.3-10.6 ns
        # on the whole kernel's proxy, one logic level
        assert SAMPLERS_PER_LANE % NODES_PER_SAMPLER == 0, "a lane's samplers hold its places, all of them"
        pipelines = SAMPLERS_PER_LANE // NODES_PER_SAMPLER
        samplers_reset, *sampler_resets = register_copies(m, platform, "samplers_reset", self.reset_samplers,
                                                          pipelines + 1, init=1)
        pipeline_samplers = [PositionSampler(cfg.max_fanout, draws_only=True, nodes=NODES_PER_SAMPLER)
                             for _ in range(pipelines)]
        for number, sampler in enumerate(pipeline_samplers):
            domain = f"samplers{number}"
            m.domains += ClockDomain(domain, local=True)
            m.d.comb += [ClockSignal(domain).eq(ClockSignal()), ResetSignal(domain).eq(sampler_resets[number])]
            m.submodules[f"positions{number}"] = DomainRenamer(domain)(sampler)
        # the places in the order the lane takes them: the samplers' first places, then their second ones
        samplers = [_Place(pipeline_samplers[number % pipelines], number // pipelines)
                    for number in range(SAMPLERS_PER_LANE)]

        # the collector: one id per cycle, at the job's place (base + i), job after job (wired below)
        m.submodules.collector = collector = NodeListCollector(cfg)
        # stop taking work a cycle after a read error, this lane's or another's (``halt``): a
        # flip-flop of the lane's own, so no wire from the collector's error flag (which also goes to
        # the sequencer and the other lanes) runs through the job offer into the tickets', collects'
        # and stage FIFOs' write enables (13.6 ns, the whole kernel's critical path at 73.7 MHz). A
        # job taken in that cycle is dropped with the others when the command ends (FINISH).
        # The flag also takes FINISH's ``abandon`` a cycle late (the sequencer's flag into the
        # stage's write enable was the next path, 11.5 ns at 87.2 MHz): a job taken in FINISH's
        # first cycle is cleared with the queues in its second (the issuer reads ``abandon`` itself).
        # (The job offer reads it folded into ``lane_open``, below, a flip-flop loaded in the same way)
        stopped = Signal()
        m.d.sync += stopped.eq(self.halt | collector.failed | finishing)

        answered = port.response.valid & port.response.ready
        answer_ids = port.answer_tag
        issuer_idle = Signal()
        # reads unanswered: ``pending`` counts the reads issued up to the cycle before last, plus
        # ``issued``, the read of the cycle before (an answer comes a cycle after its read at the
        # earliest), so the issue handshake reaches one flip-flop, not the count's adder (a sampler's
        # position FIFO -> the issuer's read valid -> the count was 9.4 ns on the ECP5 proxy)
        pending = Signal(range(cfg.outstanding_reads + 1))
        issued = Signal()
        m.d.sync += [issued.eq(port.request.valid & port.request.ready), pending.eq(pending + issued - answered)]
        with m.If(job_reset):
            m.d.sync += [pending.eq(0), issued.eq(0)]

        # issuer, first half: take a job, start the sampler whose turn it is (d > k), queue a
        # ticket for the streaming half and the job's place for the collector (all in one cycle)
        job_layout = lane_job_layout(cfg.max_fanout)
        # (a job brings its first edge's storage address and its place's device address: the
        # sequencer works them out as it forms the job)
        collect_layout = node_list_collector_layout(cfg.max_fanout)
        ticket_layout = data.StructLayout({"sampler": range(SAMPLERS_PER_LANE), "dense": 1,
                                           "count": range(cfg.max_fanout + 1), "edge_address": 64})
        # a ticket per sampler: a sampled job's draws start when its ticket is queued, so every sampler
        # can fill its pipeline while the tickets ahead of it stream
        # (each FIFO a place deeper than it needs: its room is a flag registered a cycle before, one
        # place short, below; each is written in every cycle at its free slot, so ``go`` moves its
        # pointers and reaches none of its LUT-RAM cells; the tickets' reads are counted a cycle late,
        # so the issue handshake reaches a flip-flop there, not its pointers and level: a position
        # FIFO's flag -> ``positions_valid`` -> ``issue_fire`` -> the tickets FIFO, five levels and
        # 9.8-11.7 ns on ``default``'s ECP5 proxy)
        tickets = FreeSlotFIFO(width=ticket_layout.size, depth=SAMPLERS_PER_LANE + 1, late_read=True)
        m.submodules.tickets = ResetInserter(job_reset)(tickets)
        collects = FreeSlotFIFO(width=collect_layout.size, depth=cfg.outstanding_reads + 1)
        m.submodules.collects = ResetInserter(job_reset)(collects)
        ticket_in = Signal(ticket_layout)
        collect_in = Signal(collect_layout)
        turn = Signal(range(SAMPLERS_PER_LANE))
        # the job at the queue's head is staged, in flip-flops: each follows the job taken (``take``,
        # a copy of the job handshake per group of them, ``and_copies``), else holds, so taking a job
        # or letting it go (``go``) enables no payload register (a staged job loaded when ``go``, ~200
        # enables behind the decision, was the edge streamer's critical path on the ECP5 proxy). The
        # stage holds one job (a job is taken only while it is empty or its job goes: taking jobs into
        # a second place ahead of the samplers unbalanced the lanes, 3,346 cycles instead of 3,321 in
        # the cycle-count test). (As a two-entry LUT-RAM FIFO, the stage's read, a one-level path
        # into the tickets' and collects' RAM write data, was 7.46 ns on ``small``'s proxy and
        # 10.10 ns on ``default``'s)
        # The job's key and degree are the samplers' request, in :data:`HEAD_NODE_COPIES` copies
        # (below); the rest, what the tickets and collects take as the job goes, is one copy.
        rest_layout = data.StructLayout({"count": range(cfg.max_fanout + 1), "edge_address": 64,
                                         "node_address": 64})
        staged = Signal(rest_layout, name="staged", reset_less=True)
        staged_valid = Signal()
        incoming = job_layout(jobs.payload)
        # the sampler whose turn it is, also one-hot: each sampler's request.valid is an AND of
        # flip-flops (it never waits for its ready), and its ready is not muxed into any load
        turn_hot = Signal(SAMPLERS_PER_LANE, init=1)
        offer = Signal()      # the staged job may go now, given room for it
        # room in the tickets and collects FIFOs and the lane not stopped, one flip-flop: the levels a
        # cycle before were below depth - 1 (a level grows by at most one a cycle), so no level compare
        # sits in front of ``offer``, and the three flags are one LUT input of the job decision and of
        # each sampler's request valid (as three flip-flops they took a LUT level of their own in
        # front of the samplers' ready and ``head_node``: 8.3-9.4 ns on the ECP5 proxy)
        lane_open = Signal()
        lane_open_next = Signal()
        # (the tickets' level less a read pending: the FIFO counts a read a cycle late, and the lane
        # opening a cycle late cost the cycle-count test 18 cycles of its 3,325)
        m.d.comb += lane_open_next.eq((tickets.level - tickets.r_pending < tickets.depth - 1)
                                      & (collects.level < collects.depth - 1)
                                      & ~(self.halt | collector.failed | finishing))
        m.d.sync += lane_open.eq(lane_open_next)
        go = Signal()
        # whether the sampler whose turn it is is ready, a flip-flop of the lane's (the samplers' ready
        # registers, ANDed with the turn and ORed in front of ``go``, were two LUT levels of its
        # 9.6-10.2 ns paths on the ECP5 proxy): loaded with the next ready of the sampler whose turn
        # it is next, worked out for both turns from the samplers' ``ready_unless_taken`` (a job
        # taken by a sampler moves the turn on to another) and picked by the job decision. It is low
        # a cycle after a clear whatever the sampler's ready, so it also qualifies the request's valid
        # (a sampler never takes a job the lane did not)
        turn_ready = Signal()
        turn_hot_next = Signal.like(turn_hot)
        # ``turn_hot[n] & turn_ready`` as a flip-flop per sampler (``turn_hot`` is one-hot, so sampler
        # n's is its next turn bit and its own ``ready_unless_taken``): each sampler's request valid is
        # one LUT of four flip-flops
        turn_ready_of = [Signal(name=f"turn_ready_of{number}") for number in range(SAMPLERS_PER_LANE)]
        assert SAMPLERS_PER_LANE > 1, "a job taken by a sampler must move the turn to another"
        # whether the staged job is dense (d == n: its ``dense`` flag), loaded as the job is taken
        head_dense = Signal()
        head_dense_next = Signal()
        m.d.comb += head_dense_next.eq(Mux(jobs.valid & jobs.ready, incoming.dense, head_dense))
        m.d.sync += head_dense.eq(head_dense_next)
        # the samplers' request (the staged job's key and degree) from flip-flops of their own, in
        # copies (as one copy, or as the read of a LUT-RAM stage, fanned out to the six samplers' node
        # registers, it was a one-LUT path of 8.2-9.1 ns on the ECP5 proxy). They load the incoming
        # job as it is taken, else hold, through multiplexers picked by copies of the take's last AND,
        # so ``go`` reaches no payload register and the take reaches four LUTs per copy of the node
        # (:data:`HEAD_NODE_COPIES`), not 128 multiplexers. (A copy that followed the staged job a
        # cycle late cost the cycle-count test 9 to 14 cycles of its 3,325, whether the samplers took
        # it late or the lane held the job back)
        # The job brings the key after mix32's first xor-shift
        # (:data:`~smartsage.rtl.position_sampler.PositionRequest`; the prefetcher's key pipeline ends
        # in it): no LUT between the queue's read and ``head_node``, nor between ``head_node`` and the
        # samplers' first mix32 register (the xor, fanned out to the six samplers, made ``head_node``
        # -> ``keyed_c`` 7.5-9.8 ns; in front of ``head_node`` it was a LUT of 7.9-8.1 ns paths).
        head_layout = data.StructLayout({"shifted_key": 32, "degree": 32})
        head_nodes = [Signal(head_layout, name=f"head_node{copy}", reset_less=True)
                      for copy in range(HEAD_NODE_COPIES)]
        incoming_head = Cat(incoming.shifted_key, incoming.degree)
        incoming_rest = Cat(incoming.count, incoming.edge_address, incoming.node_address)
        takes = and_copies(m, platform, "stage_takes", jobs.valid, jobs.ready,
                           HEAD_NODE_COPIES * HEAD_NODE_GROUPS + STAGED_GROUPS)
        staged_parts = [(head_nodes[copy].as_value(), incoming_head, group, HEAD_NODE_GROUPS)
                        for copy in range(HEAD_NODE_COPIES) for group in range(HEAD_NODE_GROUPS)]
        staged_parts += [(staged.as_value(), incoming_rest, group, STAGED_GROUPS) for group in range(STAGED_GROUPS)]
        for take, (register, value, group, groups) in zip(takes, staged_parts, strict=True):
            part = slice(group * len(register) // groups, (group + 1) * len(register) // groups)
            m.d.sync += register[part].eq(Mux(take, value[part], register[part]))
        take_job = jobs.valid & jobs.ready
        staged_valid_next = Signal()
        m.d.comb += staged_valid_next.eq(~job_reset & (take_job | (staged_valid & ~go)))
        m.d.sync += staged_valid.eq(staged_valid_next)
        # the samplers' request valids read copies of the stage's three flags, a set per sampler
        # pipeline (``register_copies``), so that no one flag's net spans the lane's samplers: with
        # the flags themselves, ``head_dense`` -> a valid -> a node's handshake-picked grant -> its
        # issue flip-flops was 7.6-7.8 ns on ``small``'s ECP5 proxy
        sampler_flags = [register_copies(m, platform, name, next_value, pipelines)
                         for name, next_value in (("staged_valid_for", staged_valid_next),
                                                  ("lane_open_for", lane_open_next),
                                                  ("head_dense_for", head_dense_next))]
        m.d.comb += [
            offer.eq(staged_valid & lane_open),
            go.eq(offer & (head_dense | turn_ready)),
        ]
        # the job's ready, ``~staged_valid | go``, one LUT of the four flip-flops it reads (a LUT4
        # instance on the ECP5 proxy: mapped behind ``go``'s own LUT and the stage's pop, ``lane_open``
        # -> the ready -> the stage's take copies -> ``head_node`` was four levels, 8.2 ns on
        # ``small``'s proxy)
        [job_ready] = lut_copies(m, platform, "job_ready",
                                 lambda staged, open_, dense, ready: ~staged | (open_ & (dense | ready)),
                                 [staged_valid, lane_open, head_dense, turn_ready], 1)
        m.d.comb += jobs.ready.eq(job_ready)
        m.d.comb += [
            ticket_in.sampler.eq(turn), ticket_in.dense.eq(head_dense), ticket_in.count.eq(staged.count),
            ticket_in.edge_address.eq(staged.edge_address),
            tickets.w_data.eq(ticket_in),
            collect_in.count.eq(staged.count),
            collect_in.address.eq(staged.node_address),
            collects.w_data.eq(collect_in),
        ]
        # the hop's fanout, a register of the lane's: the sequencer sets it at the hop's start, while no
        # lane and no prefetch runs, and the hop's first job reaches the samplers several cycles after
        # (the sequencer's register -> the samplers' ``left`` and ``left_any``, 7.9 ns on the proxy)
        hop_fanout = Signal(16)
        m.d.sync += hop_fanout.eq(fanout)
        for number, sampler in enumerate(samplers):
            head_node = head_nodes[(number % pipelines) * HEAD_NODE_COPIES // pipelines]   # by sampler
            staged_for, open_for, dense_for = (flags[number % pipelines] for flags in sampler_flags)
            m.d.comb += [sampler.request.payload.shifted_key.eq(head_node.shifted_key),
                         sampler.request.payload.degree.eq(head_node.degree),
                         sampler.request.payload.fanout.eq(hop_fanout),
                         sampler.request.valid.eq(staged_for & open_for & ~dense_for & turn_ready_of[number])]
        m.d.comb += turn_hot_next.eq(turn_hot)
        with m.If(go):
            m.d.comb += [tickets.w_en.eq(1), collects.w_en.eq(1)]
            with m.If(~head_dense):
                m.d.sync += turn.eq(Mux(turn == SAMPLERS_PER_LANE - 1, 0, turn + 1))
                m.d.comb += turn_hot_next.eq(turn_hot.rotate_left(1))
        with m.If(job_reset):
            m.d.sync += turn.eq(0)
            m.d.comb += turn_hot_next.eq(1)
        unless_taken = Cat(*(sampler.ready_unless_taken for sampler in samplers))
        stays_ready = (unless_taken & turn_hot).any()
        next_ready = (unless_taken & turn_hot.rotate_left(1)).any()
        m.d.sync += [turn_hot.eq(turn_hot_next),
                     turn_ready.eq(~samplers_reset & ~job_reset & Mux(go & ~head_dense, next_ready, stays_ready))]
        for number, sampler in enumerate(samplers):
            m.d.sync += turn_ready_of[number].eq(~samplers_reset & ~job_reset & turn_hot_next[number]
                                                 & sampler.ready_unless_taken)

        # issuer, second half: each ticket's reads, ticket after ticket
        # the sampler whose positions the issuer takes, one-hot, a register loaded with the ticket
        # (zero for a dense ticket and outside a ticket): a sampler's ``positions.ready`` is the read
        # port's ready and one flip-flop, not the ticket's sampler decoded with the issuer's state and
        # the dense flag (the ticket -> a sampler's ``reserved`` and FIFO level, 8.2-8.7 ns and the
        # whole kernel's worst path on the ECP5 proxy in one run)
        taking = Signal(SAMPLERS_PER_LANE)
        streaming = Signal()    # a ticket is held (its reads are issued)
        ticket_sampler = Signal(range(SAMPLERS_PER_LANE))
        ticket_dense = Signal()
        positions_valid = Signal()     # the ticket's sampler offers a position
        m.d.comb += positions_valid.eq((Cat(sampler.positions.valid for sampler in samplers) & taking).any())
        positions = Array(sampler.positions.payload for sampler in samplers)[ticket_sampler]
        # registered: the ticket's edge address (a dense ticket's steps to its next read, a beat
        # boundary after the first) and the ids of the ticket still to read
        edge_address = Signal(64)
        remaining = Signal(range(cfg.max_fanout + 1))
        # the ids from edge_address to its beat's end, a register loaded with the address (worked
        # out from the ticket's address as it loads, a whole beat after each read): no subtraction
        # between the address register and the read's step
        dense_room = Signal(range(ids_per_beat + 1))
        dense_ids = Signal(range(ids_per_beat + 1))
        m.d.comb += dense_ids.eq(Mux(remaining < dense_room, remaining, dense_room))
        # whether the next read is the ticket's last (``remaining`` == its ids: 1, or a dense read's
        # ``dense_ids``, that is remaining <= dense_room), worked out from registers beside the
        # handshake; and whether the next ticket is taken as it goes (it is there)
        last_read = Signal()
        next_now = Signal()
        m.d.comb += [last_read.eq(Mux(ticket_dense, remaining <= dense_room, remaining == 1)),
                     next_now.eq(last_read & tickets.r_rdy)]
        beat_ids = Mux(wide_ids, data_bytes >> 3, data_bytes >> 2)

        def ids_to_beat_end(address):
            return Mux(wide_ids, (data_bytes - address[:beat_log2]) >> 3, (data_bytes - address[:beat_log2]) >> 2)
        step = Mux(ticket_dense, dense_ids, 1)
        loaded = ticket_layout(tickets.r_data)
        taking_loaded = Mux(loaded.dense, 0, Const(1, SAMPLERS_PER_LANE) << loaded.sampler)
        m.d.comb += [
            port.request.valid.eq(streaming & (ticket_dense | positions_valid)),
            port.request.payload.eq(Mux(ticket_dense, edge_address,
                                        edge_address + id_offset(wide_ids, positions))),
            port.tag.eq(Mux(ticket_dense, dense_ids, 1)),
        ]
        # the read's handshake picks the ticket's registers' next values, which are worked out
        # beside it from registers (the next ticket's, or the stepped ones): as the last select, in
        # one LUT per copy (``lut_copies``: the edge address's halves, the rest), so its own net
        # reaches a few LUTs, not ~150 multiplexers (the issuer's ``taking`` -> itself through that
        # net, 9.29 ns, was the whole kernel's worst path in one run of the ECP5 proxy)
        fire_address_low, fire_address_high, fire = lut_copies(
            m, platform, "issue_fire", lambda dense, ids_ready, held, ready: (dense | ids_ready) & held & ready,
            [ticket_dense, positions_valid, streaming, port.request.ready], 3)
        # a ticket is taken while none is held, or as the held one's last read goes
        take_idle = Signal()
        m.d.comb += [take_idle.eq(~streaming & tickets.r_rdy & ~finishing & ~stopped),
                     issuer_idle.eq(~streaming & ~tickets.r_rdy),
                     tickets.r_en.eq(take_idle | (fire & next_now))]

        def next_value(fire_copy, register, loaded_value, stepped_value):
            return Mux(fire_copy, Mux(next_now, loaded_value, stepped_value), Mux(take_idle, loaded_value, register))
        stepped_address = Mux(ticket_dense, (edge_address | (data_bytes - 1)) + 1, edge_address)
        for fire_copy, bits in ((fire_address_low, slice(0, 32)), (fire_address_high, slice(32, 64))):
            m.d.sync += edge_address[bits].eq(next_value(fire_copy, edge_address[bits], loaded.edge_address[bits],
                                                         stepped_address[bits]))
        m.d.sync += [
            streaming.eq(next_value(fire, streaming, 1, ~last_read)),
            ticket_sampler.eq(next_value(fire, ticket_sampler, loaded.sampler, ticket_sampler)),
            ticket_dense.eq(next_value(fire, ticket_dense, loaded.dense, ticket_dense)),
            taking.eq(next_value(fire, taking, taking_loaded, Mux(last_read, 0, taking))),
            dense_room.eq(next_value(fire, dense_room, ids_to_beat_end(loaded.edge_address), beat_ids)),
            remaining.eq(next_value(fire, remaining, loaded.count, remaining - step)),
        ]
        with m.If(streaming & (finishing | stopped)):
            m.d.sync += [streaming.eq(0), taking.eq(0)]
        # a sampler's positions leave while the read port takes them from it: ``taking`` is zero
        # while no ticket is held and for a dense ticket, so neither the issuer's state nor the ticket's
        # dense flag is decoded in front of the samplers' FIFOs (the state -> a sampler's FIFO level
        # and ``reserved``, 7.6-8.0 ns on the whole kernel's ECP5 proxy)
        for number, sampler in enumerate(samplers):
            m.d.comb += sampler.positions.ready.eq(port.request.ready & taking[number])

        # the answers leave the read channel at once (a beat FIFO), so an answer that holds several
        # ids never stops the reads behind it
        answers = SyncFIFO(width=answer_layout(cfg.data_width).size, depth=ANSWER_DEPTH)
        m.submodules.answers = ResetInserter(job_reset)(answers)
        answer_in = Signal(answer_layout(cfg.data_width))
        m.d.comb += [
            answer_in.beat.eq(port.beat), answer_in.address.eq(port.response.payload.address),
            answer_in.error.eq(port.response.payload.error), answer_in.ids.eq(answer_ids),
            answers.w_data.eq(answer_in), answers.w_en.eq(port.response.valid & ~finishing),
            port.response.ready.eq(answers.w_rdy),
        ]
        # the collector reads the head answer from flip-flops (a two-entry buffer behind the FIFO's
        # LUT-RAM read: its id count and error flag decide the collector's step, whose ready moved
        # the FIFO's pointers and level in the same cycle)
        # (its payload in groups, each loaded through a copy of the head's load decision: the collector's
        # ready reaches a LUT per group, not the ~200-600 payload registers; ``ANSWER_LOAD_GROUPS``)
        m.submodules.answer_head = answer_head = ResetInserter(job_reset)(
            StreamBuffer(answer_in.shape(), load_groups=ANSWER_LOAD_GROUPS))
        m.d.comb += [answer_head.i.valid.eq(answers.r_rdy), answer_head.i.payload.eq(answers.r_data),
                     answers.r_en.eq(answer_head.i.ready)]
        wiring.connect(m, answer_head.o, collector.answers)
        # and the job at the head of its queue likewise (the job's address from the FIFO's LUT-RAM
        # ran through the append's address into the write combiner port's beat compares: 12.1 ns on
        # the ECP5 proxy; a job waits in the queue for its ids' storage round trip, so the buffer's
        # cycle is hidden), its payload in groups as the answer's (the collector's job ready -> one
        # LUT -> the ~100 enables was 8.6-9.0 ns on ``small``'s proxy)
        m.submodules.collect_head = collect_head = ResetInserter(job_reset)(
            StreamBuffer(collect_layout, load_groups=COLLECT_LOAD_GROUPS))
        m.d.comb += [collect_head.i.valid.eq(collects.r_rdy), collect_head.i.payload.eq(collects.r_data),
                     collects.r_en.eq(collect_head.i.ready)]
        wiring.connect(m, collect_head.o, collector.jobs)
        # the collector's wiring
        m.d.comb += [
            collector.wide_ids.eq(wide_ids), collector.abandon.eq(finishing), collector.clear.eq(job_reset),
            collector.resume.eq(self.resume),
            self.storage_error.eq(collector.storage_error),
            self.storage_error_address.eq(collector.storage_error_address),
        ]
        wiring.connect(m, wiring.flipped(appends), collector.appends)
        m.d.comb += [self.idle.eq(issuer_idle & ~jobs.valid & ~staged_valid & (pending == 0) & ~issued
                                  & (collector.failed | (collector.idle & answer_head.idle & ~answers.r_rdy
                                                         & collect_head.idle & ~collects.r_rdy))),
                     self.failed.eq(collector.failed)]
        return m
