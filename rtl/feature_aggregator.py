"""Exact near-storage feature aggregation (docs/spec.md, section 4): self rows and neighbor sums.

After the last hop, for each entry i of the last frontier F_{L-1} (a prefix of the node list) with
v = F_{L-1}[i], n = counts[c_{L-1} + i] and its last-hop samples u_0..u_{n-1} (node-list entries
from |F_{L-1}| + counts[c_{L-1}] + ... on), the block copies v's feature row to ``self[i]`` and
writes the elementwise sum of the samples' rows, folded in sample order, to ``sum[i]``.

Four parts run side by side (docs/rtl.md, "Feature aggregation"):

- **Loader** (device memory, one word read per cycle, many in flight): for a *group* of up to
  :data:`SLOTS` consecutive entries, their counts, their ids, then their samples' ids; each id
  becomes its row's storage address. Two group buffers: the next group loads while the current
  one streams.
- **Issuer**: per group and per *chunk* of the row (:data:`CHUNK_BEATS` accumulator words of
  ``data_width / 32`` elements; longer rows are done chunk by chunk), one storage read per row: the
  samples' rows sample-major (u_0 of every entry, then u_1, ...), then the group's self rows (whose
  writes then overlap the previous chunk's sums less). The
  reads go to a :class:`~smartsage.rtl.burst_reader.BurstReader` as byte ranges (bursts, many in
  flight, split at 4 KiB); a work FIFO tells the consumer what each read is.
- **Consumer**: a :class:`~smartsage.rtl.row_unpacker.RowUnpacker` turns the beats into units of
  ``data_width / 32`` elements (64, 32 or 16 bytes at 512 bits for fp32, fp16/bf16, int8). A
  self unit goes to the writer as stored. A sample unit is widened (fp16/bf16 exactly to binary32,
  NaNs canonical; int8 sign-extended), its accumulator word is read from on-chip memory, and
  ``data_width / 32`` :class:`~smartsage.rtl.fp32_adder.Fp32Adder` (one per lane) add it; the
  result is written back ``latency`` cycles later. The first sample of an entry is loaded, not
  added (``acc = x(u_0)``); int8 adds in 32 bits in the same cycle (delayed alike). So every
  element's sum is the spec's left fold in sample order. An accumulator word is not used again
  until its previous result is back (``latency + 1`` cycles): the sample-major order puts the other
  entries of the group in between, and the consumer waits only when too few entries still have
  samples.
- **Sum writer**: once a chunk's last addition is back, its sums are read from the accumulator
  memory (two banks: the next chunk fills the other) and written; an entry with n = 0 gets +0 / 0.

Self units and sums are written through one :class:`~smartsage.rtl.beat_writer.BeatWriter`
(strobed full-width beats; a run of pieces keeps the writer until its last piece). A read error
(storage or device memory) or a write error stops the block: it issues nothing more, lets every
read and write in flight finish, then drops ``busy`` with ``error`` or ``write_error`` and the
address. Every write lies inside ``self[0..entries)`` and ``sum[0..entries)``; the kernel checks
their capacities before ``start``.

Longer than the ~400 lines of the other blocks: the four parts are one block around shared state,
not four blocks in a chain. The loader's two halves fill the group buffers (counts, row and
destination tables, the samples table, the free/full flags) that the issuer reads; the issuer's
work FIFO tells the consumer what each unit is; the consumer and the sum writer share the
accumulator memory and the per-bank counts of unread chunks. As components, each would carry
most of that state on its ports. The engines they drive (``BurstReader``, ``RowUnpacker``,
``ReadStream``, ``BeatWriter``, ``Fp32Adder``, the row-address multiplier) are blocks of their own.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from smartsage.spec.config import KernelConfig
from smartsage.spec.image import FeatureDtype

from .axi import ADDRESS_WIDTH, AxiReadSignature, AxiSignature
from .beat_writer import BeatWriter
from .burst_reader import BurstReader, beat_layout
from .compare import at_most
from .float_widen import widen_to_fp32
from .fp32_adder import DEFAULT_LATENCY, Fp32Adder
from .free_slot_fifo import FreeSlotFIFO
from .fsm_encoding import encode_states
from .multiply import multiply_add_latency, multiply_add_low, registered
from .read_stream import ReadStream
from .register_copies import register_copies
from .row_unpacker import RowUnpacker, unit_layout
from .stream_buffer import StreamBuffer

__all__ = ["FeatureAggregator", "AggregateParameters", "SLOTS", "CHUNK_BEATS", "ADDER_LATENCY", "START_COPIES",
           "WORK_LOAD_GROUPS"]

#: Adder pipeline depth (cycles from an addition's operands to its result).
ADDER_LATENCY = DEFAULT_LATENCY
#: Entries of a group (accumulator slots): sample-major order re-uses an accumulator word every
#: (active entries x beats per row chunk) cycles, >= ADDER_LATENCY + 1 whenever all are active.
SLOTS = ADDER_LATENCY + 1
#: Accumulator words (of data_width / 32 elements) per slot: the row chunk summed at a time.
CHUNK_BEATS = 8

#: Copies of ``start`` (flip-flops of the sequencer's, each loading the same value), each starting one
#: group of the aggregator's registers: the control flags; the parameters; the entry counts; the count
#: and id cursors; the sample cursor; the destinations. As one flag it reached some 650 enables
#: through one LUT (``start & ~busy``), 7.8-8.8 ns paths on the whole kernel's ECP5 proxy.
START_COPIES = 6
#: Groups of the head work record's registers, each loaded through a copy of the head buffer's load
#: decision (:class:`~smartsage.rtl.stream_buffer.StreamBuffer`).
WORK_LOAD_GROUPS = 2

#: What the kernel hands over at ``start`` (held stable while ``busy``).
AggregateParameters = data.StructLayout({
    "entries": 64,          # |F_{L-1}|
    "nodes_ptr": 64,        # node list (F_{L-1} is its prefix)
    "wide_ids": 1,          # node ids are u64 (else u32)
    "counts_addr": 64,      # device address of counts[c_{L-1}]
    "features_base": 64,    # storage address of the features section
    "feature_dim": 32,      # F
    "feature_dtype": 8,     # FeatureDtype code
    "self_ptr": 64,
    "sum_ptr": 64,
})


def _at_most_slots(value):
    """``min(value, SLOTS)`` of a wide count (:func:`~smartsage.rtl.compare.at_most`: no wide carry chain)."""
    return Mux(at_most(value, SLOTS), value[:SLOTS.bit_length()], SLOTS)


def _first(bits):
    """(found, index) of the lowest set bit of a list of 1-bit values."""
    index = Const(0, range(len(bits)))
    for i in reversed(range(len(bits))):
        index = Mux(bits[i], i, index)
    return Cat(*bits).any(), index


class FeatureAggregator(wiring.Component):
    """Self-row copy and exact neighbor sums of the last frontier, one read beat per cycle.

    Parameters
    ----------
    config : KernelConfig
        ``data_width`` (the buses, ``data_width / 32`` adders), ``outstanding_reads`` (bursts and
        device-memory reads in flight, writes in flight) and ``max_fanout`` (samples of an entry).

    Members
    -------
    start : ``In(data.ArrayLayout(1, START_COPIES))``
        Begin with ``parameters``: :data:`START_COPIES` copies of one flag, equal in every cycle, raised
        only while not ``busy`` (the control flags check ``busy`` as well; the parameters, counts and
        cursors load on their copy alone).
    parameters : ``In(AggregateParameters)``
    busy : ``Out(1)``
    error : ``Out(1)``
        A read was answered with an error (valid once ``busy`` falls); ``error_address`` names it.
    error_address : ``Out(64)``
    write_error : ``Out(1)``
        A write was answered with an error (and no read was); ``write_error_address`` names it.
    write_error_address : ``Out(64)``
    storage : ``Out(AxiReadSignature(data_width))``
        Feature rows (bursts).
    mem : ``Out(AxiSignature(data_width))``
        Device memory: counts and node ids read, self rows and sums written.
    """

    def __init__(self, config: KernelConfig):
        if not isinstance(config, KernelConfig):
            raise TypeError(f"Config must be a KernelConfig, not {config!r}")
        self._config = config
        super().__init__({
            "start": In(data.ArrayLayout(1, START_COPIES)),
            "parameters": In(AggregateParameters),
            "busy": Out(1),
            "error": Out(1),
            "error_address": Out(ADDRESS_WIDTH),
            "write_error": Out(1),
            "write_error_address": Out(ADDRESS_WIDTH),
            "storage": Out(AxiReadSignature(config.data_width)),
            "mem": Out(AxiSignature(config.data_width)),
        })

    @property
    def config(self) -> KernelConfig:
        return self._config

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        width = cfg.data_width
        data_bytes = width // 8
        lanes = width // 32
        chunk_elements = CHUNK_BEATS * lanes
        max_fanout = cfg.max_fanout
        fanout_stride = 1 << (max_fanout - 1).bit_length()   # table rows padded to a power of two
        slot_bits = (SLOTS - 1).bit_length()
        beat_bits = (CHUNK_BEATS - 1).bit_length()

        m.submodules.rows = rows = BurstReader(width, cfg.outstanding_reads)
        m.submodules.unpacker = unpacker = RowUnpacker(width)
        m.submodules.ids = ids = ReadStream(width, cfg.outstanding_reads)
        m.submodules.writer = writer = BeatWriter(width, cfg.outstanding_reads)
        # Two-entry buffers between the engines and the consumer: the ready chain from the writer through
        # the consumer and the unpacker to the reader's response would otherwise be one path.
        m.submodules.beats_buffer = beats_buffer = StreamBuffer(beat_layout(width))
        m.submodules.units_buffer = units_buffer = StreamBuffer(unit_layout(width))
        m.submodules.pieces_buffer = pieces_buffer = StreamBuffer(writer.piece.payload.shape())
        # and between the issuer and the reader's requests (the reader's ready comes from its cursor)
        m.submodules.requests_buffer = requests_buffer = StreamBuffer(rows.request.payload.shape())
        # and between the id reader's answers and the taker (the answer's valid is the bus's RVALID,
        # which reaches the aggregator through the kernel's bus switch: the switch's flag -> RVALID ->
        # the taker's state and its enables of the 64-bit destination counters was 8.1-8.3 ns on the
        # whole kernel's proxy)
        m.submodules.answers_buffer = answers_buffer = StreamBuffer(ids.response.payload.shape())
        # and between the consumer's self pieces and the writer's arbiter (the sum writer's valid ->
        # the arbiter's grant -> the consumer's ``accept`` -> the work head buffer's skid registers
        # was 9.2-9.7 ns on the whole kernel's proxy)
        m.submodules.self_buffer = self_buffer = StreamBuffer(writer.piece.payload.shape())
        wiring.connect(m, ids.response, answers_buffer.i)
        id_answers = answers_buffer.o
        wiring.connect(m, requests_buffer.o, rows.request)
        row_request = requests_buffer.i
        wiring.connect(m, rows.response, beats_buffer.i)
        wiring.connect(m, beats_buffer.o, unpacker.beats)
        wiring.connect(m, unpacker.units, units_buffer.i)
        wiring.connect(m, pieces_buffer.o, writer.piece)
        units = units_buffer.o
        request_valid = Signal()    # a row read between the issuer's stage and the request buffer (below)
        buffers_idle = (beats_buffer.idle & units_buffer.idle & pieces_buffer.idle & requests_buffer.idle
                        & answers_buffer.idle & self_buffer.idle & ~request_valid)
        # the row reader's AR channel through a register slice (a two-entry buffer of ARADDR and ARLEN):
        # the bus's ARREADY, which reaches the aggregator through the kernel's bus switch, loads the
        # slice and nothing else, and the reader's own ARREADY is the slice's room, a flip-flop. (The
        # switch's flag or the bus's ARREADY -> the reader's handshake -> its cursor and burst
        # registers' enables was 9.8-10.4 ns, four levels, on ``small``'s ECP5 proxy.) A burst in the
        # slice is in the reader's in-flight FIFO already, so the reader's idle covers it.
        ar_layout = data.StructLayout({"araddr": ADDRESS_WIDTH, "arlen": 8})
        m.submodules.row_bursts = row_bursts = StreamBuffer(ar_layout)
        storage = self.storage
        m.d.comb += [
            row_bursts.i.valid.eq(rows.bus.arvalid), rows.bus.arready.eq(row_bursts.i.ready),
            row_bursts.i.payload.araddr.eq(rows.bus.araddr), row_bursts.i.payload.arlen.eq(rows.bus.arlen),
            storage.arvalid.eq(row_bursts.o.valid), row_bursts.o.ready.eq(storage.arready),
            storage.araddr.eq(row_bursts.o.payload.araddr), storage.arlen.eq(row_bursts.o.payload.arlen),
            storage.arsize.eq(rows.bus.arsize), storage.arburst.eq(rows.bus.arburst),
            rows.bus.rdata.eq(storage.rdata), rows.bus.rresp.eq(storage.rresp), rows.bus.rlast.eq(storage.rlast),
            rows.bus.rvalid.eq(storage.rvalid), storage.rready.eq(rows.bus.rready),
        ]
        for port in (ids.bus, writer.bus):
            for name, member in port.signature.members.items():
                if member.flow == Out:
                    m.d.comb += getattr(self.mem, name).eq(getattr(port, name))
                else:
                    m.d.comb += getattr(port, name).eq(getattr(self.mem, name))

        p = Signal(AggregateParameters)
        running = Signal()
        # the start, by group (:data:`START_COPIES`): ``begin`` for the control flags
        start_control, start_parameters, start_counts, start_cursors, start_samples, start_dests = (
            self.start[copy] for copy in range(START_COPIES))
        begin = Signal()
        m.d.comb += begin.eq(start_control & ~running)
        # ``draining``: an error; nothing new is issued, everything in flight finishes. Set and cleared
        # as ``draining_next``, and a flip-flop per part of the block that reads it, so no one net
        # reaches every decision it gates (as one flip-flop it was an 8.4 ns path on the ECP5 proxy,
        # into the finished chunks' count)
        draining_next = Signal()
        d_loader, d_issuer, d_consumer, d_sums, d_writer = register_copies(m, platform, "draining", draining_next, 5)
        m.d.comb += draining_next.eq(d_loader)
        m.d.comb += self.busy.eq(running)

        # what the feature type decides, as registers loaded at ``start`` (no decoding in front of
        # the unpacker, the issuer's byte counts or the adders)
        def dtype_is(code, dtype=p.feature_dtype):
            return dtype == int(code)

        def element_log2(dtype):
            return Mux(dtype_is(FeatureDtype.FP32, dtype), 2,
                       Mux(dtype_is(FeatureDtype.FP16, dtype) | dtype_is(FeatureDtype.BF16, dtype), 1, 0))

        lanes_log2 = lanes.bit_length() - 1
        is_int8 = Signal()
        size_log2 = Signal(2)
        unit_log2 = Signal(range(lanes_log2 + 3))   # a unit: one element per lane
        # its size in bytes, a register set with it (no shifter of ``unit_log2`` in front of the
        # self piece's size compare and the pieces buffer: 9.2 ns on the ECP5 proxy)
        unit_bytes = Signal(range(data_bytes + 1))
        unit_mask = Signal(range(data_bytes))       # unit_bytes - 1
        row_bytes = Signal(34)
        # (worked out in the cycle after the start, from the block's own copy of the parameters: from
        # the sequencer's registers, the type's decode and the shifts were 7.43 ns paths on
        # ``small``'s ECP5 proxy. The first of them is read once rows are asked for, cycles later)
        # The lanes' widening picks its format by flags of its own, loaded with them (the type's
        # parameter bits, decoded in front of every lane's widening multiplexers, one per value bit:
        # with that load on the net, their decode into ``unit_log2``, ``row_bytes`` and ``unit_mask``
        # was 7.7-8.1 ns, the worst paths of one run of ``small``'s ECP5 proxy)
        derive = Signal()
        widen_fp32, widen_bf16, widen_fp16 = Signal(), Signal(), Signal()
        m.d.sync += derive.eq(begin)
        with m.If(derive):
            unit_log2_next = lanes_log2 + element_log2(p.feature_dtype)
            m.d.sync += [widen_fp32.eq(dtype_is(FeatureDtype.FP32)), widen_bf16.eq(dtype_is(FeatureDtype.BF16)),
                         widen_fp16.eq(dtype_is(FeatureDtype.FP16)),
                         is_int8.eq(dtype_is(FeatureDtype.INT8)),
                         size_log2.eq(element_log2(p.feature_dtype)),
                         unit_log2.eq(unit_log2_next),
                         unit_bytes.eq(Const(1, unit_bytes.shape()) << unit_log2_next),
                         unit_mask.eq((Const(1, unit_bytes.shape()) << unit_log2_next) - 1),
                         row_bytes.eq(p.feature_dim << element_log2(p.feature_dtype))]
        m.d.comb += unpacker.unit_log2.eq(unit_log2)

        def ident(word, wide=p.wide_ids):
            return Mux(wide, word.data, Mux(word.address[2], word.data[32:], word.data[:32]))

        def fail(address):
            with m.If(~d_loader):
                m.d.comb += draining_next.eq(1)
                m.d.sync += [self.error.eq(1), self.error_address.eq(address)]

        # ---- group buffers (two): counts, row addresses, self destinations, sample row addresses
        group_k = Array(Signal(range(SLOTS + 1), name=f"group{g}_k") for g in range(2))
        group_sum = Array(Signal(64, name=f"group{g}_sum") for g in range(2))
        group_free = Array(Signal(init=1, name=f"group{g}_free") for g in range(2))   # the loader may fill it
        group_full = Array(Signal(name=f"group{g}_full") for g in range(2))   # loaded, the issuer may stream it
        counts = Array(Array(Signal(range(max_fanout + 1), name=f"count{g}_{e}") for e in range(SLOTS))
                       for g in range(2))
        counted = Array(Signal(SLOTS, name=f"counted{g}") for g in range(2))
        # each count's "none" and "one" flags, set with it (the loader reads bits: the compares behind
        # the table's multiplexer were in front of its flags, 7.3-7.5 ns on ``small``'s ECP5 proxy)
        count_none = Array(Signal(SLOTS, name=f"count_none{g}") for g in range(2))
        count_one = Array(Signal(SLOTS, name=f"count_one{g}") for g in range(2))
        m.submodules.samples = samples = Memory(shape=64, depth=2 * SLOTS * fanout_stride, init=[])
        sample_write = samples.write_port()
        sample_read = samples.read_port(domain="sync")   # the issuer's stage (below)
        # each entry's own row address and its self destination, in two small memories read like the
        # samples table (a registered read as the read is issued): no 32-way multiplexer of 64-bit
        # registers sits in front of the issuer's stage
        m.submodules.self_rows = self_rows = Memory(shape=64, depth=2 * SLOTS, init=[])
        m.submodules.self_dests = self_dests = Memory(shape=64, depth=2 * SLOTS, init=[])
        self_row_write, self_dest_write = self_rows.write_port(), self_dests.write_port()
        self_row_read, self_dest_read = self_rows.read_port(domain="sync"), self_dests.read_port(domain="sync")

        def table_address(g, e, j):
            return (g * SLOTS + e) * fanout_stride + j

        def entry_address(g, e):
            return g * SLOTS + e

        # ---- loader, request side: counts, ids, then the samples' ids of each entry of a group
        # the entries not yet requested, and the next count's, id's and sample id's addresses: cursors
        # stepped as the requests go (the groups take consecutive entries), so no address is a sum of
        # a base and an index
        load_left = Signal(64)
        load_any = Signal()             # load_left != 0, a flip-flop (as ``take_any`` below)
        count_cursor = Signal(64)
        id_cursor = Signal(64)
        sample_cursor = Signal(64)
        id_bytes = Mux(p.wide_ids, 8, 4)
        load_group = Signal()
        load_k = Signal(range(SLOTS + 1))
        load_e = Signal(range(SLOTS + 1))
        # the sample-id requests of entry load_e still to go (L_SAMPLES), and whether there are none or
        # one, flip-flops loaded with the count in L_ENTRY and stepped with the requests: no compare
        # of a count with an index sits in front of the request's valid (``load_j == load_count`` ->
        # the request handshake -> the cursors' enables was 7.7-8.6 ns, four levels, on ``small``'s
        # ECP5 proxy)
        load_remaining = Signal(range(max_fanout + 1))
        load_none = Signal()
        load_last = Signal()
        # what load_left and load_any become when the group's requests are done, registers following
        # them and load_k in every cycle (both are steady from L_IDLE to that cycle, two or more
        # cycles later), so no 64-bit subtraction or compare of load_k sits in front of them
        # (take_k / load_k -> take_left / load_left was 8.7-9.2 ns on the whole kernel's proxy)
        load_rest = Signal(64)
        load_rest_any = Signal()
        m.d.sync += [load_rest.eq(load_left - load_k), load_rest_any.eq(load_left != load_k)]
        # the group's last L_ENTRY (load_e == load_k): a flip-flop set as L_SAMPLES steps load_e to
        # load_k (L_IDS enters L_ENTRY with load_e = 0 < load_k), high in that L_ENTRY cycle only, so
        # it enables load_left's 64 flip-flops with no compare or state decoding in front (load_k ->
        # load_left was 7.0-7.7 ns on the whole kernel's ECP5 proxy)
        load_done = Signal()
        m.d.sync += load_done.eq(0)
        with m.FSM(name="load_issue") as fsm:
            with m.State("L_IDLE"):
                with m.If(running & ~d_loader & load_any & group_free[load_group]):
                    m.d.sync += [load_k.eq(_at_most_slots(load_left)), load_e.eq(0),
                                 counted[load_group].eq(0)]
                    m.d.sync += group_free[load_group].eq(0)
                    m.next = "L_COUNTS"
            with m.State("L_COUNTS"):
                m.d.comb += [ids.request.valid.eq(~d_loader), ids.request.payload.eq(count_cursor)]
                with m.If(ids.request.valid & ids.request.ready):
                    m.d.sync += [load_e.eq(load_e + 1), count_cursor.eq(count_cursor + 4)]
                    with m.If(load_e == load_k - 1):
                        m.d.sync += load_e.eq(0)
                        m.next = "L_IDS"
            with m.State("L_IDS"):
                m.d.comb += [ids.request.valid.eq(~d_loader), ids.request.payload.eq(id_cursor)]
                with m.If(ids.request.valid & ids.request.ready):
                    m.d.sync += [load_e.eq(load_e + 1), id_cursor.eq(id_cursor + id_bytes)]
                    with m.If(load_e == load_k - 1):
                        m.d.sync += load_e.eq(0)
                        m.next = "L_ENTRY"
            # each entry's count is taken from the group's table into a register (once it has
            # arrived) in a cycle of its own, so the requests' handshake reads no table multiplexer
            with m.State("L_ENTRY"):
                entry_count = counts[load_group][load_e]
                m.d.sync += [load_remaining.eq(entry_count),
                             load_none.eq(count_none[load_group].bit_select(load_e, 1)),
                             load_last.eq(count_one[load_group].bit_select(load_e, 1))]
                with m.If(load_done):
                    m.next = "L_IDLE"
                with m.Elif(counted[load_group].bit_select(load_e, 1)):
                    m.next = "L_SAMPLES"
            with m.State("L_SAMPLES"):
                with m.If(load_none):
                    m.d.sync += [load_e.eq(load_e + 1), load_done.eq(load_e == load_k - 1)]
                    m.next = "L_ENTRY"
                with m.Else():
                    m.d.comb += [ids.request.valid.eq(~d_loader),
                                 ids.request.payload.eq(sample_cursor)]
                    with m.If(ids.request.valid & ids.request.ready):
                        m.d.sync += [load_remaining.eq(load_remaining - 1), load_last.eq(load_remaining == 2),
                                     sample_cursor.eq(sample_cursor + id_bytes)]
                        with m.If(load_last):
                            m.d.sync += [load_e.eq(load_e + 1), load_done.eq(load_e == load_k - 1)]
                            m.next = "L_ENTRY"
        encode_states(fsm, platform)   # (one-hot on the ECP5 proxy)
        with m.If(load_done):   # (in L_ENTRY, its last: the group's requests are done)
            m.d.sync += [load_left.eq(load_rest), load_any.eq(load_rest_any), load_group.eq(~load_group)]

        # ---- loader, answer side: the same order
        take_left = Signal(64)          # entries whose ids are still to be taken
        # take_left != 0, a flip-flop set where take_left is (the 64-bit compare was in front of the
        # take's state, 7.0 ns on the ECP5 proxy, the aggregator alone)
        take_any = Signal()
        take_group = Signal()
        take_k = Signal(range(SLOTS + 1))
        take_e = Signal(range(SLOTS + 1))
        take_j = Signal(range(max_fanout + 1))
        take_count = Signal(range(max_fanout + 1))     # the count of entry take_e (T_SAMPLES)
        # (as load_rest: steady from T_IDLE to the take's end, two or more cycles later)
        take_rest = Signal(64)
        take_rest_any = Signal()
        m.d.sync += [take_rest.eq(take_left - take_k), take_rest_any.eq(take_left != take_k)]
        # the group's last T_ENTRY (take_e == take_k), a flip-flop as ``load_done``
        take_done = Signal()
        m.d.sync += take_done.eq(0)
        load_samples_taking = Signal()  # the answer side takes sample ids (else self ids)
        self_dest = Signal(64)          # running: self[take entry]
        sum_dest = Signal(64)           # running: sum[take entry]
        group_sum_dest = Signal(64)     # sum[first entry of the group being taken]
        word = id_answers.payload
        # an id's row address, features_base + id x row_bytes, comes out of a pipelined multiplier
        # (registered 16x16 products and adder tree) ``row_latency`` cycles later, with where it goes:
        # a group's self-row register or its samples table. The id is registered first (one cycle more):
        # the read engine's in-flight FIFO -> the answer's word select -> the multipliers' inputs was
        # the whole kernel's critical path on the ECP5 proxy (8.5 ns, 4 levels)
        row_latency = 1 + multiply_add_latency(64, len(row_bytes), 64)
        row_launch = Signal()
        row_target = data.StructLayout({"valid": 1, "self": 1, "group": 1, "entry": range(SLOTS + 1),
                                        "table": range(2 * SLOTS * fanout_stride)})
        row_in = Signal(row_target)
        row_pipe = [Signal(row_target, name=f"row_target{i}") for i in range(row_latency)]
        m.d.comb += [row_in.valid.eq(row_launch), row_in.self.eq(~load_samples_taking), row_in.group.eq(take_group),
                     row_in.entry.eq(take_e), row_in.table.eq(table_address(take_group, take_e, take_j))]
        m.d.sync += [row_pipe[0].eq(row_in), *(row_pipe[i].eq(row_pipe[i - 1]) for i in range(1, row_latency))]
        row_id = registered(m, ident(word), 1, "row_id")
        row_address = multiply_add_low(m, row_id, row_bytes, p.features_base, 64, 1, "row_address", platform)
        row_out = row_pipe[-1]
        # whether a row address of each group is in the pipeline, a flip-flop per group loaded with the
        # stages' next valid bits (an OR of the stages' flags in front of the take's decision and the
        # group's ~130 enables was a 9.1 ns path on the ECP5 proxy)
        rows_in_flight = [Signal(name=f"group{g}_rows_in_flight") for g in range(2)]
        for g in range(2):
            m.d.sync += rows_in_flight[g].eq(
                ~begin
                & ((row_launch & (take_group == g))
                   | Cat(*(stage.valid & (stage.group == g) for stage in row_pipe[:-1])).any()))
        # a group whose ids are all taken waits here for its row addresses while the take goes on with
        # the other group (it was a state of the take: a row latency per group)
        handing = Array(Signal(name=f"group{g}_handing") for g in range(2))
        for g in range(2):
            with m.If(handing[g] & ~rows_in_flight[g]):
                m.d.sync += [handing[g].eq(0), group_full[g].eq(1)]
        m.d.comb += [sample_write.data.eq(row_address), sample_write.addr.eq(row_out.table),
                     sample_write.en.eq(row_out.valid & ~row_out.self)]
        m.d.comb += [self_dest_write.data.eq(self_dest), self_dest_write.addr.eq(entry_address(take_group, take_e)),
                     self_row_write.data.eq(row_address),
                     self_row_write.addr.eq(entry_address(row_out.group, row_out.entry)),
                     self_row_write.en.eq(row_out.valid & row_out.self)]
        with m.If(begin):
            m.d.sync += [stage.valid.eq(0) for stage in row_pipe]
        with m.FSM(name="load_take") as fsm:
            with m.State("T_IDLE"):
                with m.If(running & take_any):
                    m.d.sync += [take_k.eq(_at_most_slots(take_left)), take_e.eq(0),
                                 group_sum_dest.eq(sum_dest)]
                    m.next = "T_COUNTS"
            with m.State("T_COUNTS"):
                m.d.comb += id_answers.ready.eq(1)
                with m.If(id_answers.valid & ~word.error):
                    count_in = ident(word, 0)[:len(counts[0][0])]
                    m.d.sync += [counts[take_group][take_e].eq(count_in),
                                 counted[take_group].eq(counted[take_group] | (1 << take_e)),
                                 count_none[take_group].bit_select(take_e, 1).eq(count_in == 0),
                                 count_one[take_group].bit_select(take_e, 1).eq(count_in == 1),
                                 take_e.eq(take_e + 1)]
                    with m.If(take_e == take_k - 1):
                        m.d.sync += take_e.eq(0)
                        m.next = "T_IDS"
            with m.State("T_IDS"):
                # the group's figures, in every cycle of the state (its flip-flop is their enable): its
                # counts have come, so the loader has asked for it and the issuer is done with it (not
                # so in T_COUNTS, which waits there for the loader), and it is not handed over before
                # its take ends
                m.d.sync += [group_k[take_group].eq(take_k), group_sum[take_group].eq(group_sum_dest)]
                m.d.comb += id_answers.ready.eq(1)
                with m.If(id_answers.valid & ~word.error):
                    m.d.comb += [row_launch.eq(1), self_dest_write.en.eq(1)]
                    m.d.sync += [self_dest.eq(self_dest + row_bytes), sum_dest.eq(sum_dest + (p.feature_dim << 2)),
                                 take_e.eq(take_e + 1)]
                    with m.If(take_e == take_k - 1):
                        m.d.sync += [take_e.eq(0), take_j.eq(0)]
                        m.next = "T_ENTRY"
            with m.State("T_ENTRY"):   # the entry's count into a register (as L_ENTRY)
                m.d.sync += take_count.eq(counts[take_group][take_e])
                with m.If(take_done):    # handed over once its row addresses have landed (below)
                    m.next = "T_IDLE"
                with m.Else():
                    m.next = "T_SAMPLES"
            with m.State("T_SAMPLES"):
                m.d.comb += load_samples_taking.eq(1)
                with m.If(take_j == take_count):
                    m.d.sync += [take_e.eq(take_e + 1), take_j.eq(0), take_done.eq(take_e == take_k - 1)]
                    m.next = "T_ENTRY"
                with m.Else():
                    m.d.comb += id_answers.ready.eq(1)
                    with m.If(id_answers.valid & ~word.error):
                        m.d.comb += row_launch.eq(1)
                        m.d.sync += take_j.eq(take_j + 1)
                        with m.If(take_j == take_count - 1):
                            m.d.sync += [take_e.eq(take_e + 1), take_j.eq(0), take_done.eq(take_e == take_k - 1)]
                            m.next = "T_ENTRY"
        encode_states(fsm, platform)   # (one-hot on the ECP5 proxy)
        with m.If(take_done):   # (in T_ENTRY, its last)
            m.d.sync += [handing[take_group].eq(1), take_left.eq(take_rest), take_any.eq(take_rest_any),
                         take_group.eq(~take_group)]
        with m.If(id_answers.valid & word.error):
            fail(word.address)
        with m.If(d_loader):
            m.d.comb += id_answers.ready.eq(1)

        # ---- issuer: per group and row chunk, the samples' rows sample-major, then the self rows
        work_layout = data.StructLayout({"self": 1, "slot": slot_bits, "load": 1, "bank": 1, "dest": 64,
                                         "bytes": 16, "chunk_last": 1})
        # (a chunk's beats of sums: the last one's index and its bytes, worked out as the chunk is
        # issued, so the sum writer's beat loop compares registers only)
        chunk_layout = data.StructLayout({"bank": 1, "sum_dest": 64, "k": range(SLOTS + 1), "empty": SLOTS,
                                          "last_beat": beat_bits, "last_bytes": range(4 * lanes + 1)})
        # (the fields up to ``bank`` also in flip-flops: the next head's slot and bank, which the
        # consumer's hazard compares take, start at a register, not at the LUT-RAM's read: 11.4 ns
        # into ``hazard_older`` on the ``default`` build's ECP5 proxy)
        work_head_bits = work_layout["dest"].offset
        m.submodules.work = work = FreeSlotFIFO(width=work_layout.size, depth=cfg.outstanding_reads + 1,
                                                head_bits=work_head_bits)
        m.submodules.chunks = chunks = FreeSlotFIFO(width=chunk_layout.size, depth=9)
        work_in = Signal(work_layout)
        chunk_in = Signal(chunk_layout)
        m.d.comb += [work.w_data.eq(work_in), chunks.w_data.eq(chunk_in)]

        issue_group = Signal()
        issue_bank = Signal()
        issue_self = Signal()
        issue_e = Signal(range(SLOTS))
        issue_j = Signal(range(max_fanout + 1))
        chunk_start = Signal(32)        # first element of the next chunk (stepped in I_CHUNK)
        released = Signal(64)           # entries whose every read left the issue stage
        k = group_k[issue_group]
        # the chunk's figures, registered in the I_CHUNK state (one cycle before its first read),
        # from the elements left (F - chunk_start, a register stepped with chunk_start); both step
        # there too, so the issue decision (``fire``) enables neither, nor ``released``
        remaining = Signal(32)
        sum_offset = Signal(len(chunk_start) + 2)   # the chunk's first element x 4 (the sums' offset)
        chunk_len = Signal(16)          # elements in this chunk
        chunk_offset = Signal(len(chunk_start) + 2)
        chunk_bytes = Signal(16)
        last_chunk = Signal()           # the group's last chunk
        # the group's entries with a sample issue_j (``now``) and issue_j + 1 (``next``), as registers:
        # loaded for j = 0 and 1 when a chunk starts, shifted (with issue_j + 2 worked out from the
        # counts meanwhile) when issue_j steps, so the next entry is picked from flip-flops

        def active_for(j):
            return Cat(*((e < k) & (counts[issue_group][e] > j) for e in range(SLOTS)))

        now_bits = Signal(SLOTS, name="now_active")
        next_bits = Signal(SLOTS, name="next_active")
        now_active = list(now_bits)
        next_active = list(next_bits)

        def restart_active():
            m.d.sync += [now_bits.eq(active_for(0)), next_bits.eq(active_for(1))]
        later = [Const(0)] + [now_active[e] & (issue_e < e) for e in range(1, SLOTS)]
        any_later, first_later = _first(later)
        any_next, first_next = _first(next_active)
        any_first, first_first = _first(now_active)     # (at a chunk's start, issue_j = 0)
        empty = Cat(*(~now_active[e] & (e < k) for e in range(SLOTS)))
        last_self = issue_e == k - 1
        chunk_last = issue_self & last_self
        chunk_fresh = Signal()
        first_of_chunk = chunk_fresh
        issuing = Signal()
        fire = Signal()
        # a read issued is staged for a cycle with its work record (and, for a chunk's first read, the
        # chunk's): its row address is read from the samples table (a registered read, enabled as the
        # read is issued) or taken from the self-row register into the stage; as it leaves the stage
        # the row address is registered (``request``: the table's read port, a DP16KD without its
        # output register on the ECP5 proxy, fed a 64-bit adder there), then the chunk's offset is
        # added on the way into the request buffer; the records' destinations get theirs on the way
        # into their FIFOs as the read leaves the stage. The group's buffers are freed for the loader
        # only once its last read leaves the stage.
        stage = Signal(data.StructLayout({"valid": 1, "self": 1, "offset": len(chunk_offset),
                                          "bytes": 16, "group": 1, "frees": 1, "first": 1,
                                          "sum_offset": len(chunk_start) + 2, "work": work_layout,
                                          "chunk": chunk_layout}))
        leaves = Signal()
        load = Signal()         # the stage's registers load: it is empty or its read leaves
        request = Signal(data.StructLayout({"base": 64, "offset": len(chunk_offset), "bytes": 16}), reset_less=True)
        request_load = ~request_valid | row_request.ready
        group_done = Signal()   # this read is the group's last
        # room for this read's records behind the one the stage may still hold: flags registered from
        # the FIFO levels a cycle before, one place short (a level grows by at most one a cycle), so
        # no compare sits in front of ``fire``; the FIFOs have a place more for it
        work_room_1, work_room_2, chunks_room_1, chunks_room_2 = (
            Signal(name=name) for name in ("work_room_1", "work_room_2", "chunks_room_1", "chunks_room_2"))
        m.d.sync += [work_room_1.eq(work.level < work.depth - 1), work_room_2.eq(work.level < work.depth - 2),
                     chunks_room_1.eq(chunks.level < chunks.depth - 1),
                     chunks_room_2.eq(chunks.level < chunks.depth - 2)]
        work_room = Mux(stage.valid, work_room_2, work_room_1)
        chunks_room = Mux(stage.valid & stage.first, chunks_room_2, chunks_room_1)
        m.d.comb += [
            leaves.eq(stage.valid & request_load),
            load.eq(~stage.valid | request_load),
            fire.eq(issuing & ~d_issuer & work_room & (~first_of_chunk | chunks_room) & load),
            group_done.eq(chunk_last & last_chunk),
            sample_read.addr.eq(table_address(issue_group, issue_e, issue_j)), sample_read.en.eq(load),
            self_row_read.addr.eq(entry_address(issue_group, issue_e)), self_row_read.en.eq(load),
            self_dest_read.addr.eq(entry_address(issue_group, issue_e)), self_dest_read.en.eq(load),
            row_request.valid.eq(request_valid),
            row_request.payload.address.eq(request.base + request.offset),
            row_request.payload.length.eq(request.bytes),
            work_in.eq(stage.work), work_in.dest.eq(self_dest_read.data + stage.offset),
            chunk_in.eq(stage.chunk), chunk_in.sum_dest.eq(stage.chunk.sum_dest + stage.sum_offset),
            work.w_en.eq(leaves), chunks.w_en.eq(leaves & stage.first),
        ]
        # the stage's payload loads whenever the stage may take a read (``load``), whether or not one
        # is issued (``fire``, which only sets ``valid``): its registers' enable is two flip-flops'
        # function, not the issuer's decision
        with m.If(load):
            m.d.sync += [stage.valid.eq(fire), stage.self.eq(issue_self), stage.group.eq(issue_group),
                         stage.offset.eq(chunk_offset),
                         stage.bytes.eq(chunk_bytes), stage.frees.eq(group_done), stage.first.eq(first_of_chunk),
                         stage.sum_offset.eq(sum_offset),
                         stage.work.self.eq(issue_self), stage.work.slot.eq(issue_e),
                         stage.work.load.eq(issue_j == 0), stage.work.bank.eq(issue_bank),
                         stage.work.bytes.eq(chunk_bytes),
                         stage.work.chunk_last.eq(chunk_last),
                         stage.chunk.bank.eq(issue_bank), stage.chunk.sum_dest.eq(group_sum[issue_group]),
                         stage.chunk.k.eq(k), stage.chunk.empty.eq(empty),
                         stage.chunk.last_beat.eq(((chunk_len + lanes - 1) >> lanes_log2) - 1),
                         stage.chunk.last_bytes.eq((((chunk_len - 1) & (lanes - 1)) + 1) << 2)]
        with m.If(request_load):
            m.d.sync += [request_valid.eq(stage.valid),
                         request.base.eq(Mux(stage.self, self_row_read.data, sample_read.data)),
                         request.offset.eq(stage.offset), request.bytes.eq(stage.bytes)]
        with m.If(leaves & stage.frees):
            m.d.sync += [group_free[stage.group].eq(1), released.eq(released + stage.chunk.k)]
        with m.FSM(name="issue") as fsm:
            with m.State("I_IDLE"):
                with m.If(running & group_full[issue_group]):
                    m.d.sync += [chunk_start.eq(0), remaining.eq(p.feature_dim), issue_j.eq(0)]
                    restart_active()
                    m.next = "I_CHUNK"
            with m.State("I_CHUNK"):   # samples first (if any), then the self rows
                m.d.sync += [issue_self.eq(~any_first), issue_e.eq(Mux(any_first, first_first, 0)),
                             chunk_fresh.eq(1)]
                length = Mux(remaining < chunk_elements, remaining, chunk_elements)
                m.d.sync += [chunk_len.eq(length), chunk_offset.eq(chunk_start << size_log2),
                             sum_offset.eq(chunk_start << 2),
                             chunk_bytes.eq(length << size_log2), last_chunk.eq(remaining <= chunk_elements),
                             chunk_start.eq(chunk_start + chunk_elements), remaining.eq(remaining - chunk_elements)]
                m.next = "I_ROWS"
            with m.State("I_ROWS"):
                m.d.comb += issuing.eq(1)
                with m.If(fire):
                    m.d.sync += chunk_fresh.eq(0)
                    with m.If(chunk_last):
                        m.d.sync += [issue_bank.eq(~issue_bank), issue_j.eq(0)]
                        restart_active()
                        with m.If(group_done):     # the group's last chunk
                            m.d.sync += [group_full[issue_group].eq(0), issue_group.eq(~issue_group)]
                            m.next = "I_IDLE"
                        with m.Else():
                            m.next = "I_CHUNK"
                    with m.Elif(issue_self):
                        m.d.sync += issue_e.eq(issue_e + 1)
                    with m.Elif(any_later):
                        m.d.sync += issue_e.eq(first_later)
                    with m.Elif(any_next):
                        m.d.sync += [issue_j.eq(issue_j + 1), issue_e.eq(first_next),
                                     now_bits.eq(next_bits), next_bits.eq(active_for(issue_j + 2))]
                    with m.Else():
                        m.d.sync += [issue_self.eq(1), issue_e.eq(0)]
        encode_states(fsm, platform)   # (one-hot on the ECP5 proxy)

        # ---- consumer, stage 0: a unit and its work record
        unit = units.payload
        # the head record comes out of flip-flops (a skid buffer behind the FIFO's LUT-RAM read)
        # (its payload in two groups, each loaded through a copy of the head's load decision: the
        # unit's acceptance -> the head's ready -> one net to its ~100 enables was 7.9-8.0 ns on
        # ``small``'s ECP5 proxy)
        m.submodules.work_head = work_head = StreamBuffer(work_layout, load_groups=WORK_LOAD_GROUPS)
        m.d.comb += [work_head.i.valid.eq(work.r_rdy),
                     work_head.i.payload.eq(Cat(work.r_head, work.r_data[work_head_bits:])),
                     work.r_en.eq(work_head.i.ready)]
        record = Signal(work_layout)
        m.d.comb += record.eq(work_head.o.payload)
        unit_index = Signal(beat_bits)
        present = units.valid & work_head.o.valid
        acc_address = Signal(1 + slot_bits + beat_bits)
        m.d.comb += acc_address.eq(Cat(unit_index, record.slot, record.bank))
        history = [Signal(acc_address.shape(), name=f"used{i}") for i in range(ADDER_LATENCY)]
        history_valid = Signal(ADDER_LATENCY)
        # The hazard (the unit's accumulator word is one an addition in flight will write) is worked
        # out a cycle ahead, from registers, for each word the next unit may use: this record's
        # word (nothing taken), its next word (a unit taken), or the first (a last unit taken) or
        # current word of the record the head buffer shows next; the registered choice of the
        # candidate picks its verdict. (``unit_index`` -> 9-bit compares against the five words in
        # flight -> ``accept`` -> ``finished_chunks`` was 9.6 ns on the ECP5 proxy)
        following = work_layout(work_head.next_head)
        candidates = [acc_address, Cat((unit_index + 1)[:beat_bits], record.slot, record.bank),
                      Cat(Const(0, beat_bits), following.slot, following.bank),
                      Cat(unit_index, following.slot, following.bank)]
        # [c]: a word in flight next cycle, other than this cycle's unit, is the candidate's;
        # [c] of ``now_is``: this cycle's unit's word (in flight next cycle if it is a sample) is
        hazard_older = Signal(len(candidates))
        now_is = Signal(len(candidates))
        choice = Signal(len(candidates))        # one-hot: the candidate the unit of this cycle is
        for c, candidate in enumerate(candidates):
            m.d.sync += [hazard_older[c].eq(Cat(*(history_valid[i] & (history[i] == candidate)
                                                  for i in range(ADDER_LATENCY - 1))).any()),
                         now_is[c].eq(acc_address == candidate)]
        hazard = (choice & (hazard_older | (now_is & history_valid[0].replicate(len(candidates))))).any()

        m.submodules.accumulators = accumulators = Memory(shape=lanes * 32, depth=1 << len(acc_address), init=[])
        acc_write = accumulators.write_port()
        acc_read = accumulators.read_port(domain="sync", transparent_for=[acc_write])
        sum_read = accumulators.read_port(domain="sync")
        m.d.comb += acc_read.addr.eq(acc_address)

        # self pieces and sum pieces share the writer; a run (up to its flush) keeps it
        piece_layout = writer.piece.payload.shape()
        self_piece = Signal(piece_layout)
        self_valid = Signal()
        self_ready = Signal()
        sum_piece = Signal(piece_layout)
        sum_valid = Signal()
        sum_ready = Signal()
        # the bytes of the row already written (unit_index << unit_log2), a register stepped with
        # unit_index: no shifter in front of the piece's address and size
        written_bytes = Signal(16)
        # a row's last unit holds its bytes modulo the unit size (a whole unit when that is 0), every
        # other unit a whole one: worked out from the record and the unit size, no subtraction of
        # the bytes written; and the address as a 16-bit sum whose carry picks the high bits or the
        # high bits plus one (no 64-bit carry chain behind ``written_bytes``: 9.2 ns on the ECP5 proxy)
        tail_bytes = record.bytes[:len(unit_mask)] & unit_mask
        low_address = record.dest[:16] + written_bytes
        m.d.comb += [
            self_piece.data.eq(unit.data),
            self_piece.nbytes.eq(Mux(unit.last & (tail_bytes != 0), tail_bytes, unit_bytes)),
            self_piece.address.eq(Cat(low_address[:16], Mux(low_address[16], record.dest[16:] + 1, record.dest[16:]))),
            self_piece.flush.eq(unit.last),
        ]

        ends_chunk = record.chunk_last & unit.last
        unread = Array(Signal(range(9), name=f"unread{b}") for b in range(2))   # finished chunks per bank
        # unread == 0 per bank, flip-flops set where the counts are (the count's compare was in front
        # of ``accept``: a bank's count -> ``accept`` -> the chunk's end -> both counts and
        # ``finished_chunks`` was 7.9-8.5 ns, four and five LUT levels, on the whole kernel's ECP5 proxy)
        unread_none = Array(Signal(init=1, name=f"unread{b}_none") for b in range(2))
        accept = Signal()
        sample_accept = Signal()
        with m.If(d_consumer):
            m.d.comb += accept.eq(1)
        with m.Elif(unit.error):
            m.d.comb += accept.eq(1)
            with m.If(present):
                fail(unit.address)
        with m.Elif(record.self):
            m.d.comb += [self_valid.eq(present), accept.eq(self_ready)]
        with m.Else():   # its accumulator word is free and its bank's previous sums were read out
            m.d.comb += [accept.eq(~hazard & unread_none[record.bank]), sample_accept.eq(present & accept)]
        m.d.comb += units.ready.eq(accept & (work_head.o.valid | d_consumer))
        taken = present & accept
        chunk_done = Signal()
        m.d.comb += chunk_done.eq(taken & ends_chunk & ~unit.error & ~d_consumer)
        with m.If(taken):
            m.d.sync += [unit_index.eq(Mux(unit.last, 0, unit_index + 1)),
                         written_bytes.eq(Mux(unit.last, 0, written_bytes + unit_bytes))]
            m.d.comb += work_head.o.ready.eq(unit.last)
        m.d.sync += [history_valid.eq(Cat(sample_accept, history_valid[:-1])),
                     history[0].eq(acc_address)]
        loads = ~work_head.o.valid | work_head.o.ready      # the head buffer shows another record next
        m.d.sync += choice.eq(Cat(~loads & ~taken, ~loads & taken, loads & taken, loads & ~taken))
        m.d.sync += [history[i].eq(history[i - 1]) for i in range(1, ADDER_LATENCY)]

        # widened lanes (binary32, NaNs canonical; int8 sign-extended)
        lane_values = []
        for lane in range(lanes):
            fp32 = widen_to_fp32(m, unit.data[32 * lane:32 * lane + 32], FeatureDtype.FP32, name=f"w32_{lane}")
            half = unit.data[16 * lane:16 * lane + 16]
            bf16 = widen_to_fp32(m, half, FeatureDtype.BF16, name=f"wbf_{lane}")
            fp16 = widen_to_fp32(m, half, FeatureDtype.FP16, name=f"w16_{lane}")
            int8 = unit.data[8 * lane:8 * lane + 8].as_signed()
            value = Signal(32, name=f"lane{lane}")
            m.d.comb += value.eq(Mux(widen_fp32, fp32, Mux(widen_bf16, bf16, Mux(widen_fp16, fp16, int8))))
            lane_values.append(value)

        # stage 1: the accumulator word is read; the adders (or the load / int8 sum) start
        stage_valid = Signal()
        stage_address = Signal(acc_address.shape())
        stage_load = Signal()
        stage_values = Signal(lanes * 32)
        m.d.sync += [stage_valid.eq(sample_accept), stage_address.eq(acc_address), stage_load.eq(record.load),
                     stage_values.eq(Cat(*lane_values))]
        use_adders = stage_valid & ~stage_load & ~is_int8
        direct = Signal(lanes * 32)     # the loaded value or the int8 sum
        adders = []
        for lane in range(lanes):
            adder = Fp32Adder(latency=ADDER_LATENCY, tag_width=1)
            m.submodules[f"adder{lane}"] = adder
            adders.append(adder)
            acc = acc_read.data[32 * lane:32 * lane + 32]
            x = stage_values[32 * lane:32 * lane + 32]
            m.d.comb += [adder.i.valid.eq(use_adders), adder.i.payload.a.eq(acc), adder.i.payload.b.eq(x),
                         direct[32 * lane:32 * lane + 32].eq(Mux(stage_load, x, (acc + x)[:32]))]
        # the loads and int8 sums wait as long as an addition takes, then either is written back
        delay_layout = data.StructLayout({"valid": 1, "adder": 1, "address": len(acc_address),
                                          "value": lanes * 32})
        delay = [Signal(delay_layout, name=f"delay{i}") for i in range(ADDER_LATENCY)]
        m.d.sync += [delay[0].valid.eq(stage_valid), delay[0].adder.eq(use_adders),
                     delay[0].address.eq(stage_address), delay[0].value.eq(direct)]
        m.d.sync += [delay[i].eq(delay[i - 1]) for i in range(1, ADDER_LATENCY)]
        back = delay[-1]
        m.d.comb += [acc_write.en.eq(back.valid), acc_write.addr.eq(back.address),
                     acc_write.data.eq(Mux(back.adder, Cat(*(a.o.payload.sum for a in adders)), back.value))]

        # ---- sum writer: a finished chunk's sums from the accumulators, chunk after chunk
        task = Signal(chunk_layout)
        finished_chunks = Signal(range(2 * 8 + 1))      # finished, sums not yet being written
        wait = Signal(range(ADDER_LATENCY + 2))
        sum_e = Signal(range(SLOTS + 1))
        sum_b = Signal(beat_bits + 1)
        entry_dest = Signal(64)
        sum_busy = Signal()
        out_valid = Signal()
        out_zero = Signal()
        out_meta = Signal(piece_layout)
        last_beat = sum_b == task.last_beat
        advance = ~out_valid | sum_ready
        starting = Signal()
        read_out = Signal()
        # (the count's step picked at the last LUT between its value plus one and minus one, both
        # worked out from the register: as ``finished_chunks + chunk_done - starting``, a carry chain sat
        # behind the unit's acceptance, work_head's valid -> ``finished_chunks`` 7.69 ns on ``small``'s
        # ECP5 proxy)
        finished_up, finished_down = Signal.like(finished_chunks), Signal.like(finished_chunks)
        m.d.comb += [finished_up.eq(finished_chunks + 1), finished_down.eq(finished_chunks - 1)]
        m.d.sync += finished_chunks.eq(Mux(chunk_done == starting, finished_chunks,
                                           Mux(chunk_done, finished_up, finished_down)))
        for bank in range(2):
            finished_here, read_here = chunk_done & (record.bank == bank), read_out & (task.bank == bank)
            m.d.sync += [unread[bank].eq(unread[bank] + finished_here - read_here),
                         unread_none[bank].eq(Mux(finished_here == read_here, unread_none[bank],
                                                  ~finished_here & (unread[bank] == 1)))]
        m.d.comb += [sum_read.addr.eq(Cat(sum_b[:beat_bits], sum_e[:slot_bits], task.bank)),
                     sum_read.en.eq(advance)]
        with m.If(out_valid & sum_ready):
            m.d.sync += out_valid.eq(0)
        with m.FSM(name="sums") as fsm:
            with m.State("S_IDLE"):
                with m.If((finished_chunks != 0) & ~d_sums):
                    m.d.comb += [chunks.r_en.eq(1), starting.eq(1)]
                    m.d.sync += [task.eq(chunks.r_data), wait.eq(ADDER_LATENCY), sum_e.eq(0), sum_b.eq(0),
                                 entry_dest.eq(chunk_layout(chunks.r_data).sum_dest)]
                    m.next = "S_WAIT"
            with m.State("S_WAIT"):   # the chunk's last additions land
                m.d.comb += sum_busy.eq(1)
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.next = "S_RUN"
            with m.State("S_RUN"):
                m.d.comb += sum_busy.eq(1)
                with m.If(sum_e == task.k):
                    m.d.comb += read_out.eq(1)      # every word read (the last may still be written)
                    m.next = "S_IDLE"
                with m.Elif(advance):
                    m.d.sync += [out_valid.eq(1), out_zero.eq(task.empty.bit_select(sum_e[:slot_bits], 1)),
                                 out_meta.address.eq(entry_dest + (sum_b << (lanes_log2 + 2))),
                                 out_meta.nbytes.eq(Mux(last_beat, task.last_bytes, 4 * lanes)),
                                 out_meta.flush.eq(last_beat)]
                    with m.If(last_beat):
                        m.d.sync += [sum_b.eq(0), sum_e.eq(sum_e + 1),
                                     entry_dest.eq(entry_dest + (p.feature_dim << 2))]
                    with m.Else():
                        m.d.sync += sum_b.eq(sum_b + 1)
        encode_states(fsm, platform)   # (one-hot on the ECP5 proxy)
        m.d.comb += [sum_piece.data.eq(Mux(out_zero, 0, sum_read.data)), sum_piece.nbytes.eq(out_meta.nbytes),
                     sum_piece.address.eq(out_meta.address), sum_piece.flush.eq(out_meta.flush),
                     sum_valid.eq(out_valid & ~d_sums)]
        with m.If(d_sums):
            m.d.sync += out_valid.eq(0)

        # ---- the writer's arbiter
        locked_self = Signal()
        locked_sum = Signal()
        grant_sum = locked_sum | (~locked_self & sum_valid)
        m.d.comb += [
            self_buffer.i.valid.eq(self_valid), self_buffer.i.payload.eq(self_piece),
            self_ready.eq(self_buffer.i.ready),
            pieces_buffer.i.valid.eq(Mux(grant_sum, sum_valid, self_buffer.o.valid)),
            pieces_buffer.i.payload.eq(Mux(grant_sum, sum_piece, self_buffer.o.payload)),
            sum_ready.eq(grant_sum & pieces_buffer.i.ready),
            self_buffer.o.ready.eq(~grant_sum & pieces_buffer.i.ready),
            writer.discard.eq(d_writer),
        ]
        with m.If(pieces_buffer.i.valid & pieces_buffer.i.ready):
            m.d.sync += [locked_sum.eq(grant_sum & ~pieces_buffer.i.payload.flush),
                         locked_self.eq(~grant_sum & ~pieces_buffer.i.payload.flush)]
        with m.If(d_writer):
            m.d.sync += [locked_sum.eq(0), locked_self.eq(0)]

        # ---- start, end, errors
        with m.If(writer.error & ~self.write_error & running):
            m.d.comb += draining_next.eq(1)
            m.d.sync += [self.write_error.eq(~self.error),
                         self.write_error_address.eq(writer.error_address)]
        engines_idle = rows.idle & ids.idle & writer.idle & buffers_idle & ~stage.valid
        finished = ((released == p.entries) & ~work.r_rdy & work_head.idle & (finished_chunks == 0) & ~sum_busy
                    & ~out_valid)
        # the end, registered: ``busy`` falls a cycle after everything was seen idle (and nothing is
        # left, or an error drains), a state nothing leaves while running; the AND of the engines'
        # flags and the 64-bit count compare feeds one flip-flop, not ``busy``'s own enable
        ended = Signal()
        m.d.sync += ended.eq(running & engines_idle & (d_writer | finished))
        with m.If(ended):
            m.d.sync += running.eq(0)
        with m.If(begin):
            m.d.comb += draining_next.eq(0)
            m.d.sync += [running.eq(1), self.error.eq(0), self.write_error.eq(0),
                         load_any.eq(self.parameters.entries != 0), take_any.eq(self.parameters.entries != 0),
                         released.eq(0), group_free[0].eq(1), group_free[1].eq(1),
                         group_full[0].eq(0), group_full[1].eq(0), handing[0].eq(0), handing[1].eq(0),
                         stage.valid.eq(0),
                         load_group.eq(0), take_group.eq(0), issue_group.eq(0), issue_bank.eq(0)]
        # (the wide loads on their own copies: ``start`` comes only while not busy)
        with m.If(start_parameters):
            m.d.sync += p.eq(self.parameters)
        with m.If(start_counts):
            m.d.sync += [load_left.eq(self.parameters.entries), take_left.eq(self.parameters.entries)]
        with m.If(start_cursors):
            m.d.sync += [count_cursor.eq(self.parameters.counts_addr), id_cursor.eq(self.parameters.nodes_ptr)]
        # (the samples' first id, worked out a cycle after the start from the block's own copy of the
        # parameters: from the sequencer's registers, the id width's pick and the 64-bit add in the
        # start's cycle were a 7.45 ns path on ``small``'s ECP5 proxy. The cursor is first read in
        # L_SAMPLES, after the first counts have been read)
        samples_begin = Signal()
        m.d.sync += samples_begin.eq(start_samples)
        with m.If(samples_begin):
            m.d.sync += sample_cursor.eq(p.nodes_ptr + Mux(p.wide_ids, p.entries << 3, p.entries << 2))
        with m.If(start_dests):
            m.d.sync += [self_dest.eq(self.parameters.self_ptr), sum_dest.eq(self.parameters.sum_ptr)]
        return m
