"""``smartsage sample``: the .npz layout of docs/sample-output.md, target selection, backends, errors."""

import numpy as np
import pytest
from golden_graphs import random_csr

from smartsage.host import cli_sample
from smartsage.host.cli import main
from smartsage.spec import golden
from smartsage.spec.descriptor import RESULT_FIELDS
from smartsage.spec.image import GraphImage, Split, write_image


@pytest.fixture(scope="module")
def image_path(tmp_path_factory):
    gen = np.random.default_rng(4)
    indptr, indices = random_csr(gen, 120, 20)
    features = gen.integers(0, 1 << 16, (120, 5)).astype(np.uint16)   # bf16 bit patterns
    split = gen.choice([0, 1, 1, 2, 3], 120).astype(np.uint8)
    path = tmp_path_factory.mktemp("cli") / "g.img"
    write_image(path, indptr, indices, features, feature_dtype="bf16", split=split)
    return str(path)


def test_sample_npz_layout(image_path, tmp_path, capsys):
    out = tmp_path / "out.npz"
    assert main(["sample", image_path, "-b", "16", "--fanouts", "4,3", "--seed", "9", "-o", str(out)]) == 0
    assert "16 targets" in capsys.readouterr().out
    z = np.load(out, allow_pickle=False)
    targets = z["targets"]
    with GraphImage(image_path) as image:
        expected = golden.sample(image, targets, [4, 3], 9)
        train = set(image.split_nodes(Split.TRAIN).tolist())
    assert len(set(targets.tolist())) == 16 and set(targets.tolist()) <= train
    assert (z["node_list"] == expected.node_list).all() and (z["counts"] == expected.counts).all()
    assert z["fanouts"].tolist() == [4, 3] and int(z["seed"]) == 9 and str(z["backend"]) == "golden"
    for name, _, _, _ in RESULT_FIELDS:
        assert int(z[f"header_{name}"]) == getattr(expected.header, name)
    frontiers = golden.hop_frontiers(expected.node_list, expected.counts, 16, [4, 3])
    for hop, k in enumerate([4, 3]):
        dst, neighbors, counts = z[f"hop{hop}_dst"], z[f"hop{hop}_neighbors"], z[f"hop{hop}_counts"]
        assert dst.dtype == np.int64 and neighbors.dtype == np.int64 and counts.dtype == np.uint32
        assert (dst == frontiers[hop]).all() and neighbors.shape == (dst.size, k)
        assert ((neighbors >= 0).sum(axis=1) == counts).all()
        assert (neighbors[neighbors >= 0] == frontiers[hop + 1][dst.size:]).all()
        assert (neighbors[:, :1] >= 0).sum() == (counts > 0).sum()     # padding is at the end
    assert "self_features" not in z.files


def test_sample_aggregate_and_target_files(image_path, tmp_path):
    listing = tmp_path / "targets.txt"
    listing.write_text("# a comment\n3, 7\n7 100\n")
    out = tmp_path / "agg.npz"
    assert main(["sample", image_path, "--targets", str(listing), "--fanouts", "2,5", "--aggregate",
                 "-o", str(out)]) == 0
    z = np.load(out)
    assert z["targets"].tolist() == [3, 7, 7, 100]
    with GraphImage(image_path) as image:
        expected = golden.sample(image, [3, 7, 7, 100], [2, 5], 0, aggregate=True)
    assert z["self_features"].dtype == np.uint16 and str(z["feature_dtype"]) == "bf16"
    assert (z["self_features"] == expected.self_rows).all()
    assert (z["neighbor_sums"].view(np.uint32) == expected.sums.view(np.uint32)).all()
    assert (z["aggregate_nodes"] == z["hop1_dst"]).all() and (z["aggregate_counts"] == z["hop1_counts"]).all()
    npy = tmp_path / "t.npy"
    np.save(npy, np.array([5, 6, 7], np.uint32))
    assert main(["sample", image_path, "--targets", str(npy), "-b", "2", "--fanouts", "3", "-o", str(out)]) == 0
    assert np.load(out)["targets"].tolist() == [5, 6]


def test_default_targets_are_a_seeded_train_draw(image_path):
    with GraphImage(image_path) as image:
        a = cli_sample.default_targets(image, 10, 1)
        assert (a == cli_sample.default_targets(image, 10, 1)).all()
        assert (a != cli_sample.default_targets(image, 10, 2)).any()
        pool = image.split_nodes(Split.TRAIN)
        assert (a == pool[np.random.default_rng(1).choice(pool.size, 10, replace=False)]).all()
        with pytest.raises(ValueError, match="exceeds"):
            cli_sample.default_targets(image, 1000, 1)


def test_repeat_reports_throughput(image_path, tmp_path, capsys):
    out = tmp_path / "r.npz"
    assert main(["sample", image_path, "-b", "8", "--fanouts", "3,3", "--repeat", "3", "-o", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "3 more batches" in lines[1] and "M sampled edges/s" in lines[1]
    assert main(["sample", image_path, "--repeat", "-1", "-o", str(out)]) == 2
    assert "non-negative" in capsys.readouterr().err


def test_lazily_imported_backend(image_path, tmp_path, monkeypatch):
    monkeypatch.setitem(cli_sample.SAMPLE_BACKENDS, "lazy", "smartsage.spec.golden:sample")
    out = tmp_path / "lazy.npz"
    assert main(["sample", image_path, "--backend", "lazy", "-b", "4", "--fanouts", "3", "-o", str(out)]) == 0
    assert str(np.load(out)["backend"]) == "lazy"


@pytest.mark.parametrize(("args", "message"), [
    (["--fanouts", "4,x"], "comma-separated"),
    (["--fanouts", "4,0"], "positive"),
    (["--backend", "nope"], "Unknown backend 'nope'"),
    (["--fanouts", "40"], "BAD_DESCRIPTOR"),            # above the default build's max_fanout
    (["--seed", "-1"], "unsigned 64-bit"),
    (["-b", "0"], "positive"),
])
def test_errors_are_one_line(image_path, tmp_path, capsys, args, message):
    assert main(["sample", image_path, "-o", str(tmp_path / "x.npz"), "-b", "4", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_bad_target_file(image_path, tmp_path, capsys):
    listing = tmp_path / "bad.txt"
    listing.write_text("1 2 banana\n")
    assert main(["sample", image_path, "--targets", str(listing), "-o", str(tmp_path / "x.npz")]) == 2
    assert "bad.txt:1: not a node id" in capsys.readouterr().err
    listing.write_text("1 500\n")
    assert main(["sample", image_path, "--targets", str(listing), "-o", str(tmp_path / "x.npz")]) == 2
    assert "Target 500 is not a node" in capsys.readouterr().err
