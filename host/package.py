"""``smartsage rtl package``: everything a Vitis user runs to turn the exported kernel into an xclbin.

For one kernel configuration and platform it writes, into one directory:

- ``smartsage_kernel.v``, ``kernel.xml``, ``config.json``: the export (:func:`smartsage.host.synth.export`);
- ``package_xo.tcl``: Vivado batch script. It packages the Verilog as an IP (``ipx::package_project``),
  infers the AXI interfaces by their prefixes (``s_axi_control_*``, ``m_axi_<bundle>_*``), the clock, the
  active-low reset and the interrupt, associates every AXI interface with ``ap_clk`` and the reset, maps the
  register window and the pointer arguments (each with the master it addresses, as kernel.xml does),
  checks the core as a kernel and calls ``package_xo`` with ``kernel.xml``;
- ``link.cfg``: the ``v++ --link`` configuration: the platform, one compute unit, one ``sp`` line per AXI
  master (the lanes' masters included) and the kernel clock;
- ``README.md``: the commands, in order, and what each file is.

Interfaces are taken from the exported top level's ports (:func:`smartsage.rtl.kernel_xml.vitis_port_names`),
so a configuration with more lanes gets more ``m_axi_lane<n>`` interfaces and ``sp`` lines with no edit here.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

from smartsage.rtl.control import ARGUMENTS, CONTROL_ADDRESS_WIDTH
from smartsage.rtl.kernel_xml import ARGUMENT_PORTS, CONTROL_RANGE, VITIS_TOP_NAME, vitis_port_names
from smartsage.spec.config import KernelConfig

__all__ = ["Platform", "PLATFORMS", "axi_interfaces", "package_tcl", "link_config", "readme", "write_package",
           "VIVADO_COMMANDS"]


@dataclasses.dataclass(frozen=True)
class Platform:
    """A Vitis platform: its name for ``v++ --platform`` and the memory bank the kernel's masters use."""

    name: str
    bank: str
    part: str
    note: str = ""


#: Platforms the README and the defaults know; any other name is accepted with ``--bank`` and ``--part``.
PLATFORMS: dict[str, Platform] = {
    "smartssd": Platform("xilinx_u2_gen3x4_xdma_gc_2_202110_1", "DDR[0]", "xcku15p-ffva1156-2-e",
                         "Samsung SmartSSD (KU15P, one 4 GiB DDR4 bank). The platform name is that of its XRT/Vitis "
                         "2021.1 release as far as we know (not checked against a card here); `platforminfo -l` on "
                         "the build machine lists the installed one: pass that name to --platform with --bank "
                         "and --part if it differs."),
    "u250": Platform("xilinx_u250_gen3x16_xdma_4_1_202210_1", "DDR[0]", "xcu250-figd2104-2L-e"),
    "u280": Platform("xilinx_u280_gen3x16_xdma_1_202211_1", "HBM[0]", "xcu280-fsvh2892-2L-e"),
}

#: Every Vivado command the generated Tcl may call, with the options each may take (the test's stubs
#: accept these and nothing else, so a typo here or in the script fails the test).
VIVADO_COMMANDS: dict[str, tuple[str, ...]] = {
    "create_project": ("-force", "-part"),
    "add_files": ("-norecurse",),
    "set_property": (),
    "get_property": (),
    "current_fileset": (),
    "update_compile_order": ("-fileset",),
    "ipx::package_project": ("-root_dir", "-vendor", "-library", "-taxonomy", "-import_files", "-set_current"),
    "ipx::unload_core": (),
    "ipx::edit_ip_in_project": ("-upgrade", "-name", "-directory"),
    "ipx::current_core": (),
    "ipx::get_user_parameters": ("-of_objects",),
    "ipx::remove_user_parameter": (),
    "ipx::remove_bus_interface": (),
    "ipx::infer_bus_interfaces": (),
    "ipx::infer_bus_interface": (),
    "ipx::get_bus_interfaces": ("-of_objects",),
    "ipx::associate_bus_interfaces": ("-busif", "-clock", "-reset"),
    "ipx::add_bus_parameter": (),
    "ipx::get_bus_parameters": ("-of_objects",),
    "ipx::add_memory_map": (),
    "ipx::add_address_block": (),
    "ipx::add_register": (),
    "ipx::add_register_parameter": (),
    "ipx::create_xgui_files": (),
    "ipx::update_checksums": (),
    "ipx::check_integrity": ("-kernel",),
    "ipx::save_core": (),
    "close_project": ("-delete",),
    "package_xo": ("-force", "-xo_path", "-kernel_name", "-ip_directory", "-kernel_xml"),
}


def axi_interfaces(config: KernelConfig) -> tuple[list[str], list[str]]:
    """(AXI4 masters, AXI4-Lite slaves) of the exported top level, from its port names by prefix."""
    ports = vitis_port_names(config)
    masters = sorted({name.rsplit("_", 1)[0] for name in ports
                      if name.startswith("m_axi_") and name.endswith(("_araddr", "_awaddr"))})
    slaves = sorted({name.rsplit("_", 1)[0] for name in ports
                     if name.startswith("s_axi_") and name.endswith("_awaddr")})
    return masters, slaves


def _tcl_list(items) -> str:
    return "{" + " ".join(items) + "}"


def package_tcl(config: KernelConfig, part: str) -> str:
    """The Vivado batch script (run in the package directory: ``vivado -mode batch -source package_xo.tcl``)."""
    masters, slaves = axi_interfaces(config)
    ports = vitis_port_names(config)
    for needed in ("ap_clk", "ap_rst_n", "interrupt"):
        if needed not in ports:
            raise ValueError(f"the exported kernel lacks the port {needed!r} the Vitis RTL-kernel convention needs")
    interfaces = slaves + masters
    lines = [
        f"# Generated by `smartsage rtl package` (config {config.name!r}); do not edit.",
        f"# vivado -mode batch -source package_xo.tcl  ->  {VITIS_TOP_NAME}.xo",
        "set here [file dirname [file normalize [info script]]]",
        f"set kernel {VITIS_TOP_NAME}",
        "set ip_dir [file join $here packaged_kernel]",
        "set xo_path [file join $here $kernel.xo]",
        "",
        f"create_project -force kernel_pack [file join $here kernel_pack] -part {part}",
        "add_files -norecurse [file join $here $kernel.v]",
        "set_property top $kernel [current_fileset]",
        "update_compile_order -fileset sources_1",
        "ipx::package_project -root_dir $ip_dir -vendor smartsage.org -library kernel -taxonomy /KernelIP "
        "-import_files -set_current false",
        "ipx::unload_core [file join $ip_dir component.xml]",
        "ipx::edit_ip_in_project -upgrade true -name kernel_edit -directory $ip_dir "
        "[file join $ip_dir component.xml]",
        "set core [ipx::current_core]",
        "",
        "# Interfaces by port prefix: drop what package_project guessed, infer them again explicitly.",
        "foreach busif [ipx::get_bus_interfaces -of_objects $core] {",
        "    ipx::remove_bus_interface [get_property NAME $busif] $core",
        "}",
        "ipx::infer_bus_interfaces xilinx.com:interface:aximm_rtl:1.0 $core",
        "ipx::infer_bus_interface ap_clk xilinx.com:signal:clock_rtl:1.0 $core",
        "ipx::infer_bus_interface ap_rst_n xilinx.com:signal:reset_rtl:1.0 $core",
        "ipx::infer_bus_interface interrupt xilinx.com:signal:interrupt_rtl:1.0 $core",
        "set polarity [ipx::add_bus_parameter POLARITY [ipx::get_bus_interfaces ap_rst_n -of_objects $core]]",
        "set_property value ACTIVE_LOW $polarity",
        "set sensitivity [ipx::add_bus_parameter SENSITIVITY [ipx::get_bus_interfaces interrupt -of_objects $core]]",
        "set_property value LEVEL_HIGH $sensitivity",
        f"set axi_interfaces {_tcl_list(interfaces)}",
        "foreach busif $axi_interfaces {",
        "    ipx::associate_bus_interfaces -busif $busif -clock ap_clk $core",
        "}",
        "ipx::associate_bus_interfaces -clock ap_clk -reset ap_rst_n $core",
        "",
        "# The control window and the pointer arguments (offsets from smartsage.spec.descriptor.REGISTERS).",
        "set mem_map [ipx::add_memory_map s_axi_control $core]",
        "set block [ipx::add_address_block reg0 $mem_map]",
        f"set_property range 0x{CONTROL_RANGE:X} $block",
        "set_property slave_memory_map_ref s_axi_control [ipx::get_bus_interfaces s_axi_control -of_objects $core]",
    ]
    assert CONTROL_RANGE >= 1 << CONTROL_ADDRESS_WIDTH
    for name, offset, size in (("CTRL", 0x00, 32), ("GIER", 0x04, 32), ("IP_IER", 0x08, 32), ("IP_ISR", 0x0C, 32)):
        lines += [f"set reg [ipx::add_register {name} $block]",
                  f"set_property address_offset 0x{offset:03X} $reg",
                  f"set_property size {size} $reg"]
    for arg, (lo, _hi) in ARGUMENTS.items():
        master = ARGUMENT_PORTS[arg]
        if master not in masters:
            raise ValueError(f"kernel argument {arg!r} maps to {master!r}, which the exported kernel lacks")
        lines += [f"set reg [ipx::add_register {arg} $block]",
                  f"set_property address_offset 0x{lo:03X} $reg",
                  "set_property size 64 $reg",
                  "set busif [ipx::add_register_parameter ASSOCIATED_BUSIF $reg]",
                  f"set_property value {master} $busif"]
    lines += [
        "",
        "foreach parameter [ipx::get_user_parameters -of_objects $core] {",
        "    ipx::remove_user_parameter [get_property NAME $parameter] $core",
        "}",
        "set_property sdx_kernel true $core",
        "set_property sdx_kernel_type rtl $core",
        "set_property ipi_drc {ignore_freq_hz true} $core",
        "set_property vitis_drc {ctrl_protocol ap_ctrl_hs} $core",
        "ipx::create_xgui_files $core",
        "ipx::update_checksums $core",
        "ipx::check_integrity -kernel $core",
        "ipx::save_core $core",
        "close_project -delete",
        "",
        "package_xo -force -xo_path $xo_path -kernel_name $kernel -ip_directory $ip_dir "
        "-kernel_xml [file join $here kernel.xml]",
        "",
    ]
    return "\n".join(lines)


def link_config(config: KernelConfig, platform: str, bank: str) -> str:
    """The ``v++ --link --config link.cfg`` file: platform, one CU, one ``sp`` per master, the kernel clock."""
    masters, _ = axi_interfaces(config)
    cu = f"{VITIS_TOP_NAME}_1"
    lines = [f"# Generated by `smartsage rtl package` (config {config.name!r}); do not edit.",
             f"platform={platform}", "", "[connectivity]", f"nk={VITIS_TOP_NAME}:1:{cu}"]
    lines += [f"sp={cu}.{master}:{bank}" for master in masters]
    lines += ["", "[clock]", f"freqHz={round(config.clock_mhz * 1e6)}:{cu}", ""]
    return "\n".join(lines)


def readme(config: KernelConfig, platform: str, bank: str, note: str = "", requested: str | None = None) -> str:
    masters, _ = axi_interfaces(config)
    return f"""# smartsage kernel package: config `{config.name}`, platform `{platform}`

Generated by `smartsage rtl package --config {config.name} --platform {requested or platform}`. Needs Vivado
and Vitis (2021.1 or later) and the platform installed; none of them runs in smartsage's own CI (the Tcl is checked
there by `tclsh` with the Vivado commands stubbed, tests/test_package.py).
{note and chr(10) + note + chr(10)}
- `{VITIS_TOP_NAME}.v`: the kernel's Vitis top level (Amaranth export): `ap_clk`, `ap_rst_n`,
  `s_axi_control`, {len(masters)} AXI4 masters, `interrupt`
- `kernel.xml`: kernel description for `package_xo` (`image` -> `m_axi_storage`, `descriptor` -> `m_axi_mem`)
- `config.json`: the KernelConfig it was built from
- `package_xo.tcl`: Vivado script: IP packaging (interfaces inferred by prefix, clock and reset
  associated, register map), then `package_xo`
- `link.cfg`: `v++ --link` config: platform, one compute unit, one `sp` line per master on `{bank}`,
  the {config.clock_mhz:g} MHz kernel clock

## Commands, in this directory

```sh
vivado -mode batch -source package_xo.tcl          # -> {VITIS_TOP_NAME}.xo
v++ --link -t hw --config link.cfg {VITIS_TOP_NAME}.xo -o smartsage.xclbin    # hours: place and route
xbutil program -d <bdf> -u smartsage.xclbin        # or let the host load it (below)
```

`-t hw_emu` instead of `-t hw` builds an emulation xclbin (minutes) for XRT's hardware emulation.

## On the host

```python
from smartsage.host.driver import SamplerDriver
from smartsage.host.xrt import XrtDevice      # needs pyxrt: source /opt/xilinx/xrt/setup.sh

with XrtDevice("graph.img", "smartsage.xclbin", config="{config.name}", image_placement="copy") as device:
    batch = SamplerDriver(device).sample(targets, (25, 10), seed=1, aggregate=True)
```

`image_placement="p2p"` reads the image into a P2P buffer (SSD to FPGA without the host's memory, when the
file lies on the SmartSSD's own SSD). Masters: {", ".join(f"`{m}`" for m in masters)}; all on `{bank}` (the
SmartSSD has one DDR bank; on a card with several, spreading the lanes over banks is a `link.cfg` edit).
"""


def write_package(config: KernelConfig, out_dir: str | os.PathLike, platform: str = "smartssd",
                  bank: str | None = None, part: str | None = None) -> dict[str, pathlib.Path]:
    """Write the package directory; ``platform`` is a key of :data:`PLATFORMS` or a Vitis platform name.

    Raises
    ------
    ValueError
        An unknown platform name without ``bank`` and ``part``.
    """
    from .synth import export

    known = PLATFORMS.get(platform)
    if known is None and (bank is None or part is None):
        raise ValueError(f"Unknown platform {platform!r}: pass --bank and --part, or one of {', '.join(PLATFORMS)}")
    name = known.name if known else platform
    bank = bank or known.bank
    part = part or known.part
    out = pathlib.Path(out_dir)
    files = export(config, out)
    files["package_tcl"] = out / "package_xo.tcl"
    files["link_cfg"] = out / "link.cfg"
    files["readme"] = out / "README.md"
    files["package_tcl"].write_text(package_tcl(config, part))
    files["link_cfg"].write_text(link_config(config, name, bank))
    files["readme"].write_text(readme(config, name, bank, known.note if known else "", platform))
    return files
