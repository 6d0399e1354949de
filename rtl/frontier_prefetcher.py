"""The frontier and indptr prefetcher: a hop's frontier ids, their RNG keys and degrees, read ahead.

During a hop the node-list entries F_h[0..] are read ahead from device memory (up to
``outstanding_reads`` in flight); each id that comes back is range-checked and, if in range, its
``indptr[v]``, ``indptr[v+1]`` reads are issued at once (one read when both lie in one beat). The
sequencer takes the checked ids (with their keys H_v) and the indptr pairs in order. The indptr
answers land in a FIFO whose space is reserved before the reads are issued, so they never block
another requester's answers on a shared, in-order read channel.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, stream
from amaranth.lib.wiring import In, Out

from smartsage.spec import rng as spec_rng
from smartsage.spec.config import KernelConfig

from .axi import ADDRESS_WIDTH
from .compare import below
from .free_slot_fifo import FreeSlotFIFO
from .kernel_block import KernelBlock, check_kernel_config
from .node_list_collector import id_offset
from .read_stream import StreamWord
from .register_copies import register_copies
from .rng import MIX32_LATENCY, mix32_pipelined
from .stream_buffer import StreamBuffer
from .tagged_read_stream import ReadPortSignature

__all__ = ["FrontierPrefetcher", "FrontierNode", "IndptrPair", "indptr_tag_shape", "nodes_ahead"]

#: A checked frontier entry: the id, whether it is below N, whether its read failed (at
#: ``address``), and its RNG key H_v.
#: A checked frontier entry: the id, whether it is in range, a read error, the id's address and its
#: RNG key H_v after mix32's first xor-shift (``shifted_key``, ``H_v ^ (H_v >> 16)``: what a position
#: sampler takes, :data:`~smartsage.rtl.position_sampler.PositionRequest`).
FrontierNode = data.StructLayout({"node": 64, "in_range": 1, "error": 1, "address": 64, "shifted_key": 32})
#: An in-range id's indptr pair as a job needs it: the storage address of its first edge
#: (``edge_address``, ``indices_base + indptr[v] x id size``), indptr[v+1] (``end``), their difference
#: (the degree) and the node's sample count min(degree, k) for the hop's fanout k; ``error``: one of the
#: pair's reads failed (at ``address``).
IndptrPair = data.StructLayout({"edge_address": 64, "end": 64, "degree": 64, "count": 16, "error": 1,
                                "address": 64})


def nodes_ahead(config: KernelConfig) -> int:
    """Frontier nodes in flight at most (read, checked and not yet taken)."""
    return max(2, config.outstanding_reads // 2)


def indptr_tag_shape(data_width: int) -> data.StructLayout:
    """The tag of an indptr read: whether it brings both words of the pair (``whole``), and then
    which 64-bit word of the beat is the second (``end_word``; not in a 64-bit beat, which never
    brings both)."""
    fields = {"whole": 1}
    if data_width > 64:
        fields["end_word"] = (data_width // 64 - 1).bit_length()
    return data.StructLayout(fields)


class FrontierPrefetcher(KernelBlock):
    """Reads a hop's frontier ahead, checks the ids, computes their keys and reads their indptr pairs.

    A pipeline, one node per cycle: stage 0 compares a frontier id with the node count into a
    two-entry buffer (and reserves its indptr pair's place), the buffer's head gives the id its range
    flag into a second two-entry buffer, and stage 1, that buffer's head, issues its indptr read(s) and
    queues it; ids out of range or read in error pass through stage 1 without reads (frontier
    order). Each id's key H_v comes from a free-running pipeline (two mix32 rounds) into a key FIFO
    beside the checked ids, after mix32's first xor-shift (an involution: the second round's last sum
    before its own last xor-shift).

    Parameters
    ----------
    config : KernelConfig
        Data width and outstanding_reads of the build.

    Members
    -------
    frontier_reads : ``Out(ReadPortSignature())``
        Node-list reads (device memory).
    indptr_reads : ``Out(ReadPortSignature(indptr_tag_shape(config.data_width), config.data_width))``
        indptr reads (storage); the tag says the read brings both words of the pair, and where the
        second is (so the answer's word select starts at the read engine's tag register).
    nodes : ``Out(stream.Signature(FrontierNode))``
    pairs : ``Out(stream.Signature(IndptrPair))``
        The indptr pairs of the in-range nodes, in frontier order.
    active : ``In(1)``
        The hop's frontier is being read (reads and answers are taken only then).
    restart : ``In(1)``
        The next hop starts: read from entry 0 (taken while not ``active``).
    frontier_size, nodes_ptr, num_nodes, indptr_base, indices_base : ``In(64)``
        |F_h|, the node list's device address, N, and the indptr and indices sections' storage
        addresses.
    wide_ids : ``In(1)``
    hop_key : ``In(32)``
    fanout : ``In(16)``
        The hop's fanout k (for the pairs' sample counts; set before ``restart``).
    clear : ``In(1)``
        Empty the FIFOs (a command's start and end).
    abandon : ``In(1)``
        The command ends: drop the ids in the pipelines.
    """

    def __init__(self, config: KernelConfig):
        check_kernel_config(config)
        super().__init__(config, {
            "frontier_reads": Out(ReadPortSignature()),
            "indptr_reads": Out(ReadPortSignature(indptr_tag_shape(config.data_width), config.data_width)),
            "nodes": Out(stream.Signature(FrontierNode)),
            "pairs": Out(stream.Signature(IndptrPair)),
            "active": In(1), "restart": In(1),
            "frontier_size": In(64), "nodes_ptr": In(ADDRESS_WIDTH), "num_nodes": In(64),
            "indptr_base": In(ADDRESS_WIDTH), "indices_base": In(ADDRESS_WIDTH),
            "wide_ids": In(1), "hop_key": In(32), "fanout": In(16),
            "clear": In(1), "abandon": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        data_bytes = cfg.data_bytes
        ids_per_beat = data_bytes // 4
        mem, port_a = self.frontier_reads, self.indptr_reads
        prefetching, job_reset, finishing = self.active, self.clear, self.abandon
        # the command's id width and node count, copied into registers here: they are set a hop
        # before they are read, and the copies start the range check's path at flip-flops beside
        # it (from the sequencer's registers it crossed the chip: 15.9 ns on the ECP5 proxy)
        # (and the hop's fanout, set a HOP state before the walk: from the sequencer's register,
        # min(degree, k) into the pairs FIFO was an 8.9 ns path)
        wide_ids, num_nodes = Signal(name="wide_ids"), Signal(64, name="num_nodes")
        fanout = Signal.like(self.fanout, name="fanout")
        m.d.sync += [wide_ids.eq(self.wide_ids), num_nodes.eq(self.num_nodes), fanout.eq(self.fanout)]
        # (the indices section's address and a copy of the id width of its own, for the pairs' first
        # edge addresses, worked out here as a pair is queued: in the sequencer, that add sat between
        # its pair buffer's read and the dispatcher's intake, 8.2-8.6 ns on the ECP5 proxy)
        indices_base = Signal(ADDRESS_WIDTH, name="indices_base")
        m.d.sync += indices_base.eq(self.indices_base)
        wide_edges = register_copies(m, platform, "wide_edges", self.wide_ids, 1)[0]
        # (a node count of 2^32 or more, a flag loaded beside the copy: every 32-bit id is in range)
        num_nodes_high_any = Signal(name="num_nodes_high_any")
        m.d.sync += num_nodes_high_any.eq(self.num_nodes[32:] != 0)

        def id_of(word, address):
            return Mux(wide_ids, word, Mux(address[2], word[32:], word[:32]))

        # the frontier's reads: whether one is left is a flag register (no 64-bit compare of the
        # index with the frontier's size in front of the read engine's handshake)
        # (the read's address is a register stepped by the id size: no 64-bit add and id-width mux in
        # front of the read engine, nor ~64 LUTs on the id-width flag's net, 9.8 ns on the ECP5 proxy)
        prefetch_address = Signal(ADDRESS_WIDTH)    # nodes_ptr + prefetch index x id size
        prefetch_left = Signal(64)      # frontier_size - prefetch_index
        prefetch_more = Signal()        # prefetch_left != 0
        with m.If(prefetching & prefetch_more):
            m.d.comb += [mem.request.valid.eq(1),
                         mem.request.payload.eq(prefetch_address)]
            with m.If(mem.request.ready):
                m.d.sync += [prefetch_address.eq(prefetch_address + Cat(Const(0, 2), ~wide_ids, wide_ids)),
                             prefetch_left.eq(prefetch_left - 1),
                             prefetch_more.eq(prefetch_left != 1)]
        with m.If(self.restart & ~prefetching):
            m.d.sync += [prefetch_address.eq(self.nodes_ptr), prefetch_left.eq(self.frontier_size),
                         prefetch_more.eq(self.frontier_size != 0)]

        # Checked frontier entries (with their RNG key H_v, computed here) and the indptr pairs
        # of the in-range ones, both in frontier order. Up to ``ahead`` nodes are in flight.
        ahead = nodes_ahead(cfg)
        node_ahead_layout = data.StructLayout({"node": 64, "in_range": 1, "error": 1, "address": 64})
        nodes_ahead_fifo = FreeSlotFIFO(width=node_ahead_layout.size, depth=ahead)
        m.submodules.nodes_ahead = ResetInserter(job_reset)(nodes_ahead_fifo)
        indptr_pairs = FreeSlotFIFO(width=IndptrPair.size, depth=ahead)
        m.submodules.indptr_pairs = ResetInserter(job_reset)(indptr_pairs)
        pairs_reserved = Signal(range(ahead + 1))
        ahead_in = Signal(node_ahead_layout)
        m.d.comb += nodes_ahead_fifo.w_data.eq(ahead_in)
        arriving = mem.response.payload
        arriving_id = id_of(arriving.data, arriving.address)
        # the range check for either id width, picked by the width after the compares (not a 64-bit
        # compare behind the width's select: 9.4 ns on the ECP5 proxy from the width's flip-flop)
        # (and a 64-bit id as its two 32-bit halves compared side by side: one 64-bit chain behind
        # the answer buffer was 9.85 ns on the ECP5 proxy)
        # (a 32-bit id: both halves compared, one picked by the address, so no word select sits in
        # front of a carry chain)
        high_id, low_id = arriving.data[32:64], arriving.data[:32]
        # (the high halves' equality as "neither below nor above", a third carry chain beside the two:
        # a 32-bit equality is a three-level LUT tree, and with it frontier_answers -> s1_in_range was
        # 7.65-8.78 ns, four LUT levels, in every run of the whole kernel's ECP5 proxy)
        # The compares' four outcomes are registered (``compared``, a two-entry buffer in front of the
        # checked one) and combined into the id's range flag on the way into the checked buffer: the
        # carry chains, the width's and the word's selects and the buffer's input multiplexer in one
        # cycle were 7.86-8.02 ns on ``small``'s ECP5 proxy (frontier_answers -> the checked buffer's
        # ``in_range``, four levels after the chain)
        compared_layout = data.StructLayout({"node": 64, "error": 1, "address": 64, "low_below": 1,
                                             "high_below": 1, "high_above": 1, "alt_below": 1})
        m.submodules.compared = compared = ResetInserter(job_reset | finishing)(StreamBuffer(compared_layout))
        compared_in = compared.i.payload
        m.d.comb += [compared_in.node.eq(arriving_id), compared_in.error.eq(arriving.error),
                     compared_in.address.eq(arriving.address),
                     compared_in.low_below.eq(low_id < num_nodes[:32]),
                     compared_in.high_below.eq(high_id < num_nodes[32:]),
                     compared_in.high_above.eq(num_nodes[32:] < high_id),
                     compared_in.alt_below.eq(high_id < num_nodes[:32])]
        head = compared.o.payload
        wide_below = head.high_below | (~head.high_above & head.low_below)
        narrow_below = Mux(head.address[2], head.alt_below, head.low_below)
        in_range = ~head.error & Mux(wide_ids, wide_below, num_nodes_high_any | narrow_below)
        # every id taken gets its key H_v from a free-running pipeline (the id registered, two mix32
        # rounds) into ``node_keys``, in frontier order beside ``nodes_ahead``; ids taken and not yet
        # dispatched are at most ``ahead + 4`` (the compared and checked buffers' two each and
        # nodes_ahead), so the FIFO never overflows
        node_keys = FreeSlotFIFO(width=32, depth=ahead + 5)
        m.submodules.node_keys = ResetInserter(job_reset)(node_keys)
        key_id = Signal(64)
        key_valid = Signal(2 * MIX32_LATENCY + 1)   # a valid bit per stage
        key_id_high = [Signal(32, name=f"key_id_high{i}") for i in range(MIX32_LATENCY - 1)]
        key_taken = Signal()
        m.d.sync += [key_id_high[0].eq(key_id[32:]), *(key_id_high[i].eq(key_id_high[i - 1])
                                                        for i in range(1, MIX32_LATENCY - 1))]
        # (the first round's last stage loads mix32's first xor-shift of the second round's input, with
        # the id's high half of its own cycle, one stage before the round's end)
        key_first_shifted = mix32_pipelined(m, self.hop_key ^ key_id[:32], 1, name="node_mix1",
                                            shift_out_with=key_id_high[-1] ^ spec_rng.NODE_SALT)
        # (H_v after mix32's first xor-shift, which undoes the round's last: its last register holds the
        # sum, and no LUT sits between it and the key FIFO, nor between the lanes' stages and samplers)
        key_shifted = mix32_pipelined(m, key_first_shifted, 1, name="node_mix2", shifted=True,
                                      shift_out_with=Const(0, 32))
        m.d.sync += key_valid.eq(Cat(key_taken, key_valid[:-1]))
        # (the pipeline is free-running and its valid bits say which stages hold a taken id, so the
        # id register follows the arriving answer in every cycle: no enable behind the answer's
        # handshake on its 64 flip-flops)
        m.d.sync += key_id.eq(arriving_id)
        with m.If(job_reset | finishing):
            m.d.sync += key_valid.eq(0)
        m.d.comb += [node_keys.w_en.eq(key_valid[-1]), node_keys.w_data.eq(key_shifted)]
        # A place in the pairs FIFO is reserved for every id taken, and given back when its pair
        # leaves, or as stage 1 passes an id that is out of range or failed (it has no pair): so the
        # range check (a 64-bit compare behind the id's word select) feeds stage 1's register only,
        # not the reservation count (on the ECP5 proxy: 11.6 ns from the frontier's answer buffer)
        reserve = Signal()
        release = Signal()
        returned = Signal()
        m.d.comb += release.eq(indptr_pairs.r_en & indptr_pairs.r_rdy)
        # (its room, ``pairs_reserved + 1 <= ahead``, is a register worked out from the count's next
        # value: no adder and compare in front of the answer's ready, 9.9 ns on the ECP5 proxy)
        reserved_next = Signal.like(pairs_reserved)
        reserve_room = Signal(init=1)
        m.d.comb += reserved_next.eq(Mux(job_reset, 0, pairs_reserved + reserve - release - returned))
        m.d.sync += [pairs_reserved.eq(reserved_next), reserve_room.eq(reserved_next < ahead)]
        # the stages: stage 0 compares an id into a two-entry buffer (above), its head's range flag
        # goes into a second one (checked), whose head, stage 1, issues its read(s). The answer's ready
        # is the first buffer's room (a flip-flop), the reservation's
        # and ``prefetching``: with stage 1 as a register of its own, loaded as it emptied, its read's
        # handshake ran through the stage's room into the answer's ready and the reservation count,
        # nine levels and 10.91 ns on ``default``'s ECP5 proxy. Each id takes a cycle more to reach
        # stage 1; the prefetcher runs ahead, so no cycle count changed.
        index_bits = data_bytes.bit_length() - 4        # the word's place in a beat
        stage_fields = {"node": 64, "in_range": 1, "error": 1, "address": 64}
        if data_bytes > 8:
            # indptr[v + 1] in the same beat (not for 64-bit beats): one read brings both. The word's
            # place in its beat is worked out into the stage with the id, from the low bits of the
            # base and the id: read from the 64-bit sum, it ran through the read's handshake into the
            # reservation count (``default``, ECP5 proxy: 12.4 ns), and the flag is a register of its
            # own (its compare in front of the read's valid: nine levels, 10.53 ns)
            stage_fields.update(word=index_bits, same_beat=1)
        stage_layout = data.StructLayout(stage_fields)
        m.submodules.checked = checked = ResetInserter(job_reset | finishing)(StreamBuffer(stage_layout))
        checked_in = checked.i.payload
        m.d.comb += [checked_in.node.eq(head.node), checked_in.in_range.eq(in_range),
                     checked_in.error.eq(head.error), checked_in.address.eq(head.address),
                     checked.i.valid.eq(compared.o.valid), compared.o.ready.eq(checked.i.ready)]
        if data_bytes > 8:
            low_sum = self.indptr_base[:3 + index_bits] + Cat(Const(0, 3), head.node[:index_bits])
            m.d.comb += [checked_in.word.eq(low_sum[3:3 + index_bits]),
                         checked_in.same_beat.eq(low_sum[3:3 + index_bits] != ids_per_beat // 2 - 1)]
        stage = checked.o.payload
        s1_valid, s1_in_range, s1_error = checked.o.valid, stage.in_range, stage.error
        prefetch_node, s1_address = stage.node, stage.address
        # (named: the timing reports show it)
        s1_second = Signal(name="s1_second")    # the stage's first read went, its second is due
        start_address = self.indptr_base + prefetch_node * 8
        # indptr[v + 1]'s address, for a second read, from a register: it follows the first's in every
        # cycle (both are worked out from registers that hold while stage 1 does), and the second read
        # goes a cycle after the first at the earliest, so no second 64-bit adder sits behind the first
        # in front of the storage reader's request buffer (``indptr_base`` -> the request, two carry
        # chains in series: 9.91 ns on ``default``'s ECP5 proxy, 7.36 ns on ``small``'s)
        end_address = Signal(64)
        m.d.sync += end_address.eq(start_address + 8)
        same_beat = stage.same_beat if data_bytes > 8 else 0
        s1_done = Signal()
        m.d.comb += [ahead_in.node.eq(prefetch_node), ahead_in.in_range.eq(s1_in_range),
                     ahead_in.error.eq(s1_error), ahead_in.address.eq(s1_address)]
        # the read's tag from stage 1's flip-flops alone, whichever read goes: the second read's says
        # "not whole" (its ``end_word`` is then never read), and a tag written with no read is never
        # read either. (Set inside the stage's decision, as the first read's, ``s1_in_range`` ran
        # through that decision and the read engine's tag multiplexer into every field of its tag
        # register, five levels and 10.99-11.21 ns on ``default``'s ECP5 proxy)
        # (the address likewise: the stage's second read's, or its first's)
        m.d.comb += [port_a.tag.whole.eq(same_beat & ~s1_second),
                     port_a.request.payload.eq(Mux(s1_second, end_address, start_address))]
        if data_bytes > 8:
            m.d.comb += port_a.tag.end_word.eq(stage.word + 1)
        with m.If(s1_valid & ~s1_in_range):
            m.d.comb += [nodes_ahead_fifo.w_en.eq(nodes_ahead_fifo.w_rdy), s1_done.eq(nodes_ahead_fifo.w_rdy),
                         returned.eq(nodes_ahead_fifo.w_rdy)]
        with m.Elif(s1_valid & ~s1_second):
            m.d.comb += port_a.request.valid.eq(nodes_ahead_fifo.w_rdy | ~same_beat)
            with m.If(port_a.request.valid & port_a.request.ready):
                with m.If(same_beat):
                    m.d.comb += [nodes_ahead_fifo.w_en.eq(1), s1_done.eq(1)]
                with m.Else():
                    m.d.sync += s1_second.eq(1)
        with m.Elif(s1_valid):
            m.d.comb += port_a.request.valid.eq(nodes_ahead_fifo.w_rdy)
            with m.If(port_a.request.valid & port_a.request.ready):
                m.d.comb += [nodes_ahead_fifo.w_en.eq(1), s1_done.eq(1)]
        m.d.comb += checked.o.ready.eq(s1_done)
        with m.If(s1_done | job_reset | finishing):
            m.d.sync += s1_second.eq(0)
        with m.If(prefetching & reserve_room):
            m.d.comb += [mem.response.ready.eq(compared.i.ready), compared.i.valid.eq(mem.response.valid)]
            with m.If(mem.response.valid & compared.i.ready):
                m.d.comb += [reserve.eq(1), key_taken.eq(1)]
        # indptr answers pair up (start, end) and go, three cycles later, into the reserved FIFO space:
        # both from one beat, or from two answers. Three short stages, not one long one: the pair's
        # words as the answer brings them (the storage engine's word select, from its in-flight head
        # register), their difference (the degree, a 64-bit carry chain from flip-flops), and the
        # sample count min(degree, k). (The word select and the subtraction in one cycle were
        # ``default``'s worst path on the ECP5 proxy, 12.52 ns, and 10.56 ns in another run.)
        first_half = Signal(StreamWord)
        have_half = Signal()
        pair_in = Signal(IndptrPair)
        pair_stage = Signal(IndptrPair)     # the pair as read: its end word, its degree not yet worked out
        pair_staged = Signal()
        answer = port_a.response.payload
        # (the second word's place comes with the tag, from the engine's tag register: worked out
        # from the answer's address, its select started at the in-flight FIFO's LUT-RAM read)
        next_word = port_a.beat.word_select(port_a.answer_tag.end_word, 64) if data_bytes > 8 else answer.data
        whole = port_a.answer_tag.whole
        paired = Signal()
        pair_start = Signal(64)     # indptr[v], as staged (the next stage works out the degree and edge address)
        m.d.comb += [pair_start.eq(Mux(whole, answer.data, first_half.data)),
                     pair_in.end.eq(Mux(whole, next_word, answer.data)),
                     pair_in.error.eq(Mux(whole, answer.error, first_half.error | answer.error)),
                     pair_in.address.eq(Mux(~whole & first_half.error, first_half.address, answer.address))]
        with m.If(prefetching):
            m.d.comb += port_a.response.ready.eq(1)
            with m.If(port_a.response.valid & whole):
                m.d.comb += paired.eq(1)
            with m.Elif(port_a.response.valid):
                m.d.sync += have_half.eq(~have_half)
                with m.If(have_half):
                    m.d.comb += paired.eq(1)
                with m.Else():
                    m.d.sync += first_half.eq(port_a.response.payload)
        staged_start = Signal(64)
        m.d.sync += [pair_staged.eq(paired), pair_stage.eq(pair_in), staged_start.eq(pair_start)]
        with m.If(job_reset):
            m.d.sync += [have_half.eq(0), pair_staged.eq(0)]
        # the degree and the first edge's address, from the staged words
        pair_subtracted = Signal(IndptrPair)
        pair_subtracted_valid = Signal()
        m.d.sync += [pair_subtracted.eq(pair_stage), pair_subtracted_valid.eq(pair_staged),
                     pair_subtracted.degree.eq(pair_stage.end - staged_start),
                     pair_subtracted.edge_address.eq(indices_base + id_offset(wide_edges, staged_start))]
        with m.If(job_reset):
            m.d.sync += pair_subtracted_valid.eq(0)
        # min(d, k) without a 64-bit carry chain (k has 16 bits): d < k worked out from the staged
        # degree into a flip-flop, and the pick made a cycle later, from flip-flops, on the way into
        # the FIFO's LUT-RAM (the degree's compare -> the count -> the RAM's write data was 8.7 ns on
        # the whole kernel's ECP5 proxy; the compare -> the pick -> a count register, 8.4-9.1 ns)
        pair_queued = Signal(IndptrPair)
        pair_queued_valid = Signal()
        queued_below = Signal()                  # the queued pair's d < k
        queued_fanout = Signal.like(fanout)      # (the k its compare used)
        m.d.sync += [pair_queued.eq(pair_subtracted), pair_queued_valid.eq(pair_subtracted_valid),
                     queued_below.eq(below(pair_subtracted.degree, fanout)), queued_fanout.eq(fanout)]
        with m.If(job_reset):
            m.d.sync += pair_queued_valid.eq(0)
        pair_counted = Signal(IndptrPair)
        m.d.comb += [pair_counted.eq(pair_queued),
                     pair_counted.count.eq(Mux(queued_below, pair_queued.degree[:16], queued_fanout))]
        m.d.comb += [indptr_pairs.w_data.eq(pair_counted), indptr_pairs.w_en.eq(pair_queued_valid)]

        # the checked nodes with their keys, and the pairs, to the sequencer
        entry = node_ahead_layout(nodes_ahead_fifo.r_data)
        m.d.comb += [
            self.nodes.valid.eq(nodes_ahead_fifo.r_rdy & node_keys.r_rdy),
            self.nodes.payload.node.eq(entry.node), self.nodes.payload.in_range.eq(entry.in_range),
            self.nodes.payload.error.eq(entry.error), self.nodes.payload.address.eq(entry.address),
            self.nodes.payload.shifted_key.eq(node_keys.r_data),
            # (a head leaves on valid and ready: ``ready`` alone may be high with one queue empty)
            nodes_ahead_fifo.r_en.eq(self.nodes.valid & self.nodes.ready),
            node_keys.r_en.eq(self.nodes.valid & self.nodes.ready),
            self.pairs.valid.eq(indptr_pairs.r_rdy), self.pairs.payload.eq(indptr_pairs.r_data),
            indptr_pairs.r_en.eq(self.pairs.ready),
        ]
        return m
