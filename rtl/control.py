"""The kernel's control and status registers: AXI4-Lite ``s_axi_control``, Vitis ``ap_ctrl_hs``.

The register map is :data:`smartsage.spec.descriptor.REGISTERS` (defined once there; the docs table
and this block derive from it). Registers from 0x10 on are kernel arguments; a ``name_lo`` /
``name_hi`` pair forms one 64-bit argument ``name``.

The block decodes the whole 4 KiB window that kernel.xml declares for ``s_axi_control``
(:data:`CONTROL_ADDRESS_WIDTH` address bits, every one compared): a register answers at its own
offset only, a read of any other word of the window returns 0 and a write to it changes nothing.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from smartsage.spec.descriptor import KERNEL_ARGUMENTS, REGISTERS

from .axi import AxiLiteSignature

__all__ = ["ControlRegisters", "ARGUMENTS", "CONTROL_ADDRESS_WIDTH", "register_offset",
           "register_table_markdown"]

#: Byte address width of ``s_axi_control``: the 4 KiB window the shell gives the kernel (kernel.xml's
#: ``range`` 0x1000, the value Vitis HLS writes for small kernels), decoded in full so that nothing aliases.
CONTROL_ADDRESS_WIDTH = 12


def register_offset(name: str) -> int:
    """Byte offset of the register ``name`` in :data:`REGISTERS`."""
    for reg, offset, _, _ in REGISTERS:
        if reg == name:
            return offset
    raise KeyError(f"No register named {name!r} in smartsage.spec.descriptor.REGISTERS")


def register_table_markdown() -> str:
    """The register map as a Markdown table (docs/rtl.md embeds it; a test keeps it current)."""
    lines = ["| offset | register | access | meaning |", "|---:|---|---|---|"]
    for name, offset, access, meaning in REGISTERS:
        lines.append(f"| {offset:#04x} | `{name}` | {access} | {meaning} |")
    return "\n".join(lines)


#: 64-bit kernel arguments: name -> (offset of bits 31:0, offset of bits 63:32), from the register map.
ARGUMENTS = KERNEL_ARGUMENTS
_CTRL, _GIE, _IER, _ISR = (register_offset(n) for n in ("CTRL", "GIE", "IER", "ISR"))
assert max(off for _, off, _, _ in REGISTERS) < 1 << CONTROL_ADDRESS_WIDTH


class ControlRegisters(wiring.Component):
    """AXI4-Lite slave with the ``ap_ctrl_hs`` handshake and the 64-bit kernel arguments.

    Semantics (Vitis RTL kernel): writing 1 to CTRL bit 0 raises ``ap_start``, which stays high
    until the kernel accepts it (``ap_ready``), then clears unless auto_restart (bit 7) is set.
    ap_done (bit 1) and ap_ready (bit 3) are sticky and clear on a read of CTRL; ap_idle (bit 2)
    is the kernel's idle state. ISR bit 0/1 latch ap_done/ap_ready when enabled in IER and toggle on
    a written 1; ``interrupt = GIE & (ISR != 0)``.

    Members
    -------
    s_axi_control : ``In(AxiLiteSignature(CONTROL_ADDRESS_WIDTH))``
        The host's register port (12 address bits, all decoded: unmapped words read 0, writes to them
        are ignored).
    start : ``Out(1)``
        ap_start to the kernel core.
    ready : ``In(1)``
        One-cycle pulse: the core accepted ``start`` (ap_ready).
    done : ``In(1)``
        One-cycle pulse: the core finished the command (ap_done).
    idle : ``In(1)``
        The core is idle (ap_idle).
    interrupt : ``Out(1)``
        Level interrupt to the shell.
    <argument> : ``Out(64)``
        One port per 64-bit argument of :data:`ARGUMENTS` (``image``, ``descriptor``).
    """

    def __init__(self):
        members = {
            "s_axi_control": In(AxiLiteSignature(CONTROL_ADDRESS_WIDTH)),
            "start": Out(1), "ready": In(1), "done": In(1), "idle": In(1), "interrupt": Out(1),
        }
        for name in ARGUMENTS:
            members[name] = Out(64)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        bus = self.s_axi_control

        auto_restart = Signal()
        done_sticky = Signal()
        ready_sticky = Signal()
        gie = Signal()
        ier = Signal(2)
        isr = Signal(2)
        arg_regs = {name: getattr(self, name) for name in ARGUMENTS}

        # ---- write channel: take AW and W together, answer with B
        write_fire = Signal()
        m.d.comb += [
            write_fire.eq(bus.awvalid & bus.wvalid & ~bus.bvalid),
            bus.awready.eq(write_fire),
            bus.wready.eq(write_fire),
            bus.bresp.eq(0),
        ]
        with m.If(bus.bvalid & bus.bready):
            m.d.sync += bus.bvalid.eq(0)
        with m.If(write_fire):
            m.d.sync += bus.bvalid.eq(1)

        written = Signal(32)
        address = Signal(CONTROL_ADDRESS_WIDTH)
        m.d.comb += address.eq(bus.awaddr & ~0x3)

        # ---- read channel: one outstanding read
        read_fire = Signal()
        read_address = Signal(CONTROL_ADDRESS_WIDTH)
        m.d.comb += [
            read_fire.eq(bus.arvalid & ~bus.rvalid),
            bus.arready.eq(~bus.rvalid),
            read_address.eq(bus.araddr & ~0x3),
            bus.rresp.eq(0),
        ]
        with m.If(bus.rvalid & bus.rready):
            m.d.sync += bus.rvalid.eq(0)

        read_value = Signal(32)
        with m.Switch(read_address):
            with m.Case(_CTRL):
                m.d.comb += read_value.eq(
                    self.start | (done_sticky << 1) | (self.idle << 2) | (ready_sticky << 3) | (auto_restart << 7))
            with m.Case(_GIE):
                m.d.comb += read_value.eq(gie)
            with m.Case(_IER):
                m.d.comb += read_value.eq(ier)
            with m.Case(_ISR):
                m.d.comb += read_value.eq(isr)
            for name, (lo, hi) in ARGUMENTS.items():
                with m.Case(lo):
                    m.d.comb += read_value.eq(arg_regs[name][:32])
                with m.Case(hi):
                    m.d.comb += read_value.eq(arg_regs[name][32:])
        read_ctrl = Signal()
        with m.If(read_fire):
            m.d.sync += [bus.rvalid.eq(1), bus.rdata.eq(read_value)]
            m.d.comb += read_ctrl.eq(read_address == _CTRL)

        # ---- ap_ctrl_hs
        with m.If(self.ready):
            m.d.sync += self.start.eq(auto_restart)
        with m.If(read_ctrl):
            m.d.sync += [done_sticky.eq(0), ready_sticky.eq(0)]
        with m.If(self.done):
            m.d.sync += done_sticky.eq(1)
        with m.If(self.ready):
            m.d.sync += ready_sticky.eq(1)

        # ---- register writes (byte strobes honoured)
        for b in range(4):
            m.d.comb += written[8 * b:8 * b + 8].eq(bus.wdata[8 * b:8 * b + 8])
        strb = bus.wstrb

        def write_reg(reg, lo_bit=0):
            """Byte-strobed write of the 32-bit slice reg[lo_bit:lo_bit+32]."""
            for b in range(4):
                sl = slice(lo_bit + 8 * b, lo_bit + 8 * b + 8)
                if sl.start >= len(reg):
                    continue
                with m.If(strb[b]):
                    m.d.sync += reg[sl].eq(written[8 * b:8 * b + 8])

        isr_next = Signal(2)
        m.d.comb += isr_next.eq(isr | (ier & (self.ready << 1 | self.done)))
        isr_write = Signal()
        with m.If(write_fire):
            with m.Switch(address):
                with m.Case(_CTRL):
                    with m.If(strb[0]):
                        with m.If(written[0]):
                            m.d.sync += self.start.eq(1)
                        m.d.sync += auto_restart.eq(written[7])
                with m.Case(_GIE):
                    with m.If(strb[0]):
                        m.d.sync += gie.eq(written[0])
                with m.Case(_IER):
                    with m.If(strb[0]):
                        m.d.sync += ier.eq(written[:2])
                with m.Case(_ISR):
                    with m.If(strb[0]):
                        m.d.comb += isr_write.eq(1)
                for name, (lo, hi) in ARGUMENTS.items():
                    with m.Case(lo):
                        write_reg(arg_regs[name], 0)
                    with m.Case(hi):
                        write_reg(arg_regs[name], 32)
        with m.If(isr_write):
            m.d.sync += isr.eq(isr_next ^ written[:2])
        with m.Else():
            m.d.sync += isr.eq(isr_next)
        m.d.comb += self.interrupt.eq(gie & isr.any())
        return m
