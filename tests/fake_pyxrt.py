"""A stand-in for XRT's ``pyxrt`` implementing exactly the documented calls that smartsage.host.xrt uses.

Host and device memory are separate, as on a card: ``bo.write``/``bo.read`` touch the host-side buffer,
``bo.sync`` copies between it and the device memory, ``bo.map()`` of a P2P buffer is the device memory
itself (a BAR window). The kernel executes the command with the golden model on the device memory, after
checking that the image argument's buffer holds a verified image, so every sync the adapter forgets
shows up as a wrong result. Each call checks its argument types and records itself in ``CALLS``.
"""

from __future__ import annotations

import enum
import os
import tempfile

import numpy as np

from smartsage.spec import golden
from smartsage.spec.config import get_config
from smartsage.spec.image import GraphImage

CALLS: list[tuple] = []
MEMORY_SIZE = 64 << 20
KERNEL = "smartsage_kernel"
#: What the next run returns from wait() (a test sets ERT_CMD_STATE_ERROR to model a failed run).
NEXT_STATE = None
CONFIG = "default"


class xclBOSyncDirection(enum.Enum):  # noqa: N801 (pyxrt's names)
    XCL_BO_SYNC_BO_TO_DEVICE = 0
    XCL_BO_SYNC_BO_FROM_DEVICE = 1


class ert_cmd_state(enum.Enum):  # noqa: N801
    ERT_CMD_STATE_COMPLETED = 4
    ERT_CMD_STATE_ERROR = 5
    ERT_CMD_STATE_TIMEOUT = 11


class uuid:  # noqa: N801
    def __init__(self, text):
        self.text = text


class xclbin:  # noqa: N801
    def __init__(self, path: str):
        assert isinstance(path, str), "pyxrt.xclbin takes a path string"
        CALLS.append(("xclbin", path))
        self._uuid = uuid(path)

    def get_uuid(self) -> uuid:
        return self._uuid


class device:  # noqa: N801
    def __init__(self, index: int):
        assert isinstance(index, int)
        CALLS.append(("device", index))
        self.memory = np.zeros(MEMORY_SIZE, np.uint8)
        self.next_free = 1 << 16
        self.registered = None

    def register_xclbin(self, binary: xclbin):
        assert isinstance(binary, xclbin)
        CALLS.append(("register_xclbin",))
        self.registered = binary
        return binary.get_uuid()


class hw_context:  # noqa: N801
    def __init__(self, dev: device, id: uuid):
        assert isinstance(dev, device) and isinstance(id, uuid) and dev.registered is not None
        assert dev.registered.get_uuid() is id, "hw_context needs the uuid of a registered xclbin"
        CALLS.append(("hw_context",))
        self.device = dev


class bo:  # noqa: N801
    normal = "normal"
    p2p = "p2p"

    def __init__(self, dev: device, size: int, flags, group: int):
        assert isinstance(dev, device) and isinstance(size, int) and size > 0
        assert flags in (bo.normal, bo.p2p), f"unknown bo flags {flags!r}"
        assert group in (0, 1), f"memory group {group!r} was not given by kernel.group_id"
        CALLS.append(("bo", size, flags, group))
        self.device = dev
        self._size = size
        self.flags = flags
        self._address = dev.next_free
        dev.next_free = (dev.next_free + size + 4095) // 4096 * 4096
        if dev.next_free > dev.memory.size:
            raise MemoryError("fake device memory exhausted")
        self.host = np.zeros(size, np.uint8)

    def address(self) -> int:
        return self._address

    def size(self) -> int:
        return self._size

    def write(self, data, offset: int):
        raw = np.asarray(data, np.uint8)
        assert raw.ndim == 1 and 0 <= offset and offset + raw.size <= self._size
        self.host[offset:offset + raw.size] = raw

    def read(self, size: int, offset: int) -> np.ndarray:
        assert 0 <= offset and offset + size <= self._size
        return self.host[offset:offset + size].view(np.int8).copy()     # pyxrt returns int8 arrays

    def map(self):
        assert self.flags == bo.p2p, "the fake maps P2P buffers only (a BAR window onto device memory)"
        return memoryview(self.device.memory[self._address:self._address + self._size])

    def sync(self, direction: xclBOSyncDirection, size: int, offset: int):
        assert isinstance(direction, xclBOSyncDirection) and 0 <= offset and offset + size <= self._size
        CALLS.append(("sync", direction.name, size, offset))
        span = slice(self._address + offset, self._address + offset + size)
        if direction is xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE:
            self.device.memory[span] = self.host[offset:offset + size]
        else:
            self.host[offset:offset + size] = self.device.memory[span]


class run:  # noqa: N801
    def __init__(self, state: ert_cmd_state):
        self._state = state

    def wait(self, timeout_ms: int = 0) -> ert_cmd_state:
        assert isinstance(timeout_ms, int)
        return self._state

    def state(self) -> ert_cmd_state:
        return self._state


class kernel:  # noqa: N801
    def __init__(self, context: hw_context, name: str):
        assert isinstance(context, hw_context) and name == KERNEL, f"no kernel {name!r} in the xclbin"
        CALLS.append(("kernel", name))
        self.device = context.device

    def group_id(self, argno: int) -> int:
        assert argno in (0, 1), f"the kernel has two arguments, not {argno}"
        return argno

    def __call__(self, image: bo, descriptor: bo) -> run:
        global NEXT_STATE
        assert isinstance(image, bo) and isinstance(descriptor, bo), "pointer arguments are buffer objects"
        CALLS.append(("run", image.address(), descriptor.address()))
        memory = self.device.memory
        raw = memory[image.address():image.address() + image.size()]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "image.img")
            raw.tofile(path)
            with GraphImage(path) as graph:
                golden.run_command(graph, memory, descriptor.address(), get_config(CONFIG))
        state, NEXT_STATE = NEXT_STATE or ert_cmd_state.ERT_CMD_STATE_COMPLETED, None
        return run(state)
