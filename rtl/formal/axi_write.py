"""Port properties of an AXI4 burst write master, shared by the write combiner's and the beat writer's
harnesses.

The monitor watches AW, W and B only. It assumes what a legal slave guarantees (B only for a burst
whose AW and last W beat were both accepted, BVALID held with BRESP stable until taken) and asserts:

- AWVALID held until AWREADY with AWADDR, AWLEN, AWSIZE, AWBURST stable; WVALID held until WREADY
  with WDATA, WSTRB, WLAST stable;
- every AW an INCR burst of full-width beats (AWSIZE = bus width, AWADDR aligned), at most
  ``max_beats`` beats, not crossing a 4 KiB boundary;
- every W burst (the beats up to and including WLAST) has exactly AWLEN + 1 beats of the AW it
  belongs to (the n-th W burst belongs to the n-th AW, whichever comes first), so WLAST is on
  exactly the last beat;
- never more than ``outstanding`` bursts in flight (AW accepted, B not yet), and AWVALID only while
  fewer are;
- no strobed byte outside the window ``[lo, hi)`` (when given): a W burst's strobed bytes, placed
  at its AW's address, lie inside it.

The W bursts are matched to the AWs by two harness queues: AWs accepted whose W burst has not
ended, and W bursts ended (their beat count and first / last strobed byte offset) whose AW has not
come. At most one of them is non-empty.
"""

from __future__ import annotations

from amaranth.hdl import Assert, Assume, Mux, Signal
from amaranth.lib import data

from ..axi import BURST_INCR
from .common import Queue, first_set, last_set, past

__all__ = ["axi_write_master_properties"]

#: AXI4: a burst never crosses a 4 KiB boundary.
PAGE_BYTES = 4096


def axi_write_master_properties(m, steps, bus, *, data_bytes: int, max_beats: int, outstanding: int,
                                in_flight_fifo, window=None, bounded: bool = True, aw_registered: bool = False,
                                queue_depth: int = 4):
    """Add the monitor of ``bus`` (an ``AxiWriteSignature`` master) to ``m``.

    ``in_flight_fifo`` is the block's FIFO of bursts in flight (AW accepted, B pending): the
    invariant "the harness's count equals its level" makes the outstanding bound inductive.
    ``bounded`` adds the properties that need a bounded run (W payload, burst fields, W/AW matching,
    window); without it only the inductive ones are added (the AW payload's stability too when
    ``aw_registered``: the block presents AW from registers).
    """
    size_log2 = data_bytes.bit_length() - 1
    aw_fire = bus.awvalid & bus.awready
    w_fire = bus.wvalid & bus.wready
    b_fire = bus.bvalid & bus.bready
    w_end = w_fire & bus.wlast

    # bursts in flight: AW accepted, not yet answered; W bursts ended, not yet answered
    in_flight = Signal(range(outstanding + 2), name="bursts_in_flight")
    m.d.sync += in_flight.eq(in_flight + aw_fire - b_fire)
    w_unanswered = Signal(range(16), name="w_bursts_unanswered")
    m.d.sync += w_unanswered.eq(w_unanswered + w_end - b_fire)
    m.d.comb += Assume(~bus.bvalid | ((in_flight != 0) & (w_unanswered != 0)))

    p = past(m, {"awvalid": bus.awvalid, "awready": bus.awready, "awaddr": bus.awaddr, "awlen": bus.awlen,
                 "awsize": bus.awsize, "awburst": bus.awburst, "wvalid": bus.wvalid, "wready": bus.wready,
                 "wdata": bus.wdata, "wstrb": bus.wstrb, "wlast": bus.wlast, "bvalid": bus.bvalid,
                 "bready": bus.bready, "bresp": bus.bresp})
    with m.If(steps >= 1):
        m.d.comb += Assume(~(p["bvalid"] & ~p["bready"]) | (bus.bvalid & (bus.bresp == p["bresp"])))
        aw_held = bus.awvalid
        if bounded or aw_registered:
            aw_held = aw_held & ((bus.awaddr == p["awaddr"]) & (bus.awlen == p["awlen"])
                                 & (bus.awsize == p["awsize"]) & (bus.awburst == p["awburst"]))
        m.d.comb += Assert(~(p["awvalid"] & ~p["awready"]) | aw_held)
        if bounded:
            m.d.comb += Assert(~(p["wvalid"] & ~p["wready"])
                               | (bus.wvalid & (bus.wdata == p["wdata"]) & (bus.wstrb == p["wstrb"])
                                  & (bus.wlast == p["wlast"])))

    m.d.comb += [
        Assert(~bus.awvalid | ((bus.awsize == size_log2) & (bus.awburst == BURST_INCR))),
        Assert(in_flight <= outstanding),
        Assert(~bus.awvalid | (in_flight < outstanding)),
        # the invariant that makes the bound inductive (the block's FIFO of bursts in flight)
        Assert(in_flight == in_flight_fifo.level),
    ]
    if aw_registered or bounded:
        m.d.comb += Assert(~bus.awvalid | (bus.awaddr[:size_log2] == 0))
    if not bounded:
        return

    m.d.comb += Assert(~bus.awvalid | ((bus.awlen < max_beats)
                                       & (bus.awaddr[:12] + ((bus.awlen + 1) << size_log2) <= PAGE_BYTES)))

    # ---- W bursts matched to AWs
    offset_bits = (max_beats * data_bytes).bit_length()
    aw_entry = data.StructLayout({"address": 64, "len": 8})
    w_entry = data.StructLayout({"beats": 9, "lo": offset_bits, "hi": offset_bits, "any": 1})
    awq = Queue(m, aw_entry, queue_depth, "aw_waiting")
    wq = Queue(m, w_entry, queue_depth, "w_waiting")

    # the W burst in progress: beats so far, first / last strobed byte offset from its first beat
    beat = Signal(9, name="w_beat")
    lo, hi, strobed = Signal(offset_bits, name="w_lo"), Signal(offset_bits, name="w_hi"), Signal(name="w_any")
    lane_lo = first_set(m, bus.wstrb, "w_lane_lo")
    lane_hi = last_set(m, bus.wstrb, "w_lane_hi")
    now = Signal(w_entry, name="w_summary")   # the burst so far, this cycle's beat included
    m.d.comb += [
        now.beats.eq(beat + 1),
        now.any.eq(strobed | bus.wstrb.any()),
        now.lo.eq(Mux(strobed, lo, (beat << size_log2) | lane_lo)),
        now.hi.eq(Mux(bus.wstrb.any(), (beat << size_log2) | lane_hi, hi)),
    ]
    with m.If(w_fire):
        m.d.sync += [beat.eq(Mux(bus.wlast, 0, beat + 1)), lo.eq(Mux(bus.wlast, 0, now.lo)),
                     hi.eq(Mux(bus.wlast, 0, now.hi)), strobed.eq(~bus.wlast & now.any)]
    m.d.comb += Assert(~w_fire | (beat < max_beats))

    def inside(address, summary):
        if window is None:
            return 1
        window_lo, window_hi = window
        return ~summary.any | ((address + summary.lo >= window_lo) & (address + summary.hi < window_hi))

    # the AW of the W burst in progress, when known: the oldest waiting, else the one accepted now
    known = ~wq.any & (awq.any | aw_fire)
    head = awq.head
    cur_address = Mux(awq.any, head.address, bus.awaddr)
    cur_len = Mux(awq.any, head.len, bus.awlen)
    with m.If(w_fire & known):
        m.d.comb += Assert(beat <= cur_len)
        with m.If(bus.wlast):
            m.d.comb += Assert((beat == cur_len) & inside(cur_address, now))
    # an AW after its W burst ended: the oldest ended W burst is its burst
    waiting = wq.head
    with m.If(aw_fire & wq.any):
        m.d.comb += Assert((waiting.beats == bus.awlen + 1) & inside(bus.awaddr, waiting))
    consumed_now = aw_fire & ~wq.any & ~awq.any & w_end
    m.d.comb += [
        awq.push.eq(aw_fire & ~wq.any & ~consumed_now),
        awq.pop.eq(w_end & known & awq.any),
        wq.push.eq(w_end & ~known), wq.data.eq(now),
        wq.pop.eq(aw_fire & wq.any),
    ]
    m.d.comb += [awq.data.address.eq(bus.awaddr), awq.data.len.eq(bus.awlen)]
    # at most one queue holds anything
    m.d.comb += Assert(~(awq.any & wq.any))
