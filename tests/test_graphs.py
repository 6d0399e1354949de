"""Graph generators (R-MAT, Kronecker), their learnable node data, the importers and the default graph."""

from __future__ import annotations

import numpy as np
import pytest
from golden_graphs import reference_csr

from smartsage.host.graphs import DEFAULT_GRAPH, default_graph
from smartsage.host.graphs.communities import NodeDataConfig, class_means, gaussian_table
from smartsage.host.graphs.importers import import_graph, read_edge_list
from smartsage.host.graphs.kronecker import (
    KroneckerConfig,
    SeedGraph,
    generate_kronecker,
    karate_club,
    kronecker_classes,
)
from smartsage.host.graphs.rmat import RmatConfig, _Relabel, generate_rmat, rmat_classes, rmat_edges, rmat_table
from smartsage.spec.image import (
    FLAG_NO_DUPLICATES,
    FLAG_NO_SELF_LOOPS,
    FLAG_SYMMETRIZED,
    FeatureDtype,
    GraphImage,
    bf16_bits_to_float32,
    encode_features,
    verify_image,
    write_image,
)

SEED = 7


def csr_edges(image: GraphImage) -> tuple[np.ndarray, np.ndarray]:
    indptr = image.indptr.astype(np.int64)
    return np.repeat(np.arange(image.num_nodes), np.diff(indptr)), image.indices.astype(np.int64)


# ---- R-MAT
def test_rmat_table_realizes_graph500_probabilities():
    config = RmatConfig(scale=4)
    for levels in (1, 2):
        table = rmat_table(config, levels)
        assert table.shape == (65536,)
        counts = np.bincount(table, minlength=16) / 65536
        if levels == 1:  # code = src_bit << 2 | dst_bit
            np.testing.assert_allclose(counts[[0, 1, 4, 5]], [0.57, 0.19, 0.19, 0.05], atol=2 ** -16)
        else:
            p = np.array([0.57, 0.19, 0.19, 0.05])
            for q1 in range(4):
                for q2 in range(4):
                    code = (((q1 >> 1) << 1 | (q2 >> 1)) << 2) | ((q1 & 1) << 1 | (q2 & 1))
                    assert abs(counts[code] - p[q1] * p[q2]) <= 2 ** -16


@pytest.mark.parametrize("bits", [1, 2, 7, 12, 33])
def test_relabel_is_a_bijection(bits):
    relabel = _Relabel(bits, SEED)
    if bits <= 12:
        ids = np.arange(1 << bits, dtype=np.uint64)
        image = relabel.forward(ids)
        assert len(np.unique(image)) == len(ids) and int(image.max()) < 1 << bits
    else:
        ids = np.random.default_rng(SEED).integers(0, 1 << bits, 10_000).astype(np.uint64)
    np.testing.assert_array_equal(relabel.inverse(relabel.forward(ids)), ids)


def _small_rmat(tmp_path, name, memory_budget=1 << 30, **kw):
    config = RmatConfig(**{"scale": 10, "edge_factor": 8, "num_classes": 4, "seed": SEED, **kw})
    node_data = NodeDataConfig(num_classes=config.num_classes, feature_dim=16, seed=config.seed)
    path = tmp_path / name
    header, stats = generate_rmat(path, config, node_data, memory_budget=memory_budget)
    return path, header, stats


def test_rmat_is_deterministic_for_a_seed(tmp_path):
    a, header, _ = _small_rmat(tmp_path, "a.img")
    b, _, _ = _small_rmat(tmp_path, "b.img")
    c, _, _ = _small_rmat(tmp_path, "c.img", seed=SEED + 1)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    summary = verify_image(a)
    assert summary["num_nodes"] == 1024 and summary["symmetrized"] and summary["duplicates_dropped"]
    assert header.flags == FLAG_SYMMETRIZED | FLAG_NO_SELF_LOOPS | FLAG_NO_DUPLICATES
    # chunks are generated independently: the stream restarted at chunk 0 is the same
    first = next(rmat_edges(RmatConfig(scale=10, edge_factor=8, num_classes=4, seed=SEED)))
    again = next(rmat_edges(RmatConfig(scale=10, edge_factor=8, num_classes=4, seed=SEED)))
    np.testing.assert_array_equal(first[0], again[0])


def test_rmat_degree_skew_and_class_balance(tmp_path):
    path, header, _ = _small_rmat(tmp_path, "g.img", scale=12, homophily=0.0)
    with GraphImage(path) as image:
        degree = np.diff(image.indptr.astype(np.int64))
        assert degree.max() > 15 * degree.mean(), "R-MAT degrees must be heavy-tailed"
        counts = np.bincount(image.labels, minlength=4)
        assert counts.min() == counts.max() == 1024  # k = 2 bits: every slot is a class
    sizes = np.bincount(rmat_classes(RmatConfig(scale=12, num_classes=5, seed=SEED), np.arange(4096)))
    assert sizes.min() > 0.8 * 4096 / 5 and sizes.max() < 1.2 * 4096 / 5


def test_rmat_communities_are_learnable(tmp_path):
    """Edges mostly join nodes of one class, and neighbors' features say more than a node's own."""
    path, _, _ = _small_rmat(tmp_path, "h.img", scale=11)
    control, _, _ = _small_rmat(tmp_path, "h0.img", scale=11, homophily=0.0)
    chance = 0.25
    for image_path, low, high in ((path, 0.55, 1.0), (control, 0.0, chance + 0.06)):
        with GraphImage(image_path) as image:
            src, dst = csr_edges(image)
            agreement = float(np.mean(image.labels[src] == image.labels[dst]))
            print(f"{image_path.name}: edge label agreement {agreement:.3f} (chance {chance})")
            assert low <= agreement <= high
    with GraphImage(path) as image:
        x = image.features.astype(np.float32)
        y = image.labels
        src, dst = csr_edges(image)
        mean = np.zeros_like(x)
        np.add.at(mean, src, x[dst])
        mean /= np.maximum(np.bincount(src, minlength=image.num_nodes), 1)[:, None]
        train, test = image.split == 1, image.split == 3

        def nearest_centroid(features):
            centroids = np.stack([features[train & (y == c)].mean(0) for c in range(4)])
            predicted = np.argmin(((features[test][:, None] - centroids[None]) ** 2).sum(-1), axis=1)
            return float(np.mean(predicted == y[test]))

        own, neighbors = nearest_centroid(x), nearest_centroid(mean)
        print(f"nearest-centroid accuracy: own features {own:.3f}, neighbor mean {neighbors:.3f}")
        assert own > chance + 0.1 and neighbors > own


def test_rmat_budget_does_not_change_the_image(tmp_path):
    a, _, _ = _small_rmat(tmp_path, "a.img")
    b, _, stats = _small_rmat(tmp_path, "b.img", memory_budget=64 << 10)
    assert stats["blocks"] > 1
    assert a.read_bytes() == b.read_bytes()


def test_feature_noise_is_standard_normal():
    table = gaussian_table()
    assert abs(float(table.mean())) < 1e-6 and abs(float(table.std()) - 1) < 1e-3
    means = class_means(NodeDataConfig(num_classes=50, feature_dim=64, feature_snr=1.0, seed=SEED))
    distances = np.linalg.norm(means[:, None] - means[None], axis=-1)[np.triu_indices(50, 1)]
    assert 0.85 < distances.mean() < 1.15  # class means lie ~snr noise deviations apart


@pytest.mark.parametrize("dtype", list(FeatureDtype))
def test_generated_feature_dtypes(tmp_path, dtype):
    config = RmatConfig(scale=8, edge_factor=4, num_classes=2, seed=SEED)
    fp32 = NodeDataConfig(num_classes=2, feature_dim=8, seed=SEED)
    generate_rmat(tmp_path / "fp32.img", config, fp32)
    generate_rmat(tmp_path / "x.img", config, NodeDataConfig(num_classes=2, feature_dim=8, feature_dtype=dtype,
                                                             seed=SEED))
    with GraphImage(tmp_path / "fp32.img") as reference, GraphImage(tmp_path / "x.img") as image:
        assert image.feature_dtype is dtype
        np.testing.assert_array_equal(image.features, encode_features(reference.features, dtype, 32.0))
        if dtype is FeatureDtype.BF16:
            np.testing.assert_allclose(bf16_bits_to_float32(image.features), reference.features, rtol=8e-3)


# ---- Kronecker
def test_kronecker_full_power_is_the_kronecker_product(tmp_path):
    seed = karate_club()
    config = KroneckerConfig(power=2, seed_graph=seed)
    header, _ = generate_kronecker(tmp_path / "k.img", config, NodeDataConfig(num_classes=2, feature_dim=4))
    adjacency = np.zeros((34, 34), np.int64)
    adjacency[seed.src, seed.dst] = 1
    product = np.kron(adjacency, adjacency)
    rows, cols = np.nonzero(product)
    with GraphImage(tmp_path / "k.img") as image:
        src, dst = csr_edges(image)
        np.testing.assert_array_equal(src, rows)
        np.testing.assert_array_equal(dst, cols)
        assert header.flags & FLAG_SYMMETRIZED
        # labels from the top digit: class agreement is exactly the seed's homophily
        agreement = float(np.mean(image.labels[src] == image.labels[dst]))
        assert agreement == pytest.approx(seed.homophily)
        assert seed.homophily > 0.8


def test_kronecker_sampled_is_deterministic_and_labeled(tmp_path):
    config = KroneckerConfig.for_classes(3, 4, edge_factor=4, seed=SEED)
    assert config.num_classes == 4 and config.label_digits == 2 and config.num_nodes == 34 ** 3
    node_data = NodeDataConfig(num_classes=4, feature_dim=4, seed=SEED)
    generate_kronecker(tmp_path / "a.img", config, node_data)
    generate_kronecker(tmp_path / "b.img", config, node_data)
    assert (tmp_path / "a.img").read_bytes() == (tmp_path / "b.img").read_bytes()
    summary = verify_image(tmp_path / "a.img")
    assert summary["symmetrized"] and summary["num_classes"] == 4
    with GraphImage(tmp_path / "a.img") as image:
        src, dst = csr_edges(image)
        agreement = float(np.mean(image.labels[src] == image.labels[dst]))
        assert agreement > 0.6  # about h0^2 = 0.74, chance 0.25
    with pytest.raises(ValueError, match="power of the seed's 2 classes"):
        KroneckerConfig.for_classes(3, 3)


def test_seed_graph_from_image(tmp_path):
    indptr, indices = reference_csr([0, 1, 2, 3], [1, 2, 3, 0], 4, symmetrize=True)
    write_image(tmp_path / "seed.img", indptr, indices, labels=[0, 0, 1, 1])
    seed = SeedGraph.from_image(tmp_path / "seed.img")
    assert seed.num_nodes == 4 and seed.num_edges == 8 and seed.num_classes == 2 and seed.symmetric
    config = KroneckerConfig(power=2, seed_graph=seed, label_digits=2)
    np.testing.assert_array_equal(kronecker_classes(config, np.array([0, 5, 10, 15])), [0, 0, 3, 3])


# ---- importers
@pytest.fixture(scope="module")
def raw_graph():
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    n, e = 500, 4000
    src = rng.integers(0, n, e)
    dst = rng.integers(0, n, e)
    dst[:20] = src[:20]
    src[20:40], dst[20:40] = src[40:60], dst[40:60]
    features = rng.standard_normal((n, 6)).astype(np.float32)
    labels = rng.integers(-1, 5, n)
    split = rng.integers(0, 4, n).astype(np.uint8)
    return n, src, dst, features, labels, split


def _expected(tmp_path, raw, symmetrize=False, drop_self_loops=False, drop_duplicates=False,
              node_data=True, dtype=FeatureDtype.FP32, stored=None):
    n, src, dst, features, labels, split = raw
    indptr, indices = reference_csr(src, dst, n, symmetrize, drop_self_loops, drop_duplicates)
    path = tmp_path / "expected.img"
    flags = ((FLAG_SYMMETRIZED if symmetrize else 0) | (FLAG_NO_SELF_LOOPS if drop_self_loops else 0)
             | (FLAG_NO_DUPLICATES if drop_duplicates else 0))
    if node_data:
        write_image(path, indptr, indices, features=features if stored is None else stored, feature_dtype=dtype,
                    labels=labels, split=split, flags=flags)
    else:
        write_image(path, indptr, indices, flags=flags)
    return path.read_bytes()


def test_import_text_edge_list(tmp_path, raw_graph):
    n, src, dst, *_ = raw_graph
    text = tmp_path / "edges.txt"
    with open(text, "w") as f:
        f.write("# a comment\n% another\n\n")
        for i, (u, v) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
            f.write(f"{u}\t{v} 1.0\n" if i % 97 == 0 else f"{u} {v}\n")
        f.write(f"{n - 1} {n - 1}  # trailing comment\n")
    got = list(read_edge_list(text, chunk_bytes=4096))
    assert sum(len(s) for s, _ in got) == len(src) + 1
    src_all = np.concatenate([src, [n - 1]])
    dst_all = np.concatenate([dst, [n - 1]])
    import_graph(text, tmp_path / "g.img", symmetrize=True, drop_self_loops=True, drop_duplicates=True,
                 memory_budget=64 << 10)
    indptr, indices = reference_csr(src_all, dst_all, int(max(src_all.max(), dst_all.max())) + 1, True, True, True)
    write_image(tmp_path / "expected.img", indptr, indices, flags=7)
    assert (tmp_path / "g.img").read_bytes() == (tmp_path / "expected.img").read_bytes()


def test_import_text_edge_list_reports_bad_line(tmp_path):
    text = tmp_path / "bad.txt"
    text.write_text("0 1\n1 2\n2 oops\n")
    with pytest.raises(ValueError, match=r"bad.txt:3: expected 'src dst' node ids, got '2 oops'"):
        import_graph(text, tmp_path / "g.img")
    assert not (tmp_path / "g.img").exists()


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_import_edge_index_files_with_node_data(tmp_path, raw_graph, suffix):
    n, src, dst, features, labels, split = raw_graph
    edge_index = np.stack([src, dst])
    path = tmp_path / f"edges{suffix}"
    if suffix == ".npy":
        np.save(path, edge_index)
    else:
        np.savez(path, edge_index=edge_index, other=np.zeros(3))
    for name, array in (("features", features), ("labels", labels), ("split", split)):
        np.save(tmp_path / f"{name}.npy", array)
    import_graph(path, tmp_path / "g.img", features=tmp_path / "features.npy", labels=tmp_path / "labels.npy",
                 split=tmp_path / "split.npy", drop_duplicates=True)
    assert (tmp_path / "g.img").read_bytes() == _expected(tmp_path, raw_graph, drop_duplicates=True)


def test_import_scipy_matrix_and_file(tmp_path, raw_graph):
    import scipy.sparse as sp

    n, src, dst, *_ = raw_graph
    coo = sp.coo_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
    expected = _expected(tmp_path, raw_graph, drop_self_loops=True, node_data=False)
    for matrix in (coo, sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n)).tocsr()):
        if matrix.format == "csr":  # csr construction sums duplicates: compare against that
            matrix.sum_duplicates()
            rows, cols = matrix.nonzero()
            expected_csr = reference_csr(rows, cols, n, drop_self_loops=True)
            write_image(tmp_path / "e.img", *expected_csr, flags=FLAG_NO_SELF_LOOPS)
            want = (tmp_path / "e.img").read_bytes()
        else:
            want = expected
        import_graph(matrix, tmp_path / "g.img", drop_self_loops=True)
        assert (tmp_path / "g.img").read_bytes() == want
    sp.save_npz(tmp_path / "m.npz", coo.tocsr())
    import_graph(tmp_path / "m.npz", tmp_path / "g2.img", drop_self_loops=True)
    assert verify_image(tmp_path / "g2.img")["num_nodes"] == n
    with pytest.raises(ValueError, match="square"):
        import_graph(sp.coo_matrix((3, 4)), tmp_path / "g3.img")


def test_import_pyg_data(tmp_path, raw_graph):
    torch = pytest.importorskip("torch")
    pyg_data = pytest.importorskip("torch_geometric.data")
    n, src, dst, features, labels, split = raw_graph
    data = pyg_data.Data(edge_index=torch.from_numpy(np.stack([src, dst])), x=torch.from_numpy(features),
                         y=torch.from_numpy(labels), num_nodes=n)
    for code, name in ((1, "train"), (2, "val"), (3, "test")):
        setattr(data, f"{name}_mask", torch.from_numpy(split == code))
    import_graph(data, tmp_path / "g.img", symmetrize=True)
    assert (tmp_path / "g.img").read_bytes() == _expected(tmp_path, raw_graph, symmetrize=True)
    # bf16 features stay bf16, bit for bit
    data.x = torch.from_numpy(features).to(torch.bfloat16)
    import_graph(data, tmp_path / "bf16.img")
    with GraphImage(tmp_path / "bf16.img") as image:
        assert image.feature_dtype is FeatureDtype.BF16
        assert torch.equal(image.features_torch(), data.x)


@pytest.mark.parametrize("dtype", [FeatureDtype.FP16, FeatureDtype.BF16, FeatureDtype.INT8])
def test_import_converts_feature_dtype(tmp_path, raw_graph, dtype):
    n, src, dst, features, labels, split = raw_graph
    import_graph(np.stack([src, dst]), tmp_path / "g.img", features=features, labels=labels, split=split,
                 feature_dtype=dtype)
    scale = 127 / float(np.abs(features).max()) if dtype is FeatureDtype.INT8 else None
    stored = encode_features(features, dtype, scale)
    assert (tmp_path / "g.img").read_bytes() == _expected(tmp_path, raw_graph, dtype=dtype, stored=stored)
    if dtype is FeatureDtype.INT8:
        with GraphImage(tmp_path / "g.img") as image:
            assert int(np.abs(image.features).max()) == 127


def test_import_rejects_mismatched_node_data(tmp_path, raw_graph):
    n, src, dst, features, labels, split = raw_graph
    with pytest.raises(ValueError, match="Node data lengths differ"):
        import_graph(np.stack([src, dst]), tmp_path / "g.img", features=features, labels=labels[:-1])
    with pytest.raises(ValueError, match="out of range"):
        import_graph(np.stack([src, dst]), tmp_path / "g.img", num_nodes=10)
    with pytest.raises(ValueError, match=r"shape \(2, E\)"):
        import_graph(np.stack([src, dst, dst]), tmp_path / "g.img")


# ---- default graph
def test_default_graph_is_deterministic_and_sound(tmp_path):
    a = default_graph(tmp_path / "a.img")
    default_graph(tmp_path / "b.img")
    assert (tmp_path / "a.img").read_bytes() == (tmp_path / "b.img").read_bytes()
    summary = verify_image(tmp_path / "a.img")
    assert a.num_nodes == 1 << DEFAULT_GRAPH["scale"] and summary["num_classes"] == DEFAULT_GRAPH["classes"]
    assert summary["feature_dim"] == DEFAULT_GRAPH["feature_dim"] and summary["num_train"] > 0


def test_prefetch_keeps_order_and_reraises():
    from smartsage.host.graphs.communities import prefetch

    assert list(prefetch(iter(range(50)), depth=2)) == list(range(50))

    def failing():
        yield 1
        raise KeyError("generator fault")

    with pytest.raises(KeyError, match="generator fault"):
        list(prefetch(failing()))
    stream = prefetch(iter(range(1000)))
    assert next(stream) == 0
    stream.close()  # stops the producer thread
