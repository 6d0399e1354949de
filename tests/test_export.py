"""The exported kernel: Vitis RTL-kernel ports (checked on the parsed Verilog), kernel.xml, lint, CLI."""

from __future__ import annotations

import argparse
import gc
import warnings
import xml.etree.ElementTree as ET

import pytest
from amaranth.hdl import Shape
from amaranth.lib.wiring import In

from smartsage.host import cli_rtl, synth
from smartsage.rtl import kernel_xml as kx
from smartsage.rtl.axi import AxiLiteSignature, AxiReadSignature, AxiSignature
from smartsage.rtl.control import ARGUMENTS, CONTROL_ADDRESS_WIDTH
from smartsage.rtl.kernel import storage_master_names
from smartsage.spec.config import CONFIGS
from smartsage.spec.descriptor import REGISTERS

CONFIG = CONFIGS["small"]

with warnings.catch_warnings():
    # pyverilog 1.3 reads its VERSION file without closing it; collect it here, not in a random test
    warnings.simplefilter("ignore", ResourceWarning)
    from pyverilog.vparser import ast as verilog_ast
    from pyverilog.vparser.parser import VerilogParser
    gc.collect()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return synth.export(CONFIG, tmp_path_factory.mktemp("export"))


def _top_ports(verilog_text: str, parse_dir) -> dict[str, tuple[str, int]]:
    """Ports of the top module, as pyverilog parses them: name -> (direction, width)."""
    start = verilog_text.index(f"module {kx.VITIS_TOP_NAME}(")
    top = verilog_text[start:verilog_text.index("endmodule", start) + len("endmodule")]
    module = VerilogParser(outputdir=str(parse_dir), debug=False).parse(top).description.definitions[0]
    assert module.name == kx.VITIS_TOP_NAME
    ports = {}
    for item in module.items:
        for decl in getattr(item, "list", ()):
            if isinstance(decl, verilog_ast.Input | verilog_ast.Output):
                width = 1 if decl.width is None else int(decl.width.msb.value) - int(decl.width.lsb.value) + 1
                ports[decl.name] = ("input" if isinstance(decl, verilog_ast.Input) else "output", width)
    assert set(ports) == {p.name for p in module.portlist.ports}
    return ports


def _vitis_interface(config) -> dict[str, tuple[str, int]]:
    """The Vitis RTL-kernel interface, built from the AXI signal lists and the register window alone."""
    data_width = config.data_width
    expected = {"ap_clk": ("input", 1), "ap_rst_n": ("input", 1), "interrupt": ("output", 1)}
    assert max(offset for _, offset, _, _ in REGISTERS) < 1 << CONTROL_ADDRESS_WIDTH

    def add(prefix, signature, master):
        for name, member in signature.members.items():
            toward_kernel = (member.flow == In) == master  # a master's In is the kernel's input
            expected[f"{prefix}_{name}"] = ("input" if toward_kernel else "output", Shape.cast(member.shape).width)

    add("s_axi_control", AxiLiteSignature(CONTROL_ADDRESS_WIDTH), master=False)
    for master in storage_master_names(config):  # the sequencer's storage master and one per lane
        add(master, AxiReadSignature(data_width), master=True)
    add("m_axi_mem", AxiSignature(data_width), master=True)
    return expected


def test_top_level_ports_follow_the_vitis_rtl_kernel_interface(exported, tmp_path):
    ports = _top_ports(exported["verilog"].read_text(), tmp_path)
    assert ports == _vitis_interface(CONFIG)
    assert ports == kx.vitis_port_names(CONFIG)


def test_export_is_reproducible_and_carries_no_paths(exported):
    text = exported["verilog"].read_text()
    assert "(* src" not in text and "/work/" not in text and "/home/" not in text and ".py:" not in text
    assert kx.vitis_verilog(CONFIG) == text  # cached, but the same text on every call
    assert exported["config"].read_text().strip() == CONFIG.to_json()


def test_kernel_xml_follows_the_register_map(exported):
    root = ET.fromstring(exported["kernel_xml"].read_text())
    kernel = root.find("kernel")
    assert kernel.get("name") == kx.VITIS_TOP_NAME and kernel.get("hwControlProtocol") == "ap_ctrl_hs"
    ports = {p.get("name"): p for p in kernel.find("ports")}
    assert ports["s_axi_control"].get("mode") == "slave" and ports["s_axi_control"].get("dataWidth") == "32"
    for bundle in ("m_axi_storage", "m_axi_mem"):
        assert ports[bundle].get("mode") == "master"
        assert int(ports[bundle].get("dataWidth")) == CONFIG.data_width
    args = {a.get("name"): a for a in kernel.find("args")}
    offsets = {name: offset for name, offset, _, _ in REGISTERS}
    assert set(args) == set(ARGUMENTS)
    for name, arg in args.items():
        assert int(arg.get("offset"), 16) == offsets[f"{name}_lo"]
        assert int(arg.get("size"), 16) == 8 and arg.get("port") in ports


def test_kernel_xml_names_an_argument_without_a_master(monkeypatch):
    monkeypatch.setattr(kx, "ARGUMENT_PORTS", {"image": "m_axi_storage"})
    with pytest.raises(kx.KernelXmlError, match="descriptor"):
        kx.kernel_xml(CONFIG)
    monkeypatch.setattr(kx, "ARGUMENT_PORTS", {"image": "m_axi_storage", "descriptor": "m_axi_nowhere"})
    with pytest.raises(kx.KernelXmlError, match="m_axi_nowhere"):
        kx.kernel_xml(CONFIG)


def test_wrapper_rejects_a_non_config():
    with pytest.raises(TypeError, match="Config must be a KernelConfig"):
        kx.VitisKernel("small")


def test_verilator_lint_has_no_unwaived_finding(exported):
    reason = synth.tool_missing("verilator")
    if reason:
        pytest.skip(reason)
    report = synth.lint(exported["verilog"])
    assert report.findings == []
    assert set(report.waived) <= set(synth.LINT_WAIVERS)


def test_cli_export(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    cli_rtl.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["rtl", "export", "--config", "small", "-o", str(tmp_path / "out")])
    assert args.func(args) == 0
    assert (tmp_path / "out" / "kernel.xml").exists() and (tmp_path / "out" / "smartsage_kernel.v").exists()
    assert "kernel_xml:" in capsys.readouterr().out


def test_one_storage_read_master_per_lane():
    """lanes = 4: m_axi_storage (header, indptr, aggregator) and m_axi_lane0..3 (index reads), each an
    AXI4 read master of the build's data width; kernel.xml lists every one of them."""
    from smartsage.rtl.kernel import lane_master_name, storage_master_names

    config = CONFIGS["default"]
    assert storage_master_names(config) == ["m_axi_storage"] + [f"m_axi_lane{lane}" for lane in range(4)]
    ports = kx.vitis_port_names(config)
    for master in storage_master_names(config):
        for name in AxiReadSignature(config.data_width).members:
            assert f"{master}_{name}" in ports
    assert not any(p.startswith(f"{lane_master_name(config.lanes)}_") for p in ports)
    masters = {p.get("name"): p for p in ET.fromstring(kx.kernel_xml(config)).find("kernel").find("ports")}
    assert set(storage_master_names(config)) | {"m_axi_mem"} <= set(masters)
    assert int(masters["m_axi_lane3"].get("dataWidth")) == config.data_width


@pytest.fixture(scope="module")
def proxy_verilog():
    """The timing harness of ``CONFIG`` as the ECP5 proxy elaborates it (its platform)."""
    from amaranth.back import verilog

    from smartsage.rtl.multiply import RegisteredMultipliers

    module, ports = synth.timing_harness(CONFIG)
    return verilog.convert(module, name="timing_harness", ports=ports, platform=RegisteredMultipliers("ecp5"),
                           emit_src=False, strip_internal_attrs=True)


def test_state_machines_are_one_hot_on_the_timing_proxy_only(exported, proxy_verilog):
    """The ECP5 proxy's platform marks every FSM's state register ``fsm_encoding = "one-hot"`` (Yosys
    re-encodes only marked registers; Vivado chooses by itself), and the exported Verilog carries no
    such attribute."""
    import re

    marked = re.findall(r'\(\* fsm_encoding = "one-hot" \*\)\s*reg (?:\[\d+:0\] )?(\w+)', proxy_verilog)
    # the sequencer's and the aggregator's four (a lane's issuer is a flag, ``streaming``)
    assert sorted(marked) == sorted(["fsm_state", "load_issue_state", "load_take_state",
                                     "issue_state", "sums_state"]), marked
    assert "fsm_encoding" not in exported["verilog"].read_text()


def test_each_block_resets_from_its_own_copy_of_the_kernel_reset(exported, proxy_verilog):
    """On the ECP5 proxy every block's reset is a ``TRELLIS_FF`` of its own (Yosys would merge plain
    copies into one flip-flop driving every block), as is each copy of the sequencer's flags that
    drive many loads and of a lane collector's error flag; the exported Verilog has plain registers."""
    import re

    from smartsage.rtl.command_sequencer import PrefetchOwners, bus_switch_copies
    from smartsage.rtl.frontier_prefetcher import FrontierNode, IndptrPair
    from smartsage.rtl.ping_pong_buffer import SELECT_GROUP

    copies = re.findall(r"TRELLIS_FF #\([^;]*?\)\s*(\w+) \(", proxy_verilog, flags=re.S)
    blocks = ["control", "sequencer", "prefetcher", "dispatcher", "storage_reader", "mem_reader",
              "mem_combiner", "frontier_answers"]
    blocks += [f"{name}{lane}" for lane in range(CONFIG.lanes) for name in ("lane", "lane_reader")]
    # and the sequencer's copies of its bus-switch, prefetch and abandon flags (rtl/register_copies.py)
    flags = {"aggregating": bus_switch_copies(CONFIG), "prefetch": len(PrefetchOwners.members),
             "abandon": CONFIG.lanes + 1, "wide_ids": 2}
    flag_copies = [f"{flag}{i}_ff" for flag, count in flags.items() for i in range(count)]
    # and the prefetcher's id width for the pairs' edge addresses
    flag_copies += ["wide_edges0_ff"]
    # and each lane collector's error flag: one for its handshakes, one for ``failed``
    flag_copies += [f"error{i}_ff" for _ in range(CONFIG.lanes) for i in range(2)]
    # and each lane collector's ``first`` flag (one for the append's address) and each sampler node
    # place's ``h_busy`` (one for the held draw's registers)
    from smartsage.rtl.edge_streamer import NODES_PER_SAMPLER, SAMPLERS_PER_LANE

    samplers = SAMPLERS_PER_LANE // NODES_PER_SAMPLER
    flag_copies += [f"first{i}_ff" for _ in range(CONFIG.lanes) for i in range(2)]
    flag_copies += [f"node{node}_h_busy{i}_ff" for _ in range(CONFIG.lanes * samplers)
                    for node in range(NODES_PER_SAMPLER) for i in range(2)]
    # and each node place's issue flip-flop, node 1's with copies that pick the pipeline's inputs
    from smartsage.rtl.position_sampler import ISSUE_COPIES, PICK_COPIES

    flag_copies += [f"node{node}_issue{i}_ff" for _ in range(CONFIG.lanes * samplers)
                    for node in range(NODES_PER_SAMPLER) for i in range(ISSUE_COPIES + (PICK_COPIES if node else 0))]
    # and each lane's job stage flags as its samplers' request valids read them, one set per sampler
    flag_copies += [f"{flag}_for{i}_ff" for _ in range(CONFIG.lanes) for i in range(samplers)
                    for flag in ("staged_valid", "lane_open", "head_dense")]
    # and the sequencer's multiplier low bit and element size (two bits), one per group of the feature
    # bytes' multiplexers, and its product's operand load, one per group and two more (the multiplier
    # and the carry; the multiply state's exit)
    from smartsage.rtl.command_sequencer import PRODUCT_GROUPS

    flag_copies += [f"{name}{i}_ff" for name in ("multiplier_low", "element_size0_", "element_size1_")
                    for i in range(PRODUCT_GROUPS)]
    flag_copies += [f"operands_due{i}_ff" for i in range(PRODUCT_GROUPS + 2)]
    # and each lane's samplers' reset, one per sampler and one for the lane's turn flag
    flag_copies += [f"samplers_reset{i}_ff" for _ in range(CONFIG.lanes) for i in range(samplers + 1)]
    # and the write combiner's flush, one per port (the lanes' and the sequencer's)
    flag_copies += [f"flush{i}_ff" for i in range(CONFIG.lanes + 1)]
    # and the aggregator's draining flag, one per part of the block that reads it
    flag_copies += [f"draining{i}_ff" for i in range(5)]
    # and the sequencer's aggregator start, one per group of the aggregator's registers
    from smartsage.rtl.feature_aggregator import START_COPIES
    from smartsage.rtl.write_combiner import BEAT_GROUP_BITS

    flag_copies += [f"aggregate_start{i}_ff" for i in range(START_COPIES)]
    # and each write combiner port's room flag: the port's ready, its push, and one per group of its
    # open beat
    beat_groups = max(1, (CONFIG.data_width + CONFIG.data_bytes) // BEAT_GROUP_BITS)
    flag_copies += [f"room{port}_{i}_ff" for port in range(CONFIG.lanes + 1) for i in range(2 + beat_groups)]
    # and the read pointers of the sequencer's two head buffers and of the aggregator's writer's
    # merged beat (address, data, strobes, first byte, follows) (rtl/ping_pong_buffer.py)
    merged_beat = 64 + CONFIG.data_width + CONFIG.data_bytes + CONFIG.beat_log2 + 1
    for width in (FrontierNode.size + 1, IndptrPair.size + 1, merged_beat):
        flag_copies += [f"read_slot{i}_ff" for i in range(-(-width // SELECT_GROUP))]
    assert sorted(copies) == sorted([f"{block}_reset_ff" for block in blocks] + flag_copies), copies
    assert "TRELLIS_FF" not in exported["verilog"].read_text()


def test_aggregator_reset_is_on_the_clock_network_on_the_proxy_only(exported, proxy_verilog):
    """On the ECP5 proxy the feature aggregator's reset (some 1,750 flip-flops) leaves its register
    through a ``DCCA``, which nextpnr routes on a global network (rtl/reset_copy.py); nothing else
    does, and the exported Verilog has no ``DCCA``."""
    import re

    assert re.findall(r"\bDCCA\s+(\w+) \(", proxy_verilog) == ["aggregate_rst_dcc"]
    assert "DCCA" not in exported["verilog"].read_text()


def test_frontier_walk_steps_from_copies_of_its_decision_on_the_proxy_only(exported, proxy_verilog):
    """On the ECP5 proxy the last LUT of FRONTIER's hand-off is a ``LUT4`` instance per group of the
    walk's registers (``written``, ``nodes_room``, ``frontier_index``, ``count_address``,
    ``node_address``, 64 bits each, and ``frontier_end``), and so is each lane's job-stage take, one
    per group of each of its copies of the staged node and of the rest of its staged job, and the
    aggregator's beat writer's two data selects, one per group of the data's bits, and each lane
    issuer's read handshake and each write combiner port's field handshake, and each lane's job
    ready, and the grouped loads of the lanes' head answer and job and the aggregator's head work
    record, which Yosys keeps apart; the exported Verilog has none."""
    import re

    from smartsage.rtl.command_sequencer import WALK_GROUP
    from smartsage.rtl.edge_streamer import HEAD_NODE_COPIES, HEAD_NODE_GROUPS, STAGED_GROUPS
    from smartsage.rtl.ping_pong_buffer import SELECT_GROUP

    luts = re.findall(r"LUT4 #\([^;]*?\)\s*(\w+) \(", proxy_verilog, flags=re.S)
    count = 5 * -(-64 // WALK_GROUP) + 1
    expected = [f"walk_take{i}_lut" for i in range(count)]
    expected += [f"stage_takes{i}_lut" for _ in range(CONFIG.lanes)
                 for i in range(HEAD_NODE_COPIES * HEAD_NODE_GROUPS + STAGED_GROUPS)]
    expected += [f"{select}{i}_lut" for select in ("same", "hold_first")
                 for i in range(-(-CONFIG.data_width // SELECT_GROUP))]
    # and each lane issuer's read handshake (the edge address's halves, the rest), and each write
    # combiner port's field handshake, one per group of its open beat
    from smartsage.rtl.write_combiner import BEAT_GROUP_BITS

    expected += [f"issue_fire{i}_lut" for _ in range(CONFIG.lanes) for i in range(3)]
    # and each lane's job ready, one LUT of its four flip-flops
    expected += ["job_ready0_lut"] * CONFIG.lanes
    beat_groups = max(1, (CONFIG.data_width + CONFIG.data_bytes) // BEAT_GROUP_BITS)
    expected += [f"beat_take{port}_{group}_0_lut" for port in range(CONFIG.lanes + 1) for group in range(beat_groups)]
    # and the load decision of each two-entry buffer whose head loads in groups: each lane's head
    # answer and head job, and the aggregator's head work record
    from smartsage.rtl.edge_streamer import ANSWER_LOAD_GROUPS, COLLECT_LOAD_GROUPS

    expected += [f"head_load{i}_lut" for _ in range(CONFIG.lanes)
                 for groups in (ANSWER_LOAD_GROUPS, COLLECT_LOAD_GROUPS) for i in range(groups)]
    from smartsage.rtl.feature_aggregator import WORK_LOAD_GROUPS

    expected += [f"head_load{i}_lut" for i in range(WORK_LOAD_GROUPS)]
    assert sorted(luts) == sorted(expected), luts
    assert "LUT4" not in exported["verilog"].read_text()
