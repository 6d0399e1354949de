"""The host's device interface, shaped like XRT's (``pyxrt``): device, buffer objects, kernel, run.

A real SmartSSD backend is a thin adapter: ``Device`` wraps ``pyxrt.device`` and ``xclbin``, a
:class:`BufferObject` wraps ``pyxrt.bo`` (``write``/``read``/``sync`` map one to one), :class:`Kernel`
wraps ``pyxrt.kernel`` and :class:`Run` wraps ``pyxrt.run``. Here a device is simulated by a
:class:`KernelBackend` that executes one command on a flat device memory (``numpy.uint8`` array,
address 0 = element 0) with the storage image as the device's SSD:

============  =====================================================================
backend       executes the command with
============  =====================================================================
``golden``    the golden model (``smartsage.spec.golden.run_command``)
``hls``       the C++ kernel compiled with g++ (``smartsage.host.backends.hls``)
``rtl``       the Amaranth kernel co-simulated on Verilator (``smartsage.host.backends.rtl``)
============  =====================================================================

Every transfer across the host link goes through :meth:`BufferObject.sync` (or ``read``/``write``),
which counts bytes in :class:`LinkCounters`: the "bytes sent to the host" of the I/O report.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from typing import Protocol

import numpy as np

from smartsage.spec.config import KernelConfig
from smartsage.spec.descriptor import BUFFER_ALIGN, KERNEL_ARGUMENTS
from smartsage.spec.image import GraphImage, verify_image

__all__ = ["Device", "BufferObject", "Kernel", "Run", "RunState", "SyncDirection", "KernelBackend",
           "LinkCounters", "DeviceMemoryError"]


class DeviceMemoryError(MemoryError):
    """Device memory exhausted or a buffer access outside its bounds."""


class SyncDirection(enum.Enum):
    TO_DEVICE = "to_device"      # XCL_BO_SYNC_BO_TO_DEVICE
    FROM_DEVICE = "from_device"  # XCL_BO_SYNC_BO_FROM_DEVICE


class RunState(enum.Enum):
    COMPLETED = "completed"      # ERT_CMD_STATE_COMPLETED: ap_done seen


@dataclasses.dataclass
class LinkCounters:
    """Bytes across the host link (PCIe), both directions, and commands issued."""

    bytes_to_device: int = 0
    bytes_to_host: int = 0
    commands: int = 0

    def reset(self) -> None:
        self.bytes_to_device = self.bytes_to_host = self.commands = 0


class KernelBackend(Protocol):
    """What executes one command: reads the descriptor in ``memory``, writes results there."""

    name: str

    def execute(self, image: GraphImage, memory: np.ndarray, image_addr: int, descriptor_addr: int,
                config: KernelConfig) -> None: ...


class BufferObject:
    """A buffer in device memory (``pyxrt.bo``): an address, host writes/reads, and syncs.

    ``write`` and ``read`` stage data in the host-side shadow; ``sync`` moves it across the link and
    counts the bytes. For a simulated device the shadow and the device memory are the same array, so
    ``write``/``read`` move the bytes and ``sync`` only accounts for them.
    """

    def __init__(self, device: Device, address: int, size: int):
        self.device = device
        self._address = address
        self.size = size

    def address(self) -> int:
        return self._address

    def _span(self, size: int, offset: int) -> slice:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise DeviceMemoryError(
                f"access of {size} bytes at offset {offset} is outside a {self.size}-byte buffer")
        return slice(self._address + offset, self._address + offset + size)

    def write(self, data, offset: int = 0) -> None:
        raw = np.frombuffer(memoryview(data).cast("B"), np.uint8)
        self.device.memory[self._span(raw.size, offset)] = raw

    def read(self, size: int | None = None, offset: int = 0) -> np.ndarray:
        size = self.size - offset if size is None else size
        return self.device.memory[self._span(size, offset)].copy()

    def sync(self, direction: SyncDirection, size: int | None = None, offset: int = 0) -> None:
        size = self.size - offset if size is None else size
        self._span(size, offset)
        if direction is SyncDirection.TO_DEVICE:
            self.device.link.bytes_to_device += size
        else:
            self.device.link.bytes_to_host += size

    def fill(self, value: int) -> None:
        self.device.memory[self._span(self.size, 0)] = value


class Run:
    """A started command (``pyxrt.run``); the simulated backends complete it synchronously."""

    def __init__(self, state: RunState):
        self._state = state

    def wait(self, timeout_ms: int = 0) -> RunState:
        return self._state

    def state(self) -> RunState:
        return self._state


class Kernel:
    """The sampler kernel (``pyxrt.kernel``): call it with its register arguments to start a run."""

    #: Argument names in register order (after CTRL/GIE/IER/ISR), from the register map.
    ARGUMENTS = tuple(KERNEL_ARGUMENTS)

    def __init__(self, device: Device):
        self.device = device

    def __call__(self, image_addr: int, descriptor_addr: int) -> Run:
        device = self.device
        device.link.commands += 1
        device.backend.execute(device.image, device.memory, image_addr, descriptor_addr, device.config)
        return Run(RunState.COMPLETED)


class Device:
    """A simulated SSD-attached FPGA: storage holding one image, device memory, one kernel.

    Parameters
    ----------
    backend:
        The :class:`KernelBackend` executing commands.
    image:
        Path of the storage image placed on the device's storage (verified first unless
        ``verify=False``), or an open :class:`GraphImage`.
    config:
        The kernel build's configuration.
    memory_size:
        Bytes of device memory (the SmartSSD has 4 GiB of DDR4; simulation needs far less).

    Raises
    ------
    ImageFormatError
        The image fails verification (a device is never handed a corrupt image silently).
    """

    def __init__(self, backend: KernelBackend, image: str | os.PathLike | GraphImage, config: KernelConfig,
                 memory_size: int = 64 << 20, verify: bool = True):
        if memory_size <= 0 or memory_size % BUFFER_ALIGN:
            raise ValueError(
                f"Device memory size must be a positive multiple of {BUFFER_ALIGN}, not {memory_size!r}")
        self.backend = backend
        self.config = config
        self._owns_image = not isinstance(image, GraphImage)
        self.image = GraphImage(image) if self._owns_image else image
        try:
            if verify:
                verify_image(self.image)
        except BaseException:
            self.close()
            raise
        self.memory = np.zeros(memory_size, np.uint8)
        self.link = LinkCounters()
        self._next_free = BUFFER_ALIGN * 64  # address 0 stays unused: a null pointer is always invalid

    @property
    def image_address(self) -> int:
        """Storage address of the image (one image per device, at the start of the storage window)."""
        return 0

    def alloc(self, size: int, align: int = 4096) -> BufferObject:
        """A buffer of ``size`` bytes (``pyxrt.bo``), aligned to ``align`` (a multiple of 64)."""
        if size <= 0:
            raise ValueError(f"Buffer size must be positive, not {size!r}")
        if align % BUFFER_ALIGN:
            raise ValueError(f"Buffer alignment must be a multiple of {BUFFER_ALIGN}, not {align!r}")
        address = (self._next_free + align - 1) // align * align
        if address + size > self.memory.size:
            raise DeviceMemoryError(
                f"device memory exhausted: {size} bytes requested, {self.memory.size - address} free "
                f"of {self.memory.size}")
        self._next_free = address + size
        return BufferObject(self, address, size)

    def reset_allocations(self) -> None:
        """Free every buffer (buffers already handed out must no longer be used)."""
        self._next_free = BUFFER_ALIGN * 64

    def kernel(self) -> Kernel:
        return Kernel(self)

    def close(self) -> None:
        if self._owns_image and self.image is not None:
            self.image.close()
        self.image = None

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
