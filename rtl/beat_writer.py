"""A beat-wide AXI4 writer: byte pieces at any address merged into strobed full-width beats."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .axi import ADDRESS_WIDTH, BURST_INCR, RESP_OKAY, AxiWriteSignature, check_data_width

__all__ = ["BeatWriter", "piece_layout"]


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

    A piece is shifted to its place in the beat(s) it covers and merged into a holding beat; a beat
    is written when a piece fills it up to its last byte, when the next piece belongs to another
    beat, or when a piece with ``flush`` ends there. Only the pieces' bytes are strobed, so nothing
    outside them is written. One piece per cycle; beats go out as single-beat writes (AW and W
    together), up to ``outstanding`` in flight; the first error response latches ``error`` and its
    beat's first strobed byte's address.

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

        # holding beat (bytes not strobed are kept zero) and the beat being written
        hold_valid, hold_flush = Signal(), Signal()
        hold_address = Signal(ADDRESS_WIDTH)
        hold_data = Signal(width)
        hold_strobe = Signal(data_bytes)
        out_valid, address_done, data_done = Signal(), Signal(), Signal()
        out_address = Signal(ADDRESS_WIDTH)
        out_data = Signal(width)
        out_strobe = Signal(data_bytes)

        # a write is named by its first strobed byte
        first_byte = Signal(range(data_bytes))
        for i in reversed(range(data_bytes)):
            with m.If(out_strobe[i]):
                m.d.comb += first_byte.eq(i)
        taken = Signal()
        m.d.comb += [
            bus.awaddr.eq(out_address), bus.awlen.eq(0), bus.awsize.eq(size_log2), bus.awburst.eq(BURST_INCR),
            bus.wdata.eq(out_data), bus.wstrb.eq(out_strobe), bus.wlast.eq(1),
            bus.awvalid.eq(out_valid & in_flight.w_rdy & ~address_done),
            bus.wvalid.eq(out_valid & in_flight.w_rdy & ~data_done),
            taken.eq(out_valid & in_flight.w_rdy & (address_done | (bus.awvalid & bus.awready))
                     & (data_done | (bus.wvalid & bus.wready))),
            in_flight.w_data.eq(out_address | first_byte),
            in_flight.w_en.eq(taken),
        ]
        with m.If(taken):
            m.d.sync += [out_valid.eq(0), address_done.eq(0), data_done.eq(0)]
        with m.Else():
            with m.If(bus.awvalid & bus.awready):
                m.d.sync += address_done.eq(1)
            with m.If(bus.wvalid & bus.wready):
                m.d.sync += data_done.eq(1)
        can_emit = ~out_valid | taken

        def emit(address, value, strobe):
            m.d.sync += [out_valid.eq(1), out_address.eq(address), out_data.eq(value), out_strobe.eq(strobe)]

        # the incoming piece, placed: low beat at its aligned address, high beat the next one
        piece = self.piece.payload
        place = piece.address[:size_log2]
        beat_address = Signal(ADDRESS_WIDTH)
        placed = Signal(2 * width)
        mask = Signal(2 * data_bytes)
        m.d.comb += [
            beat_address.eq(piece.address & ~(data_bytes - 1)),
            placed.eq(piece.data << Cat(Const(0, 3), place)),
            mask.eq(((Const(1, 2 * data_bytes + 1) << piece.nbytes) - 1)[:2 * data_bytes] << place),
        ]
        low_strobe = mask[:data_bytes]
        high_strobe = mask[data_bytes:]
        bytes_mask = Cat(*(low_strobe[i].replicate(8) for i in range(data_bytes)))
        same = hold_valid & (hold_address == beat_address)
        merged_data = Mux(same, hold_data, 0) | (placed[:width] & bytes_mask)
        merged_strobe = Mux(same, hold_strobe, 0) | low_strobe
        high_mask = Cat(*(high_strobe[i].replicate(8) for i in range(data_bytes)))
        fills = high_strobe.any() | mask[data_bytes - 1]

        with m.If(hold_valid & (hold_flush | (self.piece.valid & ~same))):
            # the holding beat goes first (a flush, or the next piece belongs elsewhere)
            with m.If(can_emit):
                emit(hold_address, hold_data, hold_strobe)
                m.d.sync += hold_valid.eq(0)
        with m.Elif(self.piece.valid):
            with m.If(fills | piece.flush):
                m.d.comb += self.piece.ready.eq(can_emit)
                with m.If(can_emit):
                    emit(beat_address, merged_data, merged_strobe)
                    m.d.sync += [hold_valid.eq(high_strobe.any()), hold_flush.eq(piece.flush),
                                 hold_address.eq(beat_address + data_bytes),
                                 hold_data.eq(placed[width:] & high_mask), hold_strobe.eq(high_strobe)]
            with m.Else():
                m.d.comb += self.piece.ready.eq(1)
                m.d.sync += [hold_valid.eq(1), hold_flush.eq(0), hold_address.eq(beat_address),
                             hold_data.eq(merged_data), hold_strobe.eq(merged_strobe)]
        with m.If(self.discard):
            m.d.sync += hold_valid.eq(0)

        m.d.comb += [
            bus.bready.eq(in_flight.r_rdy),
            in_flight.r_en.eq(bus.bvalid & bus.bready),
            self.idle.eq(~in_flight.r_rdy & ~out_valid & ~hold_valid),
        ]
        with m.If(bus.bvalid & bus.bready & (bus.bresp != RESP_OKAY) & ~self.error):
            m.d.sync += [self.error.eq(1), self.error_address.eq(in_flight.r_data)]
        return m
