"""The ``golden`` device backend: commands executed by the golden model on the device memory."""

from __future__ import annotations

import numpy as np

from smartsage.spec import golden
from smartsage.spec.config import KernelConfig
from smartsage.spec.descriptor import BUFFER_ALIGN, RESULT_HEADER_SIZE, Descriptor, ResultHeader, Status
from smartsage.spec.image import GraphImage


class GoldenBackend:
    """Executes each command with :func:`smartsage.spec.golden.run_command`.

    The device's storage holds one image at storage address 0; a command naming another storage
    address finds no image header there and ends with ``BAD_IMAGE``, as the kernel would.
    """

    name = "golden"
    #: The read rule counts requests and bytes, not pages: ``last_stats.storage_pages`` stays None.
    counts_pages = False

    def __init__(self):
        #: Read-cost accounting of the last command (read requests by the spec's read rule).
        self.last_stats = golden.SampleStats()

    def execute(self, image: GraphImage, memory: np.ndarray, image_addr: int, descriptor_addr: int,
                config: KernelConfig) -> None:
        if image_addr != 0:
            fields = Descriptor.unpack_raw(memory[descriptor_addr:descriptor_addr + 128].tobytes())
            ptr = fields["result_ptr"]
            self.last_stats = golden.SampleStats()
            if ptr % BUFFER_ALIGN == 0 and ptr + RESULT_HEADER_SIZE <= memory.size:
                memory[ptr:ptr + RESULT_HEADER_SIZE] = np.frombuffer(
                    ResultHeader(status=int(Status.BAD_IMAGE)).pack(), np.uint8)
            return
        self.last_stats = golden.SampleStats()
        golden.run_command(image, memory, descriptor_addr, config, stats=self.last_stats)
