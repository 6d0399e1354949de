"""``smartsage graph``: generate, import, info, verify; every fault class as one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from smartsage.host.cli import main
from smartsage.spec.image import GraphImage, verify_image
from smartsage.spec.image_faults import FAULTS, inject_fault


@pytest.fixture(scope="module")
def small_image(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "small.img"
    assert main(["graph", "generate", "--kind", "rmat", "--scale", "9", "--edge-factor", "8", "--seed", "3",
                 "--classes", "4", "--feature-dim", "8", "--no-progress", "-o", str(path)]) == 0
    return path


def test_generate_rmat_info_verify(small_image, capsys):
    assert main(["graph", "info", str(small_image), "--json", "--stats"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["num_nodes"] == 512 and info["num_classes"] == 4 and info["feature_dim"] == 8
    assert info["stats"]["edge_label_agreement"] > info["stats"]["chance_agreement"] + 0.2
    assert main(["graph", "info", str(small_image)]) == 0
    out = capsys.readouterr().out
    assert "nodes" in out and "indices" in out and "crc32" in out
    assert main(["graph", "verify", str(small_image)]) == 0
    assert f"{small_image}: ok (512 nodes" in capsys.readouterr().out


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16", "int8"])
def test_generate_every_feature_dtype(tmp_path, dtype, capsys):
    out = tmp_path / f"{dtype}.img"
    assert main(["graph", "generate", "--scale", "7", "--edge-factor", "4", "--classes", "2",
                 "--feature-dim", "4", "--feature-dtype", dtype, "--no-progress", "-o", str(out)]) == 0
    assert "edges/s" in capsys.readouterr().out
    assert verify_image(out)["feature_dtype"] == dtype


def test_generate_kronecker_and_default(tmp_path, capsys):
    out = tmp_path / "k.img"
    assert main(["graph", "generate", "--kind", "kronecker", "--scale", "2", "--feature-dim", "4",
                 "--no-progress", "-o", str(out)]) == 0
    summary = verify_image(out)
    assert summary["num_nodes"] == 34 ** 2 and summary["num_edges"] == 156 ** 2
    expanded = tmp_path / "k2.img"
    assert main(["graph", "generate", "--kind", "kronecker", "--scale", "2", "--seed-graph", str(out),
                 "--edge-factor", "2", "--classes", "4", "--feature-dim", "0", "--no-progress",
                 "-o", str(expanded)]) == 0
    assert verify_image(expanded)["num_nodes"] == 1156 ** 2
    default = tmp_path / "default.img"
    assert main(["graph", "generate", "--default", "--no-progress", "-o", str(default)]) == 0
    from smartsage.host.graphs import default_graph

    default_graph(tmp_path / "api.img")
    assert default.read_bytes() == (tmp_path / "api.img").read_bytes()
    capsys.readouterr()


def test_import_edge_list_with_node_data(tmp_path, capsys):
    rng = np.random.default_rng(5)
    edges = rng.integers(0, 40, (300, 2))
    text = tmp_path / "edges.txt"
    text.write_text("# src dst\n" + "\n".join(f"{u} {v}" for u, v in edges) + "\n")
    np.save(tmp_path / "x.npy", rng.standard_normal((50, 3)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 3, 50))
    np.save(tmp_path / "split.npy", rng.integers(0, 4, 50).astype(np.uint8))
    out = tmp_path / "g.img"
    assert main(["graph", "import", str(text), "--features", str(tmp_path / "x.npy"), "--labels",
                 str(tmp_path / "y.npy"), "--split", str(tmp_path / "split.npy"), "--feature-dtype", "bf16",
                 "--symmetrize", "--drop-duplicates", "--drop-self-loops", "--edge-budget", "32k",
                 "--no-progress", "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    summary = verify_image(out)
    assert summary["num_nodes"] == 50 and summary["feature_dtype"] == "bf16" and summary["symmetrized"]
    np.save(tmp_path / "ei.npy", edges.T.copy())
    assert main(["graph", "import", str(tmp_path / "ei.npy"), "--num-nodes", "40", "--no-progress",
                 "-o", str(tmp_path / "ei.img")]) == 0
    with GraphImage(tmp_path / "ei.img") as image:
        assert image.num_edges == 300


def _run_fault(capsys, path, expected_section, fragment):
    code = main(["graph", "verify", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"smartsage: error: {path}: section '{expected_section}': ")
    assert fragment in lines[0] and "Traceback" not in err


@pytest.mark.parametrize("fault", list(FAULTS))
def test_verify_fault_is_one_line_and_exit_2(small_image, tmp_path, capsys, fault):
    bad = tmp_path / f"{fault}.img"
    section, fragment = inject_fault(small_image, fault, bad)
    _run_fault(capsys, bad, section, fragment)


def test_info_on_bad_image_and_missing_file(small_image, tmp_path, capsys):
    bad = tmp_path / "bad.img"
    inject_fault(small_image, "bad_magic", bad)
    assert main(["graph", "info", str(bad)]) == 2
    assert "section 'header': bad magic" in capsys.readouterr().err
    assert main(["graph", "verify", str(tmp_path / "missing.img")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "No such file" in err
    empty = tmp_path / "empty.img"
    empty.write_bytes(b"")
    _run_fault(capsys, empty, "header", "truncated")


def test_bad_arguments_are_one_line(tmp_path, capsys):
    assert main(["graph", "generate", "--kind", "kronecker", "--scale", "2", "--classes", "3",
                 "--no-progress", "-o", str(tmp_path / "x.img")]) == 2
    assert "power of the seed's 2 classes" in capsys.readouterr().err
    text = tmp_path / "bad.txt"
    text.write_text("1 2\nthree 4\n")
    assert main(["graph", "import", str(text), "--no-progress", "-o", str(tmp_path / "y.img")]) == 2
    err = capsys.readouterr().err
    assert "bad.txt:2: expected 'src dst' node ids" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "y.img").exists()
    (tmp_path / "empty.npy").write_bytes(b"")
    assert main(["graph", "import", str(tmp_path / "empty.npy"), "--no-progress", "-o", str(tmp_path / "z.img")]) == 2
    err = capsys.readouterr().err
    assert "not a readable .npy/.npz file" in err and len(err.strip().splitlines()) == 1


def test_verify_in_a_real_process_has_no_traceback(small_image, tmp_path):
    """The installed entry point, as a user runs it: exit 2, one line on stderr."""
    bad = tmp_path / "bad.img"
    section, fragment = inject_fault(small_image, "non_monotone_indptr", bad)
    result = subprocess.run([sys.executable, "-m", "smartsage.host.cli", "graph", "verify", str(bad)],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"section '{section}': {fragment}" in result.stderr


def test_verify_progress_flag(small_image, capsys):
    assert main(["graph", "verify", "--progress", str(small_image)]) == 0
    assert "ok" in capsys.readouterr().out
