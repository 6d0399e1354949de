"""The near-storage neighbor-sampling kernel: top level and command sequencer.

One command per mini-batch (docs/spec.md): the host writes a descriptor into device memory, the
image's storage address and the descriptor's address into the kernel arguments, and sets ap_start.
The kernel fetches the descriptor, checks the image header and the descriptor (section 5's order),
samples every hop (frontiers read back from the node list it writes), writes counts and node ids,
under AGGREGATE copies the last frontier's feature rows and sums its last-hop samples' rows
(:class:`~smartsage.rtl.feature_aggregator.FeatureAggregator`), then writes the result header and
raises ap_done.

Ports (Amaranth names, ``__`` joins a member path):

- ``s_axi_control``: AXI4-Lite control (:class:`~smartsage.rtl.control.ControlRegisters`).
- ``m_axi_storage``: AXI4 read master on the storage window that holds the image.
- ``m_axi_mem``: AXI4 read/write master on device memory (descriptor, node list, counts, self and
  sum rows, result).
- ``interrupt``.

One lane, pipelined (docs/rtl.md): a prefetcher reads frontier entries and indptr pairs ahead, the
sequencer checks one node per cycle in frontier order and queues a job per node, and the edge
streamer (issuer and collector) turns each job's positions into index reads (many in flight) and
the ids into node-list appends.
"""

from __future__ import annotations

import struct
from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from smartsage.spec import image as spec_image
from smartsage.spec import rng as spec_rng
from smartsage.spec.config import KernelConfig
from smartsage.spec.descriptor import (
    BUFFER_ALIGN,
    DESCRIPTOR_FIELDS,
    DESCRIPTOR_MAGIC,
    DESCRIPTOR_SIZE,
    DESCRIPTOR_VERSION,
    RESULT_FIELDS,
    RESULT_HEADER_SIZE,
    SPEC_MAX_HOPS,
    Flags,
    Status,
)

from .axi import AxiLiteSignature, AxiReadSignature, AxiSignature
from .control import CONTROL_ADDRESS_WIDTH, ControlRegisters
from .feature_aggregator import FeatureAggregator
from .position_sampler import PositionSampler
from .read_stream import ReadStream, StreamWord
from .rng import mix32
from .write_combiner import WriteCombiner

__all__ = ["SamplerKernel", "IMAGE_WORDS", "SUPPORTED_FLAGS", "MAX_LANES", "lane_master_name",
           "storage_master_names"]

#: Edge-streamer lanes this microarchitecture builds at most (ports of the write combiner, masters).
MAX_LANES = 16


def lane_master_name(lane: int) -> str:
    """The storage read master of a lane's index reads: ``m_axi_lane0``, ``m_axi_lane1``, ..."""
    return f"m_axi_lane{lane}"


def storage_master_names(config: KernelConfig) -> list[str]:
    """Every storage read master of a build: ``m_axi_storage`` (the sequencer's header and indptr
    reads, then the aggregator's feature reads) and one per lane."""
    return ["m_axi_storage"] + [lane_master_name(lane) for lane in range(config.lanes)]

#: Descriptor flags this build executes: AGGREGATE (docs/spec.md section 4, the feature aggregator).
SUPPORTED_FLAGS = int(Flags.AGGREGATE)


def _field(fields, name):
    for field, code, offset, _ in fields:
        if field == name:
            return offset, struct.calcsize("<" + code)
    raise KeyError(name)


def _image_words() -> dict[str, int]:
    """Byte offsets of the 64-bit header words the kernel reads (from spec.image's tables)."""
    section_entry = spec_image.SECTION_STRUCT.size
    section_offset_field = _field(spec_image.SECTION_FIELDS, "offset")[0]
    kinds = list(spec_image.SectionKind)
    words = {
        "magic": _field(spec_image.HEADER_FIELDS, "magic")[0],
        "version": _field(spec_image.HEADER_FIELDS, "version")[0],
        "num_nodes": _field(spec_image.HEADER_FIELDS, "num_nodes")[0],
        "index_dtype": _field(spec_image.HEADER_FIELDS, "index_dtype")[0],
    }
    for kind in (spec_image.SectionKind.INDPTR, spec_image.SectionKind.INDICES, spec_image.SectionKind.FEATURES):
        words[kind.name.lower()] = (spec_image.SECTION_TABLE_OFFSET + kinds.index(kind) * section_entry
                                    + section_offset_field)
    return {name: offset & ~7 for name, offset in words.items()}


#: Header words read from storage: name -> byte offset of the enclosing 64-bit word.
IMAGE_WORDS = _image_words()


class SamplerKernel(wiring.Component):
    """The neighbor-sampling kernel, ``config.lanes`` edge-streamer lanes, a Vitis ``ap_ctrl_hs`` RTL kernel.

    Parameters
    ----------
    config : KernelConfig
        Data width, lanes, max_fanout, max_hops and outstanding_reads of this build (``fifo_depth``
        is not used by this microarchitecture).

    Members
    -------
    s_axi_control : ``In(AxiLiteSignature(6))``
    m_axi_storage : ``Out(AxiReadSignature(config.data_width))``
        Storage reads of the sequencer (descriptor-time image header, indptr) and the aggregator.
    m_axi_lane0 .. m_axi_lane{lanes - 1} : ``Out(AxiReadSignature(config.data_width))``
        Storage (index) reads of each lane (one read channel per lane).
    m_axi_mem : ``Out(AxiSignature(config.data_width))``
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
        data_bytes = cfg.data_bytes

        m.submodules.control = control = ControlRegisters()
        m.submodules.storage_reader = storage = ReadStream(cfg.data_width, cfg.outstanding_reads)
        m.submodules.mem_reader = mem = ReadStream(cfg.data_width, cfg.outstanding_reads)
        lanes = cfg.lanes
        # Sampling writes (node-list appends of lane i on port i; counts and the result header on the
        # last port) are combined into strobed full-beat bursts (the aggregator has its own writer).
        m.submodules.mem_combiner = combiner = WriteCombiner(cfg.data_width, cfg.outstanding_reads,
                                                             ports=lanes + 1)
        fields_out = combiner.fields[lanes]
        # A command that ends early (an error mid-sample) can leave positions in the samplers: they
        # are reset when the next command starts.
        # Per lane, two samplers take jobs in turn, so one's pipeline fills while the other's
        # positions stream.
        sampler_reset = Signal()
        lane_samplers = []
        for lane in range(lanes):
            pair = [PositionSampler(cfg.max_fanout) for _ in range(2)]
            for number, sampler in enumerate(pair):
                m.submodules[f"positions{lane}_{number}" if lane else f"positions{number}"] = \
                    ResetInserter(sampler_reset)(sampler)
            lane_samplers.append(pair)
        # every lane reads storage through a master of its own
        lane_readers = []
        for lane in range(lanes):
            reader = ReadStream(cfg.data_width, cfg.outstanding_reads)
            m.submodules[f"lane_reader{lane}"] = reader
            wiring.connect(m, wiring.flipped(getattr(self, lane_master_name(lane))), reader.bus)
            lane_readers.append(reader)

        wiring.connect(m, wiring.flipped(self.s_axi_control), control.s_axi_control)
        wiring.connect(m, wiring.flipped(self.m_axi_storage), storage.bus)

        # The storage reader ``m_axi_storage`` is the sequencer's (port A: header and indptr reads);
        # each lane's index reads have a master of their own. Requests carry a tag that comes back
        # with the answer: A's ``pair`` (indptr[v] and indptr[v+1] both from this beat), a lane's
        # ``ids`` (how many consecutive ids of this beat, from the address on).
        ids_per_beat = data_bytes // 4
        tag_layout = data.StructLayout({"pair": 1})

        def requester(name):
            return SimpleNamespace(
                request=SimpleNamespace(valid=Signal(name=f"{name}_req_valid"),
                                        payload=Signal(64, name=f"{name}_req_address"),
                                        pair=Signal(name=f"{name}_req_pair"),
                                        ids=Signal(range(ids_per_beat + 1), name=f"{name}_req_ids"),
                                        ready=Signal(name=f"{name}_req_ready")),
                response=SimpleNamespace(valid=Signal(name=f"{name}_resp_valid"),
                                         payload=Signal(StreamWord, name=f"{name}_resp"),
                                         beat=storage.beat,
                                         tag=Signal(tag_layout, name=f"{name}_resp_tag"),
                                         ready=Signal(name=f"{name}_resp_ready")))

        port_a = requester("storage_a")
        m.submodules.storage_tags = tags = SyncFIFO(width=tag_layout.size, depth=cfg.outstanding_reads)
        tag_in = Signal(tag_layout)
        tag_out = tag_layout(tags.r_data)
        drain_storage = Signal()
        m.d.comb += [
            storage.request.valid.eq(port_a.request.valid & tags.w_rdy),
            storage.request.payload.eq(port_a.request.payload),
            port_a.request.ready.eq(storage.request.ready & tags.w_rdy),
            tag_in.pair.eq(port_a.request.pair),
            tags.w_data.eq(tag_in),
            tags.w_en.eq(storage.request.valid & storage.request.ready),
            port_a.response.payload.eq(storage.response.payload),
            port_a.response.tag.eq(tag_out),
            port_a.response.valid.eq(storage.response.valid & tags.r_rdy),
            storage.response.ready.eq(tags.r_rdy & (drain_storage | port_a.response.ready)),
            tags.r_en.eq(storage.response.valid & storage.response.ready),
        ]
        for name, member in mem.bus.signature.members.items():
            ours, theirs = getattr(self.m_axi_mem, name), getattr(mem.bus, name)
            m.d.comb += ours.eq(theirs) if member.flow == Out else theirs.eq(ours)
        for name, member in combiner.bus.signature.members.items():
            ours, theirs = getattr(self.m_axi_mem, name), getattr(combiner.bus, name)
            m.d.comb += ours.eq(theirs) if member.flow == Out else theirs.eq(ours)
        m.d.comb += self.interrupt.eq(control.interrupt)

        # ---- command state
        image_base = Signal(64)
        descriptor_base = Signal(64)
        desc_words = Array(Signal(64, name=f"desc_word{i}") for i in range(DESCRIPTOR_SIZE // 8))
        image_names = list(IMAGE_WORDS)
        image_offsets = Array(Const(IMAGE_WORDS[n], 64) for n in image_names)
        image_words = Array(Signal(64, name=f"image_{n}") for n in image_names)
        # reads asked for and answers taken while fetching the descriptor and the header words
        desc_counters = (Signal(range(len(desc_words) + 1), name="descriptor_asked"),
                         Signal(range(len(desc_words) + 1), name="descriptor_answered"))
        image_counters = (Signal(range(len(image_names) + 1), name="image_asked"),
                          Signal(range(len(image_names) + 1), name="image_answered"))

        def desc(name):
            offset, size = _field(DESCRIPTOR_FIELDS, name)
            word = desc_words[offset // 8]
            return word[(offset % 8) * 8:(offset % 8 + size) * 8]

        def image(name):
            return image_words[image_names.index(name)]

        magic_ok = image("magic") == int.from_bytes(spec_image.MAGIC, "little")
        version_offset = _field(spec_image.HEADER_FIELDS, "version")[0] % 8
        version_ok = image("version")[version_offset * 8:version_offset * 8 + 32] == spec_image.VERSION
        num_nodes = image("num_nodes")
        dtype_offset = _field(spec_image.HEADER_FIELDS, "index_dtype")[0] % 8
        wide_ids = image("index_dtype")[dtype_offset * 8:dtype_offset * 8 + 8] == int(spec_image.IndexDtype.U64)
        # feature_dim and feature_dtype share the 64-bit header word of index_dtype
        for name in ("feature_dim", "feature_dtype"):
            assert _field(spec_image.HEADER_FIELDS, name)[0] & ~7 == IMAGE_WORDS["index_dtype"]
        dim_offset, dim_size = _field(spec_image.HEADER_FIELDS, "feature_dim")
        feature_dim = image("index_dtype")[(dim_offset % 8) * 8:(dim_offset % 8 + dim_size) * 8]
        fdtype_offset = _field(spec_image.HEADER_FIELDS, "feature_dtype")[0] % 8
        feature_dtype = image("index_dtype")[fdtype_offset * 8:fdtype_offset * 8 + 8]
        feature_size_log2 = Mux(feature_dtype == int(spec_image.FeatureDtype.FP32), 2,
                                Mux((feature_dtype == int(spec_image.FeatureDtype.FP16))
                                    | (feature_dtype == int(spec_image.FeatureDtype.BF16)), 1, 0))
        indptr_base = Signal(64)
        indices_base = Signal(64)

        num_targets = desc("num_targets")
        num_hops = desc("num_hops")
        fanouts = Array(desc(f"fanout{h}") for h in range(SPEC_MAX_HOPS))
        nodes_ptr = desc("nodes_ptr")
        nodes_capacity = desc("nodes_capacity")
        counts_ptr = desc("counts_ptr")
        counts_capacity = desc("counts_capacity")
        result_ptr = desc("result_ptr")
        seed = desc("seed")
        aggregate = (desc("flags") & int(Flags.AGGREGATE)) != 0
        self_ptr = desc("self_ptr")
        sum_ptr = desc("sum_ptr")
        last_size = Signal(64)     # |F_{L-1}|
        last_counts = Signal(64)   # c_{L-1}
        feature_bytes = Signal(96)

        status = Signal(32)
        error_hop = Signal(32)
        error_index = Signal(64)
        error_value = Signal(64)
        result_valid = Signal()   # descriptor fetched: result_ptr may be used if aligned

        command_key = Signal(32)
        hop_key = Signal(32)
        hop = Signal(range(SPEC_MAX_HOPS + 1))
        frontier_index = Signal(64)
        frontier_size = Signal(64)
        counts_base = Signal(64)
        written = Signal(64)
        prefetching = Signal()
        prefetch_index = Signal(64)
        fanout = Signal(16)
        result_index = Signal(range(RESULT_HEADER_SIZE // 8))
        cycles = Signal(64)
        storage_bytes = Signal(64)
        final_cycles = Signal(64)
        scratch = Signal(32)

        id_bytes = Mux(wide_ids, 8, 4)
        busy = Signal()
        with m.If(busy):
            m.d.sync += cycles.eq(cycles + 1)
        storage_beats = []
        for name in storage_master_names(cfg):
            master = getattr(self, name)
            storage_beats.append(Mux(master.arvalid & master.arready, master.arlen + 1, 0))
        m.d.sync += storage_bytes.eq(storage_bytes + sum(storage_beats) * data_bytes)

        def id_of(word, address):
            return Mux(wide_ids, word, Mux(address[2], word[32:], word[:32]))

        def fail(code, hop_value=0, index_value=0, value=0):
            m.d.sync += [status.eq(code), error_hop.eq(hop_value), error_index.eq(index_value),
                         error_value.eq(value), prefetching.eq(0)]
            m.next = "FINISH"

        def abort_on_back_error():
            """A hop state stops when the edge streamer hit a bus error (it set the status)."""
            with m.If(back_error):
                m.d.sync += prefetching.eq(0)
                m.next = "FINISH"

        def read_words(name, reader, words, counters, address_of, capture, then):
            """One state: the reads of ``words`` words go out back to back (``address_of(i)``) while
            their answers are taken in order (``capture(i, word)``); then ``then()``. One round trip
            in all, not one per word (a storage page latency each, under the SSD model)."""
            asked, answered = counters
            with m.State(name):
                with m.If(asked != words):
                    m.d.comb += [reader.request.valid.eq(1), reader.request.payload.eq(address_of(asked))]
                    with m.If(reader.request.ready):
                        m.d.sync += asked.eq(asked + 1)
                m.d.comb += reader.response.ready.eq(1)
                with m.If(reader.response.valid):
                    with m.If(reader.response.payload.error):
                        fail(Status.STORAGE_ERROR, value=reader.response.payload.address)
                    with m.Else():
                        capture(answered, reader.response.payload.data)
                        m.d.sync += answered.eq(answered + 1)
                        with m.If(answered == words - 1):
                            m.d.sync += [asked.eq(0), answered.eq(0)]
                            then()

        def write_state(name, address, value, wide, then):
            """One state: hand a u32/u64 field to the write combiner (responses are checked at
            drain points: every hop boundary and the end of the command)."""
            with m.State(name):
                m.d.comb += [fields_out.valid.eq(1), fields_out.payload.address.eq(address),
                             fields_out.payload.data.eq(value), fields_out.payload.wide.eq(wide)]
                with m.If(fields_out.ready):
                    then()

        def drain_state(name, then):
            """Flush the combined writes and wait until every one was answered; a write error ends
            the command (OUTPUT_ERROR)."""
            with m.State(name):
                m.d.comb += combiner.flush.eq(1)
                with m.If(combiner.idle):
                    with m.If(combiner.error & (status == Status.OK)):
                        fail(Status.OUTPUT_ERROR, value=combiner.error_address)
                    with m.Else():
                        then()

        # ---- per-node jobs: the sequencer (front) reads a node's degree, checks it in order and
        # reserves its place in the node list; the edge streamer (back) samples and appends it while
        # the front already works on the next nodes.
        job_layout = data.StructLayout({
            "key": 32, "degree": 32, "count": range(cfg.max_fanout + 1), "edge_start": 64,
            "entry": 64, "base": 64})
        job_reset = Signal()
        lane_jobs = []
        job_in = Signal(job_layout)
        for lane in range(lanes):
            jobs = SyncFIFO(width=job_layout.size, depth=4)
            m.submodules[f"jobs{lane}" if lane else "jobs"] = ResetInserter(job_reset)(jobs)
            m.d.comb += jobs.w_data.eq(job_in)
            lane_jobs.append(jobs)
        jobs_waiting = Cat(*(jobs.r_rdy for jobs in lane_jobs)).any()
        # the sequencer hands each job to a lane with room, the lanes in turn
        last_lane = Signal(range(max(lanes, 2)))
        next_lane = Signal(range(max(lanes, 2)))
        lane_free = Signal()
        with m.Switch(last_lane):
            for last in range(lanes):
                with m.Case(last):
                    for n, lane in enumerate((last + offset) % lanes for offset in range(1, lanes + 1)):
                        with (m.If if n == 0 else m.Elif)(lane_jobs[lane].w_rdy):
                            m.d.comb += [next_lane.eq(lane), lane_free.eq(1)]
        back_idle = Signal()
        back_error = Signal()
        finishing = Signal()  # the command ends: the streamer abandons its job

        # ---- frontier and indptr prefetch. During a hop the node-list entries F_h[0..] are read
        # ahead (up to outstanding_reads in flight); each id that comes back is range-checked and, if
        # in range, its indptr[v], indptr[v+1] reads are issued at once. The sequencer takes the
        # checked ids and the indptr words in order. The indptr answers land in a FIFO whose space is
        # reserved before the reads are issued, so they never block the edge streamer's answers
        # (one in-order read channel is shared).
        with m.If(prefetching & (prefetch_index != frontier_size)):
            m.d.comb += [mem.request.valid.eq(1), mem.request.payload.eq(nodes_ptr + prefetch_index * id_bytes)]
            with m.If(mem.request.ready):
                m.d.sync += prefetch_index.eq(prefetch_index + 1)

        # Checked frontier entries (with their RNG key H_v, computed here) and the indptr pairs
        # of the in-range ones, both in frontier order. Up to ``ahead`` nodes are in flight.
        ahead = max(2, cfg.outstanding_reads // 2)
        node_ahead_layout = data.StructLayout({"node": 64, "key": 32, "in_range": 1, "error": 1, "address": 64})
        nodes_ahead = SyncFIFO(width=node_ahead_layout.size, depth=ahead)
        m.submodules.nodes_ahead = ResetInserter(job_reset)(nodes_ahead)
        pair_layout = data.StructLayout({"start": 64, "end": 64, "error": 1, "address": 64})
        indptr_pairs = SyncFIFO(width=pair_layout.size, depth=ahead)
        m.submodules.indptr_pairs = ResetInserter(job_reset)(indptr_pairs)
        pairs_reserved = Signal(range(ahead + 1))
        prefetch_node = Signal(64)
        prefetch_scratch = Signal(32)
        ahead_in = Signal(node_ahead_layout)
        m.d.comb += nodes_ahead.w_data.eq(ahead_in)
        arriving = mem.response.payload
        arriving_id = id_of(arriving.data, arriving.address)
        in_range = ~arriving.error & (arriving_id < num_nodes)
        reserve = Signal()
        release = Signal()
        m.d.comb += release.eq(indptr_pairs.r_en & indptr_pairs.r_rdy)
        m.d.sync += pairs_reserved.eq(pairs_reserved + reserve - release)
        with m.If(job_reset):
            m.d.sync += pairs_reserved.eq(0)
        # A two-stage pipeline, one node per cycle: stage 0 takes a frontier id (and reserves its
        # indptr pair's place), stage 1 finishes its key and issues its indptr read(s), then queues
        # it; ids out of range or read in error pass through stage 1 without reads (frontier order).
        s1_valid, s1_in_range, s1_error, s1_second = Signal(), Signal(), Signal(), Signal()
        s1_address = Signal(64)
        start_address = indptr_base + prefetch_node * 8
        # indptr[v + 1] in the same beat (not for 64-bit beats): one read brings both
        same_beat = (start_address[3:(data_bytes.bit_length() - 1)] != ids_per_beat // 2 - 1
                     if data_bytes > 8 else 0)
        s1_done = Signal()
        m.d.comb += [ahead_in.node.eq(prefetch_node), ahead_in.in_range.eq(s1_in_range),
                     ahead_in.error.eq(s1_error), ahead_in.address.eq(s1_address),
                     ahead_in.key.eq(mix32(prefetch_scratch ^ prefetch_node[32:] ^ spec_rng.NODE_SALT))]
        with m.If(s1_valid & ~s1_in_range):
            m.d.comb += [nodes_ahead.w_en.eq(nodes_ahead.w_rdy), s1_done.eq(nodes_ahead.w_rdy)]
        with m.Elif(s1_valid & ~s1_second):
            m.d.comb += [port_a.request.valid.eq(nodes_ahead.w_rdy | ~same_beat),
                         port_a.request.payload.eq(start_address), port_a.request.pair.eq(same_beat)]
            with m.If(port_a.request.valid & port_a.request.ready):
                with m.If(same_beat):
                    m.d.comb += [nodes_ahead.w_en.eq(1), s1_done.eq(1)]
                with m.Else():
                    m.d.sync += s1_second.eq(1)
        with m.Elif(s1_valid):
            m.d.comb += [port_a.request.valid.eq(nodes_ahead.w_rdy), port_a.request.payload.eq(start_address + 8)]
            with m.If(port_a.request.valid & port_a.request.ready):
                m.d.comb += [nodes_ahead.w_en.eq(1), s1_done.eq(1)]
        with m.If(s1_done):
            m.d.sync += [s1_valid.eq(0), s1_second.eq(0)]
        room = (pairs_reserved + 1 <= ahead) & (~s1_valid | s1_done)
        with m.If(prefetching & room):
            m.d.comb += mem.response.ready.eq(1)
            with m.If(mem.response.valid):
                m.d.comb += reserve.eq(in_range)
                m.d.sync += [s1_valid.eq(1), s1_second.eq(0), s1_in_range.eq(in_range),
                             s1_error.eq(arriving.error), s1_address.eq(arriving.address),
                             prefetch_node.eq(arriving_id),
                             prefetch_scratch.eq(mix32(hop_key ^ arriving_id[:32]))]
        with m.If(job_reset | finishing):
            m.d.sync += [s1_valid.eq(0), s1_second.eq(0)]
        # indptr answers pair up (start, end) into the reserved FIFO space: both from one beat, or
        # from two answers
        first_half = Signal(StreamWord)
        have_half = Signal()
        pair_in = Signal(pair_layout)
        answer = port_a.response.payload
        if data_bytes > 8:
            next_word = port_a.response.beat.word_select(answer.address[3:data_bytes.bit_length() - 1] + 1, 64)
        else:
            next_word = answer.data
        whole = port_a.response.tag.pair
        m.d.comb += [indptr_pairs.w_data.eq(pair_in),
                     pair_in.start.eq(Mux(whole, answer.data, first_half.data)),
                     pair_in.end.eq(Mux(whole, next_word, answer.data)),
                     pair_in.error.eq(Mux(whole, answer.error, first_half.error | answer.error)),
                     pair_in.address.eq(Mux(~whole & first_half.error, first_half.address, answer.address))]
        with m.If(prefetching):
            m.d.comb += port_a.response.ready.eq(1)
            with m.If(port_a.response.valid & whole):
                m.d.comb += indptr_pairs.w_en.eq(1)
            with m.Elif(port_a.response.valid):
                m.d.sync += have_half.eq(~have_half)
                with m.If(have_half):
                    m.d.comb += indptr_pairs.w_en.eq(1)
                with m.Else():
                    m.d.sync += first_half.eq(port_a.response.payload)
        with m.If(job_reset):
            m.d.sync += have_half.eq(0)

        # ---- the feature aggregator (AGGREGATE), after the last hop; reset with every command's start
        # and end. It has its own AXI engines; while it runs, it owns m_axi_storage and m_axi_mem (muxed
        # at the end of elaborate, after every other driver of those signals; both sides are idle at
        # the switch).
        aggregator = FeatureAggregator(cfg)
        m.submodules.aggregator = ResetInserter(job_reset)(aggregator)
        aggregating = Signal()
        parameters = aggregator.parameters
        m.d.comb += [
            parameters.entries.eq(last_size), parameters.nodes_ptr.eq(nodes_ptr),
            parameters.wide_ids.eq(wide_ids), parameters.counts_addr.eq(counts_ptr + last_counts * 4),
            parameters.features_base.eq(image_base + image("features")),
            parameters.feature_dim.eq(feature_dim), parameters.feature_dtype.eq(feature_dtype),
            parameters.self_ptr.eq(self_ptr), parameters.sum_ptr.eq(sum_ptr),
        ]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += control.idle.eq(1)
                with m.If(control.start):
                    m.d.comb += [control.ready.eq(1), sampler_reset.eq(1), combiner.clear.eq(1),
                                 job_reset.eq(1)]
                    m.d.sync += [
                        image_base.eq(control.image), descriptor_base.eq(control.descriptor),
                        *(counter.eq(0) for counter in desc_counters + image_counters),
                        status.eq(Status.OK), error_hop.eq(0),
                        error_index.eq(0), error_value.eq(0), result_valid.eq(0), cycles.eq(1),
                        storage_bytes.eq(0), busy.eq(1), written.eq(0), counts_base.eq(0),
                    ]
                    m.next = "DESCRIPTOR"

            # ---- fetch the descriptor (device memory), then the image header words (storage)
            def capture_into(registers):
                def capture(index, word):
                    with m.Switch(index):
                        for i in range(len(registers)):
                            with m.Case(i):
                                m.d.sync += registers[i].eq(word)
                return capture

            def desc_next():
                m.d.sync += result_valid.eq(1)
                m.next = "IMAGE"

            read_words("DESCRIPTOR", mem, len(desc_words), desc_counters, lambda i: descriptor_base + i * 8,
                                       capture_into(desc_words), desc_next)

            def image_next():
                m.next = "CHECK"

            read_words("IMAGE", port_a, len(image_names), image_counters,
                                        lambda i: image_base + image_offsets[i], capture_into(image_words),
                                        image_next)

            # ---- section 5 checks 1-2, first failure wins
            with m.State("CHECK"):
                checks = [
                    (~(magic_ok & version_ok), Status.BAD_IMAGE, 0),
                    (desc("magic") != DESCRIPTOR_MAGIC, Status.BAD_DESCRIPTOR, "magic"),
                    (desc("version") != DESCRIPTOR_VERSION, Status.BAD_DESCRIPTOR, "version"),
                    (((desc("flags") & ~SUPPORTED_FLAGS) != 0) | (aggregate & (feature_dim == 0)),
                     Status.BAD_DESCRIPTOR, "flags"),
                    (num_targets == 0, Status.BAD_DESCRIPTOR, "num_targets"),
                    ((num_hops == 0) | (num_hops > cfg.max_hops), Status.BAD_DESCRIPTOR, "num_hops"),
                ]
                for h in range(SPEC_MAX_HOPS):
                    k = desc(f"fanout{h}")
                    bad = Mux(num_hops > h, (k == 0) | (k > cfg.max_fanout), k != 0)
                    checks.append((bad, Status.BAD_DESCRIPTOR, f"fanout{h}"))
                checks += [
                    (nodes_ptr[:BUFFER_ALIGN.bit_length() - 1] != 0, Status.BAD_DESCRIPTOR, "nodes_ptr"),
                    (nodes_capacity < num_targets, Status.BAD_DESCRIPTOR, "nodes_capacity"),
                    (counts_ptr[:BUFFER_ALIGN.bit_length() - 1] != 0, Status.BAD_DESCRIPTOR, "counts_ptr"),
                    (aggregate & (self_ptr[:BUFFER_ALIGN.bit_length() - 1] != 0), Status.BAD_DESCRIPTOR, "self_ptr"),
                    (aggregate & (sum_ptr[:BUFFER_ALIGN.bit_length() - 1] != 0), Status.BAD_DESCRIPTOR, "sum_ptr"),
                    (result_ptr[:BUFFER_ALIGN.bit_length() - 1] != 0, Status.BAD_DESCRIPTOR, "result_ptr"),
                ]
                for n, (bad, code, field) in enumerate(checks):
                    with (m.If if n == 0 else m.Elif)(bad):
                        value = 0 if code == Status.BAD_IMAGE else _field(DESCRIPTOR_FIELDS, field)[0]
                        fail(code, value=value)
                with m.Else():
                    m.d.sync += [
                        indptr_base.eq(image_base + image("indptr")),
                        indices_base.eq(image_base + image("indices")),
                        written.eq(num_targets), frontier_size.eq(num_targets), counts_base.eq(0),
                        hop.eq(0), scratch.eq(mix32(seed[:32] ^ spec_rng.SEED_SALT)),
                    ]
                    m.next = "COMMAND_KEY"
            with m.State("COMMAND_KEY"):
                m.d.sync += command_key.eq(mix32(scratch ^ seed[32:]))
                m.next = "HOP"

            # ---- hops
            with m.State("HOP"):
                with m.If((hop == num_hops) & aggregate):
                    m.d.sync += feature_bytes.eq(last_size * feature_dim)
                    m.next = "FEATURES_CHECK"
                with m.Elif(hop == num_hops):
                    m.next = "FINISH"
                with m.Elif(counts_base + frontier_size > counts_capacity):
                    fail(Status.COUNTS_CAPACITY, hop_value=hop, value=counts_base + frontier_size)
                with m.Else():
                    m.d.sync += [hop_key.eq(mix32(command_key ^ hop ^ spec_rng.HOP_SALT)),
                                 frontier_index.eq(0), fanout.eq(fanouts[hop]),
                                 prefetching.eq(1), prefetch_index.eq(0)]
                    m.next = "FRONTIER"
            with m.State("HOP_WAIT"):  # the edge streamer finishes the hop's last jobs
                with m.If(back_idle & ~jobs_waiting):
                    m.next = "HOP_DRAIN"
                abort_on_back_error()

            def next_hop():
                # the next frontier is read back from the node list: every append must have landed
                m.d.sync += [counts_base.eq(counts_base + frontier_size), frontier_size.eq(written),
                             hop.eq(hop + 1), last_size.eq(frontier_size), last_counts.eq(counts_base)]
                m.next = "HOP"

            drain_state("HOP_DRAIN", next_hop)

            with m.State("FRONTIER"):
                # one node per cycle, in frontier order: range check, degree, room in the node list,
                # then the node is handed to the edge streamer with its place reserved
                entry = node_ahead_layout(nodes_ahead.r_data)
                pair = pair_layout(indptr_pairs.r_data)
                node_degree = Signal(64)
                count = Signal(range(cfg.max_fanout + 1))
                m.d.comb += [
                    node_degree.eq(pair.end - pair.start),
                    count.eq(Mux(node_degree < fanout, node_degree, fanout)),
                    job_in.key.eq(entry.key), job_in.degree.eq(node_degree[:32]), job_in.count.eq(count),
                    job_in.edge_start.eq(pair.start), job_in.entry.eq(counts_base + frontier_index),
                    job_in.base.eq(written),
                ]
                with m.If(frontier_index == frontier_size):
                    m.d.sync += prefetching.eq(0)
                    m.next = "HOP_WAIT"
                with m.Elif(nodes_ahead.r_rdy):
                    with m.If(entry.error):
                        fail(Status.STORAGE_ERROR, value=entry.address)
                    with m.Elif(~entry.in_range):
                        fail(Status.NODE_OUT_OF_RANGE, hop_value=hop, index_value=frontier_index,
                             value=entry.node)
                    with m.Elif(indptr_pairs.r_rdy):
                        with m.If(pair.error):
                            fail(Status.STORAGE_ERROR, value=pair.address)
                        with m.Elif(written + count > nodes_capacity):
                            fail(Status.NODES_CAPACITY, hop_value=hop, index_value=frontier_index,
                                 value=written + count)
                        with m.Else():
                            # the node's count is known now: written at once, in frontier order; only
                            # nodes with edges become jobs
                            dispatchable = lane_free | (count == 0)
                            m.d.comb += [
                                fields_out.valid.eq(dispatchable),
                                fields_out.payload.address.eq(counts_ptr + (counts_base + frontier_index) * 4),
                                fields_out.payload.data.eq(count), fields_out.payload.wide.eq(0),
                            ]
                            with m.If(dispatchable & fields_out.ready):
                                with m.If(count != 0):
                                    with m.Switch(next_lane):
                                        for lane in range(lanes):
                                            with m.Case(lane):
                                                m.d.comb += lane_jobs[lane].w_en.eq(1)
                                    m.d.sync += last_lane.eq(next_lane)
                                m.d.comb += [nodes_ahead.r_en.eq(1), indptr_pairs.r_en.eq(1)]
                                m.d.sync += [written.eq(written + count), frontier_index.eq(frontier_index + 1)]
                abort_on_back_error()

            # ---- AGGREGATE (section 5 step 5, then section 4): room for the self rows and the sums
            # of the last frontier, then the feature aggregator
            with m.State("FEATURES_CHECK"):  # feature_bytes = |F_{L-1}| x F
                with m.If((feature_bytes << feature_size_log2) > desc("self_capacity")):
                    fail(Status.FEATURES_CAPACITY, index_value=0, value=feature_bytes << feature_size_log2)
                with m.Elif((feature_bytes << 2) > desc("sum_capacity")):
                    fail(Status.FEATURES_CAPACITY, index_value=1, value=feature_bytes << 2)
                with m.Else():
                    m.next = "AGGREGATE"
            with m.State("AGGREGATE"):
                m.d.comb += [aggregating.eq(1), aggregator.start.eq(1)]
                m.next = "AGGREGATE_WAIT"
            with m.State("AGGREGATE_WAIT"):
                m.d.comb += aggregating.eq(1)
                with m.If(~aggregator.busy):
                    with m.If(aggregator.error):
                        fail(Status.STORAGE_ERROR, value=aggregator.error_address)
                    with m.Elif(aggregator.write_error):
                        fail(Status.OUTPUT_ERROR, value=aggregator.write_error_address)
                    with m.Else():
                        m.next = "FINISH"

            # ---- result header, written last (never when result_ptr is unusable)
            with m.State("FINISH"):
                # reads still in flight (an error mid-hop) are taken and dropped; every output write
                # is answered before the result header
                m.d.comb += [mem.response.ready.eq(1), drain_storage.eq(1), finishing.eq(1), job_reset.eq(1),
                             combiner.flush.eq(1)]
                readers_idle = Cat(storage.idle, *(reader.idle for reader in lane_readers)).all()
                with m.If(combiner.idle & mem.idle & readers_idle & back_idle):
                    with m.If(combiner.error & (status == Status.OK)):
                        m.d.sync += [status.eq(Status.OUTPUT_ERROR), error_hop.eq(0), error_index.eq(0),
                                     error_value.eq(combiner.error_address)]
                    m.d.sync += [final_cycles.eq(cycles), result_index.eq(0)]
                    with m.If(result_valid & (result_ptr[:BUFFER_ALIGN.bit_length() - 1] == 0)):
                        m.next = "RESULT"
                    with m.Else():
                        m.next = "DONE"

            succeeded = status == Status.OK  # on an error the output counts are 0, as the golden model's
            result_words = {
                "status": Cat(status, error_hop), "error_index": error_index, "error_value": error_value,
                "nodes_written": Mux(succeeded, written, 0), "counts_written": Mux(succeeded, counts_base, 0),
                "edges_sampled": Mux(succeeded, written - num_targets, 0), "storage_bytes": storage_bytes,
                "cycles": final_cycles,
            }
            words = Array(Signal(64, name=f"result_{name}") for name in result_words)
            for i, (name, value) in enumerate(result_words.items()):
                assert _field(RESULT_FIELDS, name)[0] == 8 * i, f"result field {name} is not word {i}"
                m.d.comb += words[i].eq(value)

            def result_next():
                m.d.sync += result_index.eq(result_index + 1)
                with m.If(result_index == len(result_words) - 1):
                    m.next = "RESULT_DRAIN"
                with m.Else():
                    m.next = "RESULT"

            write_state("RESULT", result_ptr + result_index * 8, words[result_index], 1, result_next)
            with m.State("RESULT_DRAIN"):  # ap_done only once the header has landed
                m.d.comb += combiner.flush.eq(1)
                with m.If(combiner.idle):
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += control.done.eq(1)
                m.d.sync += busy.eq(0)
                m.next = "IDLE"

        # ---- the edge streamers, one per lane: the issuer turns each job's positions into index reads
        # (several jobs' reads in flight at once, up to outstanding_reads per lane); the collector takes
        # the answers in order and appends the ids to the node list at the job's reserved place. A job
        # with d > k runs a position sampler and reads one id per position; a job with d <= k takes
        # all its d consecutive ids, read a beat at a time (*dense*: up to data_width / 32 ids per
        # read). Lanes finish their jobs in any order: each id's place was fixed at dispatch.
        with m.If(job_reset):
            m.d.sync += last_lane.eq(0)
        beat_log2 = data_bytes.bit_length() - 1
        collect_layout = data.StructLayout({"count": range(cfg.max_fanout + 1), "base": 64})
        lane_idle, lane_error = [], []
        for lane in range(lanes):
            reader = lane_readers[lane]
            ids_tags = SyncFIFO(width=len(Signal(range(ids_per_beat + 1))), depth=cfg.outstanding_reads)
            m.submodules[f"ids_tags{lane}"] = ResetInserter(job_reset)(ids_tags)
            port = requester(f"lane{lane}")
            m.d.comb += [
                reader.request.valid.eq(port.request.valid & ids_tags.w_rdy),
                reader.request.payload.eq(port.request.payload),
                port.request.ready.eq(reader.request.ready & ids_tags.w_rdy),
                ids_tags.w_data.eq(port.request.ids),
                ids_tags.w_en.eq(reader.request.valid & reader.request.ready),
                port.response.payload.eq(reader.response.payload),
                port.response.valid.eq(reader.response.valid & ids_tags.r_rdy),
                # a command that ends early drains its reads with the tags already cleared (job_reset)
                reader.response.ready.eq(drain_storage | (ids_tags.r_rdy & port.response.ready)),
                ids_tags.r_en.eq(reader.response.valid & reader.response.ready),
            ]
            port.response.beat = reader.beat
            answered = reader.response.valid & reader.response.ready
            answer_ids = ids_tags.r_data
            samplers = lane_samplers[lane]
            jobs = lane_jobs[lane]
            name = f"lane{lane}_"
            issuer_idle = Signal(name=name + "issuer_idle")
            collector_idle = Signal(name=name + "collector_idle")
            collector_error = Signal(name=name + "collector_error")
            issued = Signal(range(cfg.max_fanout + 1), name=name + "issued")
            pending = Signal(range(cfg.outstanding_reads + 1), name=name + "pending")  # reads unanswered
            m.d.sync += pending.eq(pending + (port.request.valid & port.request.ready) - answered)
            with m.If(job_reset):
                m.d.sync += pending.eq(0)

            # issuer, first half: take a job, start the sampler whose turn it is (d > k), queue a
            # ticket for the streaming half and the job's place for the collector (all in one cycle)
            ticket_layout = data.StructLayout({"sampler": 1, "dense": 1, "count": range(cfg.max_fanout + 1),
                                               "edge_start": 64})
            tickets = SyncFIFO(width=ticket_layout.size, depth=2)
            m.submodules[f"tickets{lane}" if lane else "tickets"] = ResetInserter(job_reset)(tickets)
            collects = SyncFIFO(width=collect_layout.size, depth=cfg.outstanding_reads)
            m.submodules[f"collects{lane}"] = ResetInserter(job_reset)(collects)
            ticket_in = Signal(ticket_layout, name=name + "ticket_in")
            ticket = Signal(ticket_layout, name=name + "ticket")
            collect_in = Signal(collect_layout, name=name + "collect_in")
            turn = Signal(name=name + "turn")
            incoming = job_layout(jobs.r_data)
            dense_job = incoming.degree == incoming.count
            turn_ready = Mux(turn, samplers[1].request.ready, samplers[0].request.ready)
            go = Signal(name=name + "go")
            m.d.comb += [
                go.eq(jobs.r_rdy & tickets.w_rdy & collects.w_rdy & ~finishing & ~back_error
                      & (dense_job | turn_ready)),
                ticket_in.sampler.eq(turn), ticket_in.dense.eq(dense_job), ticket_in.count.eq(incoming.count),
                ticket_in.edge_start.eq(incoming.edge_start), tickets.w_data.eq(ticket_in),
                collect_in.count.eq(incoming.count), collect_in.base.eq(incoming.base),
                collects.w_data.eq(collect_in),
            ]
            for number, sampler in enumerate(samplers):
                m.d.comb += [sampler.request.payload.key.eq(incoming.key),
                             sampler.request.payload.degree.eq(incoming.degree),
                             sampler.request.payload.fanout.eq(fanout),
                             sampler.request.valid.eq(go & ~dense_job & (turn == number))]
            with m.If(go):
                m.d.comb += [jobs.r_en.eq(1), tickets.w_en.eq(1), collects.w_en.eq(1)]
                with m.If(~dense_job):
                    m.d.sync += turn.eq(~turn)
            with m.If(job_reset):
                m.d.sync += turn.eq(0)

            # issuer, second half: each ticket's reads, ticket after ticket
            positions_valid = Mux(ticket.sampler, samplers[1].positions.valid, samplers[0].positions.valid)
            positions = Mux(ticket.sampler, samplers[1].positions.payload, samplers[0].positions.payload)
            dense_address = Signal(64, name=name + "dense_address")
            dense_room = Signal(range(ids_per_beat + 1), name=name + "dense_room")  # ids to the beat's end
            dense_ids = Signal(range(ids_per_beat + 1), name=name + "dense_ids")
            remaining = ticket.count - issued
            m.d.comb += [
                dense_address.eq(indices_base + (ticket.edge_start + issued) * id_bytes),
                dense_room.eq(Mux(wide_ids, (data_bytes - dense_address[:beat_log2]) >> 3,
                                  (data_bytes - dense_address[:beat_log2]) >> 2)),
                dense_ids.eq(Mux(remaining < dense_room, remaining, dense_room)),
            ]
            step = Mux(ticket.dense, dense_ids, 1)
            with m.FSM(name=name + "issuer"):
                with m.State("I_IDLE"):
                    m.d.comb += issuer_idle.eq(~tickets.r_rdy)
                    with m.If(tickets.r_rdy & ~finishing & ~back_error):
                        m.d.comb += tickets.r_en.eq(1)
                        m.d.sync += [ticket.eq(tickets.r_data), issued.eq(0)]
                        m.next = "I_STREAM"
                with m.State("I_STREAM"):
                    with m.If(ticket.dense):
                        m.d.comb += [port.request.valid.eq(1), port.request.payload.eq(dense_address),
                                     port.request.ids.eq(dense_ids)]
                    with m.Else():
                        m.d.comb += [
                            port.request.valid.eq(positions_valid), port.request.ids.eq(1),
                            port.request.payload.eq(indices_base + (ticket.edge_start + positions) * id_bytes),
                        ]
                        for number, sampler in enumerate(samplers):
                            m.d.comb += sampler.positions.ready.eq(port.request.ready & (ticket.sampler == number))
                    with m.If(port.request.valid & port.request.ready):
                        m.d.sync += issued.eq(issued + step)
                        with m.If(issued + step == ticket.count):
                            # the next ticket at once when there is one
                            with m.If(tickets.r_rdy):
                                m.d.comb += tickets.r_en.eq(1)
                                m.d.sync += [ticket.eq(tickets.r_data), issued.eq(0)]
                            with m.Else():
                                m.next = "I_IDLE"
                    with m.If(finishing | back_error):
                        m.next = "I_IDLE"

            # the answers leave the read channel at once (a beat FIFO), so an answer that holds several
            # ids never stops the reads behind it
            answer_layout = data.StructLayout({"beat": cfg.data_width, "address": 64, "error": 1,
                                               "ids": range(ids_per_beat + 1)})
            answers = SyncFIFO(width=answer_layout.size, depth=32)
            m.submodules[f"answers{lane}" if lane else "answers"] = ResetInserter(job_reset)(answers)
            answer_in = Signal(answer_layout, name=name + "answer_in")
            m.d.comb += [
                answer_in.beat.eq(port.response.beat), answer_in.address.eq(port.response.payload.address),
                answer_in.error.eq(port.response.payload.error), answer_in.ids.eq(answer_ids),
                answers.w_data.eq(answer_in), answers.w_en.eq(port.response.valid & ~finishing),
                port.response.ready.eq(answers.w_rdy),
            ]
            # the collector: one id per cycle, at the job's place (base + i), job after job
            head = answer_layout(answers.r_data)
            job = collect_layout(collects.r_data)
            taken = Signal(range(ids_per_beat), name=name + "taken")          # ids of the head answer
            appended = Signal(range(cfg.max_fanout), name=name + "appended")  # ids of the job
            offset = Signal(beat_log2 + 1, name=name + "offset")
            m.d.comb += offset.eq(head.address[:beat_log2] + taken * id_bytes)
            wide_id = head.beat.word_select(offset[3:beat_log2], 64) if data_bytes > 8 else head.beat
            narrow_id = head.beat.word_select(offset[2:beat_log2], 32)
            appends = combiner.fields[lane]
            m.d.comb += collector_idle.eq(collector_error | (~answers.r_rdy & ~collects.r_rdy))
            with m.If(~finishing & ~collector_error):
                m.d.comb += [
                    appends.valid.eq(answers.r_rdy & collects.r_rdy & ~head.error),
                    appends.payload.address.eq(nodes_ptr + (job.base + appended) * id_bytes),
                    appends.payload.data.eq(Mux(wide_ids, wide_id, narrow_id)),
                    appends.payload.wide.eq(wide_ids),
                ]
                with m.If(answers.r_rdy & head.error):
                    m.d.sync += [status.eq(Status.STORAGE_ERROR), error_hop.eq(0), error_index.eq(0),
                                 error_value.eq(head.address), collector_error.eq(1)]
                with m.Elif(appends.valid & appends.ready):
                    m.d.sync += [taken.eq(taken + 1), appended.eq(appended + 1)]
                    with m.If(taken == head.ids - 1):
                        m.d.comb += answers.r_en.eq(1)
                        m.d.sync += taken.eq(0)
                    with m.If(appended == job.count - 1):
                        m.d.comb += collects.r_en.eq(1)
                        m.d.sync += appended.eq(0)
            with m.If(job_reset | collector_error):
                m.d.sync += [taken.eq(0), appended.eq(0)]
            with m.If(control.ready):  # stopped by an error until the next command
                m.d.sync += collector_error.eq(0)
            lane_idle.append(issuer_idle & ~jobs.r_rdy & (pending == 0) & collector_idle)
            lane_error.append(collector_error)
        m.d.comb += [back_error.eq(Cat(*lane_error).any()),
                     back_idle.eq(Cat(*lane_idle).all() | back_error)]

        # ---- the buses, while the aggregator runs: its engines instead of the sampler's (overriding
        # the connections above); otherwise its engines see an idle bus
        for ours, theirs, samplers in ((self.m_axi_storage, aggregator.storage, (storage.bus,)),
                                       (self.m_axi_mem, aggregator.mem, (mem.bus, combiner.bus))):
            for name, member in theirs.signature.members.items():
                if member.flow == In:
                    m.d.comb += getattr(theirs, name).eq(Mux(aggregating, getattr(ours, name), 0))
            with m.If(aggregating):
                for name, member in theirs.signature.members.items():
                    if member.flow == Out:
                        m.d.comb += getattr(ours, name).eq(getattr(theirs, name))
                for port in samplers:
                    for name, member in port.signature.members.items():
                        if member.flow == In:
                            m.d.comb += getattr(port, name).eq(0)
        return m
