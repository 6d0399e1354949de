"""Harness of the control block (:class:`~smartsage.rtl.control.ControlRegisters`).

Asserts the AXI4-Lite slave rules (a response is held until taken with its data stable, responses
only follow handshakes, only OKAY) and the ``ap_ctrl_hs`` semantics (ap_start rises only on a host
write or an auto-restart, stays high until ap_ready, ap_done / ap_ready are reported by the next CTRL
read, ap_idle is read live). Proved by k-induction: every property relates the ports at most four
cycles apart.
"""

from __future__ import annotations

from amaranth.hdl import Assert, Assume

from ..axi import RESP_OKAY
from ..control import ControlRegisters, register_offset
from .common import Harness, drive_inputs, history

__all__ = ["ControlHarness", "BROKEN_CONTROL"]


class ControlHarness(Harness):
    def elaborate(self, platform):
        m, steps = self.frame()
        dut = self.instantiate(m, self.block, platform)
        bus = dut.s_axi_control
        drive_inputs(self, m, bus, "host_")
        for name in ("ready", "done", "idle"):
            m.d.comb += getattr(dut, name).eq(self.free(1, name=f"core_{name}"))
        # A legal core: ap_ready only while ap_start is high (the kernel accepts a start it sees).
        m.d.comb += Assume(~dut.ready | dut.start)

        ctrl = register_offset("CTRL")
        write_fire = bus.awvalid & bus.awready & bus.wvalid & bus.wready
        read_fire = bus.arvalid & bus.arready
        ctrl_write_start = write_fire & ((bus.awaddr & ~3) == ctrl) & bus.wstrb[0] & bus.wdata[0]
        ctrl_read = read_fire & ((bus.araddr & ~3) == ctrl)

        (p_bvalid, p_bready, p_rvalid, p_rready, p_write_fire, p_read_fire, p_start, p_ready,
         p_done, p_idle, p_ctrl_write_start) = [
            history(m, v, 1, n)[0] for v, n in (
                (bus.bvalid, "bvalid"), (bus.bready, "bready"), (bus.rvalid, "rvalid"), (bus.rready, "rready"),
                (write_fire, "write_fire"), (read_fire, "read_fire"), (dut.start, "start"), (dut.ready, "ready"),
                (dut.done, "done"), (dut.idle, "idle"), (ctrl_write_start, "ctrl_write_start"))]
        p_rdata = history(m, bus.rdata, 1, "rdata")[0]
        ctrl_read_h = history(m, ctrl_read, 3, "ctrl_read")
        done_h = history(m, dut.done, 3, "done_h")
        ready_h = history(m, dut.ready, 3, "ready_h")
        rready_h = history(m, bus.rready & bus.rvalid, 2, "r_taken")
        past_valid = steps >= 1

        with m.If(past_valid):
            # AXI4-Lite: a response is held until taken, its data stable
            m.d.comb += Assert(~(p_bvalid & ~p_bready) | bus.bvalid)
            m.d.comb += Assert(~(p_rvalid & ~p_rready) | (bus.rvalid & (bus.rdata == p_rdata)))
            # a response follows a handshake, one response per handshake
            m.d.comb += Assert(~(bus.bvalid & ~p_bvalid) | p_write_fire)
            m.d.comb += Assert(~(bus.rvalid & ~p_rvalid) | p_read_fire)
            # this slave answers in the cycle after the handshake
            m.d.comb += Assert(~p_write_fire | bus.bvalid)
            m.d.comb += Assert(~p_read_fire | bus.rvalid)
            # ap_start rises only on a host write of 1 to CTRL bit 0 or an auto-restart (at ap_ready)
            m.d.comb += Assert(~(dut.start & ~p_start) | p_ctrl_write_start | p_ready)
            # ap_start stays high until the kernel takes it
            m.d.comb += Assert(~(p_start & ~p_ready) | dut.start)
            # ap_idle is the core's state at the time of the read
            m.d.comb += Assert(~p_read_fire | ~ctrl_read_h[0] | (bus.rdata[2] == p_idle))
        m.d.comb += [
            Assert(~bus.bvalid | (bus.bresp == RESP_OKAY)),
            Assert(~bus.rvalid | (bus.rresp == RESP_OKAY)),
            Assert(~(bus.awready | bus.wready) | ~bus.bvalid),
            Assert(~bus.arready | ~bus.rvalid),
        ]
        with m.If(steps >= 2):
            # ap_done / ap_ready pulsed before a CTRL read are reported by it
            m.d.comb += Assert(~(ctrl_read_h[0] & done_h[1]) | bus.rdata[1])
            m.d.comb += Assert(~(ctrl_read_h[0] & ready_h[1]) | bus.rdata[3])
        with m.If(steps >= 4):
            # ...and cleared by it: a CTRL read right after a CTRL read that saw no new pulse reads 0
            # (read at t-3 answered at t-2, taken at t-2, next read at t-1, its data at t)
            quiet_done = ~done_h[1] & ~done_h[2]
            quiet_ready = ~ready_h[1] & ~ready_h[2]
            back_to_back = ctrl_read_h[2] & rready_h[1] & ctrl_read_h[0]
            m.d.comb += Assert(~(back_to_back & quiet_done) | ~bus.rdata[1])
            m.d.comb += Assert(~(back_to_back & quiet_ready) | ~bus.rdata[3])
        return m


class _ControlRvalidDropped(ControlRegisters):
    """Broken: drops RVALID after one cycle whether or not the host took the data."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.sync += self.s_axi_control.rvalid.eq(0)  # the last assignment wins
        return m


class _ControlStartNotHeld(ControlRegisters):
    """Broken: ap_start is a one-cycle pulse instead of being held until ap_ready."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        with m.If(~self.ready & self.start):
            m.d.sync += self.start.eq(0)
        return m


class _ControlDoneNotSticky(ControlRegisters):
    """Broken: CTRL shows ap_done only in the cycle of the pulse (not sticky until read)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        bus = self.s_axi_control
        with m.If(bus.arvalid & bus.arready & ((bus.araddr & ~3) == register_offset("CTRL"))):
            m.d.sync += bus.rdata[1].eq(self.done)
        return m


#: Broken variants: name -> (class, the check it must fail).
BROKEN_CONTROL = {"rvalid_dropped": (_ControlRvalidDropped, "control"),
                  "start_not_held": (_ControlStartNotHeld, "control"),
                  "done_not_sticky": (_ControlDoneNotSticky, "control")}
