"""An AXI4 burst read engine: (byte address, byte length) requests, the beats back in order."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import ADDRESS_WIDTH, BURST_INCR, RESP_OKAY, AxiReadSignature, check_data_width
from .free_slot_fifo import FreeSlotFIFO
from .stream_buffer import StreamBuffer

__all__ = ["BurstReader", "BurstRequest", "beat_layout", "PAGE_BYTES", "MAX_BURST_BEATS"]

#: AXI4: a burst never crosses a 4 KiB boundary.
PAGE_BYTES = 4096
#: AXI4 INCR bursts are at most 256 beats long.
MAX_BURST_BEATS = 256
#: Bytes of one request at most (a request is split into as many bursts as it needs).
LENGTH_WIDTH = 32

#: A read request: the first byte and the number of bytes (>= 1); any alignment.
BurstRequest = data.StructLayout({"address": ADDRESS_WIDTH, "length": LENGTH_WIDTH})


def beat_layout(data_width: int) -> data.StructLayout:
    """One beat of an answer: the data, the beat's (aligned) address, whether the slave answered an
    error, whether it is the request's last beat, and the request's start offset in its first beat
    and length (the same on every beat of a request)."""
    check_data_width(data_width)
    return data.StructLayout({
        "data": data_width, "address": ADDRESS_WIDTH, "error": 1, "last": 1,
        "offset": (data_width // 8 - 1).bit_length(), "length": LENGTH_WIDTH,
    })


class BurstReader(wiring.Component):
    """Splits byte-range requests into AXI4 INCR bursts, many in flight, and streams the beats back.

    A request covers the beats from the one holding ``address`` to the one holding
    ``address + length - 1``; it is split at every 4 KiB boundary and after 256 beats. A request
    waits a cycle in a two-entry buffer (its last byte's block worked out on the way in; its ready is
    the buffer's room, a flip-flop). One burst is issued per cycle while the slave is ready and fewer
    than ``outstanding`` bursts are in flight.
    A FIFO of the bursts in flight (AXI4 answers one ID in order) labels every returning beat with
    its address, the request's offset and length, and ``last`` on the request's final beat; an
    error response is passed on with its beat (``error``), the request continues to its end.

    Parameters
    ----------
    data_width : int
        AXI data width in bits (64..512).
    outstanding : int
        Bursts in flight at most (KernelConfig.outstanding_reads).

    Members
    -------
    request : ``In(stream.Signature(BurstRequest))``
    response : ``Out(stream.Signature(beat_layout(data_width)))``
    bus : ``Out(AxiReadSignature(data_width))``
    idle : ``Out(1)``
        No request being split and no burst in flight.
    """

    def __init__(self, data_width: int, outstanding: int):
        self._data_width = check_data_width(data_width)
        if not isinstance(outstanding, int) or not 1 <= outstanding <= 256:
            raise ValueError(f"Outstanding reads must be an integer in 1..256, not {outstanding!r}")
        self._outstanding = outstanding
        super().__init__({
            "request": In(stream.Signature(BurstRequest)),
            "response": Out(stream.Signature(beat_layout(data_width))),
            "bus": Out(AxiReadSignature(data_width)),
            "idle": Out(1),
        })

    @property
    def data_width(self) -> int:
        return self._data_width

    @property
    def outstanding(self) -> int:
        return self._outstanding

    def elaborate(self, platform):
        m = Module()
        data_bytes = self.data_width // 8
        size_log2 = data_bytes.bit_length() - 1
        offset_bits = max(size_log2, 1)
        burst_bytes = min(PAGE_BYTES, MAX_BURST_BEATS * data_bytes)   # a power of two
        bus = self.bus
        meta = data.StructLayout({"final_beat": 8, "last": 1, "address": ADDRESS_WIDTH, "offset": offset_bits,
                                  "length": LENGTH_WIDTH})
        self._in_flight_layout = meta   # (for the formal checks' broken variants, which read its fields by name)
        # (written at its free slot in every cycle, its ready flags flip-flops: the FIFO's level
        # compare -> ARVALID -> the cursor's and the burst registers' enables was 9.4 ns on the ECP5
        # proxy)
        m.submodules.in_flight = in_flight = FreeSlotFIFO(width=meta.size, depth=self.outstanding, next_flag=True)

        burst_log2 = burst_bytes.bit_length() - 1
        # the request being split: the next byte to read, the number of burst-sized blocks after
        # the cursor's that it still reaches, and its last byte's place within its block
        active = Signal()
        cursor = Signal(ADDRESS_WIDTH)
        blocks_left = Signal(LENGTH_WIDTH + 1 - burst_log2)
        ends_here = Signal()            # blocks_left == 0, a flip-flop
        last_in_block = Signal(burst_log2)
        offset = Signal(offset_bits)
        length = Signal(LENGTH_WIDTH)

        # the burst from cursor: to the request's last byte, the block's end (the 4 KiB boundary
        # or 256 beats, whichever first). Whether the request ends in this burst is a register
        # (counted down as the blocks go; a 52-bit equality of the cursor's and the last byte's
        # block numbers in front of the cursor's enable was 10.1 ns on the ECP5 proxy), and the beat
        # count a difference of low bits (no carry chain runs through the request handshake)
        beat_address = Signal(ADDRESS_WIDTH)
        boundary = Signal(ADDRESS_WIDTH)
        final_beat = Signal(8)          # the burst's beats less one (ARLEN)
        first_beat = cursor[size_log2:burst_log2]
        m.d.comb += [
            beat_address.eq(cursor & ~(data_bytes - 1)),
            boundary.eq(Cat(Const(0, burst_log2), cursor[burst_log2:] + 1)),
            final_beat.eq(Mux(ends_here, last_in_block[size_log2:] - first_beat,
                              (burst_bytes >> size_log2) - 1 - first_beat)),
        ]
        # the burst is presented from registers, so ARADDR/ARLEN hold while ARVALID waits
        presented = Signal()
        fire = Signal()
        entry = Signal(meta)
        m.d.comb += [
            bus.arsize.eq(size_log2),
            bus.arburst.eq(BURST_INCR),
            bus.arvalid.eq(presented & in_flight.w_rdy),
            fire.eq(bus.arvalid & bus.arready),
            in_flight.w_data.eq(entry),
            in_flight.w_en.eq(fire),
        ]
        araddr = Signal(ADDRESS_WIDTH)
        arlen = Signal(8)
        m.d.comb += [bus.araddr.eq(araddr), bus.arlen.eq(arlen)]
        can_present = ~presented | fire
        with m.If(fire):
            m.d.sync += presented.eq(0)
        with m.If(active & can_present):
            m.d.sync += [presented.eq(1), araddr.eq(beat_address), arlen.eq(final_beat),
                         entry.final_beat.eq(final_beat), entry.last.eq(ends_here), entry.address.eq(beat_address),
                         entry.offset.eq(offset), entry.length.eq(length), cursor.eq(boundary)]
            with m.If(ends_here):
                m.d.sync += active.eq(0)
            with m.Else():
                m.d.sync += [blocks_left.eq(blocks_left - 1), ends_here.eq(blocks_left == 1)]
        # A request is planned on its way in: its last byte's block and place are worked out into a
        # two-entry buffer (``planned``), and the split starts from the buffer's head. The request's
        # ready is the buffer's room (a flip-flop), and the add (the last byte) and the zero test
        # (whether it ends in its first block) sit in separate cycles: in one, between the
        # aggregator's request buffer and ``ends_here``, they were 8.21 ns on ``small``'s ECP5
        # proxy, and the burst's handshake through the request's ready into that buffer's ~100
        # enables another 8.21. A request takes a cycle more to reach the split.
        plan = data.StructLayout({"address": ADDRESS_WIDTH, "length": LENGTH_WIDTH, "offset": offset_bits,
                                  "blocks": LENGTH_WIDTH + 1 - burst_log2, "last_in_block": burst_log2})
        m.submodules.planned = planned = StreamBuffer(plan)
        request = self.request.payload
        # the last byte, counted from the start of the first byte's block (length >= 1)
        last = request.address[:burst_log2] + request.length - 1
        m.d.comb += [
            planned.i.valid.eq(self.request.valid), self.request.ready.eq(planned.i.ready),
            planned.i.payload.address.eq(request.address), planned.i.payload.length.eq(request.length),
            planned.i.payload.offset.eq(request.address[:offset_bits]),
            planned.i.payload.blocks.eq(last[burst_log2:]), planned.i.payload.last_in_block.eq(last[:burst_log2]),
        ]
        next_request = planned.o.payload
        m.d.comb += planned.o.ready.eq(~active | (can_present & ends_here))
        with m.If(planned.o.valid & planned.o.ready):
            m.d.sync += [active.eq(1), cursor.eq(next_request.address),
                         blocks_left.eq(next_request.blocks), ends_here.eq(next_request.blocks == 0),
                         last_in_block.eq(next_request.last_in_block),
                         offset.eq(next_request.offset), length.eq(next_request.length)]

        # answers: the head burst labels its beats. "This beat is the burst's last" is a flip-flop
        # (``at_last``), worked out a cycle ahead: the head's ARLEN compared with the beat count
        # behind the FIFO's LUT-RAM read in front of its pop and level was 7.8 ns on the ECP5 proxy
        # (the aggregator alone). After a burst's last beat it is the next head's "one beat" flag
        # (the FIFO's ``next_flag``); while the FIFO is empty, that of the burst queued next.
        head = Signal(meta)
        beat = Signal(8)
        beat_next = Signal(8, init=1)     # beat + 1
        at_last = Signal()
        m.d.comb += head.eq(in_flight.r_data)
        answer = self.response.payload
        accept = Signal()
        pop = Signal()
        m.d.comb += [
            self.response.valid.eq(bus.rvalid & in_flight.r_rdy),
            answer.data.eq(bus.rdata),
            answer.address.eq(head.address + (beat << size_log2)),
            answer.error.eq(bus.rresp != RESP_OKAY),
            answer.last.eq(head.last & at_last),
            answer.offset.eq(head.offset),
            answer.length.eq(head.length),
            bus.rready.eq(self.response.ready & in_flight.r_rdy),
            accept.eq(bus.rvalid & bus.rready),
            pop.eq(accept & at_last),
            in_flight.r_en.eq(pop),
            self.idle.eq(planned.idle & ~active & ~presented & ~in_flight.r_rdy),
        ]
        entry_one_beat = entry.final_beat == 0   # the burst queued: ARLEN 0
        m.d.comb += in_flight.w_flag.eq(entry_one_beat)
        with m.If(pop):
            m.d.sync += at_last.eq(in_flight.next_flag)
        with m.Elif(accept):
            m.d.sync += at_last.eq(beat_next == head.final_beat)
        with m.Elif(~in_flight.r_rdy):
            m.d.sync += at_last.eq(entry_one_beat)   # the burst queued next is the head
        with m.If(accept):
            m.d.sync += [beat.eq(Mux(at_last, 0, beat_next)), beat_next.eq(Mux(at_last, 1, beat_next + 1))]
        return m
