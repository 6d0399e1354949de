"""GraphSAGE with mean aggregation (PyG ``SAGEConv(aggr="mean")`` semantics) over message-flow-graph blocks.

Each layer computes ``lin_l(mean_{u in N(v)} h_u) + lin_r(h_v)`` (``lin_l`` with bias, ``lin_r``
without, as SAGEConv). The mean comes before any weight, so the innermost layer can consume what the
device returns for each node of D_1: its own features x_v, the sum of its sampled neighbors' features and
their count: ``lin_l(sum / max(count, 1)) + lin_r(x_v)`` (:meth:`GraphSAGE.forward_aggregated`). The
other layers consume blocks (:mod:`smartsage.host.blocks`). A node without sampled neighbors gets a zero
mean, as SAGEConv's scatter-mean gives it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from smartsage.spec.golden import widen_to_fp32
from smartsage.spec.image import FeatureDtype

from .blocks import Block, MessageFlowGraph

__all__ = ["SAGELayer", "GraphSAGE", "features_to_tensor", "block_mean"]


def features_to_tensor(rows: np.ndarray, dtype: FeatureDtype | str) -> torch.Tensor:
    """Feature rows in storage representation (bf16 as raw uint16) -> float32 tensor (exact widening)."""
    return torch.from_numpy(np.ascontiguousarray(widen_to_fp32(rows, FeatureDtype.parse(dtype)),
                                                 dtype=np.float32))


def block_mean(block: Block, h_src: torch.Tensor) -> torch.Tensor:
    """Mean of each dst node's sampled neighbors' rows of ``h_src`` (zero for a node without edges)."""
    src = torch.from_numpy(block.edge_src)
    dst = torch.from_numpy(block.edge_dst)
    total = h_src.new_zeros((block.num_dst, h_src.shape[1])).index_add_(0, dst, h_src[src])
    count = torch.bincount(dst, minlength=block.num_dst).clamp_(min=1).to(h_src.dtype)
    return total / count[:, None]


class SAGELayer(nn.Module):
    """One GraphSAGE mean layer: ``lin_l(mean) + lin_r(x_dst)``.

    Parameters
    ----------
    in_dim, out_dim:
        Feature widths.
    """

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        if in_dim < 1 or out_dim < 1:
            raise ValueError(f"Layer widths must be positive, not {in_dim} -> {out_dim}")
        self.lin_l = nn.Linear(in_dim, out_dim, bias=True)
        self.lin_r = nn.Linear(in_dim, out_dim, bias=False)

    def combine(self, mean: torch.Tensor, x_dst: torch.Tensor) -> torch.Tensor:
        return self.lin_l(mean) + self.lin_r(x_dst)

    def forward(self, block: Block, h_src: torch.Tensor) -> torch.Tensor:
        """``h_src`` holds the rows of ``block.src_nodes``; returns rows of ``block.dst_nodes``."""
        return self.combine(block_mean(block, h_src), h_src[:block.num_dst])

    def forward_aggregated(self, x_self: torch.Tensor, neighbor_sum: torch.Tensor,
                           count: torch.Tensor) -> torch.Tensor:
        """The innermost layer from (self features, neighbor sum, count) rows."""
        mean = neighbor_sum / count.clamp(min=1).to(neighbor_sum.dtype)[:, None]
        return self.combine(mean, x_self)


class GraphSAGE(nn.Module):
    """L mean layers with ReLU (and optional dropout) between them; ``layers[0]`` is the innermost.

    Parameters
    ----------
    in_dim, hidden_dim, out_dim:
        Input feature width, hidden width, output width (classes).
    num_layers:
        L, equal to the number of hops the batches are sampled with.
    dropout:
        Dropout probability applied to hidden activations in training mode.
    """

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int, num_layers: int, dropout: float = 0.0):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"GraphSAGE needs at least one layer, not {num_layers}")
        widths = [in_dim] + [hidden_dim] * (num_layers - 1) + [out_dim]
        self.layers = nn.ModuleList(SAGELayer(a, b) for a, b in zip(widths[:-1], widths[1:], strict=True))
        self.dropout = nn.Dropout(dropout)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def _activate(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        return self.dropout(torch.relu(h)) if layer < self.num_layers - 1 else h

    def _outer(self, mfg: MessageFlowGraph, h: torch.Tensor, first: int) -> torch.Tensor:
        """Layers ``first``.. on the blocks that feed them (an aggregated batch lacks the innermost)."""
        offset = self.num_layers - len(mfg.blocks)
        for layer in range(first, self.num_layers):
            h = self._activate(self.layers[layer](mfg.blocks[layer - offset], h), layer)
        return h[torch.from_numpy(mfg.target_index)]

    def forward(self, mfg: MessageFlowGraph, x: torch.Tensor) -> torch.Tensor:
        """Outputs per target entry from the features ``x`` of ``mfg.input_nodes`` (D_0)."""
        if mfg.aggregated or len(mfg.blocks) != self.num_layers:
            raise ValueError(f"forward needs {self.num_layers} blocks of a non-aggregated batch")
        return self._outer(mfg, x, 0)

    def forward_aggregated(self, mfg: MessageFlowGraph, x_self: torch.Tensor, neighbor_sum: torch.Tensor,
                           count: torch.Tensor) -> torch.Tensor:
        """Outputs per target entry from the device's rows for F_{L-1} (one per frontier entry).

        ``x_self``, ``neighbor_sum`` and ``count`` have one row per entry of F_{L-1}, as the device
        wrote them (self rows, sums, the last hop's counts); ``mfg.innermost_entry`` picks one row per
        node of D_1.
        """
        if len(mfg.blocks) != self.num_layers - (1 if mfg.aggregated else 0):
            raise ValueError(f"the batch has {len(mfg.blocks)} blocks; a {self.num_layers}-layer model needs "
                             f"{self.num_layers - 1} with aggregation")
        rows = torch.from_numpy(mfg.innermost_entry)
        h = self._activate(self.layers[0].forward_aggregated(x_self[rows], neighbor_sum[rows], count[rows]), 0)
        return self._outer(mfg, h, 1)   # a non-aggregated batch's innermost block is skipped
