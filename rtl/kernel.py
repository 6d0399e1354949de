"""The near-storage neighbor-sampling kernel: the top level, wiring the blocks of docs/rtl.md.

One command per mini-batch (docs/spec.md): the host writes a descriptor into device memory, the
image's storage address and the descriptor's address into the kernel arguments, and sets ap_start.
The kernel fetches the descriptor, checks the image header and the descriptor (section 5's order),
samples every hop (frontiers read back from the node list it writes), writes counts and node ids,
under AGGREGATE copies the last frontier's feature rows and sums its last-hop samples' rows
(:class:`~smartsage.rtl.feature_aggregator.FeatureAggregator`), then writes the result header and
raises ap_done.

Ports (Amaranth names, ``__`` joins a member path):

- ``s_axi_control``: AXI4-Lite control (:class:`~smartsage.rtl.control.ControlRegisters`).
- ``m_axi_storage``: AXI4 read master on the storage window that holds the image (header and
  indptr reads, then the aggregator's feature reads).
- ``m_axi_lane0`` .. ``m_axi_lane{lanes - 1}``: one AXI4 read master per lane (index reads).
- ``m_axi_mem``: AXI4 read/write master on device memory (descriptor, node list, counts, self and
  sum rows, result).
- ``interrupt``.

The blocks (docs/rtl.md, "The command pipeline"), each in a file of its own:

- :class:`~smartsage.rtl.command_sequencer.CommandSequencer`: the command's state machine; one
  node per cycle in frontier order, a job per node with edges;
- :class:`~smartsage.rtl.frontier_prefetcher.FrontierPrefetcher`: frontier ids, their keys and
  indptr pairs read ahead;
- :class:`~smartsage.rtl.job_dispatcher.JobDispatcher`: jobs to the ``config.lanes`` lanes in turn;
- :class:`~smartsage.rtl.edge_streamer.EdgeStreamer`, one per lane: position samplers, issuer,
  collector;
- the read engines (:class:`~smartsage.rtl.tagged_read_stream.TaggedReadStream` on storage,
  :class:`~smartsage.rtl.read_stream.ReadStream` on device memory), the
  :class:`~smartsage.rtl.write_combiner.WriteCombiner` of the sampling writes, and the
  :class:`~smartsage.rtl.feature_aggregator.FeatureAggregator`.
"""

from __future__ import annotations

from amaranth.hdl import Cat, ClockDomain, ClockSignal, DomainRenamer, Module, Mux, ResetInserter, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from smartsage.spec.config import KernelConfig

from .axi import AxiLiteSignature, AxiReadSignature, AxiSignature
from .command_sequencer import BUS_SWITCH_GROUP, IMAGE_WORDS, SUPPORTED_FLAGS, CommandSequencer
from .control import CONTROL_ADDRESS_WIDTH, ControlRegisters
from .edge_streamer import SAMPLERS_PER_LANE, EdgeStreamer, ids_tag_shape
from .feature_aggregator import FeatureAggregator
from .frontier_prefetcher import FrontierPrefetcher, indptr_tag_shape
from .job_dispatcher import JobDispatcher
from .read_stream import ReadStream
from .reset_copy import global_reset, reset_copy
from .stream_buffer import StreamBuffer
from .tagged_read_stream import TaggedReadStream
from .write_combiner import WriteCombiner

__all__ = ["SamplerKernel", "IMAGE_WORDS", "SUPPORTED_FLAGS", "MAX_LANES", "SAMPLERS_PER_LANE",
           "lane_master_name", "storage_master_names"]

#: Edge-streamer lanes this microarchitecture builds at most (ports of the write combiner, masters).
MAX_LANES = 16


def lane_master_name(lane: int) -> str:
    """The storage read master of a lane's index reads: ``m_axi_lane0``, ``m_axi_lane1``, ..."""
    return f"m_axi_lane{lane}"


def storage_master_names(config: KernelConfig) -> list[str]:
    """Every storage read master of a build: ``m_axi_storage`` (the sequencer's header and indptr
    reads, then the aggregator's feature reads) and one per lane."""
    return ["m_axi_storage"] + [lane_master_name(lane) for lane in range(config.lanes)]


#: The AXI4 handshakes a master receives; its other inputs (read data, responses, ``rlast``) mean
#: something only with a handshake's valid.
_HANDSHAKES_IN = frozenset({"arready", "rvalid", "awready", "wready", "bvalid"})


def _add_block(m, platform, name, block):
    """``block`` as submodule ``name``, in a domain of its own on the kernel's clock whose reset is a
    registered copy of the kernel's (:mod:`~smartsage.rtl.reset_copy`): no reset net spans two blocks."""
    domain = f"{name}_sync"
    m.domains += ClockDomain(domain, local=True)
    m.d.comb += [ClockSignal(domain).eq(ClockSignal()),
                 ResetSignal(domain).eq(reset_copy(m, platform, f"{name}_reset"))]
    m.submodules[name] = DomainRenamer(domain)(block)
    return block


def _share_reads(m, engine, first, second, second_owns, answers_buffer=None):
    """Two requesters on one read engine, one at a time: ``second_owns`` (a register: the sequencer's
    ``prefetch``, high while the prefetcher runs, with no read of the first in flight then or when it
    drops) picks whose requests go out and who gets the answers, so neither requester's handshake
    runs through the other's (the whole kernel's critical path on the ECP5 proxy was the sequencer's
    state, as its read handshake, through the engine into the prefetcher). A tag, an answer's tag and
    the beat are the second's (the first has none: its reads carry the second's tag, unread). With
    ``answers_buffer`` (a :class:`StreamBuffer` of the answers) the second's answers start at
    flip-flops."""
    m.d.comb += [
        engine.request.valid.eq(Mux(second_owns, second.request.valid, first.request.valid)),
        engine.request.payload.eq(Mux(second_owns, second.request.payload, first.request.payload)),
        first.request.ready.eq(engine.request.ready & ~second_owns),
        second.request.ready.eq(engine.request.ready & second_owns),
        first.response.valid.eq(engine.response.valid & ~second_owns),
        first.response.payload.eq(engine.response.payload),
    ]
    if answers_buffer is not None:
        m.d.comb += [answers_buffer.i.valid.eq(engine.response.valid & second_owns),
                     answers_buffer.i.payload.eq(engine.response.payload)]
        wiring.connect(m, answers_buffer.o, second.response)
        second_ready = answers_buffer.i.ready
    else:
        m.d.comb += [second.response.valid.eq(engine.response.valid & second_owns),
                     second.response.payload.eq(engine.response.payload)]
        second_ready = second.response.ready
    m.d.comb += engine.response.ready.eq(Mux(second_owns, second_ready, first.response.ready))
    members = second.signature.members
    if "tag" in members:
        # (the second's tag goes with the first's reads too, unread: no multiplexer between the second's
        # tag and the engine's tag register, ``default``'s ECP5 proxy path into it)
        m.d.comb += [engine.tag.eq(second.tag), second.answer_tag.eq(engine.answer_tag)]
    if "beat" in members:
        assert answers_buffer is None, "a buffered answer would need its beat buffered with it"
        m.d.comb += second.beat.eq(engine.beat)


class SamplerKernel(wiring.Component):
    """The neighbor-sampling kernel, ``config.lanes`` edge-streamer lanes, a Vitis ``ap_ctrl_hs`` RTL kernel.

    Parameters
    ----------
    config : KernelConfig
        Data width, lanes, max_fanout, max_hops and outstanding_reads of this build (``fifo_depth``
        is not used by this microarchitecture).

    Members
    -------
    s_axi_control : ``In(AxiLiteSignature(CONTROL_ADDRESS_WIDTH))``
        The control registers (12-bit addresses).
    m_axi_storage : ``Out(AxiReadSignature(config.data_width))``
        Storage reads: the sequencer's image header words, the prefetcher's indptr pairs, then the
        aggregator's feature rows.
    m_axi_lane0 .. m_axi_lane{lanes - 1} : ``Out(AxiReadSignature(config.data_width))``
        Storage (index) reads of each lane's edge streamer (one read channel per lane).
    m_axi_mem : ``Out(AxiSignature(config.data_width))``
        Device memory: descriptor and frontier reads, the combined sampling writes (node list,
        counts, result header), the aggregator's reads and writes while it runs.
    interrupt : ``Out(1)``

    Raises
    ------
    ValueError
        ``config.lanes`` above :data:`MAX_LANES`.
    """

    def __init__(self, config: KernelConfig):
        if not isinstance(config, KernelConfig):
            raise TypeError(f"Config must be a KernelConfig, not {config!r}")
        if config.lanes > MAX_LANES:
            raise ValueError(f"Lanes must be at most {MAX_LANES} for this kernel, not {config.lanes!r}")
        self._config = config
        members = {"s_axi_control": In(AxiLiteSignature(CONTROL_ADDRESS_WIDTH))}
        for name in storage_master_names(config):
            members[name] = Out(AxiReadSignature(config.data_width))
        members.update({"m_axi_mem": Out(AxiSignature(config.data_width)), "interrupt": Out(1)})
        super().__init__(members)

    @property
    def config(self) -> KernelConfig:
        return self._config

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        lanes = cfg.lanes

        # every block in a domain of its own, reset from a copy of the kernel's reset (_add_block)
        control = _add_block(m, platform, "control", ControlRegisters())
        sequencer = _add_block(m, platform, "sequencer", CommandSequencer(cfg))
        prefetcher = _add_block(m, platform, "prefetcher", FrontierPrefetcher(cfg))
        dispatcher = _add_block(m, platform, "dispatcher", JobDispatcher(lanes, cfg.max_fanout))
        streamers = [EdgeStreamer(cfg) for _ in range(lanes)]
        for lane, streamer in enumerate(streamers):
            _add_block(m, platform, f"lane{lane}", streamer)
        # read engines: storage (the sequencer's header reads, then the prefetcher's indptr reads,
        # tagged: a read that brings both words of a pair, and where the second is), one per lane
        # (tagged with its ids), device memory (the descriptor, then the frontier). The storage
        # engine's R channel is registered and its tag comes from a register: the answer's word
        # select into the prefetcher's pair arithmetic started at the bus's far end, 16.9 ns on
        # ``default``'s ECP5 proxy, 7.1 of them one net from the tag to the multiplexers
        storage_engine = TaggedReadStream(cfg.data_width, cfg.outstanding_reads, indptr_tag_shape(cfg.data_width),
                                          tag_register=True, answer_register=True)
        storage = _add_block(m, platform, "storage_reader", storage_engine)
        lane_readers = [TaggedReadStream(cfg.data_width, cfg.outstanding_reads, ids_tag_shape(cfg.data_width))
                        for _ in range(lanes)]
        for lane, reader in enumerate(lane_readers):
            _add_block(m, platform, f"lane_reader{lane}", reader)
        mem = _add_block(m, platform, "mem_reader", ReadStream(cfg.data_width, cfg.outstanding_reads))
        # Sampling writes (node-list appends of lane i on port i; counts and the result header on the
        # last port) are combined into strobed full-beat bursts (the aggregator has its own writer).
        combiner = _add_block(m, platform, "mem_combiner", WriteCombiner(cfg.data_width, cfg.outstanding_reads,
                                                                           ports=lanes + 1))
        # the feature aggregator (AGGREGATE), after the last hop; reset with every command's start and
        # end, from one flip-flop a cycle after the sequencer's clear (or the kernel's reset): its own
        # domain on the kernel's clock, so that no OR of the two resets sits in front of the thousands
        # of registers it reaches (that OR was the whole kernel's path into every aggregator register
        # on the ECP5 proxy, 15.1 ns)
        m.domains.aggregate = ClockDomain("aggregate", local=True)
        aggregate_reset = Signal(init=1)
        m.d.sync += aggregate_reset.eq(sequencer.clear_jobs)
        # on the clock network (a net to some 1,750 flip-flops: 7.5-8.3 ns at no logic level when routed
        # as a fabric net on the ECP5 proxy)
        m.d.comb += [ClockSignal("aggregate").eq(ClockSignal()),
                     ResetSignal("aggregate").eq(global_reset(m, platform, "aggregate_rst", aggregate_reset))]
        aggregator = FeatureAggregator(cfg)
        m.submodules.aggregator = DomainRenamer("aggregate")(aggregator)

        # ---- control registers and the sequencer
        wiring.connect(m, wiring.flipped(self.s_axi_control), control.s_axi_control)
        m.d.comb += [
            sequencer.start.eq(control.start), sequencer.image.eq(control.image),
            sequencer.descriptor.eq(control.descriptor),
            control.ready.eq(sequencer.ready), control.idle.eq(sequencer.idle), control.done.eq(sequencer.done),
            self.interrupt.eq(control.interrupt),
        ]

        # ---- reads: device memory (descriptor, then frontier), storage (header, then indptr)
        # the frontier's ids reach the prefetcher through a two-entry buffer (its range check, a 64-bit
        # compare, starts at flip-flops); emptied with the prefetcher
        frontier_answers = StreamBuffer(prefetcher.frontier_reads.response.payload.shape())
        _add_block(m, platform, "frontier_answers", ResetInserter(sequencer.clear_jobs)(frontier_answers))
        _share_reads(m, mem, sequencer.descriptor_reads, prefetcher.frontier_reads, sequencer.prefetch.memory,
                     frontier_answers)
        _share_reads(m, storage.port, sequencer.header_reads, prefetcher.indptr_reads, sequencer.prefetch.storage)
        wiring.connect(m, wiring.flipped(self.m_axi_storage), storage.bus)
        for name, member in mem.bus.signature.members.items():
            ours, theirs = getattr(self.m_axi_mem, name), getattr(mem.bus, name)
            m.d.comb += ours.eq(theirs) if member.flow == Out else theirs.eq(ours)
        m.d.comb += [storage.drain.eq(sequencer.drain_reads),
                     sequencer.reads_idle.eq(Cat(mem.idle, frontier_answers.idle, storage.idle,
                                                 *(r.idle for r in lane_readers)).all())]
        storage_beats = []
        for name in storage_master_names(cfg):
            master = getattr(self, name)
            storage_beats.append(Mux(master.arvalid & master.arready, master.arlen + 1, 0))
        m.d.comb += sequencer.storage_read_beats.eq(sum(storage_beats))

        # ---- prefetcher -> sequencer -> dispatcher -> lanes
        wiring.connect(m, prefetcher.nodes, sequencer.nodes)
        wiring.connect(m, prefetcher.pairs, sequencer.pairs)
        m.d.comb += [
            prefetcher.active.eq(sequencer.prefetch.prefetcher), prefetcher.restart.eq(sequencer.restart_prefetch),
            prefetcher.frontier_size.eq(sequencer.frontier_size), prefetcher.nodes_ptr.eq(sequencer.nodes_ptr),
            prefetcher.num_nodes.eq(sequencer.num_nodes), prefetcher.indptr_base.eq(sequencer.indptr_base),
            prefetcher.indices_base.eq(sequencer.indices_base),
            prefetcher.wide_ids.eq(sequencer.wide_ids), prefetcher.hop_key.eq(sequencer.hop_key),
            prefetcher.fanout.eq(sequencer.fanout),
            prefetcher.clear.eq(sequencer.clear_jobs), prefetcher.abandon.eq(sequencer.abandon[cfg.lanes]),
        ]
        wiring.connect(m, sequencer.job, dispatcher.job)
        m.d.comb += [dispatcher.clear.eq(sequencer.clear_jobs), sequencer.jobs_waiting.eq(dispatcher.waiting)]
        streamers_failed = Cat(*(streamer.failed for streamer in streamers)).any()
        # a read error stops every lane a cycle later (each lane registers ``halt``, the OR across
        # lanes: no chip-wide path into a lane's job offer)
        for lane, (streamer, reader) in enumerate(zip(streamers, lane_readers, strict=True)):
            wiring.connect(m, dispatcher.lanes[lane], streamer.job)
            wiring.connect(m, streamer.reads, reader.port)
            wiring.connect(m, wiring.flipped(getattr(self, lane_master_name(lane))), reader.bus)
            # (each combiner port starts with a two-entry buffer of its own)
            wiring.connect(m, streamer.appends, combiner.fields[lane])
            m.d.comb += [
                streamer.wide_ids.eq(sequencer.wide_ids), streamer.fanout.eq(sequencer.fanout),
                streamer.abandon.eq(sequencer.abandon[lane]), streamer.halt.eq(streamers_failed),
                streamer.clear.eq(sequencer.clear_jobs), streamer.reset_samplers.eq(sequencer.reset_samplers),
                streamer.resume.eq(sequencer.ready),
                reader.drain.eq(sequencer.abandon[lane]), reader.clear.eq(sequencer.clear_jobs),
            ]
            # a read error of the highest lane wins in a cycle where several lanes take one
            with m.If(streamer.storage_error):
                m.d.comb += [sequencer.streamer_error.eq(1),
                             sequencer.streamer_error_address.eq(streamer.storage_error_address)]
        m.d.comb += [sequencer.streamers_failed.eq(streamers_failed),
                     sequencer.streamers_idle.eq(Cat(*(streamer.idle for streamer in streamers)).all()
                                                 | streamers_failed)]

        # ---- sampling writes: counts and the result header on the combiner's last port
        wiring.connect(m, sequencer.fields, combiner.fields[lanes])
        for name, member in combiner.bus.signature.members.items():
            ours, theirs = getattr(self.m_axi_mem, name), getattr(combiner.bus, name)
            m.d.comb += ours.eq(theirs) if member.flow == Out else theirs.eq(ours)
        m.d.comb += [
            combiner.flush.eq(sequencer.flush_writes), combiner.clear.eq(sequencer.clear_writes),
            sequencer.writes_idle.eq(combiner.idle),
            sequencer.write_error.eq(combiner.error),
            sequencer.write_error_address.eq(combiner.error_address),
        ]

        # ---- the aggregator
        m.d.comb += [
            aggregator.start.eq(sequencer.aggregate_start), aggregator.parameters.eq(sequencer.aggregate_parameters),
            sequencer.aggregator_busy.eq(aggregator.busy), sequencer.aggregator_error.eq(aggregator.error),
            sequencer.aggregator_error_address.eq(aggregator.error_address),
            sequencer.aggregator_write_error.eq(aggregator.write_error),
            sequencer.aggregator_write_error_address.eq(aggregator.write_error_address),
        ]
        # (each copy of the sequencer's ``aggregating`` flag drives one group of the switch below:
        # the aggregator's incoming handshakes on the storage bus (its row reader's) and on device
        # memory (its id reader's and writer's), the sampling engines', and BUS_SWITCH_GROUP bits of
        # the outgoing signals each; one copy for both of the aggregator's buses ran across it into
        # the row reader's cursor, 9.4 ns on the ECP5 proxy)
        switch = sequencer.aggregating
        storage_side, mem_side, sampler_side, *outgoing_copies = (switch[i] for i in range(switch.shape().length))

        # ---- the buses, while the aggregator runs: its engines instead of the sampler's (overriding
        # the connections above); otherwise its engines see an idle bus. Only the handshakes coming
        # in are gated: the data, responses and last flags reach both sides as they are (each side
        # reads them only with its own valid), so ``aggregating`` does not fan out into every bit of
        # both read-data buses (on the ECP5 proxy that net, into the prefetcher's pair stage and the
        # descriptor words, was the whole kernel's critical path: 12.7 ns, 79.0 MHz)
        outgoing = []   # (the bus's signal, the aggregator's) of every outgoing member
        for ours, theirs, samplers, aggregator_side in (
                (self.m_axi_storage, aggregator.storage, (storage.bus,), storage_side),
                (self.m_axi_mem, aggregator.mem, (mem.bus, combiner.bus), mem_side)):
            for name, member in theirs.signature.members.items():
                if member.flow == In:
                    value = getattr(ours, name)
                    m.d.comb += getattr(theirs, name).eq(Mux(aggregator_side, value, 0) if name in _HANDSHAKES_IN
                                                         else value)
                else:
                    outgoing.append((getattr(ours, name), getattr(theirs, name)))
            with m.If(sampler_side):
                for port in samplers:
                    for name, member in port.signature.members.items():
                        if member.flow == In and name in _HANDSHAKES_IN:
                            m.d.comb += getattr(port, name).eq(0)
        # the outgoing bits in groups of BUS_SWITCH_GROUP, a copy each
        bits = [(ours[i], theirs[i]) for ours, theirs in outgoing for i in range(len(ours))]
        assert len(bits) <= BUS_SWITCH_GROUP * len(outgoing_copies), (len(bits), len(outgoing_copies))
        for group, owner in enumerate(outgoing_copies):
            with m.If(owner):
                m.d.comb += [ours.eq(theirs)
                             for ours, theirs in bits[group * BUS_SWITCH_GROUP:(group + 1) * BUS_SWITCH_GROUP]]
        return m
