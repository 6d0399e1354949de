"""The driver's device interface on a real card through XRT's Python bindings (``pyxrt``).

:class:`XrtDevice` has the methods and members of :class:`smartsage.host.device.Device` that
:class:`~smartsage.host.driver.SamplerDriver` and the training samplers use (``alloc``, ``kernel``,
``reset_allocations``, ``image``, ``image_address``, ``config``, ``link``, ``backend``, ``close``), so the host
code that runs on the simulated device runs unchanged on a SmartSSD or an Alveo card::

    from smartsage.host.driver import SamplerDriver
    from smartsage.host.xrt import XrtDevice

    with XrtDevice("graph.img", "smartsage.xclbin", config="default") as device:
        batch = SamplerDriver(device).sample(targets, (25, 10), seed=1, aggregate=True)

pyxrt calls used (XRT's documented Python API; a test runs this module against a fake that implements
exactly these): ``pyxrt.device(index)``, ``pyxrt.xclbin(path)``, ``device.register_xclbin(xclbin)``,
``xclbin.get_uuid()``, ``pyxrt.hw_context(device, uuid)``, ``pyxrt.kernel(context, name)``,
``kernel.group_id(arg)``, ``pyxrt.bo(device, size, flags, group)``, ``pyxrt.bo.normal`` / ``pyxrt.bo.p2p``,
``bo.address()``, ``bo.size()``, ``bo.write(buffer, offset)``, ``bo.read(size, offset)``, ``bo.map()``,
``bo.sync(direction, size, offset)``, ``pyxrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE`` /
``XCL_BO_SYNC_BO_FROM_DEVICE``, ``kernel(*args)`` -> run, ``run.wait(timeout_ms)``, ``run.state()`` and
``pyxrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED``.

The image: each kernel argument is a buffer object in the memory bank its AXI master is linked to
(``kernel.group_id``; ``smartsage rtl package`` writes the link config). With ``image_placement="copy"``
the image file is written into a device buffer across PCIe (images that fit the card's DDR, 4 GiB on the
SmartSSD); with ``"p2p"`` the buffer is a peer-to-peer buffer (``pyxrt.bo.p2p``) and the image is read from
the file straight into its mapping, which XRT and the NVMe driver turn into SSD-to-FPGA transfers when the
file lies on the SmartSSD's own SSD (docs/synthesis.md, "Where a SmartSSD's FPGA gets its pages").
"""

from __future__ import annotations

import importlib
import os
import pathlib

import numpy as np

from smartsage.spec.config import CONFIGS, KernelConfig, get_config
from smartsage.spec.descriptor import BUFFER_ALIGN, KERNEL_ARGUMENTS
from smartsage.spec.golden import SampleStats
from smartsage.spec.image import GraphImage, verify_image

from .device import DeviceMemoryError, LinkCounters, RunState, SyncDirection

__all__ = ["XrtDevice", "XrtBufferObject", "XrtKernel", "XrtRun", "XrtError", "load_pyxrt", "KERNEL_NAME"]

#: The kernel's name in the xclbin (``smartsage.rtl.kernel_xml.VITIS_TOP_NAME``, kept as text so importing
#: this module needs no gateware).
KERNEL_NAME = "smartsage_kernel"
#: Bytes per chunk when the image is written into a device buffer.
_CHUNK = 64 << 20


class XrtError(RuntimeError):
    """pyxrt is missing, or the card did something the driver cannot use (the message says what)."""


def load_pyxrt(module=None):
    """``module`` when given (a test's fake), else ``import pyxrt``.

    Raises
    ------
    XrtError
        pyxrt is not importable (install XRT and source ``/opt/xilinx/xrt/setup.sh``).
    """
    if module is not None:
        return module
    try:
        return importlib.import_module("pyxrt")
    except ImportError as err:
        raise XrtError("pyxrt is not importable: install XRT and `source /opt/xilinx/xrt/setup.sh` "
                       f"({err})") from None


class XrtBufferObject:
    """A ``pyxrt.bo`` with the simulated :class:`~smartsage.host.device.BufferObject`'s methods."""

    def __init__(self, device: XrtDevice, bo, size: int):
        self.device = device
        self.bo = bo
        self.size = size

    def address(self) -> int:
        return int(self.bo.address())

    def _check(self, size: int, offset: int) -> None:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise DeviceMemoryError(f"access of {size} bytes at offset {offset} is outside a {self.size}-byte buffer")

    def write(self, data, offset: int = 0) -> None:
        raw = np.frombuffer(memoryview(data).cast("B"), np.uint8)
        self._check(raw.size, offset)
        self.bo.write(raw, offset)

    def read(self, size: int | None = None, offset: int = 0) -> np.ndarray:
        size = self.size - offset if size is None else size
        self._check(size, offset)
        return np.frombuffer(bytes(memoryview(self.bo.read(size, offset)).cast("B")), np.uint8).copy()

    def sync(self, direction: SyncDirection, size: int | None = None, offset: int = 0) -> None:
        size = self.size - offset if size is None else size
        self._check(size, offset)
        pyxrt = self.device.pyxrt
        if direction is SyncDirection.TO_DEVICE:
            self.bo.sync(pyxrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE, size, offset)
            self.device.link.bytes_to_device += size
        else:
            self.bo.sync(pyxrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE, size, offset)
            self.device.link.bytes_to_host += size

    def fill(self, value: int) -> None:
        """Fill the buffer with ``value`` and sync it to the card (the simulated device writes its memory directly)."""
        self.write(np.full(self.size, value, np.uint8))
        self.sync(SyncDirection.TO_DEVICE)


class XrtRun:
    """A started command (``pyxrt.run``)."""

    def __init__(self, run, pyxrt):
        self.run = run
        self._pyxrt = pyxrt

    def _state(self, state) -> RunState:
        if state == self._pyxrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED:
            return RunState.COMPLETED
        raise XrtError(f"the kernel run ended in state {state} (not completed): see xbutil examine / dmesg")

    def wait(self, timeout_ms: int = 0) -> RunState:
        return self._state(self.run.wait(timeout_ms))

    def state(self) -> RunState:
        return self._state(self.run.state())


class XrtKernel:
    """The sampler kernel (``pyxrt.kernel``), called with the storage and device addresses the driver uses.

    The kernel's arguments are pointers; XRT passes buffer objects, so each address is mapped back to the
    buffer that starts there (the image buffer, the descriptor buffer).
    """

    ARGUMENTS = tuple(KERNEL_ARGUMENTS)

    def __init__(self, device: XrtDevice):
        self.device = device

    def __call__(self, image_addr: int, descriptor_addr: int) -> XrtRun:
        device = self.device
        args = []
        for name, address in zip(self.ARGUMENTS, (image_addr, descriptor_addr), strict=True):
            buffer = device.buffer_at(address)
            if buffer is None:
                raise XrtError(f"kernel argument {name}: no buffer object of this device starts at {address:#x}")
            args.append(buffer.bo)
        device.link.commands += 1
        return XrtRun(device.kernel_handle(*args), device.pyxrt)


class _XrtBackend:
    """What the training samplers read of a device's backend: a name and the last command's storage stats."""

    name = "xrt"
    counts_pages = False

    def __init__(self):
        self.last_stats = SampleStats()


class XrtDevice:
    """A card running the smartsage kernel, with the storage image in its memory.

    Parameters
    ----------
    image:
        Storage image path (verified first unless ``verify=False``).
    xclbin:
        The linked FPGA binary (``v++ --link`` of ``smartsage rtl package``'s output).
    config:
        The kernel build's configuration (its name or the object), as packaged.
    device_index:
        ``pyxrt.device(index)``.
    image_placement:
        ``"copy"`` (write the file into a device buffer) or ``"p2p"`` (read it into a P2P buffer).
    pyxrt_module:
        A stand-in for ``pyxrt`` (tests); default: ``import pyxrt``.

    Raises
    ------
    XrtError
        pyxrt is missing.
    ImageFormatError
        The image fails verification.
    """

    def __init__(self, image: str | os.PathLike, xclbin: str | os.PathLike, config: KernelConfig | str = "default",
                 device_index: int = 0, image_placement: str = "copy", kernel_name: str = KERNEL_NAME,
                 verify: bool = True, pyxrt_module=None):
        if image_placement not in ("copy", "p2p"):
            raise ValueError(f"Image placement must be 'copy' or 'p2p', not {image_placement!r}")
        self.pyxrt = load_pyxrt(pyxrt_module)
        self.config = get_config(config) if isinstance(config, str) else (config or CONFIGS["default"])
        self.link = LinkCounters()
        self.backend = _XrtBackend()
        self.image = GraphImage(image)
        self._buffers: dict[int, XrtBufferObject] = {}
        try:
            if verify:
                verify_image(self.image)
            pyxrt = self.pyxrt
            self.handle = pyxrt.device(device_index)
            self.xclbin = pyxrt.xclbin(os.fspath(xclbin))
            self.handle.register_xclbin(self.xclbin)
            self.context = pyxrt.hw_context(self.handle, self.xclbin.get_uuid())
            self.kernel_handle = pyxrt.kernel(self.context, kernel_name)
            self._image_bo = self._place_image(image_placement)
        except BaseException:
            self.image.close()
            raise

    # ---------------------------------------------------------------- memory
    def _bo(self, size: int, argument: str, flags=None) -> XrtBufferObject:
        pyxrt = self.pyxrt
        group = self.kernel_handle.group_id(XrtKernel.ARGUMENTS.index(argument))
        bo = pyxrt.bo(self.handle, size, pyxrt.bo.normal if flags is None else flags, group)
        return XrtBufferObject(self, bo, size)

    def _place_image(self, placement: str) -> XrtBufferObject:
        path = pathlib.Path(self.image.path)
        size = path.stat().st_size
        if placement == "copy":
            buffer = self._bo(size, "image")
            with open(path, "rb") as f:
                for offset in range(0, size, _CHUNK):
                    buffer.write(f.read(_CHUNK), offset)
            buffer.sync(SyncDirection.TO_DEVICE)
        else:
            buffer = self._bo(size, "image", self.pyxrt.bo.p2p)
            view = memoryview(buffer.bo.map()).cast("B")
            with open(path, "rb", buffering=0) as f:
                done = 0
                while done < size:
                    n = f.readinto(view[done:min(done + _CHUNK, size)])
                    if not n:
                        raise XrtError(f"{path} ended after {done} of {size} bytes")
                    done += n
        self._buffers[buffer.address()] = buffer
        return buffer

    @property
    def image_address(self) -> int:
        """Device address of the image buffer (the ``image`` argument)."""
        return self._image_bo.address()

    def buffer_at(self, address: int) -> XrtBufferObject | None:
        return self._buffers.get(int(address))

    def alloc(self, size: int, align: int = 4096) -> XrtBufferObject:
        """A buffer in the bank of ``m_axi_mem`` (the descriptor's and the outputs' master)."""
        if size <= 0:
            raise ValueError(f"Buffer size must be positive, not {size!r}")
        if align % BUFFER_ALIGN:
            raise ValueError(f"Buffer alignment must be a multiple of {BUFFER_ALIGN}, not {align!r}")
        buffer = self._bo(size, "descriptor")
        if buffer.address() % align:
            raise XrtError(f"XRT placed a buffer at {buffer.address():#x}, not aligned to {align}")
        self._buffers[buffer.address()] = buffer
        return buffer

    def reset_allocations(self) -> None:
        """Release every buffer but the image's (XRT frees a buffer object when its last reference goes)."""
        self._buffers = {self._image_bo.address(): self._image_bo}

    def kernel(self) -> XrtKernel:
        return XrtKernel(self)

    def close(self) -> None:
        self._buffers = {}
        if self.image is not None:
            self.image.close()
        self.image = None

    def __enter__(self) -> XrtDevice:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
