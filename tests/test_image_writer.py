"""The streaming writer: same bytes as write_image whatever the chunking and the budget."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
from golden_graphs import reference_csr

from smartsage.spec.image import (
    FLAG_NO_DUPLICATES,
    FLAG_NO_SELF_LOOPS,
    FLAG_SYMMETRIZED,
    FeatureDtype,
    GraphImage,
    IndexDtype,
    encode_features,
    verify_image,
    write_image,
)
from smartsage.spec.image_writer import MIN_MEMORY_BUDGET, ImageWriter, csr_block, parse_size

SEED = 99


def flags_of(symmetrize, drop_self_loops, drop_duplicates):
    return ((FLAG_SYMMETRIZED if symmetrize else 0) | (FLAG_NO_SELF_LOOPS if drop_self_loops else 0)
            | (FLAG_NO_DUPLICATES if drop_duplicates else 0))


@pytest.fixture(scope="module")
def edges():
    """A skewed edge list with duplicates and self loops (every adjacency list fits the budgets below)."""
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    n, e = 2000, 30_000
    src = (rng.random(e) ** 2 * n).astype(np.int64)  # skewed: node 0 has ~700 edges
    dst = rng.integers(0, n, e)
    dst[:300] = src[:300]  # self loops
    src[300:600], dst[300:600] = src[600:900], dst[600:900]  # duplicates
    return n, src, dst


@pytest.mark.parametrize("symmetrize", [False, True])
@pytest.mark.parametrize("drop_self_loops", [False, True])
@pytest.mark.parametrize("drop_duplicates", [False, True])
def test_streamed_build_larger_than_budget_matches_in_memory_csr(tmp_path, edges, symmetrize, drop_self_loops,
                                                                 drop_duplicates):
    n, src, dst = edges
    budget = 64 << 10
    path = tmp_path / "streamed.img"
    writer = ImageWriter(path, n, symmetrize=symmetrize, drop_self_loops=drop_self_loops,
                         drop_duplicates=drop_duplicates, memory_budget=budget)
    for start in range(0, len(src), 4321):
        writer.add_edges(src[start:start + 4321], dst[start:start + 4321])
    writer.finalize()
    spilled_bytes = writer.stats["edges_spilled"] * 8
    assert spilled_bytes > 2 * budget, "the edge list must exceed the writer's memory budget"
    assert writer.stats["blocks"] > 1
    assert writer.stats["max_block_edges"] * 24 <= budget
    indptr, indices = reference_csr(src, dst, n, symmetrize, drop_self_loops, drop_duplicates)
    write_image(tmp_path / "reference.img", indptr, indices,
                flags=flags_of(symmetrize, drop_self_loops, drop_duplicates))
    assert path.read_bytes() == (tmp_path / "reference.img").read_bytes()
    verify_image(path)


def test_unknown_node_count_redistributes_and_matches(tmp_path, edges):
    """Without num_nodes everything spills to one partition, split again at finalize."""
    n, src, dst = edges
    path = tmp_path / "inferred.img"
    # 64 KiB: the largest adjacency list (~700 u64 entries) fits, the edge list (~1 MB) does not
    with ImageWriter(path, None, symmetrize=True, drop_duplicates=True, memory_budget=64 << 10) as w:
        w.add_edges(src, dst)
    assert w.stats["redistributed_edges"] > 0
    top = int(max(src.max(), dst.max())) + 1
    indptr, indices = reference_csr(src, dst, top, symmetrize=True, drop_duplicates=True)
    write_image(tmp_path / "reference.img", indptr, indices, flags=flags_of(True, False, True))
    assert path.read_bytes() == (tmp_path / "reference.img").read_bytes()


def test_bytes_independent_of_chunking_and_budget(tmp_path, edges):
    n, src, dst = edges
    images = []
    for index, (chunk, budget) in enumerate([(len(src), 1 << 30), (1000, 32 << 10), (77, 128 << 10)]):
        path = tmp_path / f"{index}.img"
        with ImageWriter(path, n, drop_duplicates=True, memory_budget=budget) as w:
            for start in range(0, len(src), chunk):
                w.add_edges(src[start:start + chunk], dst[start:start + chunk])
        images.append(path.read_bytes())
    assert images[0] == images[1] == images[2]


def test_u64_indices(tmp_path, edges):
    n, src, dst = edges
    path = tmp_path / "wide.img"
    with ImageWriter(path, n, index_dtype=IndexDtype.U64, memory_budget=64 << 10) as w:
        w.add_edges(src, dst)
    indptr, indices = reference_csr(src, dst, n)
    write_image(tmp_path / "reference.img", indptr, indices, index_dtype=IndexDtype.U64)
    assert path.read_bytes() == (tmp_path / "reference.img").read_bytes()
    with GraphImage(path) as image:
        assert image.indices.dtype == np.dtype("<u8")
    assert IndexDtype.for_num_nodes(1 << 32) is IndexDtype.U32
    assert IndexDtype.for_num_nodes((1 << 32) + 1) is IndexDtype.U64


def test_scipy_and_numpy_block_builds_agree():
    rng = np.random.default_rng(SEED)
    for rows, cols, nnz in [(1, 5, 50), (100, 3000, 20_000), (5000, 10, 4000)]:
        src = rng.integers(0, rows, nnz)
        dst = rng.integers(0, cols, nnz)
        for dedup in (False, True):
            fast = csr_block(src, dst, rows, dedup, use_scipy=True)
            slow = csr_block(src, dst, rows, dedup, use_scipy=False)
            np.testing.assert_array_equal(fast[0], slow[0])
            np.testing.assert_array_equal(fast[1], slow[1])


@pytest.mark.parametrize("dtype", list(FeatureDtype))
def test_node_data_in_chunks(tmp_path, dtype):
    rng = np.random.default_rng(SEED + int(dtype))
    n, f = 1000, 5
    values = rng.standard_normal((n, f)).astype(np.float32)
    labels = rng.integers(0, 7, n)
    split = rng.integers(0, 4, n)
    path = tmp_path / "nodes.img"
    with ImageWriter(path, n, feature_dim=f, feature_dtype=dtype, int8_scale=32.0,
                     memory_budget=MIN_MEMORY_BUDGET) as w:
        for start in range(0, n, 333):
            w.write_features(start, values[start:start + 333])
            w.write_labels(start, labels[start:start + 333])
        w.write_split(0, split[:500])  # the rest defaults to 0 (none)
        w.add_edges(np.arange(n - 1), np.arange(1, n))
    expected_split = split.copy()
    expected_split[500:] = 0
    stored = encode_features(values, dtype, int8_scale=32.0)
    write_image(tmp_path / "reference.img", np.arange(n + 1).clip(max=n - 1), np.arange(1, n),
                features=stored, feature_dtype=dtype, labels=labels, split=expected_split)
    assert path.read_bytes() == (tmp_path / "reference.img").read_bytes()
    assert verify_image(path)["num_classes"] == 7


def test_unwritten_node_data_gets_defaults(tmp_path):
    path = tmp_path / "defaults.img"
    with ImageWriter(path, 10, feature_dim=3, num_classes=4) as w:
        w.write_labels(0, [1, 2, 3])
        w.add_edges([0, 1], [1, 2])
    with GraphImage(path) as image:
        np.testing.assert_array_equal(image.labels, [1, 2, 3] + [-1] * 7)
        assert not image.features.any() and not image.split.any()
        assert image.num_classes == 4
    verify_image(path)


def test_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="Memory budget must be at least"):
        ImageWriter(tmp_path / "x.img", 10, memory_budget=100)
    with ImageWriter(tmp_path / "x.img", 10, feature_dim=2) as w:
        with pytest.raises(ValueError, match="Node id 10 is out of range for 10 nodes"):
            w.add_edges([0, 10], [1, 2])
        with pytest.raises(ValueError, match="must not be negative"):
            w.add_edges(np.array([0, -1]), np.array([1, 2]))
        with pytest.raises(ValueError, match="Node ids must be integers"):
            w.add_edges(np.array([0.5]), np.array([1.0]))
        with pytest.raises(ValueError, match="one length"):
            w.add_edges([0, 1], [1])
        w.write_features(0, np.zeros((2, 2), np.float32))
        with pytest.raises(ValueError, match="must be written in order: next row is 2, not 5"):
            w.write_features(5, np.zeros((1, 2), np.float32))
        with pytest.raises(ValueError, match="shape"):
            w.write_features(2, np.zeros((1, 3), np.float32))
        with pytest.raises(ValueError, match="Split codes must be"):
            w.write_split(0, [4])
    unknown = ImageWriter(tmp_path / "y.img", None)
    with pytest.raises(ValueError, match="needs the node count"):
        unknown.write_labels(0, [1])
    unknown.abort()
    stray = ImageWriter(tmp_path / "z.img", None)
    stray.add_edges([0, 1 << 33], [1, 2])  # a typo'd id must not make a 70 GB image
    with pytest.raises(ValueError, match="pass the node count"):
        stray.finalize()
    assert not (tmp_path / "z.img").exists()
    with pytest.raises(ValueError, match="Size must be a number"):
        parse_size("lots")
    assert parse_size("64k") == 65536 and parse_size("1.5G") == 3 << 29 and parse_size(7) == 7


def _leftovers(directory: pathlib.Path) -> list[str]:
    return sorted(p for p in os.listdir(directory) if ".build-" in p)


def test_temp_files_cleaned_on_success_and_on_error(tmp_path, edges):
    n, src, dst = edges
    out = tmp_path / "out.img"
    with ImageWriter(out, n, memory_budget=32 << 10) as w:
        w.add_edges(src, dst)
        assert _leftovers(tmp_path)  # spill files live next to the output while building
    assert out.exists() and not _leftovers(tmp_path)
    failed = tmp_path / "failed.img"
    with pytest.raises(RuntimeError, match="boom"):
        with ImageWriter(failed, n, memory_budget=32 << 10) as w:
            w.add_edges(src, dst)
            raise RuntimeError("boom")
    assert not failed.exists() and not _leftovers(tmp_path)
    # an error inside finalize (labels beyond num_classes) also cleans up and leaves no image
    w = ImageWriter(failed, 3, num_classes=2)
    with pytest.raises(ValueError, match="outside"):
        w.write_labels(0, [0, 1, 5])
    w.abort()
    assert not failed.exists() and not _leftovers(tmp_path)


def test_progress_bar_runs(tmp_path, edges, capsys):
    n, src, dst = edges
    with ImageWriter(tmp_path / "p.img", n, memory_budget=64 << 10, progress=True, expected_edges=len(src)) as w:
        w.add_edges(src, dst)
    assert "sorting" in capsys.readouterr().err
