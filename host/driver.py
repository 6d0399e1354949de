"""The sampler driver: one descriptor per mini-batch, one start, results turned into a batch.

The driver does what a host does with an SSD-attached FPGA: it sizes and allocates the output buffers
in device memory, writes the targets and the descriptor, starts the kernel, waits, reads the result
header, turns a non-zero status into a :class:`DeviceError` that names the cause, and reads back only
what training needs (with AGGREGATE, not the innermost hop's neighbor ids: the sums replace them).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from smartsage.spec.descriptor import (
    RESULT_HEADER_SIZE,
    SPEC_MAX_HOPS,
    Descriptor,
    Flags,
    ResultHeader,
    Status,
)

from .device import Device, SyncDirection

__all__ = ["DeviceError", "DeviceProtocolError", "SamplerDriver", "DeviceBatch", "output_bounds"]


class DeviceError(RuntimeError):
    """The device ended a command with a non-zero status; the message names the cause."""

    def __init__(self, header: ResultHeader):
        self.header = header
        self.status = Status(header.status) if header.status in Status._value2member_map_ else header.status
        super().__init__(describe_status(header))


class DeviceProtocolError(RuntimeError):
    """The device's result header contradicts itself or its buffers (a device or backend bug)."""


def describe_status(header: ResultHeader) -> str:
    """The message of a :class:`DeviceError`: ``device status`` and the header's own description."""
    return f"device status {header.describe()}"


def output_bounds(num_targets: int, fanouts: tuple[int, ...]) -> tuple[int, int, int]:
    """Worst-case (node-list entries, counts entries, last-frontier entries) of a command.

    Frontiers are not deduplicated, so |F_{h+1}| <= |F_h| (1 + k_h) exactly bounds them.
    """
    frontier, counts, last = num_targets, 0, num_targets
    for fanout in fanouts:
        last = frontier
        counts += frontier
        frontier *= 1 + fanout
    return frontier, counts, last


@dataclasses.dataclass
class DeviceBatch:
    """What the device returned for one mini-batch, plus the frontiers the host rebuilt."""

    targets: np.ndarray
    fanouts: tuple[int, ...]
    seed: int
    header: ResultHeader
    counts: np.ndarray              # u32, per frontier entry, hop after hop
    node_list: np.ndarray           # targets then sampled ids; without the innermost hop under AGGREGATE
    frontier_sizes: list[int]       # |F_0| .. |F_L|
    self_rows: np.ndarray | None = None
    sums: np.ndarray | None = None
    bytes_to_host: int = 0

    def hop_counts(self, hop: int) -> np.ndarray:
        start = sum(self.frontier_sizes[:hop])
        return self.counts[start:start + self.frontier_sizes[hop]]

    def frontier(self, hop: int) -> np.ndarray:
        return self.node_list[:self.frontier_sizes[hop]]

    def hop_neighbors(self, hop: int) -> np.ndarray:
        """Sampled neighbor ids of hop ``hop`` in frontier order (F_{h+1} minus F_h)."""
        lo, hi = self.frontier_sizes[hop], self.frontier_sizes[hop + 1]
        if hi > len(self.node_list):
            raise ValueError(f"hop {hop}'s neighbor ids were not read back (AGGREGATE batch)")
        return self.node_list[lo:hi]


class SamplerDriver:
    """Issues sampling commands to a :class:`~smartsage.host.device.Device` and collects batches."""

    def __init__(self, device: Device):
        self.device = device
        self.kernel = device.kernel()
        self._buffers = None
        self._capacity_key = None

    def _ensure_buffers(self, num_targets: int, fanouts: tuple[int, ...], aggregate: bool):
        image = self.device.image
        id_bytes = image.header.index_dtype.itemsize
        nodes, counts, last = output_bounds(num_targets, fanouts)
        row_bytes = image.header.feature_row_bytes if aggregate else 0
        sum_bytes = image.feature_dim * 4 if aggregate else 0
        key = (nodes, counts, last * row_bytes, last * sum_bytes)
        if self._buffers is not None and all(a <= b for a, b in zip(key, self._capacity_key, strict=True)):
            return self._buffers
        self.device.reset_allocations()
        self._buffers = {
            "descriptor": self.device.alloc(4096),
            "result": self.device.alloc(RESULT_HEADER_SIZE),
            "nodes": self.device.alloc(nodes * id_bytes),
            "counts": self.device.alloc(counts * 4),
            "self": self.device.alloc(max(key[2], 64)),
            "sum": self.device.alloc(max(key[3], 64)),
        }
        self._capacity_key = key
        return self._buffers

    def sample(self, targets, fanouts, seed: int, aggregate: bool = False) -> DeviceBatch:
        """Run one mini-batch command and read back its results.

        Raises
        ------
        ValueError
            Bad arguments (no targets, bad fanouts, a seed outside u64), before anything is sent.
        DeviceError
            The device ended the command with a non-zero status.
        """
        image = self.device.image
        fanouts = tuple(int(k) for k in fanouts)
        if not 1 <= len(fanouts) <= SPEC_MAX_HOPS:
            raise ValueError(f"Between 1 and {SPEC_MAX_HOPS} fanouts are needed, not {len(fanouts)}")
        if not 0 <= seed < 1 << 64:
            raise ValueError(f"Seed must be an unsigned 64-bit integer, not {seed!r}")
        targets = np.asarray(targets)
        if targets.ndim != 1 or targets.size == 0:
            raise ValueError("Targets must be a non-empty 1-D array of node ids")
        if targets.dtype.kind not in "iu" or (targets.dtype.kind == "i" and (targets < 0).any()):
            raise ValueError("Targets must be non-negative integer node ids")
        id_dtype = image.header.index_dtype.numpy_dtype
        if targets.size and int(targets.max()) >= 1 << (8 * id_dtype.itemsize):
            raise ValueError(f"Target id {int(targets.max())} does not fit the image's {id_dtype} node ids")
        targets = targets.astype(id_dtype)
        bufs = self._ensure_buffers(targets.size, fanouts, aggregate)
        link = self.device.link
        to_host_before = link.bytes_to_host

        descriptor = Descriptor(
            seed=seed, num_targets=targets.size, fanouts=fanouts,
            nodes_ptr=bufs["nodes"].address(), nodes_capacity=bufs["nodes"].size // id_dtype.itemsize,
            counts_ptr=bufs["counts"].address(), counts_capacity=bufs["counts"].size // 4,
            self_ptr=bufs["self"].address(), self_capacity=bufs["self"].size,
            sum_ptr=bufs["sum"].address(), sum_capacity=bufs["sum"].size,
            result_ptr=bufs["result"].address(), flags=int(Flags.AGGREGATE) if aggregate else 0)
        bufs["nodes"].write(targets)
        bufs["nodes"].sync(SyncDirection.TO_DEVICE, targets.nbytes)
        bufs["descriptor"].write(descriptor.pack())
        bufs["descriptor"].sync(SyncDirection.TO_DEVICE, len(descriptor.pack()))
        bufs["result"].fill(0xFF)  # a device that never writes its header cannot pass for status OK

        self.kernel(self.device.image_address, bufs["descriptor"].address()).wait()

        bufs["result"].sync(SyncDirection.FROM_DEVICE)
        header = ResultHeader.unpack(bufs["result"].read().tobytes())
        if header.status != Status.OK:
            raise DeviceError(header)
        return self._collect(bufs, header, targets, fanouts, seed, aggregate, to_host_before)

    def _collect(self, bufs, header, targets, fanouts, seed, aggregate, to_host_before) -> DeviceBatch:
        image = self.device.image
        id_dtype = image.header.index_dtype.numpy_dtype
        if header.counts_written * 4 > bufs["counts"].size or header.nodes_written * id_dtype.itemsize > \
                bufs["nodes"].size:
            raise DeviceProtocolError(
                f"device reported {header.nodes_written} nodes / {header.counts_written} counts, more than "
                f"the buffers it was given hold")
        bufs["counts"].sync(SyncDirection.FROM_DEVICE, header.counts_written * 4)
        counts = bufs["counts"].read(header.counts_written * 4).view("<u4")
        sizes = [targets.size]
        consumed = 0
        for _ in fanouts:
            hop_counts = counts[consumed:consumed + sizes[-1]]
            if hop_counts.size != sizes[-1]:
                raise DeviceProtocolError(f"device wrote {counts.size} counts, fewer than its frontiers need")
            consumed += sizes[-1]
            sizes.append(sizes[-1] + int(hop_counts.sum(dtype=np.int64)))
        if consumed != header.counts_written or sizes[-1] != header.nodes_written:
            raise DeviceProtocolError(
                f"inconsistent result header: {header.counts_written} counts / {header.nodes_written} nodes "
                f"written, the counts imply {consumed} / {sizes[-1]}")
        # Read back what the host needs. Targets are the host's own; under AGGREGATE the innermost hop's
        # ids are not needed (the sums replace their features).
        keep = sizes[-2] if aggregate else sizes[-1]
        offset = targets.size * id_dtype.itemsize
        nbytes = (keep - targets.size) * id_dtype.itemsize
        bufs["nodes"].sync(SyncDirection.FROM_DEVICE, nbytes, offset)
        sampled = bufs["nodes"].read(nbytes, offset).view(id_dtype)
        node_list = np.concatenate([targets, sampled])
        self_rows = sums = None
        if aggregate:
            last = sizes[-2]
            f = image.feature_dim
            row = image.header.feature_row_bytes
            bufs["self"].sync(SyncDirection.FROM_DEVICE, last * row)
            self_rows = bufs["self"].read(last * row).view(image.feature_dtype.numpy_storage).reshape(last, f)
            bufs["sum"].sync(SyncDirection.FROM_DEVICE, last * f * 4)
            sum_dtype = "<i4" if image.feature_dtype.name == "INT8" else "<f4"
            sums = bufs["sum"].read(last * f * 4).view(sum_dtype).reshape(last, f)
        return DeviceBatch(targets=targets, fanouts=fanouts, seed=seed, header=header, counts=counts,
                           node_list=node_list, frontier_sizes=sizes, self_rows=self_rows, sums=sums,
                           bytes_to_host=self.device.link.bytes_to_host - to_host_before)
