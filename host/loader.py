"""Mini-batches as PyG and DGL users consume them: :class:`NeighborLoader` (the shape of PyG's) and a DGL-style
blocks view, on any smartsage sampler backend (golden, hls, rtl, mmap, direct).

Each batch is one device command (the same targets and command seeds as ``smartsage train``: see
:func:`smartsage.host.train.batch_seed`), turned into a ``torch_geometric.data.Data``:

=====================  ==========================================================================================
``n_id``               global node ids, local id order: the batch's seeds first (``n_id[:batch_size]``), then
                       the nodes first reached at hop 0, hop 1, ... (hop-ordered)
``batch_size``         number of seeds
``input_id``           position of each seed in ``input_nodes``
``edge_index``         ``(2, E)`` local ids, row 0 the sampled neighbor (source), row 1 the node it was sampled
                       for (target): PyG's ``source_to_target`` flow; hop 0's edges first, then hop 1's, ...
``num_sampled_nodes``  nodes per hop (``[batch_size, new at hop 0, new at hop 1, ...]``)
``num_sampled_edges``  edges per hop (``[hop 0, hop 1, ...]``): with ``num_sampled_nodes``, what PyG's
                       ``trim_to_layer`` and ``BasicGNN.forward(num_sampled_nodes_per_hop=...)`` need
``x``                  float32 features of **every** node of ``n_id`` (widened exactly from the storage dtype);
                       every node's row is needed by a PyG forward (as ``x[n_id]`` in PyG's own loader)
``y``                  int64 labels of every node of ``n_id`` (-1 where the image has none); the loss uses
                       ``y[:batch_size]``
=====================  ==========================================================================================

Two semantics (docs/interop.md):

- ``semantics="pyg"`` (the default without aggregation): PyG's ``NeighborLoader``. Each node's edges come from
  the hop at which it was first reached, so one flat ``edge_index`` describes every layer and PyG models run
  unchanged (``trim_to_layer`` included). The device samples every node of every frontier (DGL's block
  convention, docs/spec.md section 3); here the samples that a node already reached at an earlier hop got
  again are dropped, and the nodes only they reached with them. Nothing is approximated: what is kept is
  exactly a PyG ``NeighborLoader`` batch for these per-(hop, node) samples.
- ``semantics="dgl"``: everything the device sampled, in DGL's message-flow-graph form: every node of hop
  h's frontier has its own hop-h sample. :meth:`SmartsageBatch.blocks` (on the batch: ``batch.blocks``) gives
  the per-layer bipartite blocks, the exact input of smartsage's GraphSAGE (:mod:`smartsage.host.model`)
  and of DGL-style code. ``edge_index`` then holds all hops' edges, hop-ordered; a flat PyG forward on it
  aggregates, for a node sampled at several hops, the union of those samples (not GraphSAGE over blocks).
  With ``aggregate=True`` (only here) the device returns, for each node of D_1, its own features and the
  exact sum of its innermost-hop sample's features: ``x`` is then those self rows (the nodes of D_1 only:
  the innermost hop's ids are not read back), ``agg_sum`` and ``agg_count`` the sums and counts, and
  ``edge_index`` the hops before the innermost. :func:`sage_first_layer` applies a PyG ``SAGEConv`` to them.
  For two layers the remaining ``edge_index`` has one hop, so a flat PyG forward of the outer layer is
  exact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from smartsage.spec.config import CONFIGS, KernelConfig, get_config
from smartsage.spec.image import GraphImage, Split

from .blocks import Block, MessageFlowGraph, to_blocks
from .model import features_to_tensor
from .train import EVAL_EPOCH, batch_seed, open_sampler

__all__ = ["NeighborLoader", "DGLBlock", "SmartsageBatch", "pyg_view", "sage_first_layer", "SEMANTICS"]

SEMANTICS = ("pyg", "dgl")


class DGLBlock:
    """One bipartite block in DGL's shape (``dgl.create_block``'s output), without importing DGL.

    ``srcdata["_ID"]`` / ``dstdata["_ID"]`` are the global node ids (``dgl.NID``); dst nodes are the first
    ``num_dst_nodes()`` src nodes, as in DGL. ``edges()`` gives local (src, dst) ids.
    """

    def __init__(self, block: Block):
        self._block = block
        self.srcdata = {"_ID": torch.from_numpy(block.src_nodes)}
        self.dstdata = {"_ID": torch.from_numpy(block.dst_nodes)}
        self.edata: dict = {}
        self.hop = block.hop

    @property
    def block(self) -> Block:
        return self._block

    def num_src_nodes(self) -> int:
        return self._block.num_src

    def num_dst_nodes(self) -> int:
        return self._block.num_dst

    def num_edges(self) -> int:
        return self._block.num_edges

    def edges(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_numpy(self._block.edge_src), torch.from_numpy(self._block.edge_dst)

    def in_degrees(self) -> torch.Tensor:
        return torch.from_numpy(self._block.in_degrees())

    @property
    def edge_index(self) -> torch.Tensor:
        """PyG's bipartite ``edge_index`` of the block (use with ``conv((h, h[:num_dst]), edge_index)``)."""
        return torch.from_numpy(self._block.edge_index)

    def __repr__(self) -> str:
        return (f"Block(num_src_nodes={self.num_src_nodes()}, num_dst_nodes={self.num_dst_nodes()}, "
                f"num_edges={self.num_edges()}, hop={self.hop})")


@dataclasses.dataclass
class SmartsageBatch:
    """One batch before it becomes a ``Data``: node ids, hop-ordered edges, counts and the blocks.

    ``mfg`` is the message-flow graph of the batch in its ``semantics`` (for ``"pyg"``, blocks whose layer
    l consumes the first ``sum(num_sampled_edges[:L - l])`` edges, i.e. what ``trim_to_layer`` keeps).
    """

    n_id: np.ndarray
    edge_index: np.ndarray
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]
    batch_size: int
    mfg: MessageFlowGraph
    semantics: str
    seed: int
    agg_self: np.ndarray | None = None
    agg_sum: np.ndarray | None = None
    agg_count: np.ndarray | None = None

    def blocks(self) -> list[DGLBlock]:
        """DGL-style blocks, innermost first (``blocks[0]`` consumes the input features)."""
        return [DGLBlock(b) for b in self.mfg.blocks]


def _hop_edges(mfg: MessageFlowGraph) -> list[Block]:
    """The blocks in hop order (hop 0 first)."""
    return sorted(mfg.blocks, key=lambda b: b.hop)


def _dgl_batch(mfg: MessageFlowGraph, num_targets: int, seed: int) -> SmartsageBatch:
    hops = _hop_edges(mfg)
    sizes = mfg.frontier_distinct           # |D_L|, |D_{L-1}|, ... (distinct nodes of F_0, F_1, ...)
    num_nodes = [sizes[0]] + [b - a for a, b in zip(sizes[:-1], sizes[1:], strict=False)]
    edge_index = (np.concatenate([b.edge_index for b in hops], axis=1) if hops
                  else np.zeros((2, 0), np.int64))
    return SmartsageBatch(n_id=mfg.nodes[:sizes[-1]].copy(), edge_index=edge_index, num_sampled_nodes=num_nodes,
                          num_sampled_edges=[b.num_edges for b in hops], batch_size=num_targets, mfg=mfg,
                          semantics="dgl", seed=seed)


def pyg_view(mfg: MessageFlowGraph, num_targets: int, seed: int = 0) -> SmartsageBatch:
    """PyG ``NeighborLoader`` semantics from a non-aggregated message-flow graph (see the module docstring).

    Hop by hop, only the nodes reached for the first time at the previous hop keep their samples; the
    nodes that those samples reach for the first time form the next hop. Local ids are renumbered in
    that order (seeds first).
    """
    if mfg.aggregated:
        raise ValueError("PyG semantics need every hop's neighbor ids: sample without aggregation")
    hops = _hop_edges(mfg)
    total = mfg.nodes.size
    new_id = np.full(total, -1, np.int64)          # DGL local id -> PyG local id
    new_id[:num_targets] = np.arange(num_targets)
    frontier = np.arange(num_targets)              # DGL local ids reached at the previous hop
    count = num_targets
    num_nodes, num_edges, parts = [num_targets], [], []
    for block in hops:
        keep = np.zeros(block.num_dst, bool)
        keep[frontier[frontier < block.num_dst]] = True
        mask = keep[block.edge_dst]
        src, dst = block.edge_src[mask], block.edge_dst[mask]
        by_dst = np.argsort(new_id[dst], kind="stable")  # dst in this view's order, each in sample order
        src, dst = src[by_dst], dst[by_dst]
        fresh = src[new_id[src] < 0]
        uniq, first = np.unique(fresh, return_index=True)
        fresh = uniq[np.argsort(first, kind="stable")]   # first-occurrence order
        new_id[fresh] = count + np.arange(fresh.size)
        count += fresh.size
        parts.append(np.stack([new_id[src], new_id[dst]]))
        num_nodes.append(int(fresh.size))
        num_edges.append(int(mask.sum()))
        frontier = fresh
    order = np.empty(count, np.int64)
    reached = new_id >= 0
    order[new_id[reached]] = np.flatnonzero(reached)
    n_id = mfg.nodes[order]
    edge_index = np.concatenate(parts, axis=1)
    # the blocks that trim_to_layer's layers see: layer l (innermost 0) keeps hops 0..L-1-l
    num_layers = len(hops)
    node_bounds = np.cumsum(num_nodes)
    edge_bounds = np.concatenate([[0], np.cumsum(num_edges)])
    blocks = []
    for layer in range(num_layers):
        hop = num_layers - 1 - layer
        e = int(edge_bounds[hop + 1])
        blocks.append(Block(src_nodes=n_id[:node_bounds[hop + 1]], dst_nodes=n_id[:node_bounds[hop]],
                            edge_src=edge_index[0, :e], edge_dst=edge_index[1, :e],
                            dst_entry=np.full(int(node_bounds[hop]), -1, np.int64), hop=hop))
    view = MessageFlowGraph(blocks=blocks, nodes=n_id, frontier_distinct=[int(n) for n in node_bounds],
                            target_index=np.arange(num_targets), innermost_entry=np.zeros(0, np.int64))
    return SmartsageBatch(n_id=n_id, edge_index=edge_index, num_sampled_nodes=num_nodes,
                          num_sampled_edges=num_edges, batch_size=num_targets, mfg=view, semantics="pyg", seed=seed)


def sage_first_layer(conv, data) -> torch.Tensor:
    """A PyG ``SAGEConv(aggr="mean")`` applied to the device's aggregated rows of an ``aggregate=True`` batch:
    ``conv.lin_l(agg_sum / max(agg_count, 1)) + conv.lin_r(x)`` for every node of ``data.n_id`` (D_1).

    The same as ``conv(x_full, edge_index_of_the_innermost_hop)`` on those nodes (the default SAGEConv:
    mean aggregation, ``root_weight=True``, ``normalize=False``, ``project=False``).
    """
    if getattr(conv, "project", False) or getattr(conv, "normalize", False) or not getattr(conv, "root_weight", True):
        raise ValueError("sage_first_layer supports SAGEConv(aggr='mean') without project/normalize")
    aggr = getattr(conv, "aggr", "mean")
    if str(aggr) not in ("mean", "MeanAggregation()"):
        raise ValueError(f"sage_first_layer needs mean aggregation, not {aggr!r}")
    mean = data.agg_sum / data.agg_count.clamp(min=1).to(data.agg_sum.dtype)[:, None]
    return conv.lin_l(mean) + conv.lin_r(data.x)


class NeighborLoader:
    """Iterates over ``input_nodes`` in mini-batches sampled by a smartsage backend (PyG's loader's shape).

    Parameters
    ----------
    image:
        Storage image path (or an open :class:`GraphImage` for the host-side reads of ``x``/``y``; the
        backend opens the path itself).
    num_neighbors:
        Fanout per hop, hop 0 first (PyG's ``num_neighbors``; -1 is not supported: the device needs a bound).
    batch_size:
        Seeds per batch (the last batch may be smaller).
    input_nodes:
        Seed nodes: an array of distinct node ids, a :class:`Split` or ``"train"``/``"val"``/``"test"``
        (default: the train split).
    shuffle:
        Permute the seeds every epoch with ``numpy.random.default_rng([seed, epoch])``, as ``smartsage
        train`` does; batch b of epoch e is sampled with ``batch_seed(seed, e, b)``. Without shuffling the
        seeds keep their order and every pass uses the evaluation epoch's command seeds (the same samples
        each time).
    backend, config:
        Sampler backend name (``golden``, ``hls``, ``rtl``, ``mmap``, ``direct``) and kernel configuration.
    aggregate:
        Ask the device for the innermost layer's exact self and neighbor-sum rows (``semantics="dgl"``).
    semantics:
        ``"pyg"`` (default without aggregation) or ``"dgl"`` (default and only choice with aggregation).
    seed:
        Run seed (``smartsage train --seed``).

    Raises
    ------
    ValueError
        A bad argument (message names it), or PyG semantics with aggregation.
    """

    def __init__(self, image, num_neighbors: Sequence[int], batch_size: int = 1, input_nodes=None,
                 shuffle: bool = False, backend: str = "golden", config: KernelConfig | str = "default",
                 aggregate: bool = False, semantics: str | None = None, seed: int = 0, **sampler_options):
        self.num_neighbors = tuple(int(k) for k in num_neighbors)
        if not self.num_neighbors or any(k < 1 for k in self.num_neighbors):
            raise ValueError(f"num_neighbors must be positive fanouts, hop 0 first, not {num_neighbors!r}")
        if int(batch_size) < 1:
            raise ValueError(f"Batch size must be a positive integer, not {batch_size!r}")
        semantics = semantics or ("dgl" if aggregate else "pyg")
        if semantics not in SEMANTICS:
            raise ValueError(f"Semantics must be one of {', '.join(SEMANTICS)}, not {semantics!r}")
        if aggregate and semantics == "pyg":
            raise ValueError("aggregate=True needs semantics='dgl': the device aggregates every node of the last "
                             "frontier over its innermost-hop sample (see docs/interop.md)")
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.aggregate = bool(aggregate)
        self.semantics = semantics
        self.seed = int(seed)
        self.config = get_config(config) if isinstance(config, str) else (config or CONFIGS["default"])
        self.epoch = 0
        path = image.path if isinstance(image, GraphImage) else image
        self.sampler = open_sampler(backend, path, self.config, **sampler_options)
        self.image: GraphImage = self.sampler.image
        try:
            self.input_nodes = self._input_nodes(input_nodes)
        except BaseException:
            self.sampler.close()
            raise

    def _input_nodes(self, input_nodes) -> np.ndarray:
        if input_nodes is None:
            input_nodes = Split.TRAIN
        if isinstance(input_nodes, str):
            try:
                input_nodes = Split[input_nodes.upper()]
            except KeyError:
                raise ValueError(f"input_nodes must be a split name (train, val, test) or node ids, "
                                 f"not {input_nodes!r}") from None
        if isinstance(input_nodes, Split):
            nodes = self.image.split_nodes(input_nodes)
        else:
            nodes = torch.as_tensor(input_nodes).numpy() if isinstance(input_nodes, torch.Tensor) else \
                np.asarray(input_nodes)
            if nodes.dtype == bool:
                nodes = np.flatnonzero(nodes)
        nodes = nodes.astype(np.int64)
        if nodes.ndim != 1 or nodes.size == 0:
            raise ValueError("input_nodes must name at least one node")
        if nodes.min() < 0 or nodes.max() >= self.image.num_nodes:
            raise ValueError(f"input_nodes hold ids outside the image's {self.image.num_nodes} nodes")
        if np.unique(nodes).size != nodes.size:
            raise ValueError("input_nodes must be distinct (a batch's seeds are n_id[:batch_size])")
        return nodes

    def __len__(self) -> int:
        return -(-self.input_nodes.size // self.batch_size)

    def __iter__(self) -> Iterator:
        epoch = self.epoch if self.shuffle else EVAL_EPOCH
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.input_nodes.size)
            self.epoch += 1
        else:
            order = np.arange(self.input_nodes.size)
        for b in range(len(self)):
            index = order[b * self.batch_size:(b + 1) * self.batch_size]
            batch = self.sample(self.input_nodes[index], batch_seed(self.seed, epoch, b))
            yield self.to_data(batch, input_id=index)

    def sample(self, targets: np.ndarray, command_seed: int) -> SmartsageBatch:
        """One command for ``targets`` (distinct ids) with ``command_seed``; the batch in this loader's semantics."""
        targets = np.asarray(targets, np.int64)
        result = self.sampler.sample(targets, self.num_neighbors, command_seed, aggregate=self.aggregate)
        mfg = to_blocks(result.node_list, result.counts, targets.size, self.num_neighbors, aggregated=self.aggregate)
        if self.semantics == "pyg":
            return pyg_view(mfg, targets.size, command_seed)
        batch = _dgl_batch(mfg, targets.size, command_seed)
        if self.aggregate:
            rows = mfg.innermost_entry                   # one row per node of D_1, local-id order
            last = result.counts[-result.self_rows.shape[0]:].astype(np.int64)
            batch.agg_self = result.self_rows[rows]
            batch.agg_sum = np.ascontiguousarray(result.sums[rows], dtype=np.float32)
            batch.agg_count = last[rows]
        return batch

    def to_data(self, batch: SmartsageBatch, input_id: np.ndarray | None = None):
        """The batch as a ``torch_geometric.data.Data`` (fields in the module docstring)."""
        from torch_geometric.data import Data

        image = self.image
        if batch.agg_self is not None:
            x = features_to_tensor(batch.agg_self, image.feature_dtype)
        else:
            order = np.argsort(batch.n_id, kind="stable")      # sorted reads of the feature section
            rows = np.empty((batch.n_id.size, image.feature_dim), image.feature_dtype.numpy_storage)
            rows[order] = image.features[batch.n_id[order]]
            x = features_to_tensor(rows, image.feature_dtype)
        data = Data(x=x, edge_index=torch.from_numpy(np.ascontiguousarray(batch.edge_index, dtype=np.int64)),
                    y=torch.from_numpy(np.asarray(image.labels[batch.n_id], np.int64)),
                    n_id=torch.from_numpy(batch.n_id.astype(np.int64)), batch_size=batch.batch_size,
                    num_sampled_nodes=list(batch.num_sampled_nodes), num_sampled_edges=list(batch.num_sampled_edges))
        data.num_nodes = int(batch.n_id.size)
        if input_id is not None:
            data.input_id = torch.from_numpy(np.asarray(input_id, np.int64))
        if batch.agg_sum is not None:
            data.agg_sum = torch.from_numpy(batch.agg_sum)
            data.agg_count = torch.from_numpy(batch.agg_count)
        data.blocks = batch.blocks()
        data.semantics = batch.semantics
        data.command_seed = batch.seed
        return data

    def close(self) -> None:
        self.sampler.close()

    def __enter__(self) -> NeighborLoader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"NeighborLoader(num_neighbors={list(self.num_neighbors)}, batch_size={self.batch_size}, "
                f"shuffle={self.shuffle}, backend={self.sampler.name!r}, semantics={self.semantics!r}, "
                f"aggregate={self.aggregate})")
