"""The golden model's sampling: the rule of docs/spec.md section 2-3, uniformity, read cost, and the
vectorized implementation against the scalar reference bit for bit."""

import itertools
import json
import pathlib

import numpy as np
import pytest
from golden_graphs import CountingImage, open_image, random_csr, special_bits
from scipy import stats

from smartsage.spec import golden, rng
from smartsage.spec.config import KernelConfig
from smartsage.spec.descriptor import Status
from smartsage.spec.golden_scalar import floyd, sample_node, sample_scalar
from smartsage.spec.image import FeatureDtype

WIDE = KernelConfig(name="wide", max_fanout=1024)
VECTORS = pathlib.Path(__file__).parent / "vectors" / "rng.json"


def node_keys_over_seeds(seeds, hop, node):
    """H_v of one node for many seeds, exactly as a command derives it (vectorized over seeds)."""
    seeds = np.asarray(seeds, np.uint64)
    lo = (seeds & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (seeds >> np.uint64(32)).astype(np.uint32)
    key = rng.mix32_np(rng.mix32_np(lo ^ np.uint32(rng.SEED_SALT)) ^ hi)
    hkey = rng.mix32_np(key ^ np.uint32(hop) ^ np.uint32(rng.HOP_SALT))
    v_lo, v_hi = np.uint32(node & 0xFFFFFFFF), np.uint32(node >> 32)
    return rng.mix32_np(rng.mix32_np(hkey ^ v_lo) ^ v_hi ^ np.uint32(rng.NODE_SALT))


def test_seed_derivation_helper_matches_scalar():
    keys = node_keys_over_seeds([0, 5, (1 << 64) - 1], 2, (1 << 33) + 9)
    assert keys.tolist() == [rng.node_key(rng.hop_key(rng.command_key(s), 2), (1 << 33) + 9)
                             for s in [0, 5, (1 << 64) - 1]]


def test_floyd_matches_vectors_and_scalar():
    for case in json.loads(VECTORS.read_text())["floyd"]:
        positions, draws = golden.floyd_positions(np.array([case["node_key"]], np.uint32),
                                                  np.array([case["degree"]], np.uint64), case["fanout"])
        assert positions[0].tolist() == case["positions"] and int(draws[0]) == case["draws"]
        assert floyd(case["node_key"], case["degree"], case["fanout"]) == (case["positions"], case["draws"])
    gen = np.random.default_rng(3)
    for k, spread in ((1, 200), (2, 200), (10, 200), (33, 200), (100, 4), (300, 1000)):
        degree = gen.integers(k + 1, k + 1 + spread, 50).astype(np.uint64)   # near k: many collisions
        keys = gen.integers(0, 1 << 32, 50, dtype=np.uint64).astype(np.uint32)
        positions, draws = golden.floyd_positions(keys, degree, k)
        for i in range(50):
            assert (positions[i].tolist(), int(draws[i])) == floyd(int(keys[i]), int(degree[i]), k)


def test_floyd_rejects_bad_input():
    with pytest.raises(ValueError, match="above the fanout"):
        golden.floyd_positions(np.array([1], np.uint32), np.array([3], np.uint64), 3)
    with pytest.raises(ValueError, match="below 2"):
        golden.floyd_positions(np.array([1], np.uint32), np.array([1 << 32], np.uint64), 3)


# ----------------------------------------------------------------------------------- uniformity

def test_uniform_subsets_small_degree():
    """d = 7, k = 3: every one of the 35 subsets equally likely (chi-square over 35,000 seeds)."""
    trials, d, k = 35_000, 7, 3
    keys = node_keys_over_seeds(np.arange(trials), 0, 11)
    positions, _ = golden.floyd_positions(keys, np.full(trials, d, np.uint64), k)
    assert (np.sort(positions, axis=1)[:, 1:] != np.sort(positions, axis=1)[:, :-1]).all()
    code = (np.int64(1) << positions).sum(axis=1)
    subsets = [sum(1 << p for p in c) for c in itertools.combinations(range(d), k)]
    observed = np.array([(code == s).sum() for s in subsets])
    assert observed.sum() == trials
    assert stats.chisquare(observed).pvalue > 1e-3


@pytest.mark.parametrize(("degree", "fanout", "bins"), [(60, 25, 60), (5000, 10, 100), (3_000_000_000, 10, 100)])
def test_uniform_inclusion(degree, fanout, bins):
    """Inclusion counts per position (binned for large d) over many seeds: medium, large and huge d.

    d = 3e9 puts the bounded draws' range near 2^32, where about a third of the draws are rejected.
    """
    trials = 12_000
    keys = node_keys_over_seeds(np.arange(trials) * 7919 + degree, 1, 4242)
    positions, draws = golden.floyd_positions(keys, np.full(trials, degree, np.uint64), fanout)
    assert (np.diff(np.sort(positions, axis=1), axis=1) > 0).all(), "a position repeated"
    assert positions.min() >= 0 and positions.max() < degree
    bin_of = positions * bins // degree
    observed = np.bincount(bin_of.ravel(), minlength=bins)
    edges = (np.arange(bins + 1, dtype=object) * degree + bins - 1) // bins
    expected = np.diff(np.array(edges, np.float64)) * trials * fanout / degree
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    if degree > 1 << 31:
        assert draws.sum() > trials * fanout * 1.2


def test_sample_uses_the_seeded_node_keys(tmp_path):
    """What sample() writes is floyd_positions of H_v for the command's seed (ties the tests above to it)."""
    indptr = np.array([0, 5000, 5003], np.uint64)
    indices = np.arange(5003) % 2
    with open_image(tmp_path / "g.img", indptr, indices) as image:
        for seed in (0, 1, 99):
            result = golden.sample(image, [0, 1], [10], seed)
            key = rng.node_key(rng.hop_key(rng.command_key(seed), 0), 0)
            positions, _ = golden.floyd_positions(np.array([key], np.uint32), np.array([5000], np.uint64), 10)
            assert result.node_list[2:12].tolist() == (positions[0] % 2).tolist()
            assert result.node_list[12:].tolist() == [0, 1, 0] and result.counts.tolist() == [10, 3]


# ------------------------------------------------------------------------------ properties

@pytest.fixture(scope="module")
def random_image(tmp_path_factory):
    gen = np.random.default_rng(11)
    indptr, indices = random_csr(gen, 300, 60)
    with open_image(tmp_path_factory.mktemp("g") / "g.img", indptr, indices) as image:
        yield image, indptr, indices


def test_samples_are_true_neighbors_without_repeated_positions(random_image):
    image, indptr, indices = random_image
    gen = np.random.default_rng(5)
    targets = gen.integers(0, 300, 64)
    fanouts = [17, 5, 30]
    result = golden.sample(image, targets, fanouts, seed=77, config=WIDE)
    assert result.ok
    frontiers = golden.hop_frontiers(result.node_list, result.counts, targets.size, fanouts)
    consumed = 0
    for hop, k in enumerate(fanouts):
        frontier, nxt = frontiers[hop], frontiers[hop + 1]
        counts = result.counts[consumed:consumed + frontier.size]
        consumed += frontier.size
        degree = (indptr[frontier.astype(np.int64) + 1] - indptr[frontier.astype(np.int64)]).astype(np.int64)
        assert (counts == np.minimum(degree, k)).all()
        samples = np.split(nxt[frontier.size:], np.cumsum(counts)[:-1])
        for v, got in zip(frontier.tolist(), samples, strict=True):
            positions, _ = sample_node(77, hop, v, int(indptr[v + 1] - indptr[v]), k)
            assert len(set(positions)) == len(positions)                  # never a repeated position
            neighbors = indices[int(indptr[v]):int(indptr[v + 1])]
            assert got.tolist() == neighbors[positions].tolist()          # true neighbors, in sample order
    assert result.header.edges_sampled == result.node_list.size - targets.size
    assert result.header.counts_written == sum(f.size for f in frontiers[:-1])


def test_determinism_and_duplicate_consistency(random_image):
    image, indptr, _ = random_image
    targets = np.array([5, 9, 5, 200, 9, 5])
    a = golden.sample(image, targets, [4, 3], seed=1234)
    b = golden.sample(image, targets, [4, 3], seed=1234)
    assert (a.node_list == b.node_list).all() and (a.counts == b.counts).all() and a.header == b.header
    c = golden.sample(image, targets, [4, 3], seed=1235)
    assert a.node_list.tolist() != c.node_list.tolist()
    # the same node twice in a frontier gets the identical sample (at every hop)
    frontiers = golden.hop_frontiers(a.node_list, a.counts, targets.size, [4, 3])
    consumed = 0
    for hop in range(2):
        frontier = frontiers[hop]
        counts = a.counts[consumed:consumed + frontier.size]
        consumed += frontier.size
        samples = np.split(frontiers[hop + 1][frontier.size:], np.cumsum(counts)[:-1])
        seen = {}
        for v, s in zip(frontier.tolist(), samples, strict=True):
            assert seen.setdefault(v, s.tolist()) == s.tolist()
        assert len(seen) < frontier.size
    # and a node's sample does not depend on the rest of the batch
    alone = golden.sample(image, [200], [4], seed=1234)
    assert alone.node_list[1:].tolist() == a.node_list[6:][sum(a.counts[:3]):][:a.counts[3]].tolist()


def test_read_cost_is_bounded_by_the_fanout(tmp_path):
    """A node of degree 1,000,000 with fanout 10 costs 10 index reads (counted on the section views)."""
    degree = 1_000_000
    indptr = np.array([0, degree, degree + 2, degree + 2], np.uint64)
    indices = (np.arange(degree + 2) % 3).astype(np.uint32)
    with open_image(tmp_path / "big.img", indptr, indices) as opened:
        _check_read_cost(CountingImage(opened))


def _check_read_cost(image):
    result = golden.sample(image, [0], [10], seed=3)
    assert result.ok and result.counts.tolist() == [10]
    assert image.reads()["indices"] == 10 and image.reads()["indptr"] == 2
    assert result.stats.index_reads == 10 and result.stats.indptr_reads == 2
    assert result.stats.storage_bytes == result.header.storage_bytes == 2 * 8 + 10 * 4
    two_hops = golden.sample(image, [0, 0, 1], [10, 2], seed=3)
    assert two_hops.ok
    assert two_hops.stats.index_reads == 10 + 10 + 2 + two_hops.counts[3:].sum()
    assert image.reads()["indices"] < 10 + 10 + 2 + 50   # duplicates are read once by the golden model
    scalar = sample_scalar(image, [0, 0, 1], [10, 2], seed=3)
    assert scalar.stats == two_hops.stats and (scalar.node_list == two_hops.node_list).all()


def test_aggregation_reads_only_the_rows_it_needs(tmp_path):
    degree = 200_000
    indptr = np.array([0, degree, degree + 3, degree + 3], np.uint64)
    indices = (np.arange(degree + 3) % 3).astype(np.uint32)
    features = np.arange(9, dtype=np.float32).reshape(3, 3)
    with open_image(tmp_path / "f.img", indptr, indices, features) as opened:
        image = CountingImage(opened)
        result = golden.sample(image, [0, 1], [10], seed=5, aggregate=True)
        assert result.ok and result.stats.feature_rows_read == 2 + 13
        assert image.reads()["features"] <= 3 + 3   # each distinct row once per gather
        assert image.reads()["indices"] == 13
        assert (result.self_rows == features[[0, 1]]).all()
        assert result.sums[1].tolist() == (features[0] + features[1] + features[2]).tolist()


# ---------------------------------------------------------------- vectorized == scalar, bit for bit

def _assert_same(a, b):
    assert a.header == b.header, (a.header, b.header)
    assert a.node_list.dtype == b.node_list.dtype and (a.node_list == b.node_list).all()
    assert (a.counts == b.counts).all()
    assert a.stats == b.stats
    if b.sums is None:
        assert a.sums is None and a.self_rows is None
    else:
        assert a.self_rows.dtype == b.self_rows.dtype
        assert (a.self_rows.view(np.uint8) == b.self_rows.view(np.uint8)).all()   # bytes: NaNs included
        assert a.sums.dtype == b.sums.dtype
        assert (a.sums.view(np.uint32) == b.sums.view(np.uint32)).all()


@pytest.mark.parametrize("case", range(8))
def test_vectorized_equals_scalar(tmp_path, case):
    gen = np.random.default_rng(100 + case)
    num_nodes = int(gen.integers(5, 120))
    indptr, indices = random_csr(gen, num_nodes, int(gen.integers(1, 80)), isolated=0.2)
    index_dtype = 2 if case % 4 == 3 else None   # u64 node ids too
    features = gen.standard_normal((num_nodes, 3)).astype(np.float32)
    with open_image(tmp_path / "g.img", indptr, indices, features, index_dtype=index_dtype) as image:
        _check_vectorized_equals_scalar(gen, image, num_nodes)


def _check_vectorized_equals_scalar(gen, image, num_nodes):
    hops = int(gen.integers(1, 4))
    fanouts = [int(gen.choice([1, 2, 3, 10, 25, 100])) for _ in range(hops)]
    targets = gen.integers(0, num_nodes, int(gen.integers(1, 12)))
    seed = int(gen.integers(0, 1 << 64, dtype=np.uint64))
    for aggregate in (False, True):
        a = golden.sample(image, targets, fanouts, seed, aggregate=aggregate, config=WIDE)
        b = sample_scalar(image, targets, fanouts, seed, aggregate=aggregate, config=WIDE)
        assert a.ok
        _assert_same(a, b)


def test_errors_vectorized_equals_scalar(random_image):
    """Every capacity and range error, at every point it can hit, agrees with the scalar reference."""
    image = random_image[0]
    targets = np.array([3, 17, 3, 250, 42])
    full = golden.sample(image, targets, [6, 4], seed=9)
    nodes_needed, counts_needed = full.header.nodes_written, full.header.counts_written
    cases = [dict(nodes_capacity=c) for c in range(5, nodes_needed + 1, 7)]
    cases += [dict(counts_capacity=c) for c in range(0, counts_needed + 1, 3)]
    for kw in cases:
        a = golden.sample(image, targets, [6, 4], seed=9, **kw)
        _assert_same(a, sample_scalar(image, targets, [6, 4], seed=9, **kw))
    assert golden.sample(image, targets, [6, 4], seed=9, nodes_capacity=nodes_needed).ok
    failing = golden.sample(image, targets, [6, 4], seed=9, nodes_capacity=nodes_needed - 1)
    assert failing.header.status == Status.NODES_CAPACITY and failing.header.nodes_written == 0
    bad = np.array([3, 300, 17, 301])
    a = golden.sample(image, bad, [6], seed=1)
    assert (a.header.status, a.header.error_hop, a.header.error_index, a.header.error_value) == (
        Status.NODE_OUT_OF_RANGE, 0, 1, 300)
    _assert_same(a, sample_scalar(image, bad, [6], seed=1))
    # capacity failure before an out-of-range entry: the first failing entry wins
    a = golden.sample(image, bad, [6], seed=1, nodes_capacity=4)
    _assert_same(a, sample_scalar(image, bad, [6], seed=1, nodes_capacity=4))


def test_hop_frontiers():
    node_list = np.array([7, 8, 1, 2, 3, 4, 5, 6, 9, 9], np.uint32)
    counts = np.array([2, 0, 1, 0, 1, 0], np.uint32)
    frontiers = golden.hop_frontiers(node_list, counts, 2, [2, 1])
    assert [f.tolist() for f in frontiers] == [[7, 8], [7, 8, 1, 2], [7, 8, 1, 2, 3, 4]]
    with pytest.raises(ValueError, match="counts"):
        golden.hop_frontiers(node_list, counts[:3], 2, [2, 1])
    with pytest.raises(ValueError, match="node-list"):
        golden.hop_frontiers(node_list[:5], counts, 2, [2, 1])


def test_bad_arguments_raise_and_bad_descriptor_values_are_statuses(random_image):
    image = random_image[0]
    with pytest.raises(ValueError, match="non-negative"):
        golden.sample(image, [-1], [2], 0)
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        golden.sample(image, [1], [2], -5)
    with pytest.raises(ValueError, match="does not fit"):
        golden.sample(image, [1 << 40], [2], 0)
    for targets, fanouts, offset in [([], [2], 16), ([1], [], 20), ([1], [1, 2, 3, 4, 5], 20),
                                     ([1], [0], 24), ([1], [33], 24), ([1], [3, 3, 0], 28)]:
        result = golden.sample(image, targets, fanouts, 0)
        assert (result.header.status, result.header.error_value) == (Status.BAD_DESCRIPTOR, offset)
    assert golden.sample(image, [1], [2], 0, aggregate=True).header.error_value == 6   # no features


@pytest.mark.parametrize("seed", [*range(40), *(pytest.param(s, marks=pytest.mark.slow) for s in range(40, 640))])
def test_vectorized_equals_scalar_sweep(tmp_path, seed):
    """Random graphs, every feature dtype with special values, 1-4 hops, fanouts up to above the degree,
    out-of-range targets and capacity errors: the vectorized model equals the scalar reference."""
    gen = np.random.default_rng(1000 + seed)
    print("seed", 1000 + seed)
    num_nodes = int(gen.integers(2, 60))
    indptr, indices = random_csr(gen, num_nodes, int(gen.integers(0, 50)), isolated=float(gen.random() / 2))
    dtype = FeatureDtype(int(gen.integers(1, 5)))
    dim = int(gen.integers(1, 5))
    features = special_bits(gen, num_nodes * dim, dtype).reshape(num_nodes, dim)
    with open_image(tmp_path / "g.img", indptr, indices, features, feature_dtype=dtype) as image:
        hops = int(gen.integers(1, 5))
        fanouts = [int(gen.integers(1, 60 if hops < 3 else 6)) for _ in range(hops)]
        targets = gen.integers(0, num_nodes + 2, int(gen.integers(1, 8)))   # sometimes out of range
        caps = {}
        if gen.random() < 0.3:
            caps["nodes_capacity"] = int(gen.integers(targets.size, 200))
        args = (image, targets, fanouts, int(gen.integers(0, 1 << 63)))
        _assert_same(golden.sample(*args, aggregate=True, config=WIDE, **caps),
                     sample_scalar(*args, aggregate=True, config=WIDE, **caps))
