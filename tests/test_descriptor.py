"""The descriptor/result layouts, register map and kernel configuration are defined once and consistent."""

import pytest

from smartsage.spec import descriptor as d
from smartsage.spec.config import CONFIGS, KernelConfig, get_config


def test_descriptor_round_trip():
    desc = d.Descriptor(seed=(1 << 64) - 1, num_targets=7, fanouts=(25, 10), nodes_ptr=0x1000,
                        nodes_capacity=99, counts_ptr=0x2000, counts_capacity=50, result_ptr=0x40,
                        flags=d.Flags.AGGREGATE)
    raw = desc.pack()
    assert len(raw) == d.DESCRIPTOR_SIZE
    fields = d.Descriptor.unpack_raw(raw)
    assert fields["magic"] == d.DESCRIPTOR_MAGIC
    assert fields["num_hops"] == 2 and (fields["fanout0"], fields["fanout1"], fields["fanout2"]) == (25, 10, 0)
    assert fields["seed"] == (1 << 64) - 1 and fields["flags"] == 1
    assert raw[:4] == b"SSDC"


def test_descriptor_too_many_hops():
    with pytest.raises(ValueError, match="At most 4 hops"):
        d.Descriptor(seed=0, num_targets=1, fanouts=(1, 2, 3, 4, 5)).pack()


def test_result_round_trip():
    header = d.ResultHeader(status=d.Status.NODES_CAPACITY, error_hop=1, error_index=5, error_value=77,
                            nodes_written=3, counts_written=2, edges_sampled=1, storage_bytes=4096, cycles=9)
    assert d.ResultHeader.unpack(header.pack()) == header
    assert set(header.spec_fields()) == set(d.RESULT_SPEC_FIELDS)


def test_field_offsets_are_aligned_and_unique():
    for fields in (d.DESCRIPTOR_FIELDS, d.RESULT_FIELDS):
        offsets = [off for _, code, off, _ in fields]
        assert len(set(offsets)) == len(offsets)
        for _, code, off, _ in fields:
            assert off % {"I": 4, "H": 2, "Q": 8}[code] == 0


def test_register_map_is_vitis_convention():
    regs = {name: off for name, off, _, _ in d.REGISTERS}
    assert (regs["CTRL"], regs["GIE"], regs["IER"], regs["ISR"]) == (0x00, 0x04, 0x08, 0x0C)
    assert regs["image_lo"] == 0x10 and regs["image_hi"] == 0x14
    assert regs["descriptor_lo"] == 0x18 and regs["descriptor_hi"] == 0x1C


def test_every_status_has_a_meaning():
    for status in d.Status:
        assert status.meaning


def test_c_header_lists_every_field():
    text = d.c_header()
    for name, _, offset, _ in d.DESCRIPTOR_FIELDS:
        assert f"SMARTSAGE_DESC_{name.upper()}_OFFSET {offset}" in text
    for status in d.Status:
        assert f"SMARTSAGE_STATUS_{status.name} {int(status)}" in text


@pytest.mark.parametrize("change, message", [
    (dict(data_width=96), "Data width must be one of 64, 128, 256, 512 bits, not 96"),
    (dict(lanes=0), "Lanes must be an integer in 1..64, not 0"),
    (dict(max_fanout=2000), "Max fanout must be an integer in 1..1024, not 2000"),
    (dict(max_hops=5), "Max hops must be an integer in 1..4, not 5"),
    (dict(fifo_depth=12), "FIFO depth must be a power of two >= 2, not 12"),
    (dict(outstanding_reads=0), "Outstanding reads must be an integer in 1..256, not 0"),
])
def test_config_validation(change, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        KernelConfig(**change)


def test_config_json_round_trip_and_names():
    for config in CONFIGS.values():
        assert KernelConfig.from_json(config.to_json()) == config
    assert get_config("default") == KernelConfig()
    with pytest.raises(ValueError, match="Unknown kernel config 'nope'"):
        get_config("nope")
    with pytest.raises(ValueError, match="Unknown kernel config fields: bogus"):
        KernelConfig.from_json('{"bogus": 1}')


@pytest.mark.parametrize("header, text", [
    (d.ResultHeader(), "OK (success)"),
    (d.ResultHeader(status=d.Status.NODE_OUT_OF_RANGE, error_hop=1, error_index=4, error_value=99),
     "NODE_OUT_OF_RANGE (node id out of range): node 99 at hop 1, frontier position 4"),
    (d.ResultHeader(status=d.Status.FEATURES_CAPACITY, error_index=1, error_value=512),
     "FEATURES_CAPACITY (feature output buffer too small): the sum buffer needs 512 bytes"),
    (d.ResultHeader(status=d.Status.STORAGE_ERROR, error_value=0x1000),
     "STORAGE_ERROR (storage read error) at storage address 0x1000"),
    (d.ResultHeader(status=77), "unknown status code 77"),
])
def test_result_header_describes_its_status(header, text):
    assert header.describe() == text


def test_kernel_arguments_come_from_the_register_map():
    assert d.KERNEL_ARGUMENTS == {"image": (0x10, 0x14), "descriptor": (0x18, 0x1C)}
