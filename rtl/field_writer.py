"""A pipelined AXI4 writer of 32/64-bit fields: one single-beat strobed write per field, many in flight."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .axi import ADDRESS_WIDTH, BURST_INCR, RESP_OKAY, AxiWriteSignature, check_data_width

__all__ = ["FieldWriter", "WriteWord"]

#: A field to write: byte address (naturally aligned), value, and 8 bytes (wide) or 4.
WriteWord = data.StructLayout({"address": ADDRESS_WIDTH, "data": 64, "wide": 1})


class FieldWriter(wiring.Component):
    """Writes naturally aligned u32/u64 fields without waiting for each write response.

    AW and W of a field are presented together; a field is taken when both were accepted. Write
    responses are counted back against a FIFO of the addresses in flight (depth ``outstanding``):
    the first error response latches ``error`` and its address. Only the field's bytes are strobed,
    so nothing outside the output buffers is ever written.

    Parameters
    ----------
    data_width : int
        AXI data width in bits (64..512).
    outstanding : int
        Writes in flight at most.

    Members
    -------
    request : ``In(stream.Signature(WriteWord))``
    bus : ``Out(AxiWriteSignature(data_width))``
    idle : ``Out(1)``
        Every write taken so far has been answered.
    error : ``Out(1)``
        Some write was answered SLVERR/DECERR (sticky until ``clear``).
    error_address : ``Out(64)``
        Address of the first such write.
    clear : ``In(1)``
        Clears ``error`` (a new command).
    """

    def __init__(self, data_width: int, outstanding: int):
        self._data_width = check_data_width(data_width)
        if not isinstance(outstanding, int) or not 1 <= outstanding <= 256:
            raise ValueError(f"Outstanding writes must be an integer in 1..256, not {outstanding!r}")
        self._outstanding = outstanding
        super().__init__({
            "request": In(stream.Signature(WriteWord)),
            "bus": Out(AxiWriteSignature(data_width)),
            "idle": Out(1),
            "error": Out(1),
            "error_address": Out(ADDRESS_WIDTH),
            "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        data_bytes = self._data_width // 8
        size_log2 = data_bytes.bit_length() - 1
        bus = self.bus
        m.submodules.in_flight = in_flight = SyncFIFO(width=ADDRESS_WIDTH, depth=self._outstanding)

        # One field is held in a register while its AW and W are presented: the request handshake
        # is atomic, whatever the bus does (a producer may stop offering at any time).
        field = Signal(WriteWord)
        pending = Signal()
        address_done = Signal()
        data_done = Signal()
        address_fire = bus.awvalid & bus.awready
        data_fire = bus.wvalid & bus.wready
        taken = Signal()
        lane_value = Mux(field.wide, field.data, Cat(field.data[:32], field.data[:32]))
        strobe = Mux(field.wide, 0xFF, 0x0F)
        m.d.comb += [
            bus.awaddr.eq(field.address & ~(data_bytes - 1)),
            bus.awlen.eq(0),
            bus.awsize.eq(size_log2),
            bus.awburst.eq(BURST_INCR),
            bus.wdata.eq(lane_value.replicate(data_bytes // 8)),
            bus.wstrb.eq(strobe << field.address[:size_log2]),
            bus.wlast.eq(1),
            bus.awvalid.eq(pending & in_flight.w_rdy & ~address_done),
            bus.wvalid.eq(pending & in_flight.w_rdy & ~data_done),
            taken.eq(pending & in_flight.w_rdy & (address_done | address_fire) & (data_done | data_fire)),
            self.request.ready.eq(~pending | taken),
            in_flight.w_data.eq(field.address),
            in_flight.w_en.eq(taken),
        ]
        with m.If(self.request.valid & self.request.ready):
            m.d.sync += [field.eq(self.request.payload), pending.eq(1), address_done.eq(0), data_done.eq(0)]
        with m.Elif(taken):
            m.d.sync += [pending.eq(0), address_done.eq(0), data_done.eq(0)]
        with m.Else():
            with m.If(address_fire):
                m.d.sync += address_done.eq(1)
            with m.If(data_fire):
                m.d.sync += data_done.eq(1)

        m.d.comb += [
            bus.bready.eq(in_flight.r_rdy),
            in_flight.r_en.eq(bus.bvalid & bus.bready),
            self.idle.eq(~in_flight.r_rdy & ~pending),
        ]
        with m.If(bus.bvalid & bus.bready & (bus.bresp != RESP_OKAY) & ~self.error):
            m.d.sync += [self.error.eq(1), self.error_address.eq(in_flight.r_data)]
        with m.If(self.clear):
            m.d.sync += self.error.eq(0)
        return m
