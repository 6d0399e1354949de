"""Message-flow-graph blocks (DGL's form) from a command's node list and counts; relabelling on the host.

The device writes the frontiers F_0 (targets) .. F_L as prefixes of one node list, with duplicates and
without local ids (docs/spec.md section 3). Here they become L blocks: block l (innermost first, as DGL
orders them) has the distinct nodes of D_{l+1} as dst nodes and those of D_l as src nodes, where
D_L = distinct targets and D_{l-1} = D_l plus their sampled neighbors, and one edge per sampled edge
position of each dst node (multi-edges stay, once per position).

Local ids are one numbering for all blocks: distinct node ids in the order they first occur in the node
list. Since every frontier is a prefix of the node list, D_l's nodes are a prefix of D_{l-1}'s (DGL's
"dst nodes first" convention holds with no extra permutation). A node that appears several times in a
frontier got the identical sample each time (counter-based RNG); its edges are taken from its first
occurrence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from smartsage.spec.golden import hop_frontiers, segment_runs

__all__ = ["Block", "MessageFlowGraph", "to_blocks"]


@dataclasses.dataclass
class Block:
    """Edges from ``src_nodes`` into ``dst_nodes`` of one layer (the samples of one hop).

    Members
    -------
    src_nodes, dst_nodes:
        Global node ids (int64), distinct; ``src_nodes[:len(dst_nodes)] == dst_nodes``.
    edge_src, edge_dst:
        Local ids (int64) into ``src_nodes`` and ``dst_nodes``, one per sampled edge, grouped by
        destination in increasing order, each group in sample order.
    dst_entry:
        For each dst node, the position of its first occurrence in the frontier F_hop: the row of
        that node in the counts of the hop (and, for the innermost hop, in the self/sum rows).
    hop:
        The hop whose samples these edges are (hop 0 samples the targets: the outermost block).
    """

    src_nodes: np.ndarray
    dst_nodes: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    dst_entry: np.ndarray
    hop: int

    @property
    def num_src(self) -> int:
        return int(self.src_nodes.size)

    @property
    def num_dst(self) -> int:
        return int(self.dst_nodes.size)

    @property
    def num_edges(self) -> int:
        return int(self.edge_src.size)

    @property
    def edge_index(self) -> np.ndarray:
        """(2, E) int64: row 0 local src ids, row 1 local dst ids (PyG's bipartite ``edge_index``)."""
        return np.stack([self.edge_src, self.edge_dst])

    def in_degrees(self) -> np.ndarray:
        return np.bincount(self.edge_dst, minlength=self.num_dst)


@dataclasses.dataclass
class MessageFlowGraph:
    """The blocks of one mini-batch, innermost first.

    Members
    -------
    blocks:
        ``blocks[0]`` consumes D_0 and produces D_1; ``blocks[-1]`` produces D_L (the targets). With
        ``aggregated`` the innermost block is absent: the device returned (self, sum, count) rows of
        F_{L-1} instead of its edges, and ``innermost_entry`` selects them.
    nodes:
        Every distinct node id, in local-id order; D_l is ``nodes[:num_nodes[L - l]]``.
    frontier_distinct:
        Number of distinct nodes of F_0 .. F_L (of those built).
    target_index:
        For each target entry (duplicates included), its local id: the output row of the model.
    innermost_entry:
        For each node of D_1, its first position in F_{L-1}: the rows of the device's self features,
        neighbor sums and the hop L-1 counts that belong to it.
    """

    blocks: list[Block]
    nodes: np.ndarray
    frontier_distinct: list[int]
    target_index: np.ndarray
    innermost_entry: np.ndarray
    aggregated: bool = False

    @property
    def input_nodes(self) -> np.ndarray:
        """The nodes whose features the first block needs (D_0), or D_1 when aggregated."""
        if self.aggregated:
            return self.nodes[:self.innermost_entry.size]
        return self.blocks[0].src_nodes

    @property
    def output_nodes(self) -> np.ndarray:
        return self.nodes[:self.frontier_distinct[0]]


def to_blocks(node_list, counts, num_targets: int, fanouts: Sequence[int] | int,
              aggregated: bool = False) -> MessageFlowGraph:
    """Turn a command's node list and counts into blocks (relabelled to local ids).

    Parameters
    ----------
    node_list, counts:
        As the device wrote them (any backend). With ``aggregated`` the node list may stop at
        F_{L-1} (the innermost hop's ids are not needed: the sums replace them).
    num_targets:
        B, the number of targets at the head of the node list.
    fanouts:
        The command's fanouts (only their number L is used) or L itself.
    aggregated:
        Build blocks for hops 0..L-2 only; the innermost layer consumes (self, sum, count).

    Raises
    ------
    ValueError
        The counts or the node list are shorter than the frontiers they imply.
    """
    num_hops = fanouts if isinstance(fanouts, int) else len(fanouts)
    if num_hops < 1:
        raise ValueError("At least one hop is needed to build blocks")
    node_list = np.asarray(node_list)
    counts = np.asarray(counts)
    if aggregated:
        # the frontier sizes F_0..F_{L-1} from the first L-1 hops' counts
        frontiers = hop_frontiers(node_list, counts, num_targets, range(num_hops - 1))
    else:
        frontiers = hop_frontiers(node_list, counts, num_targets, range(num_hops))
    sizes = [f.size for f in frontiers]
    prefix = node_list[:sizes[-1]].astype(np.int64)

    uniq, first, inverse = np.unique(prefix, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    nodes = uniq[order]
    first_pos = first[order]                      # increasing: local id -> first node-list position
    local_of_uniq = np.empty(uniq.size, np.int64)
    local_of_uniq[order] = np.arange(uniq.size)
    local = local_of_uniq[inverse]                # local id of every node-list entry
    distinct = [int(np.searchsorted(first_pos, size)) for size in sizes]

    blocks = []
    count_start = 0
    built_hops = num_hops - 1 if aggregated else num_hops
    for hop in range(built_hops):
        size = sizes[hop]
        hop_counts = counts[count_start:count_start + size].astype(np.int64)
        count_start += size
        sample_start = np.empty(size, np.int64)
        sample_start[0] = size
        np.cumsum(hop_counts[:-1], out=sample_start[1:])
        sample_start[1:] += size
        entry = np.arange(size)
        keep = first_pos[local[:size]] == entry   # first occurrences only
        kept = entry[keep]
        lengths = hop_counts[keep]
        positions = segment_runs(sample_start[kept], lengths)
        edge_dst = np.repeat(local[kept], lengths)
        edge_src = local[positions]
        blocks.append(Block(src_nodes=nodes[:distinct[hop + 1]], dst_nodes=nodes[:distinct[hop]],
                            edge_src=edge_src, edge_dst=edge_dst, dst_entry=first_pos[:distinct[hop]], hop=hop))
    blocks.reverse()  # innermost first
    innermost_entry = first_pos[:distinct[num_hops - 1]]
    return MessageFlowGraph(blocks=blocks, nodes=nodes, frontier_distinct=distinct,
                            target_index=local[:num_targets].copy(), innermost_entry=innermost_entry,
                            aggregated=aggregated)

