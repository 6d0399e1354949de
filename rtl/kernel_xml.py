"""Vitis RTL-kernel packaging: the top level with Vitis port names, and ``kernel.xml`` for ``package_xo``.

Amaranth joins a port's member path with ``__`` (``s_axi_control__awaddr``) and gives the ``sync``
domain an active-high ``rst``. Vitis' RTL-kernel convention wants ``ap_clk``, an active-low
``ap_rst_n``, ``s_axi_control_<signal>``, ``m_axi_<bundle>_<signal>`` and ``interrupt``.
:class:`VitisKernel` wraps :class:`~smartsage.rtl.kernel.SamplerKernel` under those names (no logic
but the reset inversion), so the exported Verilog can be handed to ``package_xo`` as it is.

``kernel.xml`` is generated from :data:`smartsage.spec.descriptor.REGISTERS` (argument offsets,
through :data:`smartsage.rtl.control.ARGUMENTS`) and the wrapper's own ports (data widths), so the
register map is still defined once.
"""

from __future__ import annotations

import functools
import xml.etree.ElementTree as ET

from amaranth.back import verilog
from amaranth.hdl import ClockDomain, Module, Shape
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from smartsage.spec.config import KernelConfig

from .axi import ADDRESS_WIDTH
from .control import ARGUMENTS, CONTROL_ADDRESS_WIDTH
from .export import TOP_NAME
from .kernel import SamplerKernel

__all__ = [
    "VITIS_TOP_NAME", "ARGUMENT_PORTS", "CONTROL_RANGE", "VitisKernel", "vitis_verilog", "kernel_xml",
    "vitis_port_names", "KernelXmlError",
]

#: Module name of the Vitis top level (the kernel name in kernel.xml and in ``v++ --connectivity``).
VITIS_TOP_NAME = TOP_NAME

#: The AXI4 master that each 64-bit kernel argument (a pointer) addresses. kernel.xml needs it for
#: ``v++`` to map a buffer to a memory bank; the register map names the arguments, the kernel's
#: docstring (rtl/kernel.py) says which master reads through which pointer.
ARGUMENT_PORTS: dict[str, str] = {"image": "m_axi_storage", "descriptor": "m_axi_mem"}

#: Address window the shell gives ``s_axi_control`` (the value Vitis HLS writes for small kernels).
#: The kernel decodes all ``CONTROL_ADDRESS_WIDTH`` (12) bits of it: no register aliases in the window.
CONTROL_RANGE = 0x1000


class KernelXmlError(ValueError):
    """The register map or the kernel's ports cannot be described in kernel.xml (the message says why)."""


def _flat_name(path) -> str:
    return "_".join(str(p) for p in path)


class VitisKernel(wiring.Component):
    """:class:`~smartsage.rtl.kernel.SamplerKernel` with the Vitis RTL-kernel port names.

    Parameters
    ----------
    config : KernelConfig
        The kernel build.

    Members
    -------
    ap_clk : ``In(1)``
        Kernel clock (the ``sync`` domain of every block inside).
    ap_rst_n : ``In(1)``
        Synchronous active-low reset.
    s_axi_control_* , m_axi_storage_*, m_axi_mem_*, interrupt
        The kernel's ports, member paths joined with ``_``.
    """

    def __init__(self, config: KernelConfig):
        if not isinstance(config, KernelConfig):
            self._MustUse__silence = True  # never built: nothing to warn about
            raise TypeError(f"Config must be a KernelConfig, not {config!r}")
        self._config = config
        self._kernel = SamplerKernel(config)
        members = {"ap_clk": In(1), "ap_rst_n": In(1)}
        self._paths = []
        # flatten() yields every leaf port with its flow as seen from the kernel (flips applied)
        for path, member, _ in self._kernel.signature.flatten(self._kernel):
            name = _flat_name(path)
            members[name] = member
            self._paths.append((path, name))
        super().__init__(members)

    @property
    def config(self) -> KernelConfig:
        return self._config

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = sync = ClockDomain("sync")
        m.d.comb += [sync.clk.eq(self.ap_clk), sync.rst.eq(~self.ap_rst_n)]
        m.submodules.kernel = kernel = self._kernel
        for path, name in self._paths:
            ours = getattr(self, name)
            theirs = kernel
            for part in path:
                theirs = getattr(theirs, part) if isinstance(part, str) else theirs[part]
            flow = self.signature.members[name].flow
            if flow == In:
                m.d.comb += theirs.eq(ours)
            else:
                m.d.comb += ours.eq(theirs)
        return m


@functools.lru_cache(maxsize=8)
def vitis_verilog(config: KernelConfig) -> str:
    """The Vitis top level for ``config`` as Verilog (no source paths: reproducible; cached)."""
    return verilog.convert(VitisKernel(config), name=VITIS_TOP_NAME, emit_src=False, strip_internal_attrs=True)


def vitis_port_names(config: KernelConfig) -> dict[str, tuple[str, int]]:
    """The top level's ports as the Vitis interface expects them: name -> (``input``/``output``, width).

    Derived from the AXI signatures and the register window, not from the generated Verilog, so a
    test can compare the two.
    """
    ports = {"ap_clk": ("input", 1), "ap_rst_n": ("input", 1)}
    for name, member in _members(config).items():
        if name in ports:
            continue
        width = Shape.cast(member.shape).width
        ports[name] = ("input" if member.flow == In else "output", width)
    return ports


def _members(config: KernelConfig):
    """The wrapper's signature members, without leaving an unused elaboratable behind."""
    wrapper = VitisKernel(config)
    wrapper._MustUse__silence = True          # only the signature is wanted here
    wrapper._kernel._MustUse__silence = True
    return wrapper.signature.members


def _hex(value: int, digits: int = 0) -> str:
    return f"0x{value:0{digits}X}" if digits else f"0x{value:X}"


def kernel_xml(config: KernelConfig) -> str:
    """``kernel.xml`` for ``package_xo -kernel_xml``: the ``ap_ctrl_hs`` kernel, its ports and arguments.

    Raises
    ------
    KernelXmlError
        A kernel argument of the register map has no AXI master in :data:`ARGUMENT_PORTS`, or one
        maps to a master the kernel does not have.
    """
    members = _members(config)
    masters = {}
    for name in members:
        if name.startswith("m_axi_") and name.endswith(("_araddr", "_awaddr")):
            bundle = name.rsplit("_", 1)[0]
            masters[bundle] = Shape.cast(members[f"{bundle}_rdata"].shape).width
    if set(ARGUMENTS) - set(ARGUMENT_PORTS):
        missing = ", ".join(sorted(set(ARGUMENTS) - set(ARGUMENT_PORTS)))
        raise KernelXmlError(f"Kernel argument(s) {missing} of REGISTERS have no AXI master in ARGUMENT_PORTS")
    for arg in ARGUMENTS:
        if ARGUMENT_PORTS[arg] not in masters:
            raise KernelXmlError(f"Kernel argument {arg!r} maps to {ARGUMENT_PORTS[arg]!r}, which the kernel lacks "
                                 f"(it has {', '.join(sorted(masters))})")

    root = ET.Element("root", versionMajor="1", versionMinor="6")
    kernel = ET.SubElement(root, "kernel", {
        "name": VITIS_TOP_NAME, "language": "ip_c", "vlnv": f"smartsage.org:kernel:{VITIS_TOP_NAME}:1.0",
        "attributes": "", "preferredWorkGroupSizeMultiple": "0", "workGroupSize": "1",
        "interrupt": "true", "hwControlProtocol": "ap_ctrl_hs",
    })
    ports = ET.SubElement(kernel, "ports")
    assert CONTROL_RANGE >= 1 << CONTROL_ADDRESS_WIDTH
    ET.SubElement(ports, "port", {"name": "s_axi_control", "mode": "slave", "range": _hex(CONTROL_RANGE),
                                  "dataWidth": "32", "portType": "addressable", "base": "0x0"})
    for bundle, width in sorted(masters.items()):
        ET.SubElement(ports, "port", {"name": bundle, "mode": "master", "range": _hex((1 << ADDRESS_WIDTH) - 1),
                                      "dataWidth": str(width), "portType": "addressable", "base": "0x0"})
    args = ET.SubElement(kernel, "args")
    for arg_id, (arg, (lo, hi)) in enumerate(ARGUMENTS.items()):
        if hi != lo + 4:
            raise KernelXmlError(f"Kernel argument {arg!r}: _hi at {hi:#x} must follow _lo at {lo:#x}")
        ET.SubElement(args, "arg", {
            "name": arg, "addressQualifier": "1", "id": str(arg_id), "port": ARGUMENT_PORTS[arg],
            "size": "0x8", "offset": _hex(lo, 3), "type": "void*", "hostOffset": "0x0", "hostSize": "0x8",
        })
    ET.indent(root)
    comment = ("Generated by `smartsage rtl export` from smartsage.spec.descriptor.REGISTERS "
               f"(config {config.name!r}); do not edit.")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<!-- ' + comment + " -->\n"
            + ET.tostring(root, encoding="unicode") + "\n")
