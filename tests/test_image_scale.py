"""Billion-edge builds on a small machine, CI-sized: bounded memory, a full disk, a budget too small,
streamed binary edge lists, streamed verify and statistics, progress with rate and ETA."""

from __future__ import annotations

import errno
import io
import json
import os
import pathlib

import numpy as np
import pytest
from golden_graphs import reference_csr

from smartsage.host.cli import main
from smartsage.host.graphs.importers import NpyEdges, import_graph
from smartsage.spec import image_writer
from smartsage.spec.image import FLAG_NO_DUPLICATES, FLAG_SYMMETRIZED, GraphImage, verify_image, write_image
from smartsage.spec.image_writer import DiskFullError, ImageWriter, MemoryBudgetError, ProgressMeter

SEED = 13


def _leftovers(directory: pathlib.Path) -> list[str]:
    return sorted(p for p in os.listdir(directory) if ".build-" in p)


@pytest.fixture(scope="module")
def edge_list():
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    n, e = 3000, 40_000
    src = (rng.random(e) ** 2 * n).astype(np.int64)
    dst = rng.integers(0, n, e)
    return n, src, dst


def _reference(tmp_path, n, src, dst):
    indptr, indices = reference_csr(src, dst, n, symmetrize=True, drop_duplicates=True)
    path = tmp_path / "reference.img"
    write_image(path, indptr, indices, flags=FLAG_SYMMETRIZED | FLAG_NO_DUPLICATES)
    return path.read_bytes()


@pytest.mark.parametrize("layout", ["pairs-int32", "rows-int64", "pairs-fortran-uint32"])
def test_streamed_npy_import_larger_than_the_budget(tmp_path, edge_list, layout):
    """A (E, 2) or (2, E) .npy edge array is read in chunks far smaller than the file and the
    writer's budget is far smaller too; the image equals the in-memory CSR."""
    n, src, dst = edge_list
    pairs = np.stack([src, dst], axis=1)
    array = {"pairs-int32": pairs.astype(np.int32), "rows-int64": pairs.T.copy(),
             "pairs-fortran-uint32": np.asfortranarray(pairs.astype(np.uint32))}[layout]
    npy = tmp_path / "edges.npy"
    np.save(npy, array)
    edges = NpyEdges(npy)
    assert edges.num_edges == len(src)
    chunks = list(edges.chunks(4096))
    assert len(chunks) == -(-len(src) // 4096)
    assert np.array_equal(np.concatenate([c[0] for c in chunks]), src)
    assert np.array_equal(np.concatenate([c[1] for c in chunks]), dst)
    budget = 64 << 10
    assert npy.stat().st_size > 4 * budget
    out = tmp_path / "g.img"
    header, stats = import_graph(npy, out, num_nodes=n, symmetrize=True, drop_duplicates=True, memory_budget=budget)
    assert stats["blocks"] > 1 and stats["disk_peak_bytes"] >= stats["spill_peak_bytes"] > 0
    assert out.read_bytes() == _reference(tmp_path, n, src, dst)
    verify_image(out)


def test_npy_import_rejects_bad_arrays(tmp_path):
    np.save(tmp_path / "three.npy", np.zeros((5, 3), np.int64))
    with pytest.raises(ValueError, match=r"shape \(2, E\) or \(E, 2\)"):
        NpyEdges(tmp_path / "three.npy")
    np.save(tmp_path / "float.npy", np.zeros((5, 2), np.float32))
    with pytest.raises(ValueError, match="integers"):
        NpyEdges(tmp_path / "float.npy")
    np.save(tmp_path / "short.npy", np.zeros((100, 2), np.int64))
    data = (tmp_path / "short.npy").read_bytes()
    (tmp_path / "short.npy").write_bytes(data[:-16])
    with pytest.raises(ValueError, match="shorter"):
        NpyEdges(tmp_path / "short.npy")


def test_cli_import_of_npy_pairs_reports_memory_and_disk(tmp_path, edge_list, capsys):
    n, src, dst = edge_list
    npy = tmp_path / "pairs.npy"
    np.save(npy, np.stack([src, dst], axis=1).astype(np.int32))
    out = tmp_path / "g.img"
    assert main(["graph", "import", str(npy), "--num-nodes", str(n), "--symmetrize", "--drop-duplicates",
                 "--memory-budget", "2G", "--no-progress", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "peak RSS" in text and "of the 2.0 GiB budget" in text and "disk: peak" in text
    assert out.read_bytes() == _reference(tmp_path, n, src, dst)


def test_budget_smaller_than_the_process_is_one_line_and_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "g.img"
    assert main(["graph", "generate", "--scale", "8", "--memory-budget", "64M", "--no-progress",
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "memory budget 64.0 MiB is too small" in err and "give at least" in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists() and not _leftovers(tmp_path)
    assert main(["graph", "generate", "--scale", "8", "--memory-budget", "1G", "--edge-budget", "1M",
                 "--no-progress", "-o", str(out)]) == 2
    assert "not both" in capsys.readouterr().err


def test_adjacency_list_larger_than_the_budget_is_refused(tmp_path):
    """A node's list is sorted in one block: a budget that cannot hold it is an error, not an overrun."""
    n = 1000
    src = np.zeros(20_000, np.int64)  # node 0: 20,000 entries, 480 KB to sort
    dst = np.arange(20_000) % n
    out = tmp_path / "hub.img"
    with pytest.raises(MemoryBudgetError, match="node 0 has 20,000 entries"):
        with ImageWriter(out, n, memory_budget=64 << 10) as w:
            w.add_edges(src, dst)
    assert not out.exists() and not _leftovers(tmp_path)


class _FullDisk:
    """Fails writes with ENOSPC once ``limit`` bytes have been written through the patched calls."""

    def __init__(self, monkeypatch, limit: int):
        self.limit = limit
        self.written = 0
        real_pwrite, real_write = os.pwrite, image_writer._write_all

        def pwrite(fd, data, offset):
            self._charge(len(memoryview(data).cast("B")))
            return real_pwrite(fd, data, offset)

        def write_all(f, array):
            self._charge(np.asarray(array).nbytes)
            return real_write(f, array)

        monkeypatch.setattr(image_writer.os, "pwrite", pwrite)
        monkeypatch.setattr(image_writer, "_write_all", write_all)

    def _charge(self, size: int) -> None:
        if self.written + size > self.limit:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.written += size


@pytest.mark.parametrize("limit", [4 << 10, 200 << 10, 600 << 10], ids=["node-data", "spill", "sort"])
def test_full_disk_is_a_clear_error_and_removes_the_partial_image(tmp_path, monkeypatch, edge_list, limit):
    n, src, dst = edge_list
    full = _FullDisk(monkeypatch, limit)
    out = tmp_path / "full.img"
    with pytest.raises(DiskFullError, match="disk full while .* the partial image and spill files were removed"):
        with ImageWriter(out, n, feature_dim=4, symmetrize=True, memory_budget=64 << 10) as w:
            w.write_features(0, np.ones((n, 4), np.float32))
            for start in range(0, len(src), 5000):
                w.add_edges(src[start:start + 5000], dst[start:start + 5000])
    assert full.written <= limit
    assert not out.exists() and not _leftovers(tmp_path)


def test_full_disk_through_the_cli_is_one_line(tmp_path, monkeypatch, capsys):
    _FullDisk(monkeypatch, 256 << 10)
    out = tmp_path / "g.img"
    assert main(["graph", "generate", "--scale", "10", "--feature-dim", "0", "--no-progress",
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "disk full while" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not _leftovers(tmp_path)


def test_disk_clearly_too_small_is_refused_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(image_writer, "free_disk", lambda path: 1 << 20)
    out = tmp_path / "g.img"
    with pytest.raises(DiskFullError, match="not enough disk .* 1.0 MiB are free"):
        ImageWriter(out, 1 << 20, symmetrize=True, expected_edges=1 << 20)
    assert not out.exists() and not _leftovers(tmp_path)


def test_disk_peak_accounts_spill_and_image(tmp_path, edge_list):
    n, src, dst = edge_list
    with ImageWriter(tmp_path / "g.img", n, symmetrize=True, memory_budget=64 << 10,
                     expected_edges=len(src)) as w:
        w.add_edges(src, dst)
    spilled = w.stats["edges_spilled"] * 8
    # a partition redistributed into finer ones exists twice for a moment
    assert spilled <= w.stats["spill_peak_bytes"] <= 2 * spilled
    image = (tmp_path / "g.img").stat().st_size
    assert w.stats["spill_peak_bytes"] <= w.stats["disk_peak_bytes"] <= w.stats["spill_peak_bytes"] + image


def test_plain_progress_lines_have_rate_and_eta():
    stream = io.StringIO()
    meter = ProgressMeter(True, "g.img", interval=0.0, stream=stream)
    meter.task("edges in", 1000, "edges")
    meter.advance("edges in", 250)
    meter.advance("edges in", 750)
    meter.task("read", None, "B")
    meter.update("read", 3 << 20, 4 << 20)
    meter.close()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("g.img edges in: 250/1,000 (25.0%)") and "edges/s" in lines[0] and "ETA" in lines[0]
    assert lines[1].startswith("g.img edges in: 1,000/1,000 (100.0%)") and "ETA" not in lines[1]
    assert lines[2].startswith("g.img read: 3.0 MiB/4.0 MiB (75.0%)") and "iB/s" in lines[2]


def test_streamed_statistics_and_verify_match_the_in_memory_answer(tmp_path, capsys):
    out = tmp_path / "g.img"
    assert main(["graph", "generate", "--scale", "11", "--edge-factor", "8", "--classes", "4",
                 "--feature-dim", "0", "--no-progress", "-o", str(out)]) == 0
    capsys.readouterr()
    from smartsage.host.cli_graph import graph_statistics

    with GraphImage(out) as image:
        indptr, indices, labels = (np.asarray(image.indptr, np.int64), np.asarray(image.indices),
                                   np.asarray(image.labels))
        small_chunks = graph_statistics(image, chunk_nodes=100)
    degree = np.diff(indptr)
    own, other = np.repeat(labels, degree), labels[indices]
    assert small_chunks["degree_max"] == degree.max()
    assert small_chunks["isolated_nodes"] == np.count_nonzero(degree == 0)
    assert small_chunks["class_sizes"] == np.bincount(labels, minlength=4).tolist()
    assert small_chunks["edge_label_agreement"] == pytest.approx(np.mean(own == other))
    assert main(["graph", "info", str(out), "--stats", "--json", "--progress"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["stats"] == small_chunks
    assert "stats g.img entries:" in captured.err
    assert main(["graph", "verify", str(out), "--progress"]) == 0
    captured = capsys.readouterr()
    assert "peak RSS" in captured.out and "verify g.img read:" in captured.err
