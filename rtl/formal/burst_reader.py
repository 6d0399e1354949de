"""Harness of the burst read engine (:class:`~smartsage.rtl.burst_reader.BurstReader`).

Every input is a free port; requests are any (address, length >= 1) below ``FORMAL_ADDRESS_BITS``.
The slave is legal: it answers only bursts it accepted, in order, with exactly ARLEN + 1 beats and RLAST on the last,
RVALID held with its data until taken. Asserted on the ports:

- ARVALID held until ARREADY with ARADDR, ARLEN, ARSIZE, ARBURST stable; INCR bursts of full-width
  aligned beats, never crossing 4 KiB;
- the ARs tile the requests: each request's bursts start at its first beat, follow each other
  without gap or overlap and end at its last beat (so a burst of 256 beats at most: ARLEN is 8 bits);
- never more than ``outstanding`` bursts in flight, and ARVALID only while fewer are;
- the response stream: one beat per R beat, the data passed through, each beat labelled with the
  next beat address of the oldest unfinished request, ``last`` on exactly its final beat, its
  offset and length; valid held until ready with the payload stable.

The bus is 64 bits wide here, so 256 beats (2 KiB) is below the 4 KiB page and both splits are
exercised. The AR stability and the constant ARSIZE / ARBURST are proved by k-induction
(``burst_reader``); the rest depends on the block's registers and FIFO memory and is a bounded check
(``burst_reader_bounded``).
"""

from __future__ import annotations

from amaranth.hdl import Assert, Assume, Mux, Signal
from amaranth.lib import data

from .. import burst_reader
from ..axi import BURST_INCR
from ..burst_reader import BurstReader
from .common import (
    FORMAL_ADDRESS_BITS,
    FORMAL_OUTSTANDING,
    Harness,
    Observed,
    OneTooMany,
    Queue,
    fifo_invariants,
    past,
    patched,
)

__all__ = ["BurstReaderHarness", "BROKEN_BURST_READER", "FORMAL_READER_DATA_WIDTH"]

#: Bus width of the reader under proof (the 256-beat split is shorter than the 4 KiB one).
FORMAL_READER_DATA_WIDTH = 64


class _ObservedBurstReader(Observed, BurstReader):
    pass


class _ReaderLastEarly(_ObservedBurstReader):
    """Broken: ``last`` on every beat of a request's final burst."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        head = self._in_flight_layout(self.in_flight_fifo.r_data)
        m.d.comb += self.response.payload.last.eq(head.last)
        return m


class _ReaderAddressSkewed(_ObservedBurstReader):
    """Broken: ARADDR one beat past the burst's first beat (a burst ending at 4 KiB crosses it)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        # the burst's registered in-flight entry holds the same address as ARADDR's register
        entry = self._in_flight_layout(self.in_flight_fifo.w_data)
        m.d.comb += self.bus.araddr.eq(entry.address + self.data_width // 8)
        return m


class _ReaderLongBursts(_ObservedBurstReader):
    """Broken: built believing AXI allows 512-beat bursts (ARLEN wraps, the tiling breaks)."""

    def elaborate(self, platform):
        with patched(burst_reader, MAX_BURST_BEATS=512):
            return super().elaborate(platform)


class BurstReaderHarness(Harness):
    def elaborate(self, platform):
        m, steps, dut = self.frame_with_bus(platform)
        bus = dut.bus
        data_bytes = dut.data_width // 8
        size_log2 = data_bytes.bit_length() - 1
        outstanding = FORMAL_OUTSTANDING
        request, response = dut.request, dut.response
        m.d.comb += [request.valid.eq(self.free(1, "req_valid")),
                     request.payload.address.eq(self.free(FORMAL_ADDRESS_BITS, "req_address")),
                     request.payload.length.eq(self.free(FORMAL_ADDRESS_BITS - 1, "req_length")),
                     response.ready.eq(self.free(1, "resp_ready"))]
        m.d.comb += Assume(~request.valid | (request.payload.length >= 1))
        ar_fire = bus.arvalid & bus.arready
        r_fire = bus.rvalid & bus.rready

        p = past(m, {"arvalid": bus.arvalid, "arready": bus.arready, "araddr": bus.araddr, "arlen": bus.arlen,
                     "arsize": bus.arsize, "arburst": bus.arburst, "rvalid": bus.rvalid, "rready": bus.rready,
                     "rdata": bus.rdata, "rresp": bus.rresp, "rlast": bus.rlast, "resp_valid": response.valid,
                     "resp_ready": response.ready, "resp": response.payload.as_value()})
        with m.If(steps >= 1):
            m.d.comb += Assert(~(p["arvalid"] & ~p["arready"])
                               | (bus.arvalid & (bus.araddr == p["araddr"]) & (bus.arlen == p["arlen"])
                                  & (bus.arsize == p["arsize"]) & (bus.arburst == p["arburst"])))
        m.d.comb += [
            Assert(~bus.arvalid | ((bus.arsize == size_log2) & (bus.arburst == BURST_INCR))),
        ]
        fifo_invariants(m, dut)   # for the induction
        if self.inductive_only:
            return m   # the AR properties hold whatever the slave answers

        # the slave: bursts accepted, answered in order with ARLEN + 1 beats
        bursts = Queue(m, 8, 4, "bursts")
        r_beat = Signal(8, name="r_beat")
        m.d.comb += [bursts.push.eq(ar_fire), bursts.data.eq(bus.arlen), bursts.pop.eq(r_fire & bus.rlast),
                     Assume(~bus.rvalid | (bursts.any & (bus.rlast == (r_beat == bursts.head))))]
        with m.If(r_fire):
            m.d.sync += r_beat.eq(Mux(bus.rlast, 0, r_beat + 1))
        with m.If(steps >= 1):
            m.d.comb += Assume(~(p["rvalid"] & ~p["rready"]) | (bus.rvalid & (bus.rdata == p["rdata"])
                                                               & (bus.rresp == p["rresp"]) & (bus.rlast == p["rlast"])))

        m.d.comb += [
            Assert(bursts.count <= outstanding),
            Assert(~bus.arvalid | (bursts.count < outstanding)),
            Assert(~bus.arvalid | ((bus.araddr[:size_log2] == 0)
                                   & (bus.araddr[:12] + ((bus.arlen + 1) << size_log2) <= 4096))),
            Assert((response.valid & response.ready) == r_fire),
            Assert(~response.valid | (response.payload.data == bus.rdata)),
        ]
        with m.If(steps >= 1):
            m.d.comb += Assert(~(p["resp_valid"] & ~p["resp_ready"])
                               | (response.valid & (response.payload.as_value() == p["resp"])))

        # the requests: first and final beat; the AR side and the R side each walk them in order
        entry = data.StructLayout({"first": 64, "final": 64, "offset": size_log2, "length": 32})
        requests = [Signal(entry, name=f"request_{i}") for i in range(8)]
        # counters of requests (4 bits, slots by the low 3): at most 6 unanswered (2 bursts in flight,
        # one presented, one being split, two planned)
        written = Signal(4, name="requests_written")
        issued = Signal(4, name="requests_issued")     # requests whose every burst was asked for
        answered = Signal(4, name="requests_answered")  # requests whose every beat came back
        address, length = request.payload.address, request.payload.length
        with m.If(request.valid & request.ready):
            m.d.sync += written.eq(written + 1)
            for i, slot in enumerate(requests):
                with m.If(written[:3] == i):
                    m.d.sync += [slot.first.eq(address & ~(data_bytes - 1)),
                                 slot.final.eq((address + length - 1) & ~(data_bytes - 1)),
                                 slot.offset.eq(address[:size_log2]), slot.length.eq(length)]
        m.d.comb += Assert(~(request.valid & request.ready) | ((written - answered)[:4] != 8))

        def pick(index, name):
            value = Signal(entry, name=name)
            for i, slot in enumerate(requests):
                with m.If(index[:3] == i):
                    m.d.comb += value.eq(slot)
            return value

        ar_request = pick(issued, "ar_request")
        ar_started, ar_next = Signal(name="ar_started"), Signal(64, name="ar_next")
        ar_end = bus.araddr + (bus.arlen << size_log2)   # the burst's last beat
        with m.If(ar_fire):
            m.d.comb += Assert((issued != written) & (bus.araddr == Mux(ar_started, ar_next, ar_request.first))
                               & (ar_end <= ar_request.final))
            with m.If(ar_end == ar_request.final):
                m.d.sync += [issued.eq(issued + 1), ar_started.eq(0)]
            with m.Else():
                m.d.sync += [ar_started.eq(1), ar_next.eq(ar_end + data_bytes)]

        r_request = pick(answered, "r_request")
        r_started, r_next = Signal(name="r_started"), Signal(64, name="r_next")
        expected = Mux(r_started, r_next, r_request.first)
        beat = response.payload
        with m.If(response.valid):
            m.d.comb += Assert((answered != issued) | ar_started)
            m.d.comb += Assert((beat.address == expected) & (beat.last == (expected == r_request.final))
                               & (beat.offset == r_request.offset) & (beat.length == r_request.length))
        with m.If(r_fire):
            with m.If(expected == r_request.final):
                m.d.sync += [answered.eq(answered + 1), r_started.eq(0)]
            with m.Else():
                m.d.sync += [r_started.eq(1), r_next.eq(expected + data_bytes)]
        return m


#: Broken variants: name -> (class, the check it must fail).
BROKEN_BURST_READER = {
    "last_early": (_ReaderLastEarly, "burst_reader_bounded"),
    "address_skewed": (_ReaderAddressSkewed, "burst_reader_bounded"),
    "long_bursts": (_ReaderLongBursts, "burst_reader_bounded"),
    "too_many_outstanding": (type("_ReaderTooManyOutstanding", (OneTooMany, _ObservedBurstReader),
                                  {"__doc__": OneTooMany.__doc__}), "burst_reader_bounded"),
}
DEFAULT_CLASS = _ObservedBurstReader
