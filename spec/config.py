"""The one configuration object of a kernel build.

A :class:`KernelConfig` flows from the CLI (``--config NAME`` or ``--config-json``) through the
gateware generator (``smartsage.rtl``), the testbench (``smartsage.cosim``), the golden model (for the
limits a descriptor is checked against) and the reports. Nothing else repeats these constants.
"""

from __future__ import annotations

import dataclasses
import json

from .descriptor import SPEC_MAX_FANOUT, SPEC_MAX_HOPS


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """Parameters of one kernel build.

    Parameters
    ----------
    name:
        Label used for build directories and reports.
    data_width:
        AXI4 data width of the storage and result masters, in bits: 64, 128, 256 or 512.
    lanes:
        Parallel samplers.
    outstanding_reads:
        AXI read transactions the storage read engine keeps in flight (Little's law: 540 K IOPS at
        85 us needs ~46; the default 64 leaves margin).
    max_fanout:
        Largest fanout a descriptor may ask for (size of the sampler's distinct-position set).
    max_hops:
        Largest number of hops a descriptor may ask for (at most the descriptor's 4 fanout slots).
    fifo_depth:
        Depth of the stream FIFOs between blocks.
    clock_mhz:
        Kernel clock used to turn cycle counts into time in reports (SmartSSD kernels close at
        200-300 MHz).

    Raises
    ------
    ValueError
        A parameter outside its range; the message names the parameter.
    """

    name: str = "default"
    data_width: int = 512
    lanes: int = 4
    outstanding_reads: int = 64
    max_fanout: int = 32
    max_hops: int = SPEC_MAX_HOPS
    fifo_depth: int = 16
    clock_mhz: float = 250.0

    def __post_init__(self):
        if self.data_width not in (64, 128, 256, 512):
            raise ValueError(f"Data width must be one of 64, 128, 256, 512 bits, not {self.data_width!r}")
        if not isinstance(self.lanes, int) or not 1 <= self.lanes <= 64:
            raise ValueError(f"Lanes must be an integer in 1..64, not {self.lanes!r}")
        if not isinstance(self.outstanding_reads, int) or not 1 <= self.outstanding_reads <= 256:
            raise ValueError(f"Outstanding reads must be an integer in 1..256, not {self.outstanding_reads!r}")
        if not isinstance(self.max_fanout, int) or not 1 <= self.max_fanout <= SPEC_MAX_FANOUT:
            raise ValueError(
                f"Max fanout must be an integer in 1..{SPEC_MAX_FANOUT}, not {self.max_fanout!r}")
        if not isinstance(self.max_hops, int) or not 1 <= self.max_hops <= SPEC_MAX_HOPS:
            raise ValueError(f"Max hops must be an integer in 1..{SPEC_MAX_HOPS}, not {self.max_hops!r}")
        if not isinstance(self.fifo_depth, int) or self.fifo_depth < 2 or self.fifo_depth & (self.fifo_depth - 1):
            raise ValueError(f"FIFO depth must be a power of two >= 2, not {self.fifo_depth!r}")
        if not self.clock_mhz > 0:
            raise ValueError(f"Clock must be positive (MHz), not {self.clock_mhz!r}")

    @property
    def data_bytes(self) -> int:
        return self.data_width // 8

    @property
    def beat_log2(self) -> int:
        """log2 of the bus's bytes per beat (the byte-offset bits of an address within a beat)."""
        return self.data_bytes.bit_length() - 1

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> KernelConfig:
        values = json.loads(text)
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"Unknown kernel config fields: {', '.join(sorted(unknown))}")
        return cls(**values)

    def replace(self, **changes) -> KernelConfig:
        return dataclasses.replace(self, **changes)


#: Named configurations. ``default`` is the SmartSSD build; the others keep simulation fast.
CONFIGS: dict[str, KernelConfig] = {
    "default": KernelConfig(),
    "small": KernelConfig(name="small", data_width=64, lanes=1, outstanding_reads=16, max_fanout=16,
                          fifo_depth=8),
    "wide2": KernelConfig(name="wide2", data_width=128, lanes=2, outstanding_reads=32, max_fanout=32),
}


def get_config(name: str) -> KernelConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"Unknown kernel config {name!r}; known: {', '.join(CONFIGS)}") from None
