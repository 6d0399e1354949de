"""torch_geometric's own GraphSAGE trained on smartsage batches (smartsage.host.loader.NeighborLoader).

    python examples/pyg_graphsage.py [IMAGE] [--backend golden] [--epochs 5] [--compare]

Without IMAGE the embedded default graph (``smartsage graph generate --default``) is built in a temporary
directory. The hyper-parameters and seeds are those of ``smartsage train`` (batch 256, fanouts 10,5, hidden
64, lr 0.01, weight decay 5e-4, dropout 0.2, seed 0; evaluation on at most 4096 val/test nodes drawn as
``smartsage train`` draws them), and the loader issues the same commands (same targets, same command seeds),
so the two runs see the same samples. The models differ in one respect: PyG's loader semantics (each node
aggregates the sample of the hop where it was first reached; docs/interop.md) against smartsage's blocks
(every node of a frontier aggregates its own sample of that hop). ``--compare`` also runs ``smartsage train``'s
trainer and prints both accuracies (docs/interop.md quotes them).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import warnings

import numpy as np
import torch
import torch.nn.functional as F

from smartsage.host.loader import NeighborLoader
from smartsage.host.train import EVAL_EPOCH, TrainConfig, Trainer, open_sampler
from smartsage.spec.image import GraphImage, Split

with warnings.catch_warnings():
    warnings.simplefilter("ignore")          # torch_geometric's import warns about torch.jit on some versions
    from torch_geometric.nn import GraphSAGE


def eval_nodes(image: GraphImage, split: Split, seed: int, limit: int | None) -> np.ndarray:
    """The val/test nodes ``smartsage train`` evaluates (at most ``limit``, drawn with its seed)."""
    nodes = image.split_nodes(split)
    if limit is not None and nodes.size > limit:
        nodes = np.random.default_rng([seed, EVAL_EPOCH]).choice(nodes, limit, replace=False)
    return nodes


@torch.no_grad()
def accuracy(model, loader: NeighborLoader) -> float:
    model.eval()
    correct = total = 0
    for batch in loader:
        out = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                    num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
        correct += int((out.argmax(1) == batch.y[:batch.batch_size]).sum())
        total += batch.batch_size
    return correct / total


def train_pyg(image_path, config: TrainConfig | None = None, backend: str = "golden",
              progress=print) -> list[dict]:
    """PyG's GraphSAGE on smartsage batches; returns per-epoch loss, val and test accuracy."""
    config = config or TrainConfig()
    torch.manual_seed(config.seed)
    train = NeighborLoader(image_path, config.fanouts, batch_size=config.batch_size, input_nodes="train",
                           shuffle=True, backend=backend, seed=config.seed)
    image = train.image
    evals = {name: NeighborLoader(image_path, config.fanouts, batch_size=config.eval_batch_size,
                                  input_nodes=eval_nodes(image, split, config.seed, config.max_eval_nodes),
                                  backend=backend, seed=config.seed)
             for name, split in (("val", Split.VAL), ("test", Split.TEST))}
    model = GraphSAGE(image.feature_dim, config.hidden, num_layers=len(config.fanouts),
                      out_channels=image.num_classes, dropout=config.dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    history = []
    try:
        for epoch in range(config.epochs):
            model.train()
            total = seen = 0.0
            for batch in train:
                out = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                            num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
                loss = F.cross_entropy(out, batch.y[:batch.batch_size])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += loss.item() * batch.batch_size
                seen += batch.batch_size
            record = {"epoch": epoch, "loss": total / seen, "val_acc": accuracy(model, evals["val"]),
                      "test_acc": accuracy(model, evals["test"])}
            history.append(record)
            if progress:
                progress(f"pyg  epoch {epoch}: loss {record['loss']:.4f}  val {record['val_acc']:.4f}  "
                         f"test {record['test_acc']:.4f}")
    finally:
        for loader in (train, *evals.values()):
            loader.close()
    return history


def train_smartsage(image_path, config: TrainConfig | None = None, backend: str = "golden",
                    progress=print) -> list[dict]:
    """``smartsage train`` (its Trainer, device-aggregated innermost layer) with the same settings."""
    config = config or TrainConfig()
    sampler = open_sampler(backend, image_path)
    try:
        trainer = Trainer(sampler, config)
        trainer.fit(on_epoch=lambda r: progress and progress(
            f"ours epoch {r['epoch']}: loss {r['loss']:.4f}  val {r['val_acc']:.4f}  test {r['test_acc']:.4f}"))
        return trainer.history
    finally:
        sampler.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("image", nargs="?", type=pathlib.Path, help="storage image (default: the default graph)")
    parser.add_argument("--backend", default="golden")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare", action="store_true", help="also run smartsage train's trainer")
    args = parser.parse_args(argv)
    config = TrainConfig(epochs=args.epochs, seed=args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        image = args.image
        if image is None:
            from smartsage.host.graphs import default_graph

            image = pathlib.Path(tmp) / "default.img"
            default_graph(image)
        pyg = train_pyg(image, config, args.backend)
        if args.compare:
            ours = train_smartsage(image, config, args.backend)
            print(f"final test accuracy: torch_geometric GraphSAGE {pyg[-1]['test_acc']:.4f}, "
                  f"smartsage train {ours[-1]['test_acc']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
