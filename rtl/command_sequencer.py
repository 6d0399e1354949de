"""The command sequencer: one command from ap_start to ap_done, node by node in frontier order.

It fetches the descriptor (device memory) and the image header words (storage), checks them in
the order of docs/spec.md section 5, computes the command key, then per hop the hop key and the
counts-capacity check; during a hop it takes the prefetcher's checked nodes and indptr pairs one
per cycle, writes each node's count, reserves its place in the node list and hands a job per node
with edges to the dispatcher. After the last hop (AGGREGATE) it checks the feature buffers and
runs the aggregator; at the end it drains every read and write and writes the result header.

Longer than the ~400 lines of the other blocks: the descriptor and header checks, the hop loop,
the aggregation's capacity checks and the result header are the states of one state machine (the
command's), which share its registers; split across files, one FSM's states would be too. The
image header words it reads are located in ``image_header.py``.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Shape, Signal
from amaranth.lib import data, stream
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

from .axi import ADDRESS_WIDTH, AxiReadSignature, AxiSignature
from .compare import below
from .feature_aggregator import START_COPIES, AggregateParameters
from .frontier_prefetcher import FrontierNode, IndptrPair
from .fsm_encoding import encode_states
from .image_header import IMAGE_WORDS, field_span
from .job_dispatcher import node_job_layout
from .kernel_block import KernelBlock, check_kernel_config
from .multiply import split_accumulate
from .node_list_collector import id_offset
from .ping_pong_buffer import PingPongBuffer
from .register_copies import lut_copies, register_copies
from .rng import MIX32_LATENCY, mix32_pipelined
from .tagged_read_stream import ReadPortSignature
from .write_combiner import AppendWord

__all__ = ["CommandSequencer", "IMAGE_WORDS", "SUPPORTED_FLAGS", "OutputBuffers", "bus_switch_copies",
           "BUS_SWITCH_GROUP", "PrefetchOwners"]

#: Descriptor flags this build executes: AGGREGATE (docs/spec.md section 4, the feature aggregator).
SUPPORTED_FLAGS = int(Flags.AGGREGATE)
#: The descriptor's output buffers as the sequencer latched them (pointers, capacities).
OutputBuffers = data.StructLayout({name: 64 for name in (
    "nodes_ptr", "nodes_capacity", "counts_ptr", "counts_capacity", "self_ptr", "self_capacity",
    "sum_ptr", "sum_capacity", "result_ptr")})
#: The copies of the sequencer's ``prefetch`` flag: the device-memory read engine's and the storage
#: read engine's share (the prefetcher's reads, not the sequencer's, while set) and the prefetcher's
#: ``active``.
PrefetchOwners = data.StructLayout({"memory": 1, "storage": 1, "prefetcher": 1})
#: Multiplexer bits of the kernel's bus switch one copy of ``aggregating`` drives at most.
BUS_SWITCH_GROUP = 48
#: FRONTIER's walk registers one copy of ``take``'s last AND steps at most.
WALK_GROUP = 32
#: Copies of the multiplier's low bit and of the element size's log2 (``register_copies``), each
#: picking one group of the feature bytes' multiplexers.
PRODUCT_GROUPS = 4


def bus_switch_copies(config: KernelConfig) -> int:
    """Copies of the sequencer's ``aggregating`` flag the kernel's bus switch uses: one for the
    aggregator's incoming handshakes on each bus (storage, device memory), one for the sampling
    engines', and one per
    :data:`BUS_SWITCH_GROUP` bits of the two buses' outgoing signals (the storage master's read
    channels, device memory's read and write channels)."""
    outgoing = sum(Shape.cast(member.shape).width
                   for signature in (AxiReadSignature(config.data_width), AxiSignature(config.data_width))
                   for member in signature.members.values() if member.flow == Out)
    return 3 + -(-outgoing // BUS_SWITCH_GROUP)


class CommandSequencer(KernelBlock):
    """The command's state machine (docs/rtl.md, "The command pipeline", steps 1, 3, 5-7).

    Parameters
    ----------
    config : KernelConfig
        Data width, max_fanout and max_hops of the build.

    Members
    -------
    start : ``In(1)``; image, descriptor : ``In(64)``
        ap_start and the kernel arguments (from the control registers).
    ready, idle, done : ``Out(1)``
        ap_ready (the command is taken), ap_idle, ap_done.
    descriptor_reads : ``Out(ReadPortSignature())``
        Descriptor reads (device memory).
    header_reads : ``Out(ReadPortSignature())``
        Image header reads (storage).
    nodes : ``In(stream.Signature(FrontierNode))``; pairs : ``In(stream.Signature(IndptrPair))``
        The prefetcher's checked frontier nodes and indptr pairs.
    prefetch : ``Out(PrefetchOwners)``; restart_prefetch : ``Out(1)``
        The hop's frontier is read (the prefetcher runs): the same flag as a flip-flop of its own
        for each of its uses (:mod:`~smartsage.rtl.register_copies`); a hop starts (from entry 0):
        high in the cycle after each cycle of HOP, a flip-flop (the prefetcher takes it while not
        running).
    frontier_size, nodes_ptr, num_nodes, indptr_base, indices_base : ``Out(64)``
    wide_ids : ``Out(1)``; hop_key : ``Out(32)``; fanout : ``Out(16)``
        What the prefetcher and the lanes need of the command and the hop.
    job : ``Out(stream.Signature(node_job_layout(config.max_fanout)))``
        A job per node with edges, to the dispatcher, with its first edge's storage address and its
        place's device address. Its ``ready`` is looked at before the node's
        count is offered (both go in one cycle).
    jobs_waiting : ``In(1)``
        The dispatcher's queues hold jobs. (This and the idle flags below are taken a cycle late,
        through flip-flops of the sequencer's.)
    fields : ``Out(stream.Signature(AppendWord))``
        Counts and the result header (a write-combiner port).
    flush_writes, clear_writes : ``Out(1)``; writes_idle, write_error : ``In(1)``;
    write_error_address : ``In(64)``
        The write combiner's flush, clear, idle and first error.
    clear_jobs : ``Out(1)``
        A command started or is ending (a register, a cycle after): the prefetcher, dispatcher,
        lanes and aggregator are cleared.
    reset_samplers : ``Out(1)``
        A command started (a register, a cycle after): the position samplers are reset.
    abandon : ``Out(data.ArrayLayout(1, config.lanes + 1))``
        The command ends: work in flight is dropped (high exactly in the FINISH state): a flip-flop
        for each lane (its edge streamer and its reader's drain) and one for the prefetcher
        (:mod:`~smartsage.rtl.register_copies`), the last.
    drain_reads : ``Out(1)``
        The command ends: every storage answer is taken and dropped.
    reads_idle : ``In(1)``
        No read in flight on any read engine.
    streamers_idle, streamers_failed : ``In(1)``
        Every lane is idle (or one failed); a lane hit a read error.
    streamer_error : ``In(1)``; streamer_error_address : ``In(64)``
        A lane takes a read error this cycle (STORAGE_ERROR at that address).
    storage_read_beats : ``In(16)``
        Storage beats requested this cycle (all storage masters; for ``storage_bytes``).
    aggregate_start : ``Out(data.ArrayLayout(1, START_COPIES))``; aggregate_parameters : ``Out(AggregateParameters)``
    aggregating : ``Out(data.ArrayLayout(1, bus_switch_copies(config)))``
    aggregator_busy, aggregator_error, aggregator_write_error : ``In(1)``;
    aggregator_error_address, aggregator_write_error_address : ``In(64)``
        The feature aggregator's start, its parameters and outcome; ``aggregating``: it owns the
        storage and device-memory buses (copies of one flag, each a flip-flop of its own,
        :mod:`~smartsage.rtl.register_copies`, for a group of the kernel's bus switch).
    buffers : ``Out(OutputBuffers)``
        The descriptor's output buffers as fetched (for the write-window property of
        rtl/formal/kernel_writes.py; nothing in the kernel reads them).
    """

    def __init__(self, config: KernelConfig):
        check_kernel_config(config)
        super().__init__(config, {
            "start": In(1), "image": In(ADDRESS_WIDTH), "descriptor": In(ADDRESS_WIDTH),
            "ready": Out(1), "idle": Out(1), "done": Out(1),
            "descriptor_reads": Out(ReadPortSignature()), "header_reads": Out(ReadPortSignature()),
            "nodes": In(stream.Signature(FrontierNode)), "pairs": In(stream.Signature(IndptrPair)),
            "prefetch": Out(PrefetchOwners), "restart_prefetch": Out(1),
            "frontier_size": Out(64), "nodes_ptr": Out(ADDRESS_WIDTH), "num_nodes": Out(64),
            "indptr_base": Out(ADDRESS_WIDTH), "indices_base": Out(ADDRESS_WIDTH),
            "wide_ids": Out(1), "hop_key": Out(32), "fanout": Out(16),
            "job": Out(stream.Signature(node_job_layout(config.max_fanout))), "jobs_waiting": In(1),
            "fields": Out(stream.Signature(AppendWord)),
            "flush_writes": Out(1), "clear_writes": Out(1), "writes_idle": In(1), "write_error": In(1),
            "write_error_address": In(ADDRESS_WIDTH),
            "clear_jobs": Out(1), "reset_samplers": Out(1), "abandon": Out(data.ArrayLayout(1, config.lanes + 1)),
            "drain_reads": Out(1),
            "reads_idle": In(1), "streamers_idle": In(1), "streamers_failed": In(1),
            "streamer_error": In(1), "streamer_error_address": In(ADDRESS_WIDTH),
            "storage_read_beats": In(16),
            "aggregate_start": Out(data.ArrayLayout(1, START_COPIES)),
            "aggregating": Out(data.ArrayLayout(1, bus_switch_copies(config))),
            "aggregate_parameters": Out(AggregateParameters),
            "aggregator_busy": In(1), "aggregator_error": In(1), "aggregator_error_address": In(ADDRESS_WIDTH),
            "aggregator_write_error": In(1), "aggregator_write_error_address": In(ADDRESS_WIDTH),
            "buffers": Out(OutputBuffers),
        })

    def _fits(self, end, capacity, buffer: str):
        """The capacity checks: entries up to ``end`` fit the ``buffer`` ("counts": ``end`` the hop's
        last count entry, ``capacity`` the buffer's; "nodes": ``end`` the node's sample count,
        ``capacity`` the room left in the node list, compared without a 64-bit carry chain)."""
        if buffer == "nodes":
            return ~below(capacity, end)
        return end <= capacity

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        data_bytes = cfg.data_bytes
        fields_out = self.fields
        # in FINISH, as a flip-flop set on every way into the state and cleared on the way out: the
        # lanes' ``abandon``, the readers' drain and the combiner's flush fan out across the chip from
        # it (decoded from the state in LUTs they were the whole kernel's critical path, 65.8 MHz)
        # (its next value also loads a copy per lane and one for the prefetcher, ``abandon``)
        finishing = Signal()
        finishing_next = Signal()
        m.d.comb += finishing_next.eq(finishing)
        m.d.sync += finishing.eq(finishing_next)
        m.d.comb += self.abandon.eq(Cat(register_copies(m, platform, "abandon", finishing_next, cfg.lanes + 1)))
        # the clears reach every lane's samplers and the aggregator as synchronous resets: they leave
        # as flip-flops, a cycle after their cause (the whole kernel's critical path on the ECP5 proxy
        # was the start decoded from the state into those resets, 56.1 MHz), so no block is cleared
        # in the cycle a command starts or its FINISH begins, only the next
        job_reset, sampler_reset = Signal(), Signal()
        m.d.sync += [self.clear_jobs.eq(job_reset), self.reset_samplers.eq(sampler_reset)]
        drain_storage = self.drain_reads
        # the aggregator owns the buses in AGGREGATE and AGGREGATE_WAIT: a flip-flop set on the way
        # in and cleared on the way out (it muxes every signal of both buses; decoded from the state
        # it put the state's LUTs in front of the read engines' answers across the kernel)
        # (its next value, set and cleared below, loads the flag's copies, one per group of the bus
        # switch's multiplexers: as one flip-flop it drove ~400 of them, into the aggregator's
        # read handshakes among others, 9.6-9.7 ns on the ECP5 proxy)
        aggregating = Signal()
        aggregating_next = Signal()
        m.d.comb += aggregating_next.eq(aggregating)
        m.d.sync += aggregating.eq(aggregating_next)
        m.d.comb += self.aggregating.eq(Cat(register_copies(m, platform, "aggregating", aggregating_next,
                                                            len(self.aggregating))))
        # the aggregator's start, high in AGGREGATE's one cycle: a flip-flop set on the way in (the
        # state decoded in LUTs reached the aggregator's loads and clears across the chip), copied for
        # the aggregator's groups of registers (:data:`~smartsage.rtl.feature_aggregator.START_COPIES`)
        aggregate_start_next = Signal()
        m.d.comb += self.aggregate_start.eq(Cat(register_copies(m, platform, "aggregate_start",
                                                                aggregate_start_next, START_COPIES)))
        m.d.comb += [drain_storage.eq(finishing), self.flush_writes.eq(finishing)]

        m.d.sync += self.restart_prefetch.eq(0)   # (set in HOP, below)

        # ---- command state
        image_base = Signal(64)
        descriptor_base = Signal(64)
        # (the fetched words are read only after their fetch: no reset reaches their ~1,400 flip-flops)
        desc_words = Array(Signal(64, name=f"desc_word{i}", reset_less=True) for i in range(DESCRIPTOR_SIZE // 8))
        image_names = list(IMAGE_WORDS)
        image_offsets = Array(Const(IMAGE_WORDS[n], 64) for n in image_names)
        image_words = Array(Signal(64, name=f"image_{n}", reset_less=True) for n in image_names)
        # reads asked for and answers taken while fetching the descriptor and the header words
        desc_counters = (Signal(range(len(desc_words) + 1), name="descriptor_asked"),
                         Signal(range(len(desc_words) + 1), name="descriptor_answered"))
        image_counters = (Signal(range(len(image_names) + 1), name="image_asked"),
                          Signal(range(len(image_names) + 1), name="image_answered"))
        fetching_descriptor = Signal(name="fetching_descriptor")   # in DESCRIPTOR
        fetching_header = Signal(name="fetching_header")           # in IMAGE

        def desc(name):
            offset, size = field_span(DESCRIPTOR_FIELDS, name)
            word = desc_words[offset // 8]
            return word[(offset % 8) * 8:(offset % 8 + size) * 8]

        def image(name):
            return image_words[image_names.index(name)]

        magic_ok = image("magic") == int.from_bytes(spec_image.MAGIC, "little")
        version_offset = field_span(spec_image.HEADER_FIELDS, "version")[0] % 8
        version_ok = image("version")[version_offset * 8:version_offset * 8 + 32] == spec_image.VERSION
        num_nodes = image("num_nodes")
        dtype_offset = field_span(spec_image.HEADER_FIELDS, "index_dtype")[0] % 8
        # decoded header fields are registered (the header words change only in the IMAGE state)
        # (the id width as two flip-flops: one for the job's node address, one for the rest; as one,
        # into the addresses' shifts and the dispatcher's intake it was a 9.0 ns path on the ECP5
        # proxy. The job's edge address comes with its pair: the prefetcher works it out)
        wide_decoded = image("index_dtype")[dtype_offset * 8:dtype_offset * 8 + 8] == int(spec_image.IndexDtype.U64)
        wide_ids, wide_nodes = register_copies(m, platform, "wide_ids", wide_decoded, 2)
        self._wide_nodes = (wide_nodes, wide_decoded)     # (for the proofs: the flag and its source)
        # feature_dim and feature_dtype share the 64-bit header word of index_dtype
        for name in ("feature_dim", "feature_dtype"):
            assert field_span(spec_image.HEADER_FIELDS, name)[0] & ~7 == IMAGE_WORDS["index_dtype"]
        dim_offset, dim_size = field_span(spec_image.HEADER_FIELDS, "feature_dim")
        feature_dim = image("index_dtype")[(dim_offset % 8) * 8:(dim_offset % 8 + dim_size) * 8]
        fdtype_offset = field_span(spec_image.HEADER_FIELDS, "feature_dtype")[0] % 8
        feature_dtype = image("index_dtype")[fdtype_offset * 8:fdtype_offset * 8 + 8]
        size_log2_next = Signal(2)      # the element size's log2, loaded into copies below
        m.d.comb += size_log2_next.eq(Mux(feature_dtype == int(spec_image.FeatureDtype.FP32), 2,
                                          Mux((feature_dtype == int(spec_image.FeatureDtype.FP16))
                                              | (feature_dtype == int(spec_image.FeatureDtype.BF16)), 1, 0)))
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
        multiplicand = Signal(96)
        multiplier = Signal(32)
        self_bytes = Signal(96 + 2)
        sum_bytes = Signal(96 + 2)
        self_over = Signal()        # self_bytes > self_capacity, a cycle after self_bytes
        sum_over = Signal()
        m.d.sync += [self_over.eq(self_bytes > desc("self_capacity")), sum_over.eq(sum_bytes > desc("sum_capacity"))]
        # feature_bytes = |F_{L-1}| x F by shifts and adds, one bit of F per cycle, in every cycle with
        # no enable (decoded from the state, the enables of these ~420 flip-flops were a long path on the
        # ECP5 proxy): the operands load in the cycle after each HOP cycle, and FEATURES_MULTIPLY (entered
        # from HOP) waits that cycle and for the multiplier to shift out; then, and in every other state,
        # the multiplier is 0, so nothing changes, and the byte counts follow the product a cycle behind.
        # The sum is two 48-bit chains, the low one's carry into the high one registered (rtl/multiply.py
        # ``split_accumulate``): exact a cycle after the last addition (FEATURES_CARRY)
        # The load is a flip-flop set by HOP, in copies (``register_copies``), one per group of the
        # operands and the sum (decoded from the state in HOP, one LUT reached their ~225 flip-flops:
        # ``fsm_state`` -> ``multiplicand`` 8.67 ns at one level on ``small``'s ECP5 proxy), and the
        # multiplier's low bit and the element size, which pick ~100 multiplexers each, are read through
        # copies likewise (as one flip-flop each, ``multiplier`` -> the addend -> ``feature_bytes`` was
        # 7.97 ns and ``feature_size_log2`` -> ``self_bytes`` 7.60 ns at two levels)
        in_hop = Signal()
        operands_due = register_copies(m, platform, "operands_due", in_hop, PRODUCT_GROUPS + 2)
        multiplier_next = Signal.like(multiplier)
        m.d.comb += multiplier_next.eq(Mux(operands_due[PRODUCT_GROUPS], feature_dim, multiplier >> 1))
        m.d.sync += multiplier.eq(multiplier_next)
        low_bits = register_copies(m, platform, "multiplier_low", multiplier_next[0], PRODUCT_GROUPS)
        addend = Cat(Mux(low_bits[bit * PRODUCT_GROUPS // 96], multiplicand[bit], 0) for bit in range(96))
        carry = split_accumulate(m, feature_bytes, addend, 48)
        loaded_multiplicand = Cat(last_size, Const(0, 32))
        for group in range(PRODUCT_GROUPS):
            part = slice(group * 96 // PRODUCT_GROUPS, (group + 1) * 96 // PRODUCT_GROUPS)
            with m.If(operands_due[group]):   # (after split_accumulate's statements: the load wins)
                m.d.sync += feature_bytes[part].eq(0)
            m.d.sync += multiplicand[part].eq(Mux(operands_due[group], loaded_multiplicand[part],
                                                  (multiplicand << 1)[part]))
        with m.If(operands_due[PRODUCT_GROUPS]):
            m.d.sync += carry.eq(0)
        multiplied = ~operands_due[PRODUCT_GROUPS + 1] & (multiplier == 0)   # (FEATURES_MULTIPLY's exit)
        size_bits = [register_copies(m, platform, f"element_size{b}_", size_log2_next[b], PRODUCT_GROUPS)
                     for b in range(2)]

        def element_bytes_bit(bit):
            """Bit ``bit`` of feature_bytes << feature_size_log2, through the bit's group's copies."""
            copy = bit * PRODUCT_GROUPS // len(self_bytes)
            return Mux(size_bits[1][copy], feature_bytes[bit - 2] if bit >= 2 else 0,
                       Mux(size_bits[0][copy], feature_bytes[bit - 1] if 1 <= bit <= 96 else 0,
                           feature_bytes[bit] if bit < 96 else 0))
        m.d.sync += [self_bytes.eq(Cat(element_bytes_bit(bit) for bit in range(len(self_bytes)))),
                     sum_bytes.eq(feature_bytes << 2)]
        counts_end = Signal(65)    # counts_base + frontier_size, registered (the HOP state's check)

        status = Signal(32)
        error_hop = Signal(32)
        error_index = Signal(64)
        error_value = Signal(64)
        result_valid = Signal()   # descriptor fetched: result_ptr may be used if aligned

        command_key = Signal(32)
        hop_key = Signal(32)
        hop = Signal(range(SPEC_MAX_HOPS + 1))
        last_hop = Signal()     # hop == num_hops, set with hop (HOP decides on it in its first cycle)
        frontier_index = Signal(64)
        frontier_end = Signal()     # frontier_index == frontier_size, as a register (during a hop)
        frontier_size = Signal(64)
        # frontier_size == 0, a flip-flop loaded with it (the 64-bit compare, in HOP, was in front of
        # ``frontier_end``: four levels, 7.03 ns on ``small``'s ECP5 proxy)
        frontier_empty = Signal(name="frontier_empty")
        # frontier_size - 1, loaded in every HOP cycle (frontier_size is set before HOP): the walk's end
        # is ``frontier_index == frontier_last`` as a node is taken, a compare of two registers (as
        # ``frontier_index + 1 == frontier_size``, a carry chain in front of the compare, it was an
        # 8.7 ns path on the ECP5 proxy)
        frontier_last = Signal(64)
        counts_base = Signal(64)
        written = Signal(64)
        nodes_room = Signal(64)     # nodes_capacity - written (from the descriptor check on)
        # the fields' address: counts_ptr + (counts_base + frontier_index) x 4 during a hop, the
        # result header's word in RESULT
        count_address = Signal(64)
        # the next job's place, nodes_ptr + written x id size, stepped with ``written`` in FRONTIER
        # (loaded in HOP): worked out from ``written`` as the job was formed, its 64-bit add was in
        # front of the dispatcher's intake, 7.23 ns on ``small``'s ECP5 proxy
        node_address = Signal(64, name="node_address")
        # (set on the way into FRONTIER, cleared on every way out; its next value also loads a copy for
        # each read engine's share and for the prefetcher, ``prefetch``)
        prefetching = Signal()
        prefetching_next = Signal()
        m.d.comb += prefetching_next.eq(prefetching)
        m.d.sync += prefetching.eq(prefetching_next)
        m.d.comb += self.prefetch.eq(Cat(register_copies(m, platform, "prefetch", prefetching_next,
                                                         len(PrefetchOwners.members))))
        fanout = Signal(16)
        result_index = Signal(range(RESULT_HEADER_SIZE // 8))
        cycles = Signal(64)
        storage_bytes = Signal(64)
        final_cycles = Signal(64)
        # the command's and the hop's RNG keys: free-running mix32 pipelines whose inputs are held
        # while ``key_wait`` counts their latency down
        key_wait = Signal(range(2 * MIX32_LATENCY + 2))
        seed_mixed = mix32_pipelined(m, seed[:32] ^ spec_rng.SEED_SALT, 1, name="seed_mix")
        command_mixed = mix32_pipelined(m, seed_mixed ^ seed[32:], 1, name="command_mix")
        hop_mixed = mix32_pipelined(m, command_key ^ hop ^ spec_rng.HOP_SALT, 1, name="hop_mix")
        with m.If(key_wait != 0):  # counts down in every state (the FSM below sets it)
            m.d.sync += key_wait.eq(key_wait - 1)
        # the hop's key and fanout follow the hop in every cycle, with no enable (decoded from the
        # state, one was a 2-level, 11.5 ns path into their 48 flip-flops on the ECP5 proxy): the hop
        # and the command key change only while no lane and no prefetch runs (a command's start, and
        # ``next_hop`` after the hop's writes landed), and HOP waits for the key to settle
        m.d.sync += [hop_key.eq(hop_mixed), fanout.eq(fanouts[hop])]

        m.d.sync += counts_end.eq(counts_base + frontier_size)
        # the hop's counts check, registered a cycle after counts_end (both settle while the hop key
        # does: HOP decides MIX32_LATENCY + 1 cycles after it is entered)
        counts_fit = Signal()
        m.d.sync += counts_fit.eq(self._fits(counts_end, counts_capacity, "counts"))
        busy = Signal()
        with m.If(busy):
            m.d.sync += cycles.eq(cycles + 1)
        m.d.sync += storage_bytes.eq(storage_bytes + self.storage_read_beats * data_bytes)

        # The next hop's registers move on in HOP_DRAIN's first cycle, enabled by a flip-flop set as
        # HOP_WAIT ends (the lanes are idle, so nothing reads the hop, its key or its counts while the
        # writes drain): with the move at the drain's end, the write combiner's and the memory
        # reader's idle flags ran through the drain's decision into these ~330 enables (11.2 ns on
        # the ECP5 proxy). The next hop's key settles during the drain (``key_wait`` is set as
        # HOP_WAIT ends), and HOP waits for what is left of it; HOP lasts two cycles at least: the
        # prefetcher takes the restart a HOP cycle sets only while FRONTIER has not begun
        hop_advance = Signal()
        m.d.sync += hop_advance.eq(0)   # (HOP_WAIT sets it for one cycle)

        # the engines' idle flags (and the dispatcher's queue flag), a cycle late: flip-flops, so
        # no AND of the lanes', the readers' or the write combiner's flags runs into the state
        # machine's decisions, ``status`` and ``finishing`` (the write combiner's run FIFO and a
        # lane's answer and job buffers -> the state, 7.0-8.2 ns paths in every run of the whole
        # kernel's ECP5 proxy). Each is read only where nothing new starts: once the engines are
        # idle, with no job, field or read handed to them in the same cycle, they stay idle, so the
        # flag a cycle late is the flag (a wait costs a cycle more: HOP_WAIT, each drain, FINISH).
        # The sequencer's own fields and jobs of that cycle are or-ed in
        writes_idle, reads_idle, streamers_idle = Signal(), Signal(), Signal()
        jobs_waiting = Signal(init=1)
        m.d.sync += [writes_idle.eq(self.writes_idle & ~self.fields.valid), reads_idle.eq(self.reads_idle),
                     streamers_idle.eq(self.streamers_idle), jobs_waiting.eq(self.jobs_waiting | self.job.valid)]
        with m.If(hop_advance):
            m.d.sync += [counts_base.eq(counts_base + frontier_size), frontier_size.eq(written),
                         frontier_empty.eq(written == 0),
                         hop.eq(hop + 1), last_hop.eq((hop + 1)[:len(hop)] == num_hops),
                         last_size.eq(frontier_size), last_counts.eq(counts_base)]

        def to_finish():
            m.d.comb += finishing_next.eq(1)
            m.next = "FINISH"

        def report(code, hop_value=0, index_value=0, value=0):
            m.d.sync += [status.eq(code), error_hop.eq(hop_value), error_index.eq(index_value),
                         error_value.eq(value)]

        def fail(code, hop_value=0, index_value=0, value=0):
            report(code, hop_value, index_value, value)
            m.d.comb += prefetching_next.eq(0)
            to_finish()

        def abort_on_streamer_error():
            """A hop state stops when the edge streamer hit a bus error (it set the status)."""
            with m.If(self.streamers_failed):
                m.d.comb += prefetching_next.eq(0)
                to_finish()

        def read_words(name, reader, counters, fetching, address_of, registers, then, every_cycle=()):
            """One state: the reads of ``len(registers)`` words go out back to back (``address_of(i)``)
            while their answers are taken in order (each lands in its register two cycles after its
            answer, below); then ``then()``; ``every_cycle``: statements of each cycle of the state.
            One round trip in all, not one per word (a storage page latency each, under the SSD
            model). ``fetching`` is the state as a flip-flop (set on the way in, cleared here on the
            way out): the answers' captures are enabled by it, not by the state decoded in LUTs."""
            asked, answered = counters
            words = len(registers)
            captures.append((name, fetching, reader, answered, registers))
            with m.State(name):
                m.d.sync += every_cycle
                with m.If(asked != words):
                    m.d.comb += [reader.request.valid.eq(1), reader.request.payload.eq(address_of(asked))]
                    with m.If(reader.request.ready):
                        m.d.sync += asked.eq(asked + 1)
                m.d.comb += reader.response.ready.eq(1)
                with m.If(reader.response.valid):
                    with m.If(reader.response.payload.error):
                        m.d.sync += fetching.eq(0)
                        fail(Status.STORAGE_ERROR, value=reader.response.payload.address)
                    with m.Else():
                        m.d.sync += answered.eq(answered + 1)
                        with m.If(answered == words - 1):
                            m.d.sync += [asked.eq(0), answered.eq(0), fetching.eq(0)]
                            then()

        def write_state(name, value, wide, then):
            """One state: hand a u32/u64 field at ``count_address`` to the write combiner (responses
            are checked at drain points: every hop boundary and the end of the command)."""
            with m.State(name):
                m.d.comb += [fields_out.valid.eq(1),
                             fields_out.payload.data.eq(value), fields_out.payload.wide.eq(wide)]
                with m.If(fields_out.ready):
                    then()

        def drain_state(name, then):
            """Flush the combined writes and wait until every one was answered; a write error ends
            the command (OUTPUT_ERROR)."""
            with m.State(name):
                m.d.comb += self.flush_writes.eq(1)
                with m.If(writes_idle):
                    with m.If(self.write_error & (status == Status.OK)):
                        fail(Status.OUTPUT_ERROR, value=self.write_error_address)
                    with m.Else():
                        then()

        # the feature aggregator's parameters (AGGREGATE, after the last hop)
        parameters = self.aggregate_parameters
        m.d.comb += [
            parameters.entries.eq(last_size), parameters.nodes_ptr.eq(nodes_ptr),
            parameters.wide_ids.eq(wide_ids), parameters.counts_addr.eq(counts_ptr + last_counts * 4),
            parameters.features_base.eq(image_base + image("features")),
            parameters.feature_dim.eq(feature_dim), parameters.feature_dtype.eq(feature_dtype),
            parameters.self_ptr.eq(self_ptr), parameters.sum_ptr.eq(sum_ptr),
        ]

        # what the prefetcher and the lanes need of the command and the hop
        m.d.comb += [
            self.frontier_size.eq(frontier_size), self.nodes_ptr.eq(nodes_ptr),
            self.num_nodes.eq(num_nodes), self.indptr_base.eq(indptr_base), self.indices_base.eq(indices_base),
            self.wide_ids.eq(wide_ids), self.hop_key.eq(hop_key), self.fanout.eq(fanout),
        ]

        m.d.comb += [getattr(self.buffers, name).eq(desc(name)) for name in OutputBuffers.members]

        # the FRONTIER state's job, from the heads of the prefetcher's queues (outside the state
        # machine: no state decoding in front of the count). The degree and the sample count
        # min(d, k) come with the pair (worked out as it was queued)
        # The heads come out of two-entry buffers (flip-flops, not the prefetcher's LUT-RAM FIFOs),
        # emptied with the prefetcher's queues: ping-pong buffers, so FRONTIER's hand-off moves their
        # read pointers and enables none of their ~430 payload flip-flops
        # (a node's "usable" bit, in range and read, and a pair's "no samples" bit, count == 0, are
        # worked out on their way into the buffers: FRONTIER's decision reads bits, not the fields)
        # (and the heads' bits, as the decision reads them, come out of flip-flops worked out a cycle
        # ahead: behind the buffers' output multiplexers, the pair buffer's read pointer -> the
        # decision -> the walk's registers was five levels, 6.9-7.4 ns on ``small``'s ECP5 proxy)
        head_node = data.StructLayout({"node": FrontierNode, "usable": 1})
        m.submodules.nodes_head = nodes_head = PingPongBuffer(head_node, head_flags=lambda head: head.usable)
        head_pair = data.StructLayout({"pair": IndptrPair, "none": 1})
        # (the pair's sample count too: behind the output multiplexer, it was in front of the room
        # check's and the walk's carry chains, 6.8-7.1 ns on ``small``'s proxy)
        m.submodules.pairs_head = pairs_head = PingPongBuffer(
            head_pair, head_flags=lambda head: Cat(~head.pair.error, head.none, head.pair.count))
        m.d.comb += [nodes_head.clear.eq(self.clear_jobs), pairs_head.clear.eq(self.clear_jobs)]
        m.d.comb += [nodes_head.i.valid.eq(self.nodes.valid), self.nodes.ready.eq(nodes_head.i.ready),
                     nodes_head.i.payload.node.eq(self.nodes.payload),
                     nodes_head.i.payload.usable.eq(self.nodes.payload.in_range & ~self.nodes.payload.error)]
        m.d.comb += [pairs_head.i.valid.eq(self.pairs.valid), self.pairs.ready.eq(pairs_head.i.ready),
                     pairs_head.i.payload.pair.eq(self.pairs.payload),
                     pairs_head.i.payload.none.eq(self.pairs.payload.count == 0)]
        nodes_in, pairs_in = nodes_head.o, pairs_head.o
        entry = nodes_in.payload.node
        pair = pairs_in.payload.pair
        node_usable, pair_good, no_samples = nodes_head.o_flags, pairs_head.o_flags[0], pairs_head.o_flags[1]
        job_in = self.job.payload
        count = Signal(range(cfg.max_fanout + 1), name="head_count")
        self._head_count = count    # (for the proofs)
        take = Signal()     # FRONTIER hands the node at the queues' heads on this cycle
        # Room in the node list for the head's count, from registers: ``room_wide``, room for any
        # count (the room a cycle ago was at least two counts' worth, and a cycle takes one node);
        # else ``room_exact``, the head's check worked out in the cycle before, which still holds
        # while ``room_current`` (the head and the room are those of the cycle before: a FRONTIER
        # cycle took nothing). Near a full node list a node so waits a cycle for its check
        # ``room`` is that verdict itself as one more register (the decision reads one bit; the
        # other three tell a node that waits from one that does not fit)
        most = 2 ** len(count) - 1
        room_wide, room_exact, room_current = Signal(name="room_wide"), Signal(name="room_exact"), Signal(
            name="room_current")
        room = Signal(name="room")
        # ``prefetching`` is set on the way into FRONTIER and cleared on every way out: the state
        # as a flip-flop (the walk's decision and registers do not decode the state machine's state)
        next_room_wide = self._fits(2 * most, nodes_room, "nodes")
        next_room_exact = self._fits(count, nodes_room, "nodes")
        next_room_current = prefetching & pairs_in.valid & ~take
        m.d.sync += [room_wide.eq(next_room_wide), room_exact.eq(next_room_exact), room_current.eq(next_room_current),
                     room.eq(next_room_wide | (next_room_current & next_room_exact))]
        m.d.comb += [
            count.eq(pairs_head.o_flags[2:]),
            job_in.shifted_key.eq(entry.shifted_key), job_in.degree.eq(pair.degree[:32]), job_in.count.eq(count),
            job_in.edge_address.eq(pair.edge_address), job_in.base.eq(written),
            job_in.node_address.eq(node_address),
        ]
        # FRONTIER's hand-off, outside the state machine (the state is ``prefetching``; the fails
        # are the state's, below): both heads there, usable, and room for the count. The count is
        # written at once, in frontier order; only nodes with edges become jobs (the dispatcher
        # takes a job whenever a lane has room: the count is written only then). The decision reads
        # the pair's bit; the job's valid, off that path, the count itself: what the write-bounds
        # proof sees of a job
        # (as two ANDs of flip-flops, the walk's state and the heads, each one LUT: the walk's take
        # copies read both, so no seven-input AND of its own sits in front of them: ``prefetching``
        # -> ``handing`` -> a take copy -> ``count_address`` was five levels, 8.09 ns on ``small``'s
        # ECP5 proxy)
        handing = Signal()
        hand_state, hand_heads = Signal(name="hand_state"), Signal(name="hand_heads")
        m.d.comb += [hand_state.eq(prefetching & ~frontier_end & room),
                     hand_heads.eq(nodes_in.valid & node_usable & pairs_in.valid & pair_good),
                     handing.eq(hand_state & hand_heads)]
        dispatchable = self.job.ready | no_samples
        # the count's field, whatever is decided (its valid is the decision's; the other states'
        # fields override the payload)
        m.d.comb += [fields_out.payload.address.eq(count_address), fields_out.payload.data.eq(count),
                     fields_out.payload.wide.eq(0)]
        # The walk's registers are written in every cycle, by what is taken (``take`` picks the
        # stepped value or the register; it is 0 outside FRONTIER, where the states that load them
        # override), so neither the decision nor the state enables their ~320 flip-flops. The sums
        # are worked out from registers (the walk's and the pair buffer's count) beside the decision,
        # which meets them at the last LUT (``take`` into the addends put its LUTs in front of four
        # 64-bit carry chains: 9.25 ns from the pair buffer on the ECP5 proxy)
        # ``take``'s last AND is copied per 32 of these ~320 registers (``lut_copies``: LUT4 instances
        # on the ECP5 proxy), so no one net of the decision reaches them all (the pair buffer's
        # read pointer -> the decision -> ``written``'s enables was 9.55 ns on the proxy)
        dispatched = dispatchable & fields_out.ready
        walk = [(written, written + count), (nodes_room, nodes_room - count),
                (frontier_index, frontier_index + 1), (count_address, count_address + 4),
                (node_address, node_address + id_offset(wide_nodes, count))]
        # (the copies are LUT4s of the hand-off's two halves, ``dispatchable`` and the field port's
        # ready: behind a LUT of its own, the dispatcher's intake flag -> ``count_address`` was five
        # levels, 7.68 ns on ``small``'s ECP5 proxy)
        walk_takes = iter(lut_copies(m, platform, "walk_take",
                                     lambda state, heads, dispatch, room: state & heads & dispatch & room,
                                     [hand_state, hand_heads, dispatchable, fields_out.ready],
                                     sum(-(-len(register) // WALK_GROUP) for register, _ in walk) + 1))
        for register, stepped in walk:
            m.d.sync += register.eq(Cat(Mux(next(walk_takes), stepped[bit:bit + WALK_GROUP],
                                            register[bit:bit + WALK_GROUP])
                                        for bit in range(0, len(register), WALK_GROUP)))
        m.d.sync += frontier_end.eq(Mux(next(walk_takes), frontier_index == frontier_last, frontier_end))
        with m.If(handing):
            m.d.comb += [self.job.valid.eq(fields_out.ready & (count != 0)), fields_out.valid.eq(dispatchable)]
            with m.If(dispatched):
                m.d.comb += [nodes_in.ready.eq(1), pairs_in.ready.eq(1), take.eq(1)]

        captures = []   # (state, fetching, reader, answered, registers) of each read_words state, wired after the FSM
        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.comb += self.idle.eq(1)
                # the command's arguments follow the control block's registers in every IDLE cycle,
                # and its counters and result registers are cleared in every one (all are read only
                # in later states; the previous command's result header landed before DONE), so
                # ``start`` enables the two flags below only, not ~600 flip-flops
                m.d.sync += [
                    image_base.eq(self.image), descriptor_base.eq(self.descriptor),
                    *(counter.eq(0) for counter in desc_counters + image_counters),
                    status.eq(Status.OK), error_hop.eq(0),
                    error_index.eq(0), error_value.eq(0), result_valid.eq(0), cycles.eq(1),
                    storage_bytes.eq(0), written.eq(0), counts_base.eq(0),
                ]
                with m.If(self.start):
                    m.d.comb += [self.ready.eq(1), sampler_reset.eq(1), self.clear_writes.eq(1),
                                 job_reset.eq(1)]
                    m.d.sync += [busy.eq(1), fetching_descriptor.eq(1)]
                    m.next = "DESCRIPTOR"

            # ---- fetch the descriptor (device memory), then the image header words (storage)
            # (a word lands in its register two cycles after its answer, below: the seed is final
            # two cycles after the descriptor's last answer, and the descriptor's words from IMAGE's
            # second cycle, when ``result_valid`` (set in every IMAGE cycle) lets a failure use them)
            def desc_next():
                # the command key settles while the header is read
                m.d.sync += [key_wait.eq(2 * MIX32_LATENCY + 2), fetching_header.eq(1)]
                m.next = "IMAGE"

            read_words("DESCRIPTOR", self.descriptor_reads, desc_counters, fetching_descriptor,
                       lambda i: descriptor_base + i * 8, desc_words, desc_next)

            def image_next():
                m.next = "IMAGE_LANDS"

            read_words("IMAGE", self.header_reads, image_counters, fetching_header,
                       lambda i: image_base + image_offsets[i], image_words, image_next,
                       every_cycle=[result_valid.eq(1)])
            with m.State("IMAGE_LANDS"):   # the last header word lands in its register
                m.next = "CHECK_LATCH"

            # ---- section 5 checks 1-2, first failure wins: each check's outcome is registered (one
            # cycle), then the first failing one is picked from the flags
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
            check_bad = Signal(len(checks))
            checks_failed = Signal()
            self._check_flags = (check_bad, Cat(*(bad for bad, _, _ in checks)), checks_failed)   # (for the proofs)
            with m.State("CHECK_LATCH"):
                m.d.sync += check_bad.eq(self._check_flags[1])
                m.next = "CHECK"
            with m.State("CHECK"):
                # the first hop's registers load in the state's cycle whatever the checks say (a
                # failed command reports no counts), so the checks' outcome enables none of them;
                # the outcome is decided in COMMAND_KEY, from a flip-flop (the OR of ~20 flags is not
                # in front of the state register and the status fields)
                m.d.sync += checks_failed.eq(check_bad.any())
                m.d.sync += [
                    indptr_base.eq(image_base + image("indptr")),
                    indices_base.eq(image_base + image("indices")),
                    written.eq(num_targets), nodes_room.eq(nodes_capacity - num_targets),
                    frontier_size.eq(num_targets), frontier_empty.eq(num_targets == 0),
                    counts_base.eq(0), hop.eq(0), last_hop.eq(num_hops == 0),
                ]
                m.next = "COMMAND_KEY"
            with m.State("COMMAND_KEY"):
                with m.If(checks_failed):
                    # the first failing check picks the status fields only: the state, ``finishing``
                    # and ``prefetching`` follow the one flag (with ``fail`` in each branch the
                    # flags' chain ran on into them, 7.84 ns on ``small``'s ECP5 proxy)
                    for n, (_, code, field) in enumerate(checks):
                        with (m.If if n == 0 else m.Elif)(check_bad[n]):
                            value = 0 if code == Status.BAD_IMAGE else field_span(DESCRIPTOR_FIELDS, field)[0]
                            report(code, value=value)
                    m.d.comb += prefetching_next.eq(0)
                    to_finish()
                with m.Elif(key_wait == 0):
                    m.d.sync += [command_key.eq(command_mixed), key_wait.eq(MIX32_LATENCY + 1)]
                    m.next = "HOP"

            # ---- hops
            with m.State("HOP"):
                # the hop's registers follow their values in every cycle of the state (nothing reads
                # them before FRONTIER), so the decision below enables no payload register; so does
                # the prefetcher's restart (a flip-flop, high in the cycle after each HOP cycle: the
                # prefetcher takes it while it is not active)
                m.d.sync += self.restart_prefetch.eq(1)
                m.d.sync += [frontier_index.eq(0), frontier_end.eq(frontier_empty),
                             frontier_last.eq(frontier_size - 1), count_address.eq(counts_ptr + (counts_base << 2)),
                             node_address.eq(nodes_ptr + id_offset(wide_nodes, written))]
                # |F_{L-1}| x F's operands load in the cycle after every HOP cycle (the product is read
                # only after the last hop's): the last hop's decision enables none of their ~225
                # flip-flops, and neither does the state's decode (``operands_due``, above)
                m.d.comb += in_hop.eq(1)
                with m.If(last_hop & aggregate):
                    m.next = "FEATURES_MULTIPLY"
                with m.Elif(last_hop):
                    to_finish()
                with m.Elif(key_wait != 0):  # hop_key and counts_end settle
                    pass
                with m.Elif(~counts_fit):
                    fail(Status.COUNTS_CAPACITY, hop_value=hop, value=counts_end)
                with m.Else():
                    m.d.comb += prefetching_next.eq(1)
                    m.next = "FRONTIER"
            with m.State("HOP_WAIT"):  # the edge streamer finishes the hop's last jobs
                with m.If(streamers_idle & ~jobs_waiting):
                    # the next hop's key settles while the writes drain: the hop moves on in the
                    # drain's first cycle, its mix32 result is final MIX32_LATENCY cycles after and
                    # ``hop_key`` a cycle after that
                    m.d.sync += [hop_advance.eq(1), key_wait.eq(MIX32_LATENCY + 2)]
                    m.next = "HOP_DRAIN"
                abort_on_streamer_error()

            def next_hop():
                # the next frontier is read back from the node list: every append must have landed
                # (the hop's registers moved on in HOP_DRAIN's first cycle, above). HOP waits for
                # what is left of the key's latency, and lasts two cycles at least (the prefetcher
                # takes the restart that HOP's first cycle sets before FRONTIER begins)
                with m.If(key_wait <= 1):
                    m.d.sync += key_wait.eq(1)
                m.next = "HOP"

            drain_state("HOP_DRAIN", next_hop)

            with m.State("FRONTIER"):
                # one node per cycle, in frontier order: range check, degree, room in the node list,
                # then the node is handed to the edge streamer with its place reserved (the job and
                # its count are formed from the heads of the queues, before the state machine). The
                # walk's registers are stepped by what is taken (above the state machine)
                with m.If(frontier_end):
                    m.d.comb += prefetching_next.eq(0)
                    m.next = "HOP_WAIT"
                with m.Elif(nodes_in.valid):
                    with m.If(entry.error):
                        fail(Status.STORAGE_ERROR, value=entry.address)
                    with m.Elif(~entry.in_range):
                        fail(Status.NODE_OUT_OF_RANGE, hop_value=hop, index_value=frontier_index,
                             value=entry.node)
                    with m.Elif(pairs_in.valid):
                        with m.If(pair.error):
                            fail(Status.STORAGE_ERROR, value=pair.address)
                        with m.Elif(~room_wide & ~room_current):
                            pass    # the head's room check is worked out in this cycle
                        with m.Elif(~room_wide & ~room_exact):
                            fail(Status.NODES_CAPACITY, hop_value=hop, index_value=frontier_index,
                                 value=written + count)
                        # (else the node is handed on: ``handing``, above)
                abort_on_streamer_error()

            # ---- AGGREGATE (section 5 step 5, then section 4): room for the self rows and the sums
            # of the last frontier, then the feature aggregator
            with m.State("FEATURES_MULTIPLY"):  # feature_bytes = |F_{L-1}| x F (above the state machine)
                with m.If(multiplied):
                    m.next = "FEATURES_CARRY"
            with m.State("FEATURES_CARRY"):     # the low half's last carry reaches the high half
                m.next = "FEATURES_SETTLE"
            with m.State("FEATURES_SETTLE"):   # the capacity compares below are registered
                m.next = "FEATURES_CHECK"
            with m.State("FEATURES_CHECK"):
                with m.If(self_over):
                    fail(Status.FEATURES_CAPACITY, index_value=0, value=self_bytes)
                with m.Elif(sum_over):
                    fail(Status.FEATURES_CAPACITY, index_value=1, value=sum_bytes)
                with m.Else():
                    m.d.comb += aggregating_next.eq(1)
                    m.d.comb += aggregate_start_next.eq(1)
                    m.next = "AGGREGATE"
            with m.State("AGGREGATE"):     # (``aggregate_start`` is high in this state's cycle)
                m.next = "AGGREGATE_WAIT"
            with m.State("AGGREGATE_WAIT"):
                with m.If(~self.aggregator_busy):
                    m.d.comb += aggregating_next.eq(0)
                    with m.If(self.aggregator_error):
                        fail(Status.STORAGE_ERROR, value=self.aggregator_error_address)
                    with m.Elif(self.aggregator_write_error):
                        fail(Status.OUTPUT_ERROR, value=self.aggregator_write_error_address)
                    with m.Else():
                        to_finish()

            # ---- result header, written last (never when result_ptr is unusable)
            with m.State("FINISH"):
                # reads still in flight (an error mid-hop) are taken and dropped; every output write
                # is answered before the result header
                m.d.comb += [self.descriptor_reads.response.ready.eq(1), job_reset.eq(1)]
                # the result header's first word address, loaded in every FINISH cycle (not behind
                # the engines' idle flags: the write combiner's idle into ~64 enables, 10.2 ns on
                # the ECP5 proxy); the walk's count address is not read after FRONTIER
                m.d.sync += count_address.eq(Cat(Const(0, 3 + len(result_index)),
                                                 result_ptr[BUFFER_ALIGN.bit_length() - 1:]))
                with m.If(writes_idle & reads_idle & streamers_idle):
                    m.d.comb += finishing_next.eq(0)
                    with m.If(self.write_error & (status == Status.OK)):
                        m.d.sync += [status.eq(Status.OUTPUT_ERROR), error_hop.eq(0), error_index.eq(0),
                                     error_value.eq(self.write_error_address)]
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
                assert field_span(RESULT_FIELDS, name)[0] == 8 * i, f"result field {name} is not word {i}"
                m.d.comb += words[i].eq(value)

            def result_next():
                m.d.sync += [result_index.eq(result_index + 1), count_address.eq(count_address + 8)]
                with m.If(result_index == len(result_words) - 1):
                    m.next = "RESULT_DRAIN"
                with m.Else():
                    m.next = "RESULT"

            # (result_ptr is 64-byte aligned, checked before RESULT: the word's address,
            # ``result_ptr + 8 x result_index``, is ``count_address``, loaded in FINISH and
            # stepped with the index, so the field's address is the same register in every state:
            # no state-selected multiplexer in front of the write combiner's beat compares, 9.3 ns
            # from the RESULT state's flip-flop on the ECP5 proxy)
            assert RESULT_HEADER_SIZE == BUFFER_ALIGN == 8 << len(result_index)
            write_state("RESULT", words[result_index], 1, result_next)
            with m.State("RESULT_DRAIN"):  # ap_done only once the header has landed
                m.d.comb += self.flush_writes.eq(1)
                with m.If(writes_idle):
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += self.done.eq(1)
                m.d.sync += busy.eq(0)
                m.next = "IDLE"
        encode_states(fsm, platform)   # (one-hot on the ECP5 proxy)

        # the fetched words land in their registers while their state's flag is set, two cycles
        # after their answer: the answer and a one-hot of its word are registered first, so the read
        # engine's answer handshake (its in-flight FIFO) reaches one flip-flop per word, not the
        # enables of ~1,900 word flip-flops (8.1-9.4 ns on the ECP5 proxy in four of six runs)
        for name, fetching, reader, answered, registers in captures:
            answer = Signal(64, name=f"{name.lower()}_answer", reset_less=True)
            lands = Signal(len(registers), name=f"{name.lower()}_lands")
            m.d.sync += [answer.eq(reader.response.payload.data),
                         lands.eq(Mux(fetching & reader.response.valid & ~reader.response.payload.error,
                                      Const(1, len(registers)) << answered, 0))]
            for i, register in enumerate(registers):
                with m.If(lands[i]):
                    m.d.sync += register.eq(answer)

        # a lane's read error (after the state machine: it wins over a failure of the same cycle)
        with m.If(self.streamer_error):
            m.d.sync += [status.eq(Status.STORAGE_ERROR), error_hop.eq(0), error_index.eq(0),
                         error_value.eq(self.streamer_error_address)]
        return m
