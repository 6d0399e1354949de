"""The kernel testbench: clock, reset, the control master, the storage model and device memory.

House style (cocotbext-axi): a TB class owns the clock, the bus models and the backpressure
generators; the cocotb tests in :mod:`smartsage.cosim.kernel_cocotb` are thin scenarios over it.
"""

from __future__ import annotations

import time

import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import First, RisingEdge, Timer
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from smartsage.rtl.control import ARGUMENTS, register_offset
from smartsage.rtl.kernel import storage_master_names
from smartsage.spec.config import KernelConfig

from .axi_responder import AxiReadResponder, AxiWriteResponder, Backpressure
from .device_memory import DeviceMemory
from .storage import SsdTiming, StorageModel

__all__ = ["KernelTB", "DEVICE_MEMORY_LATENCY", "CTRL_AP_DONE", "CTRL_AP_IDLE"]

#: Device-memory (DDR) read latency in cycles.
DEVICE_MEMORY_LATENCY = 20
CTRL_AP_START, CTRL_AP_DONE, CTRL_AP_IDLE = 0x1, 0x2, 0x4


class KernelTB:
    """Owns the kernel's environment for one co-simulation.

    Parameters
    ----------
    dut :
        The cocotb handle of the kernel toplevel.
    config : KernelConfig
        The build's configuration (clock for the timing model).
    image_path :
        The storage image (memory-mapped, not copied).
    timing : SsdTiming
        Storage timing model.
    backpressure : Backpressure
        Random idle/backpressure on every AXI channel.
    image_base : int
        Storage address of the image.
    """

    def __init__(self, dut, config: KernelConfig, image_path, timing: SsdTiming, backpressure: Backpressure,
                 image_base: int = 1 << 36):
        self.dut = dut
        self.config = config
        self.period_ps = round(1e6 / config.clock_mhz)
        self.image_base = image_base
        self.backpressure = backpressure
        # the clock toggles in the GPI layer (C++), not in a Python coroutine: no Python per cycle
        self._clock = Clock(dut.clk, self.period_ps, unit="ps", impl="gpi")
        self._clock.start()
        self.control = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi_control_"), dut.clk, dut.rst)
        self.storage = StorageModel(image_path, timing, config.clock_mhz, base=image_base)
        self.memory = DeviceMemory(64)
        # the sequencer's read master and one per lane, all served by the one storage model (one
        # IOPS ceiling, one cache, one read account)
        self.storage_ports = [
            AxiReadResponder(dut, name, dut.clk, self.period_ps, self.storage.read,
                             self.storage.ready_cycle, backpressure, salt=1 if number == 0 else 10 + number,
                             accepted=self.storage.accept)
            for number, name in enumerate(storage_master_names(config))]
        self.storage_port = self.storage_ports[0]
        self.memory_read_port = AxiReadResponder(
            dut, "m_axi_mem", dut.clk, self.period_ps, lambda r: self.memory.read(r),
            lambda r: r.cycle + DEVICE_MEMORY_LATENCY, backpressure, salt=2)
        self.memory_write_port = AxiWriteResponder(dut, "m_axi_mem", dut.clk, self.period_ps,
                                                   lambda r: self.memory.write(r), backpressure, salt=3)

    def cycle(self) -> int:
        return self.storage_port.cycle()

    @property
    def storage_transactions(self) -> int:
        """Storage read transactions served, all lanes' masters together."""
        return sum(port.transactions for port in self.storage_ports)

    async def reset(self) -> None:
        self.dut.rst.value = 1
        for _ in range(4):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    async def write_argument(self, name: str, value: int) -> None:
        lo, hi = ARGUMENTS[name]
        await self.control.write_dword(lo, value & 0xFFFFFFFF)
        await self.control.write_dword(hi, value >> 32)

    async def read_register(self, name: str) -> int:
        return await self.control.read_dword(register_offset(name))

    def load_memory(self, initial: np.ndarray) -> None:
        self.memory.data = initial.copy()
        self.memory.writes.clear()
        self.memory.write_failures.clear()

    async def run_command(self, descriptor_addr: int, watchdog_cycles: int, image_offset: int = 0) -> dict:
        """Start one command and wait for ap_done (interrupt); returns timing, whether it hung and the
        storage reads it issued (``storage_account``: :meth:`~smartsage.cosim.storage.ReadAccount.to_dict`)."""
        await self.write_argument("image", self.image_base + image_offset)
        await self.write_argument("descriptor", descriptor_addr)
        await self.control.write_dword(register_offset("GIE"), 1)
        await self.control.write_dword(register_offset("IER"), 1)
        self.storage.begin_command()  # the kernel is idle: every storage read from here on is this command's
        start_wall = time.perf_counter()
        start_cycle = self.cycle()
        await self.control.write_dword(register_offset("CTRL"), CTRL_AP_START)
        deadline = Timer(watchdog_cycles * self.period_ps, unit="ps")
        fired = await First(RisingEdge(self.dut.interrupt), deadline)
        end_cycle = self.cycle()
        wall = time.perf_counter() - start_wall
        hung = fired is deadline
        ctrl = await self.read_register("CTRL")
        isr = await self.read_register("ISR")
        await self.control.write_dword(register_offset("ISR"), isr)  # toggle-on-write clears
        after = await self.read_register("CTRL")
        return {"hung": hung, "ctrl": ctrl, "ctrl_after_read": after, "isr": isr,
                "storage_account": self.storage.command.to_dict(),
                "interrupt_after_clear": int(self.dut.interrupt.value),
                "cycles": end_cycle - start_cycle, "wall_s": wall}
