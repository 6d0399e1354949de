"""run_command: the device-level semantics of docs/spec.md section 5. Every status, the check order, and
guard bytes around every buffer (nothing is written outside the buffers a descriptor names)."""

import struct

import numpy as np
import pytest
from golden_graphs import open_image, random_csr

from smartsage.spec import golden
from smartsage.spec.config import CONFIGS, KernelConfig
from smartsage.spec.descriptor import (
    DESCRIPTOR_FIELDS,
    RESULT_HEADER_SIZE,
    Descriptor,
    Flags,
    ResultHeader,
    Status,
)

GUARD = 0xA5
MEMORY = 1 << 16
DESC, RESULT, NODES, COUNTS, SELF, SUM = 0x0, 0x80, 0x1000, 0x4000, 0x6000, 0x9000
FIELD_CODE = {name: (code, offset) for name, code, offset, _ in DESCRIPTOR_FIELDS}


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    gen = np.random.default_rng(21)
    indptr, indices = random_csr(gen, 50, 9)
    features = gen.standard_normal((50, 4)).astype(np.float16)
    with open_image(tmp_path_factory.mktemp("c") / "g.img", indptr, indices, features, "fp16") as img:
        yield img


def command(image, targets, fanouts=(3, 2), seed=5, aggregate=True, patch=None, config=CONFIGS["default"],
            **caps):
    """Lay out a command in guarded device memory, run it, return (header, memory, descriptor)."""
    memory = np.full(MEMORY, GUARD, np.uint8)
    targets = np.asarray(targets, image.header.index_dtype.numpy_dtype if hasattr(image, "header") else np.uint32)
    desc = Descriptor(seed=seed, num_targets=targets.size, fanouts=tuple(fanouts), nodes_ptr=NODES,
                      nodes_capacity=caps.get("nodes", 600), counts_ptr=COUNTS, counts_capacity=caps.get("counts", 400),
                      self_ptr=SELF, self_capacity=caps.get("self", 0x3000), sum_ptr=SUM,
                      sum_capacity=caps.get("sum", 0x4000), result_ptr=RESULT,
                      flags=int(Flags.AGGREGATE) if aggregate else 0)
    raw = bytearray(desc.pack())
    for name, value in (patch or {}).items():
        code, offset = FIELD_CODE[name]
        struct.pack_into("<" + code, raw, offset, value)
    fields = Descriptor.unpack_raw(bytes(raw))
    memory[DESC:DESC + len(raw)] = np.frombuffer(bytes(raw), np.uint8)
    room = memory[fields["nodes_ptr"]:fields["nodes_ptr"] + targets.nbytes]
    room[:] = targets.view(np.uint8)[:room.size]
    before = memory.copy()
    header = golden.run_command(image, memory, DESC, config)
    _check_guards(before, memory, fields, targets.itemsize, targets.nbytes)
    return header, memory, fields


def _check_guards(before, memory, fields, id_size, targets_bytes):
    """Bytes outside the output buffers are unchanged; the targets and the descriptor too."""
    allowed = np.zeros(memory.size, bool)
    regions = [(fields["nodes_ptr"] + targets_bytes, fields["nodes_capacity"] * id_size - targets_bytes),
               (fields["counts_ptr"], fields["counts_capacity"] * 4), (fields["result_ptr"], RESULT_HEADER_SIZE)]
    if fields["flags"] & Flags.AGGREGATE:
        regions += [(fields["self_ptr"], fields["self_capacity"]), (fields["sum_ptr"], fields["sum_capacity"])]
    for start, length in regions:
        allowed[start:start + max(length, 0)] = True
    changed = np.flatnonzero(before != memory)
    assert allowed[changed].all(), f"wrote outside the buffers at {changed[~allowed[changed]][:8]}"


def _status(header):
    return Status(header.status), header.error_hop, header.error_index, header.error_value


def test_success_writes_what_sample_computes(image):
    targets = [4, 9, 4, 31]
    header, memory, _ = command(image, targets)
    expected = golden.sample(image, targets, (3, 2), 5, aggregate=True)
    assert header == expected.header and header.status == Status.OK
    assert ResultHeader.unpack(memory[RESULT:RESULT + RESULT_HEADER_SIZE].tobytes()) == header
    nodes = memory[NODES:NODES + header.nodes_written * 4].view(np.uint32)
    assert (nodes == expected.node_list).all()
    assert (memory[COUNTS:COUNTS + header.counts_written * 4].view(np.uint32) == expected.counts).all()
    rows = expected.self_rows.size * 2
    assert (memory[SELF:SELF + rows] == expected.self_rows.view(np.uint8).ravel()).all()
    assert (memory[SUM:SUM + rows * 2] == expected.sums.view(np.uint8).ravel()).all()
    assert header.edges_sampled == header.nodes_written - 4


def test_exact_capacities_succeed_with_guards_right_after(image):
    targets = [1, 2, 3]
    full = golden.sample(image, targets, (3, 2), 5, aggregate=True)
    last = full.self_rows.shape[0]
    header, _, _ = command(image, targets, nodes=full.header.nodes_written, counts=full.header.counts_written,
                           self=last * 4 * 2, sum=last * 4 * 4)
    assert header.status == Status.OK


def test_bad_image(image):
    class Corrupt:
        buffer = memoryview(bytes(image.buffer[:4096]).replace(b"SSAGEIMG", b"SSAGEIMX"))

    header, memory, _ = command(Corrupt(), [1])
    assert _status(header) == (Status.BAD_IMAGE, 0, 0, 0)
    assert ResultHeader.unpack(memory[RESULT:RESULT + RESULT_HEADER_SIZE].tobytes()) == header
    wrong_version = bytearray(image.buffer[:4096])
    struct.pack_into("<I", wrong_version, 8, 2)

    class OtherVersion:
        buffer = memoryview(bytes(wrong_version))

    assert command(OtherVersion(), [1], patch={"magic": 0})[0].status == Status.BAD_IMAGE   # image first


@pytest.mark.parametrize(("patch", "offset", "aggregate"), [
    ({"magic": 0x43445354}, 0, True),
    ({"version": 2}, 4, True),
    ({"flags": 2}, 6, False),
    ({"flags": 0x8001}, 6, True),
    ({"num_targets": 0}, 16, True),
    ({"num_hops": 0}, 20, True),
    ({"num_hops": 5}, 20, True),
    ({"fanout0": 0}, 24, True),
    ({"fanout1": 33}, 26, True),            # above the default build's max_fanout (32)
    ({"fanout2": 1}, 28, True),             # a fanout beyond num_hops must be 0
    ({"nodes_ptr": NODES + 4}, 32, True),
    ({"nodes_capacity": 1}, 40, True),      # fewer than the targets
    ({"counts_ptr": COUNTS + 8}, 48, True),
    ({"self_ptr": SELF + 32}, 64, True),
    ({"sum_ptr": SUM + 16}, 80, True),
    ({"magic": 0, "result_ptr": RESULT + 64 + 1}, None, True),   # misaligned result_ptr: nothing written
    ({"fanout0": 0, "nodes_ptr": NODES + 3}, 24, True),                   # the first bad field in layout order
])
def test_bad_descriptor(image, patch, offset, aggregate):
    header, memory, fields = command(image, [1, 2], patch=patch, aggregate=aggregate)
    assert header.status == Status.BAD_DESCRIPTOR
    if offset is None:
        assert (memory[RESULT:RESULT + 2 * RESULT_HEADER_SIZE] == GUARD).all()
        return
    assert header.error_value == offset
    assert ResultHeader.unpack(memory[RESULT:RESULT + RESULT_HEADER_SIZE].tobytes()) == header
    assert header.nodes_written == header.counts_written == header.edges_sampled == 0


def test_descriptor_limits_follow_the_kernel_config(image):
    small = KernelConfig(name="t", max_fanout=4, max_hops=2)
    assert command(image, [1], fanouts=(5,), config=small)[0].error_value == 24
    assert command(image, [1], fanouts=(1, 1, 1), config=small)[0].error_value == 20
    assert command(image, [1], fanouts=(4, 4), config=small)[0].status == Status.OK
    # self/sum pointers are only checked when AGGREGATE is set
    assert command(image, [1], aggregate=False, patch={"self_ptr": 1, "sum_ptr": 3})[0].status == Status.OK


def test_aggregate_on_an_image_without_features(tmp_path):
    indptr, indices = random_csr(np.random.default_rng(1), 10, 3)
    with open_image(tmp_path / "nf.img", indptr, indices) as bare:
        assert _status(command(bare, [1])[0]) == (Status.BAD_DESCRIPTOR, 0, 0, 6)
        assert command(bare, [1], aggregate=False)[0].status == Status.OK


def test_capacity_and_range_errors(image):
    targets = [4, 9, 4, 31]
    full = golden.sample(image, targets, (3, 2), 5, aggregate=True)
    sizes = [f.size for f in golden.hop_frontiers(full.node_list, full.counts, 4, (3, 2))]
    # counts: hop 0 needs 4 entries, hop 1 needs 4 + |F_1|
    assert _status(command(image, targets, counts=3)[0]) == (Status.COUNTS_CAPACITY, 0, 0, 4)
    assert _status(command(image, targets, counts=4 + sizes[1] - 1)[0]) == (
        Status.COUNTS_CAPACITY, 1, 0, 4 + sizes[1])
    # node list: the first entry whose samples do not fit
    header = command(image, targets, nodes=sizes[1] - 1)[0]
    assert header.status == Status.NODES_CAPACITY and header.error_hop == 0
    assert header.error_value > sizes[1] - 1
    header = command(image, targets, nodes=sizes[2] - 1)[0]
    assert (header.status, header.error_hop, header.error_value) == (Status.NODES_CAPACITY, 1, sizes[2])
    # out of range at hop 0 (the first bad entry), and one that is checked before the node-list room
    assert _status(command(image, [4, 50, 51])[0]) == (Status.NODE_OUT_OF_RANGE, 0, 1, 50)
    assert _status(command(image, [4, 2**32 - 1])[0]) == (Status.NODE_OUT_OF_RANGE, 0, 1, 2**32 - 1)
    # features: self buffer (index 0) first, then the sum buffer (index 1)
    last = sizes[1]
    assert _status(command(image, targets, self=last * 8 - 1)[0]) == (
        Status.FEATURES_CAPACITY, 0, 0, last * 8)
    assert _status(command(image, targets, sum=last * 16 - 1)[0]) == (
        Status.FEATURES_CAPACITY, 0, 1, last * 16)
    # a capacity error of an earlier stage wins over a later one
    assert command(image, targets, counts=3, self=0)[0].status == Status.COUNTS_CAPACITY


def test_bus_errors_of_the_memory_model(image):
    # targets read past the end of device memory: STORAGE_ERROR at the first address past it
    header = command(image, [1] * 20, patch={"nodes_ptr": MEMORY - 64, "nodes_capacity": 100})[0]
    assert _status(header) == (Status.STORAGE_ERROR, 0, 0, MEMORY)
    # counts written past the end: OUTPUT_ERROR; the header still lands
    header, memory, _ = command(image, list(range(20)), patch={"counts_ptr": MEMORY - 64})
    assert _status(header) == (Status.OUTPUT_ERROR, 0, 0, MEMORY)
    assert ResultHeader.unpack(memory[RESULT:RESULT + RESULT_HEADER_SIZE].tobytes()) == header


def test_host_errors_raise(image):
    memory = np.zeros(4096, np.uint8)
    with pytest.raises(ValueError, match="aligned"):
        golden.run_command(image, memory, 8)
    with pytest.raises(ValueError, match="aligned"):
        golden.run_command(image, memory, 4096 - 64)
    with pytest.raises(ValueError, match="writable"):
        golden.run_command(image, memory.astype(np.int8), 0)
