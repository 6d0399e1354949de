"""Graph generation and import into storage images.

- :mod:`.rmat`: Graph500 R-MAT graphs with planted communities;
- :mod:`.kronecker`: Kronecker (fractal) expansion of a small seed graph;
- :mod:`.importers`: text edge lists, ``edge_index`` arrays, scipy sparse matrices, PyG ``Data``;
- :mod:`.communities`: class-conditional features, labels and split of generated graphs;
- :func:`default_graph`: the embedded default graph of ``smartsage demo``.

docs/graphs.md describes the constructions.
"""

from __future__ import annotations

import os

from smartsage.spec.image import ImageHeader

__all__ = ["DEFAULT_GRAPH", "default_graph"]

#: The embedded default graph: small enough to build in about a second and to co-simulate, large
#: enough for GraphSAGE to learn its communities (``smartsage graph generate`` with these options
#: builds the same bytes).
DEFAULT_GRAPH = {
    "kind": "rmat",
    "scale": 12,
    "edge_factor": 16,
    "seed": 0,
    "classes": 4,
    "homophily": 0.6,
    "feature_dim": 32,
    "feature_dtype": "fp32",
    "feature_snr": 1.0,
}


def default_graph(path: str | os.PathLike, *, progress: bool = False) -> ImageHeader:
    """Build the embedded default graph (R-MAT scale 12, 4096 nodes, ~94 K CSR entries, 4 classes,
    fp32 features of dimension 32) at ``path``, deterministically. Returns its header."""
    from .communities import NodeDataConfig
    from .rmat import RmatConfig, generate_rmat

    g = DEFAULT_GRAPH
    config = RmatConfig(scale=g["scale"], edge_factor=g["edge_factor"], num_classes=g["classes"],
                        homophily=g["homophily"], seed=g["seed"])
    node_data = NodeDataConfig(num_classes=g["classes"], feature_dim=g["feature_dim"],
                               feature_dtype=g["feature_dtype"], feature_snr=g["feature_snr"], seed=g["seed"])
    header, _ = generate_rmat(path, config, node_data, progress=progress)
    return header
