"""`smartsage bench` on a tiny image: every figure present and the device's traffic below the gather-only device."""

import json

from smartsage.host.cli import main


def test_bench_small(tmp_path, capsys):
    out = tmp_path / "bench.md"
    assert main(["bench", "--scale", "9", "--feature-dim", "16", "--batch", "32", "--fanouts", "5,3", "--repeats", "2",
                 "--workdir", str(tmp_path / "w"), "-o", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["build"]["csr_edges"] > 0
    assert report["rates"]["sample"]["edges_sampled"] > 0
    traffic = report["traffic"]
    assert 0 < traffic["golden"]["bytes_to_host"] < traffic["gather_only"]["bytes_to_host"]
    assert traffic["mmap"]["bytes_to_host"] == traffic["mmap"]["storage_bytes"] > 0
    # every backend reports storage reads and bytes (pages where it counts them); the HLS kernel moves
    # exactly what the golden device does and reads what the read rule says
    for backend in ("golden", "hls", "mmap", "direct"):
        assert traffic[backend]["storage_reads"] > 0 and traffic[backend]["storage_bytes"] > 0, backend
    assert traffic["hls"]["bytes_to_host"] == traffic["golden"]["bytes_to_host"]
    assert traffic["hls"]["storage_bytes"] == traffic["golden"]["storage_bytes"]
    assert traffic["hls"]["storage_reads"] >= traffic["golden"]["storage_reads"]
    assert traffic["hls"]["storage_pages"] > 0 and traffic["golden"]["storage_pages"] is None
    text = out.read_text()
    assert "smartsage bench --scale 9" in text and "O_DIRECT sampler" in text
