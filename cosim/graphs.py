"""Graphs for the co-simulation tests and benchmarks, written as storage images.

:func:`edge_case_image` packs the cases the sampler must get right into one small image: isolated
nodes, self loops, multi-edges, a hub of very high degree (reading cost bounded by the fanout), and
ordinary nodes. :func:`rmat_image` is the R-MAT (Graph500 parameters) generator used by the benchmark.
"""

from __future__ import annotations

import numpy as np

from smartsage.spec.image import IndexDtype, write_image

__all__ = ["edge_case_image", "rmat_image", "EdgeCaseGraph"]


class EdgeCaseGraph:
    """Node roles of an :func:`edge_case_image`."""

    def __init__(self, num_nodes, hub, isolated, self_loops, multi_edges, max_small_degree):
        self.num_nodes = num_nodes
        self.hub = hub
        self.isolated = isolated
        self.self_loops = self_loops
        self.multi_edges = multi_edges
        self.max_small_degree = max_small_degree


def edge_case_image(path, seed: int, num_nodes: int = 400, hub_degree: int = 100_000,
                    max_small_degree: int = 6, index_dtype: IndexDtype | None = None) -> EdgeCaseGraph:
    """Write a graph with isolated nodes, self loops, multi-edges and one hub of ``hub_degree``."""
    rng = np.random.default_rng(seed)
    degrees = rng.integers(0, max_small_degree + 1, num_nodes)
    isolated = [int(v) for v in rng.choice(num_nodes, 8, replace=False)]
    degrees[isolated] = 0
    hub = next(v for v in range(num_nodes) if v not in isolated)
    degrees[hub] = hub_degree
    indptr = np.zeros(num_nodes + 1, np.uint64)
    np.cumsum(degrees, out=indptr[1:])
    indices = rng.integers(0, num_nodes, int(indptr[-1]), dtype=np.uint64)
    candidates = [v for v in range(num_nodes) if degrees[v] >= 3 and v != hub]
    self_loops = candidates[:10]
    multi_edges = candidates[10:20]
    for v in self_loops:
        indices[int(indptr[v])] = v
    for v in multi_edges:
        start = int(indptr[v])
        indices[start + 1] = indices[start]
        indices[start + 2] = indices[start]
    write_image(path, indptr, indices, index_dtype=index_dtype)
    return EdgeCaseGraph(num_nodes, hub, isolated, self_loops, multi_edges, max_small_degree)


def rmat_image(path, scale: int, edge_factor: int, seed: int, a=0.57, b=0.19, c=0.19) -> None:
    """Write an R-MAT graph (2^scale nodes, edge_factor x 2^scale directed edges, CSR by source)."""
    rng = np.random.default_rng(seed)
    num_nodes = 1 << scale
    num_edges = edge_factor * num_nodes
    src = np.zeros(num_edges, np.uint64)
    dst = np.zeros(num_edges, np.uint64)
    for bit in range(scale):
        r = rng.random(num_edges)
        down = r >= a + b           # quadrant c or d: source bit set
        right = ((r >= a) & (r < a + b)) | (r >= a + b + c)  # quadrant b or d: destination bit set
        src |= down.astype(np.uint64) << np.uint64(bit)
        dst |= right.astype(np.uint64) << np.uint64(bit)
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    counts = np.bincount(src.astype(np.int64), minlength=num_nodes)
    indptr = np.zeros(num_nodes + 1, np.uint64)
    np.cumsum(counts, out=indptr[1:])
    write_image(path, indptr, dst.astype(np.uint32))
