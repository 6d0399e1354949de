"""``smartsage rtl package``: the package_xo Tcl runs under a real tclsh with every Vivado command stubbed
(names and options checked, calls logged), and the v++ link config names exactly the exported masters."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess

import pytest

from smartsage.host.cli import main
from smartsage.host.package import VIVADO_COMMANDS, link_config, write_package
from smartsage.rtl.control import ARGUMENTS
from smartsage.rtl.kernel_xml import ARGUMENT_PORTS
from smartsage.spec.config import get_config

TCLSH = shutil.which("tclsh")


def _tcl_missing() -> bool:
    if TCLSH:
        return False
    try:
        import tkinter

        tkinter.Tcl()
    except Exception:
        return True
    return False


NO_TCL = pytest.mark.skipif(_tcl_missing(), reason="neither tclsh nor Python's tkinter (Tcl) is installed")

#: Vivado's commands as Tcl procs: options are checked against VIVADO_COMMANDS, every call is logged as a
#: Tcl list, a command the list lacks is an error (`unknown`).
STUBS = r"""
set ::log [open $::stub_log w]
namespace eval ipx {}
proc stub {name options result} {
    proc $name args [string map [list @NAME@ $name @OPTIONS@ $options @RESULT@ $result] {
        foreach a $args {
            if {[string match -* $a] && [lsearch -exact {@OPTIONS@} $a] < 0} {
                error "@NAME@: unknown option $a"
            }
        }
        puts $::log [list @NAME@ {*}$args]
        @RESULT@
    }]
}
proc unknown {name args} { error "not a stubbed Vivado command: $name $args" }
"""

RESULTS = {
    "ipx::current_core": "return core0",
    "current_fileset": "return sources_1",
    "get_property": "return [lindex $args end]",
    "ipx::get_bus_interfaces": "return {guessed_a guessed_b}",
    "ipx::get_user_parameters": "return {C_S_AXI_CONTROL_ADDR_WIDTH}",
    "ipx::add_register": "return reg_[lindex $args 0]",
    "ipx::add_memory_map": "return map_[lindex $args 0]",
    "ipx::add_address_block": "return block_[lindex $args 0]",
    "ipx::add_bus_parameter": "return param_[lindex $args 0]",
    "ipx::add_register_parameter": "return param_[lindex $args 0]",
}


def _run_tcl(directory, tmp_path, tclsh: str | None = TCLSH) -> list[list[str]]:
    """Source the package's Tcl under the stubs: in tclsh, or else in the Tcl 8.6 interpreter that Python's
    tkinter embeds (the same language, no Tk window); returns the logged calls."""
    log = tmp_path / "calls.log"
    stubs = f"set ::stub_log {{{log}}}\n" + STUBS + "\n".join(
        f"stub {name} {{{' '.join(opts)}}} {{{RESULTS.get(name, 'return {}')}}}"
        for name, opts in VIVADO_COMMANDS.items())
    script = stubs + f"\nsource {{{directory / 'package_xo.tcl'}}}\nclose $::log\n"
    if tclsh:
        (tmp_path / "stubs.tcl").write_text(script)
        proc = subprocess.run([tclsh, str(tmp_path / "stubs.tcl")], capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin"}, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    else:
        import tkinter

        interpreter = tkinter.Tcl()
        try:
            interpreter.eval(script)
        except tkinter.TclError as err:
            raise AssertionError(str(err)) from None
    # each line is a Tcl list of plain words (no braces or spaces inside the words the script uses)
    return [line.split() for line in log.read_text().splitlines()]


def _verilog_masters(verilog: str) -> set[str]:
    """AXI masters of the top module's port declarations in the exported Verilog."""
    top = re.search(r"^module smartsage_kernel\b.*?^endmodule", verilog, re.M | re.S).group(0)
    ports = re.findall(r"^\s*(?:input|output)\s+(?:wire\s+)?(?:\[[^\]]+\]\s*)?(\w+)\s*;", top, re.M)
    return {p.rsplit("_", 1)[0] for p in ports if p.startswith("m_axi_") and p.endswith(("_araddr", "_awaddr"))}


@NO_TCL
@pytest.mark.parametrize("config_name", ["small", "wide2"])
def test_package_tcl_runs_under_tclsh_with_stubs(tmp_path, config_name):
    config = get_config(config_name)
    files = write_package(config, tmp_path / "pkg")
    calls = _run_tcl(tmp_path / "pkg", tmp_path)
    masters = _verilog_masters(files["verilog"].read_text())
    assert len(masters) == config.lanes + 2        # storage, mem and one per lane
    by_name: dict[str, list[list[str]]] = {}
    for call in calls:
        by_name.setdefault(call[0], []).append(call[1:])
    # the exported Verilog is what gets packaged, and kernel.xml what package_xo reads
    assert by_name["add_files"] == [["-norecurse", str(files["verilog"])]]
    (xo,) = by_name["package_xo"]
    assert xo[0] == "-force"
    options = dict(zip(xo[1::2], xo[2::2], strict=True))
    assert options["-kernel_name"] == "smartsage_kernel" and options["-kernel_xml"] == str(files["kernel_xml"])
    assert options["-xo_path"].endswith("smartsage_kernel.xo")
    # interfaces: inferred, every AXI interface on ap_clk, the clock with the active-low reset
    inferred = {tuple(c[:2]) for c in by_name["ipx::infer_bus_interface"]}
    assert inferred == {("ap_clk", "xilinx.com:signal:clock_rtl:1.0"), ("ap_rst_n", "xilinx.com:signal:reset_rtl:1.0"),
                        ("interrupt", "xilinx.com:signal:interrupt_rtl:1.0")}
    assert by_name["ipx::infer_bus_interfaces"] == [["xilinx.com:interface:aximm_rtl:1.0", "core0"]]
    clocked = {c[1] for c in by_name["ipx::associate_bus_interfaces"]
               if c[0] == "-busif" and c[2:4] == ["-clock", "ap_clk"]}
    assert clocked == masters | {"s_axi_control"}
    assert ["-clock", "ap_clk", "-reset", "ap_rst_n", "core0"] in by_name["ipx::associate_bus_interfaces"]
    assert ["value", "ACTIVE_LOW", "param_POLARITY"] in by_name["set_property"]
    # pointer arguments at the register map's offsets, each with its master
    for arg, (lo, _) in ARGUMENTS.items():
        assert ["address_offset", f"0x{lo:03X}", f"reg_{arg}"] in by_name["set_property"]
    associated = [c for c in by_name["set_property"] if c[0] == "value" and c[2] == "param_ASSOCIATED_BUSIF"]
    assert sorted(c[1] for c in associated) == sorted(ARGUMENT_PORTS[a] for a in ARGUMENTS)
    assert by_name["ipx::check_integrity"] == [["-kernel", "core0"]]
    assert ["sdx_kernel", "true", "core0"] in by_name["set_property"]

    # the link config: one sp per master of the exported Verilog, the kernel clock, one compute unit
    cfg = configparser.ConfigParser(strict=False, allow_no_value=True)
    text = files["link_cfg"].read_text()
    cfg.read_string("[top]\n" + text)
    assert cfg["top"]["platform"] == "xilinx_u2_gen3x4_xdma_gc_2_202110_1"
    sp = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith("sp=")]
    assert {s.split(":")[0] for s in sp} == {f"smartsage_kernel_1.{m}" for m in masters}
    assert all(s.endswith(":DDR[0]") for s in sp) and len(sp) == len(masters)
    assert cfg["connectivity"]["nk"] == "smartsage_kernel:1:smartsage_kernel_1"
    assert cfg["clock"]["freqHz"] == f"{round(config.clock_mhz * 1e6)}:smartsage_kernel_1"
    readme = files["readme"].read_text()
    assert "vivado -mode batch -source package_xo.tcl" in readme and "v++ --link" in readme


def _interpreters() -> list[str | None]:
    """tclsh where installed, and tkinter's Tcl where Python has it (None stands for tkinter)."""
    found: list[str | None] = [TCLSH] if TCLSH else []
    try:
        import tkinter

        tkinter.Tcl()
        found.append(None)
    except Exception:
        pass
    return found


@NO_TCL
def test_stubs_reject_an_unknown_option_or_command(tmp_path):
    (tmp_path / "pkg").mkdir()
    for tclsh in _interpreters():
        (tmp_path / "pkg" / "package_xo.tcl").write_text("ipx::save_core core0\n")
        assert _run_tcl(tmp_path / "pkg", tmp_path, tclsh) == [["ipx::save_core", "core0"]]
        for bad, message in (("package_xo -xo_pth x.xo", "unknown option -xo_pth"),
                             ("ipx::frobnicate core0", "not a stubbed Vivado command")):
            (tmp_path / "pkg" / "package_xo.tcl").write_text(bad + "\n")
            with pytest.raises(AssertionError, match=message):
                _run_tcl(tmp_path / "pkg", tmp_path, tclsh)


def test_cli_package_and_unknown_platform(tmp_path, capsys, monkeypatch):
    from smartsage.host import synth

    monkeypatch.setattr(synth, "export", lambda config, out: (out.mkdir(parents=True, exist_ok=True), {})[1])
    assert main(["rtl", "package", "--config", "small", "--platform", "u250", "-o", str(tmp_path / "p")]) == 0
    assert "package_tcl:" in capsys.readouterr().out
    assert "platform=xilinx_u250" in (tmp_path / "p" / "link.cfg").read_text()
    assert main(["rtl", "package", "--platform", "my_platform", "-o", str(tmp_path / "q")]) == 2
    assert "--bank and --part" in capsys.readouterr().err
    text = link_config(get_config("small"), "my_platform", "HBM[3]")
    assert "sp=smartsage_kernel_1.m_axi_storage:HBM[3]" in text
