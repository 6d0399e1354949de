"""A pipelined AXI4 read engine: one naturally aligned 64-bit word per request, many in flight."""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import ADDRESS_WIDTH, BURST_INCR, RESP_OKAY, AxiReadSignature, check_data_width
from .free_slot_fifo import FreeSlotFIFO
from .stream_buffer import StreamBuffer

__all__ = ["ReadStream", "StreamWord"]

#: A word read back: its 64 bits, the byte address asked for, and whether the slave answered an error.
StreamWord = data.StructLayout({"data": 64, "address": ADDRESS_WIDTH, "error": 1})


class ReadStream(wiring.Component):
    """Issues one single-beat read per request, up to ``outstanding`` in flight; answers in order.

    AXI4 returns the data of one ID in order, so a FIFO of the requested addresses (depth
    ``outstanding``) tells which 64-bit lane of each returning beat is the word asked for, and gives
    the failing address of an error response. With the slave ready, a request is issued every cycle.

    Parameters
    ----------
    data_width : int
        AXI data width in bits (64..512).
    outstanding : int
        Reads in flight at most (KernelConfig.outstanding_reads).
    answer_register : bool
        Register the R channel (a :class:`StreamBuffer` of RDATA and RRESP, an AXI register slice:
        RREADY is a flip-flop): an answer leaves a cycle later, its word selected from flip-flops
        that the placer may put beside the requester, not at the bus's far end.

    Members
    -------
    request : ``In(stream.Signature(64))``
        Byte address of a naturally aligned field of at most 8 bytes.
    response : ``Out(stream.Signature(StreamWord))``
        The enclosing aligned 64-bit word, in request order.
    beat : ``Out(data_width)``
        The whole beat the word was taken from (valid with ``response``): the neighbouring fields
        of the same beat, for a consumer that takes several from one read.
    bus : ``Out(AxiReadSignature(data_width))``
    idle : ``Out(1)``
        No read in flight.
    """

    def __init__(self, data_width: int, outstanding: int, *, answer_register: bool = False):
        self._data_width = check_data_width(data_width)
        if not isinstance(outstanding, int) or not 1 <= outstanding <= 256:
            raise ValueError(f"Outstanding reads must be an integer in 1..256, not {outstanding!r}")
        self._outstanding = outstanding
        self._answer_register = answer_register
        super().__init__({
            "request": In(stream.Signature(ADDRESS_WIDTH)),
            "response": Out(stream.Signature(StreamWord)),
            "beat": Out(data_width),
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
        bus = self.bus
        # (its ready flags are flip-flops: the FIFO's level compare sat in front of every answer's
        # valid, e.g. 9.6 ns from the memory reader into the sequencer's descriptor words on the proxy)
        # The addresses wait rotated by three bits, their word index in the low bits, which the FIFO
        # keeps in flip-flops too: the word select starts at a register, not at the LUT-RAM's read
        # (the ``default`` build's worst path on the ECP5 proxy, 16.0 ns into the prefetcher, 8.3 ns
        # of it the read pointer to the RAM and its output to the beat's multiplexers)
        index_bits = size_log2 - 3
        m.submodules.in_flight = in_flight = FreeSlotFIFO(width=ADDRESS_WIDTH, depth=self.outstanding,
                                                          head_bits=index_bits)

        # The request is registered before ARVALID, in a skid buffer: the handshake with the producer
        # is atomic, ARADDR holds while ARVALID is high whatever the producer does next, and the
        # producer's ready is a flip-flop (a lane's position samplers took their ready from the
        # address handshake and the in-flight FIFO's room through the engine: 9.0-9.4 ns on the
        # ECP5 proxy, at full throughput either way)
        m.submodules.requests = requests = StreamBuffer(ADDRESS_WIDTH)
        address_fire = Signal()
        wiring.connect(m, wiring.flipped(self.request), requests.i)
        m.d.comb += [
            bus.araddr.eq(requests.o.payload & ~(data_bytes - 1)),
            bus.arlen.eq(0),
            bus.arsize.eq(size_log2),
            bus.arburst.eq(BURST_INCR),
            bus.arvalid.eq(requests.o.valid & in_flight.w_rdy),
            address_fire.eq(bus.arvalid & bus.arready),
            requests.o.ready.eq(address_fire),
            in_flight.w_data.eq(requests.o.payload.rotate_right(3)),
            in_flight.w_en.eq(address_fire),
        ]
        if self._answer_register:
            beats = StreamBuffer(data.StructLayout({"data": self.data_width, "resp": len(bus.rresp)}))
            m.submodules.answer_register = beats
            m.d.comb += [beats.i.valid.eq(bus.rvalid), beats.i.payload.data.eq(bus.rdata),
                         beats.i.payload.resp.eq(bus.rresp), bus.rready.eq(beats.i.ready)]
            r_valid, r_data, r_resp, r_ready = beats.o.valid, beats.o.payload.data, beats.o.payload.resp, beats.o.ready
        else:
            r_valid, r_data, r_resp, r_ready = bus.rvalid, bus.rdata, bus.rresp, bus.rready
        address = in_flight.r_data.rotate_left(3)
        word = r_data.word_select(in_flight.r_head, 64) if index_bits else r_data
        m.d.comb += [
            self.response.valid.eq(r_valid & in_flight.r_rdy),
            self.response.payload.data.eq(word),
            self.beat.eq(r_data),
            self.response.payload.address.eq(address),
            self.response.payload.error.eq(r_resp != RESP_OKAY),
            r_ready.eq(self.response.ready & in_flight.r_rdy),
            in_flight.r_en.eq(r_valid & r_ready),
            self.idle.eq(~in_flight.r_rdy & requests.idle),
        ]
        return m
