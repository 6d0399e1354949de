"""Import a real graph that ships in a Python package (Zachary's karate club, from networkx), write it
as a storage image and train GraphSAGE on it through the golden device.

    python examples/karate_club.py [OUT_DIR]

Labels are the two clubs the members joined after the split ("Mr. Hi" = 0, "Officer" = 1); features
are one-hot node ids (the graph has none of its own), so the model must learn from the structure.
Half the members are for training, a quarter each for validation and test (seeded).
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import networkx as nx
import numpy as np

from smartsage.host.graphs.importers import import_edge_index
from smartsage.host.train import TrainConfig, Trainer, open_sampler
from smartsage.spec.image import Split


def build_image(path: pathlib.Path, seed: int = 0) -> pathlib.Path:
    graph = nx.karate_club_graph()
    edge_index = np.array(graph.edges(), dtype=np.int64).T
    labels = np.array([0 if graph.nodes[v]["club"] == "Mr. Hi" else 1 for v in graph.nodes], np.int32)
    n = graph.number_of_nodes()
    split = np.full(n, int(Split.TEST), np.uint8)
    order = np.random.default_rng(seed).permutation(n)
    split[order[: n // 2]] = Split.TRAIN
    split[order[n // 2: 3 * n // 4]] = Split.VAL
    import_edge_index(edge_index, path, num_nodes=n, features=np.eye(n, dtype=np.float32), labels=labels,
                      num_classes=2, split=split, symmetrize=True, drop_duplicates=True)
    return path


def train(path: pathlib.Path, epochs: int = 30) -> list[dict]:
    sampler = open_sampler("golden", path)
    try:
        trainer = Trainer(sampler, TrainConfig(epochs=epochs, batch_size=8, fanouts=(5, 5), hidden=16, lr=0.02,
                                               dropout=0.0, seed=0, max_eval_nodes=None))
        return trainer.fit()
    finally:
        sampler.close()


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[0]) if argv else pathlib.Path(tempfile.mkdtemp())
    out.mkdir(parents=True, exist_ok=True)
    image = build_image(out / "karate.img")
    history = train(image)
    last = history[-1]
    print(f"karate club: {image}; after {len(history)} epochs loss {last['loss']:.4f}, "
          f"val accuracy {last['val_acc']:.3f}, test accuracy {last['test_acc']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
