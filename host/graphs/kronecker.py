"""Kronecker (fractal) expansion of a small seed graph, the way SmartSAGE built its large data sets.

The k-th Kronecker power of a seed adjacency matrix A (n0 nodes, m0 directed entries) has
``n0^k`` nodes. Write a node id in base n0 with k digits, most significant first: ``u = (u_1 .. u_k)``.
Then ``u -> v`` is an edge of the power iff every digit pair ``u_i -> v_i`` is an edge of the seed.
The m0^k edges are enumerated in chunks: edge number e, written in base m0, picks one seed edge per
digit. So the graph is self-similar at every scale: the seed's structure (its communities, degree
spread, clustering) is repeated inside each block of ids and between blocks.

The full power grows as m0^k; a chosen size is a *sampled* power: ``edge_factor * n0^k`` edges,
each drawing its k seed edges uniformly (a stochastic Kronecker graph with the seed as initiator),
symmetrized, duplicates dropped. Chunks come from per-chunk random streams: deterministic for a seed.

Labels: the seed's labels (C0 classes) give the product node u the class
``sum_i label(u_i) * C0^(i-1)`` over its ``j`` most significant digits, ``C = C0^j`` classes. An edge
keeps its endpoints' seed labels digit by digit, so its class agreement is about h0^j, for h0 the
seed's label homophily (Zachary's karate club, the default seed: 0.87 for its two factions).
Features and split: :mod:`.communities`, as for R-MAT.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from smartsage.spec.image import FLAG_SYMMETRIZED, GraphImage, ImageHeader
from smartsage.spec.image_writer import DEFAULT_MEMORY_BUDGET, ImageWriter

from .communities import STREAM_KRONECKER, NodeDataConfig, node_rng, prefetch, write_node_data

__all__ = ["SeedGraph", "KroneckerConfig", "KRONECKER_CHUNK", "karate_club", "kronecker_edges",
           "kronecker_classes", "generate_kronecker"]

#: Edges per generated chunk: the unit of determinism.
KRONECKER_CHUNK = 1 << 20

# Zachary's karate club (W. W. Zachary, J. Anthropol. Res. 33, 1977): 34 members, 78 friendships,
# and the faction each member joined after the split (0: Mr. Hi, 1: the officer).
_KARATE_EDGES = (
    (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (0, 6), (0, 7), (0, 8), (0, 10), (0, 11), (0, 12), (0, 13),
    (0, 17), (0, 19), (0, 21), (0, 31), (1, 2), (1, 3), (1, 7), (1, 13), (1, 17), (1, 19), (1, 21),
    (1, 30), (2, 3), (2, 7), (2, 8), (2, 9), (2, 13), (2, 27), (2, 28), (2, 32), (3, 7), (3, 12),
    (3, 13), (4, 6), (4, 10), (5, 6), (5, 10), (5, 16), (6, 16), (8, 30), (8, 32), (8, 33), (9, 33),
    (13, 33), (14, 32), (14, 33), (15, 32), (15, 33), (18, 32), (18, 33), (19, 33), (20, 32), (20, 33),
    (22, 32), (22, 33), (23, 25), (23, 27), (23, 29), (23, 32), (23, 33), (24, 25), (24, 27), (24, 31),
    (25, 31), (26, 29), (26, 33), (27, 33), (28, 31), (28, 33), (29, 32), (29, 33), (30, 32), (30, 33),
    (31, 32), (31, 33), (32, 33),
)
_KARATE_OFFICER = (9, 14, 15, 18, 20, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33)


@dataclasses.dataclass(frozen=True, eq=False)
class SeedGraph:
    """A small labeled graph to expand: directed entries ``src[i] -> dst[i]`` and node labels."""

    num_nodes: int
    src: np.ndarray
    dst: np.ndarray
    labels: np.ndarray
    num_classes: int
    name: str = "seed"

    def __post_init__(self):
        src = np.asarray(self.src, np.int64)
        dst = np.asarray(self.dst, np.int64)
        labels = np.asarray(self.labels, np.int64)
        if src.shape != dst.shape or src.ndim != 1 or src.size == 0:
            raise ValueError("Seed graph needs at least one edge, as two 1-D arrays of one length")
        if self.num_nodes < 2 or min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= self.num_nodes:
            raise ValueError(f"Seed graph edges must join nodes in [0, {self.num_nodes}), with at least 2 nodes")
        if labels.shape != (self.num_nodes,) or labels.min() < 0 or labels.max() >= max(self.num_classes, 1):
            raise ValueError(f"Seed graph needs one label in [0, {self.num_classes}) per node")
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "labels", labels)

    @property
    def num_edges(self) -> int:
        return len(self.src)

    @property
    def symmetric(self) -> bool:
        forward = set(zip(self.src.tolist(), self.dst.tolist(), strict=True))
        return all((v, u) in forward for u, v in forward)

    @property
    def homophily(self) -> float:
        return float(np.mean(self.labels[self.src] == self.labels[self.dst]))

    @classmethod
    def from_image(cls, path) -> SeedGraph:
        """A (small) image as a seed: its CSR edges and labels (unlabeled: one class)."""
        with GraphImage(path) as image:
            if image.num_nodes > 1 << 16:
                raise ValueError(f"Seed graph {path} has {image.num_nodes} nodes; a seed should be small "
                                 f"(at most 65536)")
            indptr = image.indptr.astype(np.int64)
            dst = image.indices.astype(np.int64)
            src = np.repeat(np.arange(image.num_nodes), np.diff(indptr))
            labels = image.labels.astype(np.int64)
            num_classes = image.num_classes
            if num_classes == 0 or (labels < 0).any():
                labels, num_classes = np.zeros(image.num_nodes, np.int64), 1
            return cls(image.num_nodes, src, dst, labels, num_classes, name=str(path))


def karate_club() -> SeedGraph:
    """Zachary's karate club, both directions of every friendship, labeled by faction."""
    pairs = np.array(_KARATE_EDGES, np.int64)
    labels = np.zeros(34, np.int64)
    labels[list(_KARATE_OFFICER)] = 1
    return SeedGraph(34, np.concatenate([pairs[:, 0], pairs[:, 1]]), np.concatenate([pairs[:, 1], pairs[:, 0]]),
                     labels, 2, name="karate")


@dataclasses.dataclass(frozen=True)
class KroneckerConfig:
    """Parameters of a Kronecker expansion.

    Parameters
    ----------
    power:
        k: the graph has ``n0^k`` nodes (``--scale`` on the command line).
    edge_factor:
        ``None``: the full power (``m0^k`` edges). Else sample ``round(edge_factor * n0^k)`` edges.
    label_digits:
        j: classes come from the seed labels of the j most significant digits (``C0^j`` classes).
    seed:
        Random seed (sampled powers, features, split).
    seed_graph:
        The graph to expand (default: Zachary's karate club).
    """

    power: int
    edge_factor: float | None = None
    label_digits: int = 1
    seed: int = 0
    seed_graph: SeedGraph = dataclasses.field(default_factory=karate_club)

    def __post_init__(self):
        g = self.seed_graph
        if not isinstance(self.power, int) or self.power < 1:
            raise ValueError(f"Kronecker power must be a positive integer, not {self.power!r}")
        if g.num_nodes ** self.power >= 1 << 63:
            raise ValueError(f"{g.num_nodes}^{self.power} nodes do not fit 63-bit ids")
        if self.edge_factor is not None and not self.edge_factor > 0:
            raise ValueError(f"Edge factor must be positive, not {self.edge_factor!r}")
        if not isinstance(self.label_digits, int) or not 1 <= self.label_digits <= self.power:
            raise ValueError(f"Label digits must be in [1, {self.power}], not {self.label_digits!r}")
        if g.num_classes ** self.label_digits >= 1 << 16:
            raise ValueError("Too many classes")

    @property
    def num_nodes(self) -> int:
        return self.seed_graph.num_nodes ** self.power

    @property
    def num_classes(self) -> int:
        return self.seed_graph.num_classes ** self.label_digits

    @property
    def num_edges(self) -> int:
        """Generated (directed) edges."""
        if self.edge_factor is None:
            return self.seed_graph.num_edges ** self.power
        return int(round(self.edge_factor * self.num_nodes))

    @classmethod
    def for_classes(cls, power: int, num_classes: int, **kwargs) -> KroneckerConfig:
        """The config whose class count is ``num_classes`` (a power of the seed's class count)."""
        seed_graph = kwargs.get("seed_graph") or karate_club()
        kwargs["seed_graph"] = seed_graph
        c0 = seed_graph.num_classes
        digits = 1
        while c0 > 1 and c0 ** digits < num_classes:
            digits += 1
        if c0 ** digits != num_classes:
            raise ValueError(f"Kronecker classes must be a power of the seed's {c0} classes, not {num_classes}")
        return cls(power, label_digits=digits, **kwargs)


def kronecker_edges(config: KroneckerConfig) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The power's edges ``(src, dst)`` (uint64) in chunks of :data:`KRONECKER_CHUNK`."""
    g = config.seed_graph
    n0 = np.uint64(g.num_nodes)
    seed_src = g.src.astype(np.uint64)
    seed_dst = g.dst.astype(np.uint64)
    m0 = g.num_edges
    total = config.num_edges
    for chunk in range((total + KRONECKER_CHUNK - 1) // KRONECKER_CHUNK):
        start = chunk * KRONECKER_CHUNK
        n = min(KRONECKER_CHUNK, total - start)
        if config.edge_factor is None:
            rest = np.arange(start, start + n, dtype=np.uint64)
            digits = []
            for _ in range(config.power):  # least significant first
                digits.append(rest % np.uint64(m0))
                rest //= np.uint64(m0)
            digits.reverse()
        else:
            rng = node_rng(config.seed, STREAM_KRONECKER, chunk)
            digits = list(rng.integers(0, m0, size=(config.power, KRONECKER_CHUNK), dtype=np.int64)[:, :n])
        src = np.zeros(n, np.uint64)
        dst = np.zeros(n, np.uint64)
        for digit in digits:
            src *= n0
            src += seed_src[digit]
            dst *= n0
            dst += seed_dst[digit]
        yield src, dst


def kronecker_classes(config: KroneckerConfig, nodes: np.ndarray) -> np.ndarray:
    """Class of each node id of the power (int64)."""
    g = config.seed_graph
    nodes = np.asarray(nodes, dtype=np.uint64)
    classes = np.zeros(nodes.shape, np.int64)
    place = np.uint64(g.num_nodes) ** np.uint64(config.power - 1)
    for _ in range(config.label_digits):
        digit = (nodes // place) % np.uint64(g.num_nodes)
        classes = classes * g.num_classes + g.labels[digit.astype(np.int64)]
        place //= np.uint64(g.num_nodes)
    return classes


def generate_kronecker(path, config: KroneckerConfig, node_data: NodeDataConfig | None = None, *,
                       symmetrize: bool | None = None, drop_self_loops: bool = True, drop_duplicates: bool = True,
                       memory_budget: int = DEFAULT_MEMORY_BUDGET, progress: bool = False,
                       temp_dir: str | None = None
                       ) -> tuple[ImageHeader, dict]:
    """Write a Kronecker image. Returns its header and the writer's statistics.

    ``symmetrize`` defaults to True for a sampled power; the full power of a symmetric seed is
    symmetric already (and flagged so).
    """
    if node_data is None:
        node_data = NodeDataConfig(num_classes=config.num_classes, seed=config.seed)
    if node_data.num_classes != config.num_classes:
        raise ValueError(f"Node data has {node_data.num_classes} classes, the graph {config.num_classes}")
    if symmetrize is None:
        symmetrize = config.edge_factor is not None
    full_symmetric = config.edge_factor is None and config.seed_graph.symmetric
    n = config.num_nodes
    with ImageWriter(path, n, feature_dim=node_data.feature_dim, feature_dtype=node_data.feature_dtype,
                     num_classes=config.num_classes, symmetrize=symmetrize, drop_self_loops=drop_self_loops,
                     drop_duplicates=drop_duplicates, memory_budget=memory_budget, progress=progress,
                     temp_dir=temp_dir,
                     flags=FLAG_SYMMETRIZED if full_symmetric else 0,
                     expected_edges=config.num_edges) as writer:
        write_node_data(writer, node_data, n, lambda nodes: kronecker_classes(config, nodes),
                        progress=writer.node_progress(n))
        for src, dst in prefetch(kronecker_edges(config)):
            writer.add_edges(src, dst)
        header = writer.finalize()
    return header, writer.stats
