"""Commands, their device-memory layout, and the scoreboard against ``smartsage.spec.golden``.

A :class:`CommandSpec` is what a test asks for (targets, fanouts, seed, capacities, deliberate
faults). :func:`layout_command` places the descriptor, node list, counts and result header in device
memory with guard regions around each. :func:`expected_result` runs the golden model on a copy of the
same memory; :func:`compare` checks the kernel's memory and result against it.

Comparison rules (docs/spec.md section 5):

- OK: the whole device memory must equal the golden model's, byte for byte, except the two counter
  fields of the result header (``storage_bytes``, ``cycles``), which are implementation counters.
- An error: status and ``error_*`` must match; outputs are unspecified but no byte outside the
  node-list, counts, self, sum and result buffers may change.
- AGGREGATE commands are compared like any other: on success the self rows and the sums are part
  of the whole-memory comparison.
- Faults the golden model cannot reproduce (AXI error responses) have explicit expectations: the
  status and the address range the error value must fall in. For a write error that range is set
  after the run to the strobed bytes of the burst that was answered SLVERR (the kernel combines
  fields into bursts; the error value must lie inside the failing write).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from smartsage.rtl.beat_writer import WRITE_BURST_BEATS
from smartsage.spec import golden
from smartsage.spec.config import KernelConfig
from smartsage.spec.descriptor import (
    BUFFER_ALIGN,
    DESCRIPTOR_SIZE,
    RESULT_HEADER_SIZE,
    Descriptor,
    Flags,
    ResultHeader,
    Status,
    descriptor_field_offset,
)
from smartsage.spec.image import MAGIC, VERSION

__all__ = ["CommandSpec", "Layout", "layout_command", "expected_result", "rtl_expectation", "compare",
           "GUARD_BYTES", "FLAGS_OFFSET"]

GUARD_BYTES = 256
FLAGS_OFFSET = descriptor_field_offset("flags")
_COUNTER_FIELDS = ("storage_bytes", "cycles")


@dataclasses.dataclass
class CommandSpec:
    """One command of a co-simulation run.

    ``nodes_capacity``/``counts_capacity``: None sizes the buffer exactly to what the command needs
    (so the capacity checks run at their boundary). ``overrides``: raw descriptor fields written
    over the packed descriptor (malformed descriptors); a string ``"+N"`` adds N to the laid-out
    value. ``storage_errors``: (start, end) offsets *into the image* whose reads answer SLVERR.
    ``write_error``: (buffer name: nodes, counts, self or sum; byte offset) whose write answers SLVERR.
    ``read_error``: (buffer name: nodes or counts; byte offset) whose device-memory read answers SLVERR
    (the counts are read back only by the aggregation).
    ``self_capacity``/``sum_capacity`` (bytes, AGGREGATE): None sizes the buffer exactly. ``image_offset``: the
    image argument points this many bytes into the image (not a header page: BAD_IMAGE).
    """


    targets: list[int]
    fanouts: list[int]
    seed: int
    flags: int = 0
    nodes_capacity: int | None = None
    counts_capacity: int | None = None
    overrides: dict[str, int | str] = dataclasses.field(default_factory=dict)
    storage_errors: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    write_error: tuple[str, int] | None = None
    read_error: tuple[str, int] | None = None
    image_offset: int = 0
    self_capacity: int | None = None
    sum_capacity: int | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> CommandSpec:
        values = dict(values)
        values["storage_errors"] = [tuple(r) for r in values.get("storage_errors", [])]
        for name in ("write_error", "read_error"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls(**values)


@dataclasses.dataclass
class Layout:
    """Where a command's records lie in device memory (byte addresses)."""

    descriptor: int
    nodes: int
    nodes_bytes: int
    counts: int
    counts_bytes: int
    result: int
    size: int
    fields: dict[str, int]
    self_rows: int = 0      # AGGREGATE: the self and sum buffers (0 bytes without)
    self_bytes: int = 0
    sums: int = 0
    sum_bytes: int = 0

    def buffers(self) -> list[tuple[int, int]]:
        """(start, bytes) of every buffer the kernel may write."""
        return [(self.nodes, self.nodes_bytes), (self.counts, self.counts_bytes),
                (self.self_rows, self.self_bytes), (self.sums, self.sum_bytes),
                (self.result, RESULT_HEADER_SIZE)]


def _align(value: int) -> int:
    return (value + BUFFER_ALIGN - 1) // BUFFER_ALIGN * BUFFER_ALIGN


def layout_command(image, spec: CommandSpec, config: KernelConfig) -> tuple[Layout, np.ndarray]:
    """Place ``spec`` in a fresh device memory; returns the layout and the memory's initial bytes."""
    id_size = image.header.index_dtype.itemsize
    nodes_capacity, counts_capacity = spec.nodes_capacity, spec.counts_capacity
    aggregate = bool(spec.flags & Flags.AGGREGATE)
    self_capacity, sum_capacity = (spec.self_capacity, spec.sum_capacity) if aggregate else (0, 0)
    if nodes_capacity is None or counts_capacity is None or self_capacity is None or sum_capacity is None:
        need = golden.sample(image, np.asarray(spec.targets, np.uint64), spec.fanouts, spec.seed,
                             config=config, aggregate=aggregate)
        if nodes_capacity is None:
            nodes_capacity = max(need.node_list.size, len(spec.targets))
        if counts_capacity is None:
            counts_capacity = need.counts.size
        rows = need.self_rows.shape[0] if need.self_rows is not None else 0
        if self_capacity is None:
            self_capacity = rows * image.header.feature_row_bytes
        if sum_capacity is None:
            sum_capacity = rows * image.header.feature_dim * 4
    address = GUARD_BYTES
    descriptor = address
    address = _align(address + DESCRIPTOR_SIZE + GUARD_BYTES)
    nodes = address
    nodes_bytes = nodes_capacity * id_size
    address = _align(address + nodes_bytes + GUARD_BYTES)
    counts = address
    counts_bytes = counts_capacity * 4
    address = _align(address + counts_bytes + GUARD_BYTES)
    self_rows = address if aggregate else 0
    address = _align(address + self_capacity + GUARD_BYTES) if aggregate else address
    sums = address if aggregate else 0
    address = _align(address + sum_capacity + GUARD_BYTES) if aggregate else address
    result = address
    size = _align(address + RESULT_HEADER_SIZE + GUARD_BYTES)
    desc = Descriptor(seed=spec.seed, num_targets=len(spec.targets), fanouts=tuple(spec.fanouts),
                      nodes_ptr=nodes, nodes_capacity=nodes_capacity, counts_ptr=counts,
                      counts_capacity=counts_capacity, result_ptr=result, flags=spec.flags,
                      self_ptr=self_rows, self_capacity=self_capacity, sum_ptr=sums, sum_capacity=sum_capacity)
    raw = bytearray(desc.pack())
    fields = Descriptor.unpack_raw(bytes(raw))
    if spec.overrides:
        import struct

        from smartsage.spec.descriptor import DESCRIPTOR_FIELDS

        for name, value in spec.overrides.items():
            for field, code, offset, _ in DESCRIPTOR_FIELDS:
                if field == name:
                    if isinstance(value, str):  # "+N": N added to the laid-out value (misalign a pointer)
                        value = fields[name] + int(value)
                    struct.pack_into("<" + code, raw, offset, value)
                    break
            else:
                raise KeyError(f"No descriptor field {name!r}")
        fields = Descriptor.unpack_raw(bytes(raw))
    memory = np.full(size, 0xA5, np.uint8)
    memory[descriptor:descriptor + DESCRIPTOR_SIZE] = np.frombuffer(bytes(raw), np.uint8)
    targets = np.asarray(spec.targets, np.uint64).astype(image.header.index_dtype.numpy_dtype)
    # the targets go into the node list as the host writes them (never past its end in memory)
    target_bytes = targets.view(np.uint8)
    memory[nodes:nodes + min(target_bytes.size, nodes_bytes + GUARD_BYTES)] = \
        target_bytes[:nodes_bytes + GUARD_BYTES]
    return Layout(descriptor, nodes, nodes_bytes, counts, counts_bytes, result, size, fields,
                  self_rows, self_capacity, sums, sum_capacity), memory


def expected_result(image, layout: Layout, initial: np.ndarray, config: KernelConfig):
    """The golden model on a copy of the initial memory: (memory after, result header)."""
    memory = initial.copy()
    header = golden.run_command(image, memory, layout.descriptor, config)
    return memory, header


@dataclasses.dataclass
class Expectation:
    """What the RTL must produce: a golden memory image, or a status with an error-value range."""

    status: int
    header: ResultHeader | None          # exact spec fields (None: checked by range below)
    memory: np.ndarray | None            # exact memory on success
    error_value_range: tuple[int, int] | None = None
    writes_result: bool = True


def rtl_expectation(image, spec: CommandSpec, layout: Layout, initial: np.ndarray,
                    config: KernelConfig, image_base: int) -> Expectation:
    """The expected kernel outcome for ``spec``, derived from the golden model (see module doc)."""
    result_ok = layout.fields["result_ptr"] % BUFFER_ALIGN == 0
    if spec.image_offset:
        head = bytes(image.buffer[spec.image_offset:spec.image_offset + 12])
        if head[:8] == MAGIC and int.from_bytes(head[8:12], "little") == VERSION:
            raise ValueError(f"image_offset {spec.image_offset} points at a valid image header")
        return Expectation(Status.BAD_IMAGE, ResultHeader(status=Status.BAD_IMAGE), None, writes_result=result_ok)
    golden_memory, header = expected_result(image, layout, initial, config)
    if spec.storage_errors and header.status == Status.OK:
        lo = min(image_base + a for a, _ in spec.storage_errors)
        hi = max(image_base + b for _, b in spec.storage_errors)
        return Expectation(Status.STORAGE_ERROR, None, None, (lo, hi), writes_result=result_ok)
    if spec.read_error is not None and header.status == Status.OK:
        name, offset = spec.read_error
        start = {"nodes": layout.nodes, "counts": layout.counts}[name] + offset
        # reads fetch whole beats: the failing read is a field of the beat that holds the faulty byte
        beat = start - start % config.data_bytes
        return Expectation(Status.STORAGE_ERROR, None, None, (beat, beat + config.data_bytes),
                           writes_result=result_ok)
    if spec.write_error is not None and header.status == Status.OK:
        name, offset = spec.write_error
        buffer = {"nodes": layout.nodes, "counts": layout.counts, "self": layout.self_rows, "sum": layout.sums}[name]
        start = buffer + offset
        # error_value names the failing write: a field (<= 8 bytes), or for self rows and sums (written
        # in bursts of beats) the burst's first strobed byte, inside the buffer, before the faulty byte
        reach = WRITE_BURST_BEATS * config.data_bytes
        first = start if name in ("nodes", "counts") else max(buffer, start - reach + 1)
        return Expectation(Status.OUTPUT_ERROR, None, None, (first, start + 8), writes_result=result_ok)
    return Expectation(header.status, header, golden_memory if header.status == Status.OK else None,
                       writes_result=result_ok)


def compare(expect: Expectation, layout: Layout, initial: np.ndarray, memory: np.ndarray,
            stray: list[int]) -> list[str]:
    """Mismatches between the kernel's device memory and the expectation (empty: pass)."""
    problems = []
    if stray:
        problems.append(f"{len(stray)} bytes written outside the output buffers, first at {stray[0]:#x}")
    if not expect.writes_result:
        if not np.array_equal(memory, initial):
            changed = np.flatnonzero(memory != initial)
            problems.append(f"misaligned result_ptr: nothing may be written, {changed.size} bytes changed "
                            f"(first at {int(changed[0]):#x})")
        return problems
    got = ResultHeader.unpack(memory[layout.result:layout.result + RESULT_HEADER_SIZE].tobytes())
    if got.status != expect.status:
        problems.append(f"status {_status(got.status)}, expected {_status(expect.status)} "
                        f"({golden.status_message(got)})")
        return problems
    if expect.header is not None:
        fields = ("status", "error_hop", "error_index", "error_value")
        if expect.status == Status.OK:
            fields = fields + ("nodes_written", "counts_written", "edges_sampled")
        for name in fields:
            if getattr(got, name) != getattr(expect.header, name):
                problems.append(f"result {name} = {getattr(got, name)}, expected {getattr(expect.header, name)}")
    if expect.error_value_range is not None:
        lo, hi = expect.error_value_range
        if not lo <= got.error_value < hi:
            problems.append(f"error_value {got.error_value:#x} outside the faulty range [{lo:#x}, {hi:#x})")
    if expect.memory is not None:
        masked = memory.copy()
        reference = expect.memory.copy()
        for name in _COUNTER_FIELDS:
            from smartsage.spec.descriptor import RESULT_FIELDS

            offset = next(off for f, _, off, _ in RESULT_FIELDS if f == name)
            masked[layout.result + offset:layout.result + offset + 8] = 0
            reference[layout.result + offset:layout.result + offset + 8] = 0
        if not np.array_equal(masked, reference):
            diff = np.flatnonzero(masked != reference)
            where = _region(layout, int(diff[0]))
            problems.append(f"{diff.size} bytes differ from golden, first at {int(diff[0]):#x} ({where}): "
                            f"got {int(masked[diff[0]]):#04x}, golden {int(reference[diff[0]]):#04x}")
    return problems


def _status(code: int) -> str:
    try:
        return Status(code).name
    except ValueError:
        return f"unknown({code})"


def _region(layout: Layout, address: int) -> str:
    for name, start, nbytes in (("descriptor", layout.descriptor, DESCRIPTOR_SIZE),
                                ("nodes", layout.nodes, layout.nodes_bytes),
                                ("counts", layout.counts, layout.counts_bytes),
                                ("self", layout.self_rows, layout.self_bytes),
                                ("sum", layout.sums, layout.sum_bytes),
                                ("result", layout.result, RESULT_HEADER_SIZE)):
        if start <= address < start + nbytes:
            return f"{name}+{address - start}"
    return "guard"
