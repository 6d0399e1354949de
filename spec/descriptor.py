"""The batch descriptor, the result header, the status codes and the kernel's register map.

One command per mini-batch: the host writes a :data:`DESCRIPTOR` record into device memory, writes
the image's storage address and the descriptor's address into the kernel arguments and sets
``ap_start``. The device writes its outputs and a :data:`RESULT_HEADER` record, then raises
``ap_done``. Every implementation (golden, RTL, HLS) and the driver use these tables; the RTL builds
its Amaranth layouts from them and ``hls/`` gets a generated header (``smartsage.spec.descriptor``
``--c-header``), checked against this file by a test. docs/spec.md holds the semantics.
"""

from __future__ import annotations

import dataclasses
import enum
import struct

__all__ = [
    "DESCRIPTOR_MAGIC", "DESCRIPTOR_VERSION", "DESCRIPTOR_SIZE", "RESULT_HEADER_SIZE",
    "SPEC_MAX_FANOUT", "SPEC_MAX_HOPS", "BUFFER_ALIGN", "Flags", "Status", "Descriptor",
    "ResultHeader", "DESCRIPTOR_FIELDS", "RESULT_FIELDS", "REGISTERS", "KERNEL_ARGUMENTS",
]

DESCRIPTOR_MAGIC = 0x43445353  # b"SSDC" little-endian
DESCRIPTOR_VERSION = 1
DESCRIPTOR_SIZE = 128
RESULT_HEADER_SIZE = 64
#: Upper bounds of the format; a kernel build may accept less (KernelConfig.max_fanout/max_hops).
SPEC_MAX_FANOUT = 1024
SPEC_MAX_HOPS = 4
#: Every buffer pointer (descriptor, node list, counts, self, sum, result) is aligned to this.
BUFFER_ALIGN = 64


class Flags(enum.IntFlag):
    AGGREGATE = 1 << 0  # gather the last frontier's features and sum its last-hop neighbors' features


class Status(enum.IntEnum):
    """Result status codes. The host raises an exception naming the cause for every non-zero code."""

    OK = 0
    BAD_IMAGE = 1           # image header at the storage address is not a version-1 image
    BAD_DESCRIPTOR = 2      # error_value: byte offset of the offending descriptor field
    NODE_OUT_OF_RANGE = 3   # error_hop, error_index (frontier position), error_value (node id)
    COUNTS_CAPACITY = 4     # error_hop, error_value: counts entries needed
    NODES_CAPACITY = 5      # error_hop, error_index, error_value: node-list entries needed
    FEATURES_CAPACITY = 6   # error_value: bytes needed (self or sum buffer, error_index 0 or 1)
    STORAGE_ERROR = 7       # an AXI read answered SLVERR/DECERR; error_value: address
    OUTPUT_ERROR = 8        # an AXI write answered SLVERR/DECERR; error_value: address

    @property
    def meaning(self) -> str:
        return _STATUS_MEANING[self]


_STATUS_MEANING = {
    Status.OK: "success",
    Status.BAD_IMAGE: "the storage address does not hold a version-1 smartsage image",
    Status.BAD_DESCRIPTOR: "malformed descriptor",
    Status.NODE_OUT_OF_RANGE: "node id out of range",
    Status.COUNTS_CAPACITY: "counts buffer too small",
    Status.NODES_CAPACITY: "node-list buffer too small",
    Status.FEATURES_CAPACITY: "feature output buffer too small",
    Status.STORAGE_ERROR: "storage read error",
    Status.OUTPUT_ERROR: "output write error",
}

# (name, struct code, offset, meaning): the one definition of the descriptor record.
DESCRIPTOR_FIELDS: tuple[tuple[str, str, int, str], ...] = (
    ("magic", "I", 0, f"{DESCRIPTOR_MAGIC:#010x} (`SSDC`)"),
    ("version", "H", 4, f"{DESCRIPTOR_VERSION}"),
    ("flags", "H", 6, "bit 0 AGGREGATE; other bits zero"),
    ("seed", "Q", 8, "u64 seed of the counter-based RNG"),
    ("num_targets", "I", 16, "B >= 1 target nodes, written by the host at nodes[0:B]"),
    ("num_hops", "I", 20, "L, 1..max_hops"),
    ("fanout0", "H", 24, "k_0, fanout of hop 0 (from the targets; PyG order)"),
    ("fanout1", "H", 26, "k_1 (0 when L <= 1)"),
    ("fanout2", "H", 28, "k_2 (0 when L <= 2)"),
    ("fanout3", "H", 30, "k_3 (0 when L <= 3)"),
    ("nodes_ptr", "Q", 32, "node list: targets, then every hop's sampled neighbors (id width)"),
    ("nodes_capacity", "Q", 40, "entries of the node list buffer"),
    ("counts_ptr", "Q", 48, "u32 sample count per frontier entry, hop after hop"),
    ("counts_capacity", "Q", 56, "entries of the counts buffer"),
    ("self_ptr", "Q", 64, "AGGREGATE: feature rows of the last frontier (image dtype)"),
    ("self_capacity", "Q", 72, "bytes of the self buffer"),
    ("sum_ptr", "Q", 80, "AGGREGATE: neighbor feature sums of the last frontier (fp32 or i32)"),
    ("sum_capacity", "Q", 88, "bytes of the sum buffer"),
    ("result_ptr", "Q", 96, f"result header ({RESULT_HEADER_SIZE} bytes)"),
    ("reserved0", "Q", 104, "zero"),
    ("reserved1", "Q", 112, "zero"),
    ("reserved2", "Q", 120, "zero"),
)

RESULT_FIELDS: tuple[tuple[str, str, int, str], ...] = (
    ("status", "I", 0, "Status code"),
    ("error_hop", "I", 4, "hop of the error (0 otherwise)"),
    ("error_index", "Q", 8, "frontier position of the error (0 otherwise)"),
    ("error_value", "Q", 16, "offending value: node id, entries or bytes needed, field offset, address"),
    ("nodes_written", "Q", 24, "entries of the node list in use, targets included"),
    ("counts_written", "Q", 32, "entries of the counts buffer written"),
    ("edges_sampled", "Q", 40, "sampled edges over all hops (= nodes_written - num_targets)"),
    ("storage_bytes", "Q", 48, "bytes read from storage (implementation counter, not compared)"),
    ("cycles", "Q", 56, "kernel cycles from ap_start to ap_done (implementation counter, not compared)"),
)
#: Result fields that every implementation must produce identically (the rest are counters).
RESULT_SPEC_FIELDS = ("status", "error_hop", "error_index", "error_value", "nodes_written",
                      "counts_written", "edges_sampled")


def _struct(fields) -> struct.Struct:
    s = struct.Struct("<" + "".join(code for _, code, _, _ in fields))
    offsets = [struct.calcsize("<" + "".join(c for _, c, _, _ in fields[:i])) for i in range(len(fields))]
    assert offsets == [off for _, _, off, _ in fields], "field offsets must match the packed layout"
    return s


DESCRIPTOR_STRUCT = _struct(DESCRIPTOR_FIELDS)
RESULT_STRUCT = _struct(RESULT_FIELDS)
assert DESCRIPTOR_STRUCT.size == DESCRIPTOR_SIZE and RESULT_STRUCT.size == RESULT_HEADER_SIZE


@dataclasses.dataclass
class Descriptor:
    """One mini-batch command. ``fanouts`` has ``num_hops`` entries, hop 0 (from the targets) first."""

    seed: int
    num_targets: int
    fanouts: tuple[int, ...]
    nodes_ptr: int = 0
    nodes_capacity: int = 0
    counts_ptr: int = 0
    counts_capacity: int = 0
    self_ptr: int = 0
    self_capacity: int = 0
    sum_ptr: int = 0
    sum_capacity: int = 0
    result_ptr: int = 0
    flags: int = 0
    magic: int = DESCRIPTOR_MAGIC
    version: int = DESCRIPTOR_VERSION

    @property
    def num_hops(self) -> int:
        return len(self.fanouts)

    @property
    def aggregate(self) -> bool:
        return bool(self.flags & Flags.AGGREGATE)

    def pack(self) -> bytes:
        fanouts = list(self.fanouts) + [0] * (SPEC_MAX_HOPS - len(self.fanouts))
        if len(fanouts) != SPEC_MAX_HOPS:
            raise ValueError(f"At most {SPEC_MAX_HOPS} hops fit a descriptor, not {len(self.fanouts)}")
        return DESCRIPTOR_STRUCT.pack(
            self.magic, self.version, self.flags, self.seed, self.num_targets, len(self.fanouts),
            *fanouts, self.nodes_ptr, self.nodes_capacity, self.counts_ptr, self.counts_capacity,
            self.self_ptr, self.self_capacity, self.sum_ptr, self.sum_capacity, self.result_ptr, 0, 0, 0)

    @classmethod
    def unpack_raw(cls, data: bytes) -> dict[str, int]:
        """Every field by name, unchecked (validation is part of the command semantics)."""
        return dict(zip([f[0] for f in DESCRIPTOR_FIELDS], DESCRIPTOR_STRUCT.unpack(bytes(data[:DESCRIPTOR_SIZE])),
                        strict=True))


@dataclasses.dataclass
class ResultHeader:
    status: int = Status.OK
    error_hop: int = 0
    error_index: int = 0
    error_value: int = 0
    nodes_written: int = 0
    counts_written: int = 0
    edges_sampled: int = 0
    storage_bytes: int = 0
    cycles: int = 0

    def pack(self) -> bytes:
        return RESULT_STRUCT.pack(*(int(getattr(self, f[0])) for f in RESULT_FIELDS))

    @classmethod
    def unpack(cls, data: bytes) -> ResultHeader:
        return cls(*RESULT_STRUCT.unpack(bytes(data[:RESULT_HEADER_SIZE])))

    def spec_fields(self) -> dict[str, int]:
        return {name: int(getattr(self, name)) for name in RESULT_SPEC_FIELDS}

    def describe(self) -> str:
        """One line naming the status and what its ``error_*`` fields mean (docs/spec.md section 5)."""
        try:
            status = Status(self.status)
        except ValueError:
            return f"unknown status code {self.status}"
        h, i, v = self.error_hop, self.error_index, self.error_value
        detail = {
            Status.OK: "",
            Status.BAD_IMAGE: "",
            Status.BAD_DESCRIPTOR: f" (field at byte offset {v})",
            Status.NODE_OUT_OF_RANGE: f": node {v} at hop {h}, frontier position {i}",
            Status.COUNTS_CAPACITY: f": hop {h} needs {v} entries",
            Status.NODES_CAPACITY: f": hop {h}, frontier position {i} needs {v} entries",
            Status.FEATURES_CAPACITY: f": the {'self' if i == 0 else 'sum'} buffer needs {v} bytes",
            Status.STORAGE_ERROR: f" at storage address {v:#x}",
            Status.OUTPUT_ERROR: f" at device address {v:#x}",
        }[status]
        return f"{status.name} ({status.meaning}){detail}"


def descriptor_field_offset(name: str) -> int:
    for field, _, offset, _ in DESCRIPTOR_FIELDS:
        if field == name:
            return offset
    raise KeyError(name)


# Kernel register map (AXI4-Lite s_axi_control, Vitis RTL-kernel convention, ap_ctrl_hs).
# (name, offset, access, meaning). The RTL control block, kernel.xml and the docs use this table.
REGISTERS: tuple[tuple[str, int, str, str], ...] = (
    ("CTRL", 0x00, "rw", "bit 0 ap_start (W1, self-clearing), 1 ap_done (COR), 2 ap_idle, 3 ap_ready (COR), "
                         "7 auto_restart"),
    ("GIE", 0x04, "rw", "bit 0 global interrupt enable"),
    ("IER", 0x08, "rw", "bit 0 ap_done interrupt enable, bit 1 ap_ready interrupt enable"),
    ("ISR", 0x0C, "rw", "bit 0 ap_done, bit 1 ap_ready (toggle on write 1)"),
    ("image_lo", 0x10, "rw", "storage address of the image, bits 31:0"),
    ("image_hi", 0x14, "rw", "storage address of the image, bits 63:32"),
    ("descriptor_lo", 0x18, "rw", "device-memory address of the descriptor, bits 31:0"),
    ("descriptor_hi", 0x1C, "rw", "device-memory address of the descriptor, bits 63:32"),
)


def _kernel_arguments() -> dict[str, tuple[int, int]]:
    args: dict[str, list] = {}
    for name, offset, _, _ in REGISTERS:
        if offset < 0x10:
            continue
        base, half = name.rsplit("_", 1)
        if half not in ("lo", "hi"):
            raise ValueError(f"Kernel argument register {name!r} must end in _lo or _hi")
        args.setdefault(base, [None, None])[half == "hi"] = offset
    for base, (lo, hi) in args.items():
        if lo is None or hi is None:
            raise ValueError(f"Kernel argument {base!r} needs both _lo and _hi registers")
    return {base: (lo, hi) for base, (lo, hi) in args.items()}


#: 64-bit kernel arguments in register order: name -> (offset of bits 31:0, offset of bits 63:32).
KERNEL_ARGUMENTS = _kernel_arguments()


def c_header() -> str:
    """hls/include/smartsage_layout.h, generated from the tables above."""
    types = {"I": "uint32_t", "H": "uint16_t", "Q": "uint64_t"}
    out = [
        "// Generated by `python -m smartsage.spec.descriptor --c-header`; do not edit.",
        "// tests check that this file matches smartsage/spec/descriptor.py.",
        "#pragma once",
        "#include <stdint.h>",
        "",
        f"#define SMARTSAGE_DESCRIPTOR_MAGIC {DESCRIPTOR_MAGIC:#010x}u",
        f"#define SMARTSAGE_DESCRIPTOR_VERSION {DESCRIPTOR_VERSION}",
        f"#define SMARTSAGE_DESCRIPTOR_SIZE {DESCRIPTOR_SIZE}",
        f"#define SMARTSAGE_RESULT_HEADER_SIZE {RESULT_HEADER_SIZE}",
        f"#define SMARTSAGE_SPEC_MAX_FANOUT {SPEC_MAX_FANOUT}",
        f"#define SMARTSAGE_SPEC_MAX_HOPS {SPEC_MAX_HOPS}",
        f"#define SMARTSAGE_BUFFER_ALIGN {BUFFER_ALIGN}",
        f"#define SMARTSAGE_FLAG_AGGREGATE {int(Flags.AGGREGATE)}u",
        "",
    ]
    for status in Status:
        out.append(f"#define SMARTSAGE_STATUS_{status.name} {int(status)}")
    out.append("")
    for name, code, offset, _ in DESCRIPTOR_FIELDS:
        out.append(f"#define SMARTSAGE_DESC_{name.upper()}_OFFSET {offset}  // {types[code]}")
    out.append("")
    for name, code, offset, _ in RESULT_FIELDS:
        out.append(f"#define SMARTSAGE_RESULT_{name.upper()}_OFFSET {offset}  // {types[code]}")
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--c-header"]:
        print(c_header(), end="")
    else:
        sys.exit("usage: python -m smartsage.spec.descriptor --c-header")
