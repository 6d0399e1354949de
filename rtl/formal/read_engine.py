"""Harness of the single-beat read engine (:class:`~smartsage.rtl.read_stream.ReadStream`).

ARVALID held until ARREADY with a stable address and burst, single naturally aligned beats, never
more reads outstanding than configured, and the response stream obeys the stream rules when the
slave obeys AXI. The outstanding bound is inductive with the invariants "the harness's count of reads
in flight equals the level of the block's in-flight FIFO" and "that FIFO's ready flags (flip-flops)
agree with its level"; the response payload comes from that
FIFO's memory, so its stability is a bounded check.
"""

from __future__ import annotations

from amaranth.hdl import Assert, Assume, Signal

from ..read_stream import ReadStream
from .common import Harness, Observed, fifo_invariants, history

__all__ = ["ReadEngineHarness", "ObservedReadStream", "BROKEN_READ_ENGINE"]


class ObservedReadStream(Observed, ReadStream):
    pass


class _ReadStreamNoBackpressure(Observed, ReadStream):
    """Broken: issues reads whether or not the in-flight FIFO has room (too many outstanding)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        pending = Signal(name="broken_pending")
        # re-derive the block's "a request is pending" from its port behaviour: ARVALID was masked by
        # FIFO room; unmask it by offering whenever a request was taken and not yet issued
        m.d.comb += self.bus.arvalid.eq(pending)
        with m.If(self.request.valid & self.request.ready):
            m.d.sync += pending.eq(1)
        with m.Elif(self.bus.arvalid & self.bus.arready):
            m.d.sync += pending.eq(0)
        m.d.comb += self.request.ready.eq(~pending | (self.bus.arvalid & self.bus.arready))
        return m


class _ReadStreamAddressUnstable(Observed, ReadStream):
    """Broken: ARADDR follows the producer's payload while ARVALID waits."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.comb += self.bus.araddr.eq(self.request.payload & ~(self.data_width // 8 - 1))
        return m


class ReadEngineHarness(Harness):
    def elaborate(self, platform):
        m, steps, dut = self.frame_with_bus(platform)
        bus = dut.bus
        data_bytes = dut.data_width // 8
        m.d.comb += [dut.request.valid.eq(self.free(1, "req_valid")),
                     dut.request.payload.eq(self.free(64, "req_address")),
                     dut.response.ready.eq(self.free(1, "resp_ready"))]

        ar_fire = bus.arvalid & bus.arready
        r_fire = bus.rvalid & bus.rready
        in_flight = Signal(range(dut.outstanding + 2))
        m.d.sync += in_flight.eq(in_flight + ar_fire - r_fire)
        # A legal AXI slave: data only for a read asked for, RVALID held with stable data.
        p = {n: history(m, v, 1, n)[0] for n, v in (
            ("arvalid", bus.arvalid), ("arready", bus.arready), ("araddr", bus.araddr), ("arlen", bus.arlen),
            ("arsize", bus.arsize), ("arburst", bus.arburst), ("rvalid", bus.rvalid), ("rready", bus.rready),
            ("rdata", bus.rdata), ("rresp", bus.rresp), ("resp_valid", dut.response.valid),
            ("resp_ready", dut.response.ready), ("resp_payload", dut.response.payload.as_value()))}
        m.d.comb += [Assume(~bus.rvalid | (in_flight != 0)), Assume(~bus.rvalid | bus.rlast)]
        with m.If(steps >= 1):
            m.d.comb += Assume(~(p["rvalid"] & ~p["rready"])
                               | (bus.rvalid & (bus.rdata == p["rdata"]) & (bus.rresp == p["rresp"])))
            # ARVALID held until ARREADY, with a stable address and burst
            m.d.comb += Assert(~(p["arvalid"] & ~p["arready"])
                               | (bus.arvalid & (bus.araddr == p["araddr"]) & (bus.arlen == p["arlen"])
                                  & (bus.arsize == p["arsize"]) & (bus.arburst == p["arburst"])))
        if not self.inductive_only:
            with m.If(steps >= 1):
                # the response stream: valid held until ready, payload stable (bounded: the payload's
                # address comes from the FIFO's memory)
                m.d.comb += Assert(~(p["resp_valid"] & ~p["resp_ready"])
                                   | (dut.response.valid & (dut.response.payload.as_value() == p["resp_payload"])))
        m.d.comb += [
            # single naturally aligned beats of the bus width
            Assert(~bus.arvalid | ((bus.arlen == 0) & (bus.arsize == data_bytes.bit_length() - 1)
                                   & (bus.araddr[:data_bytes.bit_length() - 1] == 0))),
            # never more outstanding than configured (in_flight counts after the handshake)
            Assert(in_flight <= dut.outstanding),
            # invariant that makes the bound inductive (the FIFO of addresses in flight)
            Assert(in_flight == dut.in_flight_fifo.level),
        ]
        fifo_invariants(m, dut)   # (its level within depth, its ready flags from its level)
        return m


#: Broken variants: name -> (class, the check it must fail).
BROKEN_READ_ENGINE = {"no_backpressure": (_ReadStreamNoBackpressure, "read_engine_bounded"),
                      "address_unstable": (_ReadStreamAddressUnstable, "read_engine")}
