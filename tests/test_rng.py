"""The counter-based RNG: test vectors, scalar == numpy, and unbiased bounded draws."""

import json
import pathlib

import numpy as np
import pytest
from scipy import stats

from smartsage.spec import rng

VECTORS = pathlib.Path(__file__).parent / "vectors" / "rng.json"


@pytest.fixture(scope="module")
def vectors():
    return json.loads(VECTORS.read_text())


def test_vector_file_is_current(vectors):
    assert vectors == json.loads(json.dumps(rng.reference_vectors())), \
        "regenerate: python -m smartsage.spec.rng --vectors > tests/vectors/rng.json"


def test_scalar_functions_match_vectors(vectors):
    for case in vectors["mix32"]:
        assert rng.mix32(case["x"]) == case["out"]
    for case in vectors["command_key"]:
        assert rng.command_key(case["seed"]) == case["out"]
    for case in vectors["hop_key"]:
        assert rng.hop_key(case["key"], case["hop"]) == case["out"]
    for case in vectors["node_key"]:
        assert rng.node_key(case["hop_key"], case["node"]) == case["out"]
    for case in vectors["draw"]:
        assert rng.draw(case["node_key"], case["index"]) == case["out"]
    for case in vectors["rand32"]:
        assert rng.rand32(case["seed"], case["hop"], case["node"], case["index"]) == case["out"]
    for case in vectors["bounded"]:
        assert rng.bounded(case["node_key"], case["n"], case["index"]) == (case["value"], case["next_index"])


def test_vectors_cover_rejections(vectors):
    assert any(c["next_index"] - c["index"] > 1 for c in vectors["bounded"])
    assert any(c["draws"] > c["fanout"] for c in vectors["floyd"])


def test_numpy_matches_vectors(vectors):
    mix = vectors["mix32"]
    assert rng.mix32_np(np.array([c["x"] for c in mix], np.uint32)).tolist() == [c["out"] for c in mix]
    nk = vectors["node_key"]
    for case in nk:
        got = rng.node_key_np(case["hop_key"], np.array([case["node"]], np.uint64))
        assert int(got[0]) == case["out"]
    dr = vectors["draw"]
    got = rng.draw_np(np.array([c["node_key"] for c in dr], np.uint32), np.array([c["index"] for c in dr]))
    assert got.tolist() == [c["out"] for c in dr]
    bd = vectors["bounded"]
    value, nxt = rng.bounded_np(np.array([c["node_key"] for c in bd], np.uint32),
                                np.array([c["n"] for c in bd], np.uint64), np.array([c["index"] for c in bd]))
    assert value.tolist() == [c["value"] for c in bd]
    assert nxt.tolist() == [c["next_index"] for c in bd]


def test_scalar_equals_numpy_random():
    gen = np.random.default_rng(7)
    words = gen.integers(0, 1 << 32, 2000, dtype=np.uint64).astype(np.uint32)
    assert rng.mix32_np(words).tolist() == [rng.mix32(int(w)) for w in words]
    nodes = gen.integers(0, 1 << 63, 300, dtype=np.uint64)
    hkey = rng.hop_key(rng.command_key(123456789), 2)
    keys = rng.node_key_np(hkey, nodes)
    assert keys.tolist() == [rng.node_key(hkey, int(v)) for v in nodes]
    # bounded over ranges from 1 to 2^32 - 1, many of them rejection-heavy (just above 2^31)
    n = np.concatenate([gen.integers(1, 1 << 32, 300, dtype=np.uint64),
                        gen.integers((1 << 31) + 1, (1 << 31) + 1000, 300, dtype=np.uint64)])
    keys = gen.integers(0, 1 << 32, n.size, dtype=np.uint64).astype(np.uint32)
    start = gen.integers(0, 100, n.size)
    value, nxt = rng.bounded_np(keys, n, start)
    expected = [rng.bounded(int(k), int(m), int(s)) for k, m, s in zip(keys, n, start, strict=True)]
    assert list(zip(value.tolist(), nxt.tolist(), strict=True)) == expected
    assert (nxt - start.astype(np.uint64) > 1).sum() > 100  # the rejection path ran


def test_seed_must_be_u64():
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        rng.command_key(1 << 64)
    with pytest.raises(ValueError, match="Range"):
        rng.bounded(0, 0, 0)


@pytest.mark.parametrize("n", [3, 7, 100, (1 << 31) + 1])
def test_bounded_is_uniform(n):
    """Chi-square over the values of many independent draws (seeded, deterministic)."""
    trials = 40_000
    keys = rng.mix32_np(np.arange(trials, dtype=np.uint32))
    value, _ = rng.bounded_np(keys, np.full(trials, n, np.uint64), np.zeros(trials, np.uint64))
    bins = min(n, 50)
    observed = np.bincount((value * np.uint64(bins) // np.uint64(n)).astype(np.int64), minlength=bins)
    edges = (np.arange(bins + 1, dtype=object) * n + bins - 1) // bins   # first value of each bin
    expected = np.diff(np.array(edges, dtype=np.float64)) * trials / n
    assert stats.chisquare(observed, expected).pvalue > 1e-3
