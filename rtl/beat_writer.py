"""A beat-wide AXI4 writer: byte pieces at any address merged into strobed full-width beats."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .axi import ADDRESS_WIDTH, BURST_INCR, RESP_OKAY, AxiWriteSignature, check_data_width
from .compare import carry_equal
from .ping_pong_buffer import SELECT_GROUP, PingPongBuffer
from .register_copies import lut_copies
from .stream_buffer import StreamBuffer

__all__ = ["BeatWriter", "piece_layout", "WRITE_BURST_BEATS"]

#: Beats of one write burst at most (a burst's error response names its first byte: kept short).
WRITE_BURST_BEATS = 16


def piece_layout(data_width: int) -> data.StructLayout:
    """A piece to write: ``nbytes`` (1..data_width/8) bytes, the first in ``data``'s low byte, to
    ``address`` (any alignment); ``flush`` ends a run of contiguous pieces (the last partial beat
    is written out at once)."""
    check_data_width(data_width)
    data_bytes = data_width // 8
    return data.StructLayout({"data": data_width, "nbytes": data_bytes.bit_length(), "address": ADDRESS_WIDTH,
                              "flush": 1})


class BeatWriter(wiring.Component):
    """Merges contiguous byte pieces into full-width beats and writes each beat with its strobes.

    A piece enters through a two-entry buffer that marks, as it enters, whether it is for the beat of
    the piece before it and whether it fills its beat (one cycle). It is then shifted to its place in
    the beat(s) it covers and merged into a holding beat; a beat is written when a piece fills it up to
    its last byte, when the next piece belongs to another beat, or when a piece with ``flush`` ends
    there; a written beat waits in a two-entry buffer (one cycle), so the piece's handshake and the
    burst gathering are separate paths. Only the pieces' bytes are strobed, so nothing outside them is
    written. One piece per cycle. Consecutive beats are gathered into INCR bursts (up to
    :data:`WRITE_BURST_BEATS`, never across 4 KiB; a burst closes when the next beat is not its
    successor or on a cycle without a beat): its beats wait in a FIFO, then AW and W go out, up to
    ``outstanding`` bursts in flight; the first error response latches ``error`` and the burst's first
    strobed byte's address.

    Parameters
    ----------
    data_width : int
        AXI data width in bits (64..512).
    outstanding : int
        Writes in flight at most.

    Members
    -------
    piece : ``In(stream.Signature(piece_layout(data_width)))``
    bus : ``Out(AxiWriteSignature(data_width))``
    idle : ``Out(1)``
        Nothing held and every write answered.
    discard : ``In(1)``
        Drop the holding beat (after an error: it is never written).
    error : ``Out(1)``
    error_address : ``Out(64)``
    """

    def __init__(self, data_width: int, outstanding: int):
        self._data_width = check_data_width(data_width)
        if not isinstance(outstanding, int) or not 1 <= outstanding <= 256:
            raise ValueError(f"Outstanding writes must be an integer in 1..256, not {outstanding!r}")
        self._outstanding = outstanding
        super().__init__({
            "piece": In(stream.Signature(piece_layout(data_width))),
            "bus": Out(AxiWriteSignature(data_width)),
            "idle": Out(1),
            "discard": In(1),
            "error": Out(1),
            "error_address": Out(ADDRESS_WIDTH),
        })

    @property
    def data_width(self) -> int:
        return self._data_width

    def elaborate(self, platform):
        m = Module()
        width = self._data_width
        data_bytes = width // 8
        size_log2 = data_bytes.bit_length() - 1
        bus = self.bus
        m.submodules.in_flight = in_flight = SyncFIFO(width=ADDRESS_WIDTH, depth=self._outstanding)
        # beats waiting for W, and the closed bursts (for AW, and their lengths for W)
        m.submodules.beats = beats = SyncFIFO(width=width + data_bytes, depth=2 * WRITE_BURST_BEATS)
        burst_layout = data.StructLayout({"address": ADDRESS_WIDTH, "first": ADDRESS_WIDTH, "beats": 8})
        m.submodules.bursts = bursts = SyncFIFO(width=burst_layout.size, depth=4)
        m.submodules.lengths = lengths = SyncFIFO(width=8, depth=4)

        # holding beat (bytes not strobed are kept zero). Its payload registers, and the others below
        # read only under a flag of their own (the open burst's, the previous piece's and beat's), are
        # reset-less: the aggregator's reset reaches the flags only (into every one of them it was an
        # 8.2 ns net on the ECP5 proxy)
        hold_valid = Signal()
        hold_flush, hold_high = Signal(reset_less=True), Signal(reset_less=True)
        hold_address = Signal(ADDRESS_WIDTH, reset_less=True)
        hold_data = Signal(width, reset_less=True)
        hold_strobe = Signal(data_bytes, reset_less=True)

        # a merged beat waits in ``merged`` (two entries: its ready is a register, so the piece's
        # handshake does not run through the burst logic below; a ping-pong buffer, so taking a beat
        # moves a read pointer, copied per group of the beat's bits, and the burst decision reads the
        # beat through one multiplexer: behind a FIFO's read address it was an 8.8 ns path on the ECP5
        # proxy, into the FIFO's level); from there it joins the open burst if
        # it is the next beat of it in the same 4 KiB page (``follows``, a bit worked out as it was
        # merged), else the open burst is closed first; a burst is also closed at WRITE_BURST_BEATS
        # beats and on a cycle without a beat
        beat_layout = data.StructLayout({"address": ADDRESS_WIDTH, "data": width, "strobe": data_bytes,
                                         "first_byte": range(data_bytes), "follows": 1})
        m.submodules.merged = merged = PingPongBuffer(beat_layout)
        want = Signal()
        emit_address = Signal(ADDRESS_WIDTH)
        emit_data = Signal(width)
        emit_strobe = Signal(data_bytes)
        first_byte = Signal(range(data_bytes))   # a burst is named by its first strobed byte
        for i in reversed(range(data_bytes)):
            with m.If(emit_strobe[i]):
                m.d.comb += first_byte.eq(i)
        can_emit = merged.i.ready
        # whether a beat follows the beat merged before it in the same 4 KiB page (a run's next
        # address is its last joined beat's + a beat, and beats join in the order they are merged):
        # worked out as the beat goes in, so the burst logic reads one bit of the buffer, not an
        # address compare. Each candidate (the holding beat, the piece's beat) is compared from
        # registers in ``emit`` and the result picked with the address, so no compare sits behind
        # the piece's handshake
        emitted_next = Signal(ADDRESS_WIDTH, reset_less=True)   # the last merged beat's address + data_bytes
        # (read only for a beat that may join an open burst: the burst's first beat set it)
        follows = Signal()
        emit_next = Signal(ADDRESS_WIDTH)      # the merged beat's address + data_bytes
        m.d.comb += [merged.i.payload.eq(Cat(emit_address, emit_data, emit_strobe, first_byte, follows)),
                     merged.i.valid.eq(want)]
        with m.If(want & can_emit):
            m.d.sync += emitted_next.eq(emit_next)

        beat = merged.o.payload
        run_open = Signal()
        run = Signal(burst_layout, reset_less=True)     # (read while ``run_open``)
        continues = Signal()
        m.d.comb += continues.eq(run_open & beat.follows & (run.beats < WRITE_BURST_BEATS))
        closing = Signal()
        m.d.comb += closing.eq(run_open & (~merged.o.valid | ~continues))
        joined = merged.o.valid & beats.w_rdy & (~closing | (bursts.w_rdy & lengths.w_rdy))
        m.d.comb += [beats.w_data.eq(Cat(beat.data, beat.strobe)), beats.w_en.eq(joined), merged.o.ready.eq(joined),
                     bursts.w_data.eq(run), lengths.w_data.eq(run.beats - 1)]
        with m.If(closing & bursts.w_rdy & lengths.w_rdy):
            m.d.comb += [bursts.w_en.eq(1), lengths.w_en.eq(1)]
            m.d.sync += run_open.eq(0)
        with m.If(joined):
            with m.If(continues):
                m.d.sync += run.beats.eq(run.beats + 1)
            with m.Else():
                m.d.sync += [run_open.eq(1), run.address.eq(beat.address),
                             run.first.eq(beat.address | beat.first_byte), run.beats.eq(1)]

        def emit(address, strobe, is_emitted_next):
            m.d.comb += [want.eq(1), emit_address.eq(address), emit_strobe.eq(strobe),
                         follows.eq(is_emitted_next & (address[:12] != 0)),
                         emit_next.eq(address + data_bytes)]

        # AW: the closed bursts; W: their beats, once closed (wlast from the length)
        head = Signal(burst_layout)
        sent = Signal(8)
        m.d.comb += [
            head.eq(bursts.r_data),
            bus.awaddr.eq(head.address), bus.awlen.eq(head.beats - 1), bus.awsize.eq(size_log2),
            bus.awburst.eq(BURST_INCR),
            bus.awvalid.eq(bursts.r_rdy & in_flight.w_rdy),
            bursts.r_en.eq(bus.awvalid & bus.awready),
            in_flight.w_data.eq(head.first),
            in_flight.w_en.eq(bus.awvalid & bus.awready),
            bus.wdata.eq(beats.r_data[:width]), bus.wstrb.eq(beats.r_data[width:]),
            bus.wlast.eq(sent == lengths.r_data),
            bus.wvalid.eq(beats.r_rdy & lengths.r_rdy),
            beats.r_en.eq(bus.wvalid & bus.wready),
            lengths.r_en.eq(bus.wvalid & bus.wready & bus.wlast),
        ]
        with m.If(bus.wvalid & bus.wready):
            m.d.sync += sent.eq(Mux(bus.wlast, 0, sent + 1))

        # ---- the input stage: a two-entry buffer (ready and payload from flip-flops) that works out,
        # as a piece enters, what the merge decision needs of it: whether its beat is the beat of the
        # piece before it (``same_low``) or the one after (``same_high``: where the piece before it
        # spilled), whether it reaches its beat's last byte (``fills``) and beyond (``spills``). The
        # holding beat is always the piece before's beat or its spill, so the decision reads bits,
        # not a 58-bit address compare and a byte-count sum
        # (and the piece's byte mask over its two beats, worked out as it enters: a shift of the
        # byte count by the place in front of the merged beat's strobes and first-byte encoder was
        # a 7-level path into the merged-beat FIFO, 10.1 ns on the ECP5 proxy)
        staged_layout = data.StructLayout({"piece": piece_layout(width), "same_low": 1, "same_high": 1,
                                           "fills": 1, "spills": 1, "mask": 2 * data_bytes})
        m.submodules.stage = stage = StreamBuffer(staged_layout)
        incoming = self.piece.payload
        incoming_beat = incoming.address[size_log2:]
        incoming_end = incoming.address[:size_log2] + incoming.nbytes   # one past its last byte
        # (read for a piece that may merge into the holding beat: the piece before it set them)
        previous_beat = Signal(ADDRESS_WIDTH - size_log2, reset_less=True)
        previous_next = Signal(ADDRESS_WIDTH - size_log2, reset_less=True)   # previous_beat + 1
        m.d.comb += [stage.i.valid.eq(self.piece.valid), self.piece.ready.eq(stage.i.ready),
                     stage.i.payload.piece.eq(incoming),
                     stage.i.payload.same_low.eq(incoming_beat == previous_beat),
                     stage.i.payload.same_high.eq(incoming_beat == previous_next),
                     stage.i.payload.fills.eq(incoming_end >= data_bytes),
                     stage.i.payload.spills.eq(incoming_end > data_bytes),
                     stage.i.payload.mask.eq(((Const(1, 2 * data_bytes + 1) << incoming.nbytes) - 1)[:2 * data_bytes]
                                             << incoming.address[:size_log2])]
        with m.If(self.piece.valid & self.piece.ready):
            m.d.sync += [previous_beat.eq(incoming_beat), previous_next.eq(incoming_beat + 1)]
        staged = stage.o.payload

        # the incoming piece, placed: low beat at its aligned address, high beat the next one
        piece = staged.piece
        place = piece.address[:size_log2]
        beat_address = Signal(ADDRESS_WIDTH)
        placed = Signal(2 * width)
        mask = staged.mask
        m.d.comb += [
            beat_address.eq(piece.address & ~(data_bytes - 1)),
            placed.eq(piece.data << Cat(Const(0, 3), place)),
        ]
        low_strobe = mask[:data_bytes]
        high_strobe = mask[data_bytes:]
        bytes_mask = Cat(*(low_strobe[i].replicate(8) for i in range(data_bytes)))
        # (``hold_high``: the holding beat is the spill of the piece before, else that piece's beat)
        same = hold_valid & Mux(hold_high, staged.same_high, staged.same_low)
        hold_first = hold_valid & (hold_flush | (stage.o.valid & ~same))
        # The data's two selects (whether the piece merges into the holding beat, and whether the
        # holding beat goes first) reach every data bit: each is a LUT4 instance per group of
        # SELECT_GROUP bits on the proxy (register_copies.lut_copies), so neither decision drives
        # some three hundred multiplexers as one net (the stage's valid -> that net -> the merged
        # beat buffer's slots was 8.3 ns at two levels on the whole kernel's ECP5 proxy)
        # (each copy of ``same`` is one LUT of the four flip-flops it reads, and each of ``hold_first``
        # one LUT behind the pick of the two compares: with the pick in front of the copies,
        # ``hold_high`` -> the merged beat buffer's slots was four levels and 11.4-11.8 ns on
        # ``default``'s ECP5 proxy)
        groups = range(0, width, SELECT_GROUP)
        same_copies = lut_copies(m, platform, "same", lambda valid, high, same_high, same_low:
                                 valid & ((high & same_high) | (~high & same_low)),
                                 [hold_valid, hold_high, staged.same_high, staged.same_low], len(groups))
        other_beat = Signal()   # the staged piece is not for the holding beat's (given one held)
        m.d.comb += other_beat.eq(~Mux(hold_high, staged.same_high, staged.same_low))
        first_copies = lut_copies(m, platform, "hold_first", lambda valid, flush, staged_valid, other:
                                  valid & (flush | (staged_valid & other)),
                                  [hold_valid, hold_flush, stage.o.valid, other_beat], len(groups))
        merged_data = Cat(Mux(same_g, hold_data[start:start + SELECT_GROUP], 0)
                          | (placed[start:min(start + SELECT_GROUP, width)] & bytes_mask[start:start + SELECT_GROUP])
                          for same_g, start in zip(same_copies, groups, strict=True))
        merged_strobe = Mux(same, hold_strobe, 0) | low_strobe
        m.d.comb += emit_data.eq(Cat(Mux(first_g, hold_data[start:start + SELECT_GROUP],
                                         merged_data[start:start + SELECT_GROUP])
                                     for first_g, start in zip(first_copies, groups, strict=True)))
        high_mask = Cat(*(high_strobe[i].replicate(8) for i in range(data_bytes)))
        fills = staged.fills

        # each candidate's equality with the last merged beat's next address is a carry chain
        # (``carry_equal``; as a LUT tree, three levels, ``emitted_next`` -> ``follows`` -> the merged
        # beat buffer's slots was four levels and 8.7-8.9 ns on ``small``'s ECP5 proxy)
        hold_follows = carry_equal(m, platform, "hold_follows", hold_address, emitted_next)
        beat_follows = carry_equal(m, platform, "beat_follows", beat_address, emitted_next)
        with m.If(hold_first):
            # the holding beat goes first (a flush, or the next piece belongs elsewhere)
            emit(hold_address, hold_strobe, hold_follows)
            with m.If(can_emit):
                m.d.sync += hold_valid.eq(0)
        with m.Elif(stage.o.valid):
            with m.If(fills | piece.flush):
                emit(beat_address, merged_strobe, beat_follows)
                m.d.comb += stage.o.ready.eq(can_emit)
                with m.If(can_emit):
                    m.d.sync += [hold_valid.eq(staged.spills), hold_flush.eq(piece.flush), hold_high.eq(1),
                                 hold_address.eq(beat_address + data_bytes),
                                 hold_data.eq(placed[width:] & high_mask), hold_strobe.eq(high_strobe)]
            with m.Else():
                m.d.comb += stage.o.ready.eq(1)
                m.d.sync += [hold_valid.eq(1), hold_flush.eq(0), hold_high.eq(0), hold_address.eq(beat_address),
                             hold_data.eq(merged_data), hold_strobe.eq(merged_strobe)]
        with m.If(self.discard):
            m.d.sync += hold_valid.eq(0)

        m.d.comb += [
            bus.bready.eq(in_flight.r_rdy),
            in_flight.r_en.eq(bus.bvalid & bus.bready),
            self.idle.eq(stage.idle & ~in_flight.r_rdy & ~hold_valid & ~merged.o.valid & ~run_open & ~bursts.r_rdy
                         & ~beats.r_rdy),
        ]
        with m.If(bus.bvalid & bus.bready & (bus.bresp != RESP_OKAY) & ~self.error):
            m.d.sync += [self.error.eq(1), self.error_address.eq(in_flight.r_data)]
        return m
