"""Graph500 R-MAT graphs with planted communities (docs/graphs.md).

Edges: Graph500's recursive matrix (R-MAT) generator, A=0.57, B=0.19, C=0.19 (D=0.05):
``edge_factor * 2^scale`` edges, each choosing one quadrant of the adjacency matrix per level, for
``scale`` levels. Generated in chunks of :data:`RMAT_CHUNK` edges, each from its own random stream
(seed, chunk): the graph depends only on the parameters and the seed. Two levels are drawn per
16-bit random number through a 65536-entry table of the 16 joint outcomes (probabilities exact to
1/65536), vectorized over the chunk.

Communities: node ``r`` (before the final relabeling) belongs to class
``slot(r) = (r mod 2^k) xor (hash(r >> k) mod 2^k)`` where ``2^k >= C`` (nodes whose slot is >= C get
a hashed class, so classes are equally likely). A fraction ``homophily`` of the edges is rewired to
stay inside the source's class: the destination keeps its high bits (its R-MAT position above the
low ``k`` levels) and takes the low bits that put it in the source's class. Every other edge is
untouched R-MAT.

Relabeling: as in Graph500, node ids are finally scrambled by a seeded bijection of ``scale`` bits
(xor-shift / odd-multiply rounds), so hubs are spread over the id range.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from smartsage.spec.image import ImageHeader
from smartsage.spec.image_writer import DEFAULT_MEMORY_BUDGET, ImageWriter

from .communities import (
    STREAM_CLASSES,
    STREAM_PERMUTATION,
    STREAM_RMAT,
    NodeDataConfig,
    mix64,
    node_rng,
    prefetch,
    write_node_data,
)

__all__ = ["RmatConfig", "RMAT_CHUNK", "rmat_edges", "rmat_classes", "generate_rmat", "rmat_table"]

#: Edges per generated chunk: the unit of determinism (do not change; it fixes the random streams).
RMAT_CHUNK = 1 << 20
MAX_SCALE = 40


@dataclasses.dataclass(frozen=True)
class RmatConfig:
    """Parameters of an R-MAT graph.

    Parameters
    ----------
    scale:
        log2 of the node count.
    edge_factor:
        Generated edges per node (before symmetrizing and dropping duplicates and self loops).
    a, b, c:
        Quadrant probabilities (d = 1 - a - b - c); Graph500: 0.57, 0.19, 0.19.
    num_classes:
        Planted communities.
    homophily:
        Fraction of edges rewired to stay inside their source's class.
    permute:
        Scramble node ids (Graph500 does).
    seed:
        The random seed.
    """

    scale: int
    edge_factor: int = 16
    a: float = 0.57
    b: float = 0.19
    c: float = 0.19
    num_classes: int = 8
    homophily: float = 0.6
    permute: bool = True
    seed: int = 0

    def __post_init__(self):
        if not isinstance(self.scale, int) or not 1 <= self.scale <= MAX_SCALE:
            raise ValueError(f"R-MAT scale must be an integer in [1, {MAX_SCALE}], not {self.scale!r}")
        if not isinstance(self.edge_factor, int) or self.edge_factor < 0:
            raise ValueError(f"Edge factor must be a non-negative integer, not {self.edge_factor!r}")
        d = 1.0 - self.a - self.b - self.c
        if min(self.a, self.b, self.c) < 0 or d < -1e-12:
            raise ValueError(f"R-MAT probabilities must be non-negative and sum to at most 1, not "
                             f"a={self.a}, b={self.b}, c={self.c}")
        if not isinstance(self.num_classes, int) or self.num_classes < 1:
            raise ValueError(f"Class count must be a positive integer, not {self.num_classes!r}")
        if self.class_bits >= self.scale and self.num_classes > 1:
            raise ValueError(f"{self.num_classes} classes need scale > {self.class_bits}, not {self.scale}")
        if not 0 <= self.homophily <= 1:
            raise ValueError(f"Homophily must lie in [0, 1], not {self.homophily!r}")

    @property
    def num_nodes(self) -> int:
        return 1 << self.scale

    @property
    def num_edges(self) -> int:
        """Generated (directed) edges."""
        return self.edge_factor << self.scale

    @property
    def class_bits(self) -> int:
        return max(int(self.num_classes - 1).bit_length(), 0)


def _quantize(probabilities: np.ndarray, total: int) -> np.ndarray:
    """Integer counts summing to ``total``, proportional to ``probabilities`` (largest remainder)."""
    exact = probabilities / probabilities.sum() * total
    counts = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:total - int(counts.sum())]] += 1
    return counts


def rmat_table(config: RmatConfig, levels: int) -> np.ndarray:
    """65536-entry uint8 table: a 16-bit random number -> ``levels`` (1 or 2) quadrant choices.

    Entry bits: ``src_bits << 2 | dst_bits`` (the first level in the high bit of each pair).
    """
    p = np.array([config.a, config.b, config.c, max(1.0 - config.a - config.b - config.c, 0.0)])
    if levels == 1:
        probs, codes = p, np.array([(q >> 1) << 2 | (q & 1) for q in range(4)])
    else:
        probs = np.outer(p, p).reshape(-1)
        codes = np.array([(((q1 >> 1) << 1 | (q2 >> 1)) << 2) | ((q1 & 1) << 1 | (q2 & 1))
                          for q1 in range(4) for q2 in range(4)])
    return np.repeat(codes, _quantize(probs, 1 << 16)).astype(np.uint8)


class _Relabel:
    """A seeded bijection on ``bits``-bit ids: xor-shift / odd-multiply-add rounds, and its inverse."""

    ROUNDS = 3

    def __init__(self, bits: int, seed: int, enabled: bool = True):
        self.bits = bits
        self.enabled = enabled and bits > 1
        self.mask = (1 << bits) - 1
        self.shift = (bits + 1) // 2  # 2 * shift >= bits: x ^= x >> shift is its own inverse
        draws = node_rng(seed, STREAM_PERMUTATION, 0).integers(0, 2**63, size=(self.ROUNDS, 2), dtype=np.int64)
        self.keys = [(int(m) << 1 | 1) & self.mask for m, _ in draws]
        self.adds = [int(a) & self.mask for _, a in draws]
        self.inverses = [pow(m, -1, 1 << bits) for m in self.keys]

    def _dtype(self):
        return np.uint32 if self.bits <= 32 else np.uint64

    def forward(self, x: np.ndarray) -> np.ndarray:
        if not self.enabled:
            return x
        t = self._dtype()
        x = x.astype(t, copy=True)
        mask, shift = t(self.mask), t(self.shift)
        for m, a in zip(self.keys, self.adds, strict=True):
            x ^= x >> shift
            x *= t(m)
            x += t(a)
            x &= mask
        x ^= x >> shift
        return x

    def inverse(self, x: np.ndarray) -> np.ndarray:
        if not self.enabled:
            return x
        t = self._dtype()
        x = x.astype(t, copy=True)
        mask, shift = t(self.mask), t(self.shift)
        x ^= x >> shift
        for m_inv, a in zip(reversed(self.inverses), reversed(self.adds), strict=True):
            x -= t(a)
            x *= t(m_inv)
            x &= mask
            x ^= x >> shift
        return x


def _raw_classes(config: RmatConfig, raw: np.ndarray) -> np.ndarray:
    """Class of each pre-relabeling id (int64)."""
    k = config.class_bits
    if config.num_classes == 1:
        return np.zeros(raw.shape, np.int64)
    raw = raw.astype(np.uint64)
    low_mask = np.uint64((1 << k) - 1)
    high_hash = mix64(raw >> np.uint64(k), config.seed ^ STREAM_CLASSES)
    slot = ((raw & low_mask) ^ (high_hash & low_mask)).astype(np.int64)
    spill = slot >= config.num_classes
    if spill.any():
        other = mix64(raw[spill], (config.seed ^ STREAM_CLASSES) + 1) % np.uint64(config.num_classes)
        slot[spill] = other.astype(np.int64)
    return slot


def rmat_classes(config: RmatConfig, nodes: np.ndarray) -> np.ndarray:
    """Class (label) of each node id of the generated graph."""
    relabel = _Relabel(config.scale, config.seed, config.permute)
    return _raw_classes(config, relabel.inverse(np.asarray(nodes, dtype=np.uint64)))


def rmat_edges(config: RmatConfig, first_chunk: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Generated edges ``(src, dst)`` in chunks of :data:`RMAT_CHUNK` (uint32, or uint64 past scale 32)."""
    scale = config.scale
    id_t = np.uint32 if scale <= 32 else np.uint64
    pairs, single = divmod(scale, 2)
    levels = pairs + single
    table2 = rmat_table(config, 2)
    table1 = rmat_table(config, 1)
    relabel = _Relabel(scale, config.seed, config.permute)
    k = config.class_bits
    rewire_threshold = int(round(config.homophily * 65536))
    total = config.num_edges
    for chunk in range(first_chunk, (total + RMAT_CHUNK - 1) // RMAT_CHUNK):
        n = min(RMAT_CHUNK, total - chunk * RMAT_CHUNK)
        rng = node_rng(config.seed, STREAM_RMAT, chunk)
        words = (levels + 1) * RMAT_CHUNK
        draws = rng.bit_generator.random_raw((words + 3) // 4).view(np.uint16)[:words]
        draws = draws.reshape(levels + 1, RMAT_CHUNK)[:, :n]
        src = np.zeros(n, id_t)
        dst = np.zeros(n, id_t)
        for level in range(levels):
            table, width = (table2, 2) if level < pairs else (table1, 1)
            code = table[draws[level]]
            src <<= id_t(width)
            src |= code >> np.uint8(2)
            dst <<= id_t(width)
            code &= np.uint8(3)
            dst |= code
        if config.num_classes > 1 and rewire_threshold:
            rewire = np.flatnonzero(draws[levels] < rewire_threshold)
            target = _raw_classes(config, src[rewire]).astype(np.uint64)
            moved = dst[rewire].astype(np.uint64)
            low_mask = np.uint64((1 << k) - 1)
            high_hash = mix64(moved >> np.uint64(k), config.seed ^ STREAM_CLASSES) & low_mask
            moved = (moved & ~low_mask) | (target ^ high_hash)
            dst[rewire] = moved.astype(id_t)
        yield relabel.forward(src), relabel.forward(dst)


def generate_rmat(path, config: RmatConfig, node_data: NodeDataConfig | None = None, *,
                  symmetrize: bool = True, drop_self_loops: bool = True, drop_duplicates: bool = True,
                  memory_budget: int = DEFAULT_MEMORY_BUDGET, progress: bool = False,
                  temp_dir: str | None = None) -> tuple[ImageHeader, dict]:
    """Write an R-MAT image. Returns its header and the writer's statistics."""
    if node_data is None:
        node_data = NodeDataConfig(num_classes=config.num_classes, seed=config.seed)
    if node_data.num_classes != config.num_classes:
        raise ValueError(f"Node data has {node_data.num_classes} classes, the graph {config.num_classes}")
    n = config.num_nodes
    with ImageWriter(path, n, feature_dim=node_data.feature_dim, feature_dtype=node_data.feature_dtype,
                     num_classes=config.num_classes, symmetrize=symmetrize, drop_self_loops=drop_self_loops,
                     drop_duplicates=drop_duplicates, memory_budget=memory_budget, progress=progress,
                     temp_dir=temp_dir,
                     expected_edges=config.num_edges) as writer:
        write_node_data(writer, node_data, n, lambda nodes: rmat_classes(config, nodes),
                        progress=writer.node_progress(n))
        for src, dst in prefetch(rmat_edges(config)):
            writer.add_edges(src, dst)
        header = writer.finalize()
    return header, writer.stats
