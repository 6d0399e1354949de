"""Blocks (DGL message-flow graphs, relabelled on the host) and the GraphSAGE model, which equals PyG's
SAGEConv(aggr="mean") layers run on the same sampled edges with the same weights."""

import warnings

import numpy as np
import pytest
import torch
from golden_graphs import open_image, random_csr

from smartsage.host.blocks import to_blocks
from smartsage.host.model import GraphSAGE, SAGELayer, block_mean, features_to_tensor
from smartsage.spec import golden
from smartsage.spec.image import FeatureDtype


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    gen = np.random.default_rng(8)
    indptr, indices = random_csr(gen, 200, 30, isolated=0.1)
    features = gen.standard_normal((200, 12)).astype(np.float32)
    with open_image(tmp_path_factory.mktemp("m") / "g.img", indptr, indices, features) as image:
        yield image, indptr, indices, features


def naive_blocks(node_list, counts, num_targets, num_hops):
    """Dict-based relabelling, hop by hop, for comparison."""
    node_list = [int(v) for v in node_list]
    local, order = {}, []
    for v in node_list:
        if v not in local:
            local[v] = len(order)
            order.append(v)
    frontier, consumed, blocks = num_targets, 0, []
    for _ in range(num_hops):
        cursor, edges, seen = frontier, [], set()
        for i in range(frontier):
            c = int(counts[consumed + i])
            v = node_list[i]
            if v not in seen:
                seen.add(v)
                edges += [(local[u], local[v]) for u in node_list[cursor:cursor + c]]
            cursor += c
        blocks.append((len({*node_list[:frontier]}), len({*node_list[:cursor]}), edges))
        consumed += frontier
        frontier = cursor
    return order, blocks[::-1]


def test_blocks_match_naive_relabelling(graph):
    image = graph[0]
    targets = np.array([5, 7, 5, 150, 7, 33])
    result = golden.sample(image, targets, [6, 4, 3], seed=2)
    mfg = to_blocks(result.node_list, result.counts, targets.size, [6, 4, 3])
    order, expected = naive_blocks(result.node_list, result.counts, targets.size, 3)
    assert mfg.nodes.tolist() == order
    assert len(mfg.blocks) == 3 and [b.hop for b in mfg.blocks] == [2, 1, 0]
    for block, (num_dst, num_src, edges) in zip(mfg.blocks, expected, strict=True):
        assert (block.num_dst, block.num_src) == (num_dst, num_src)
        assert (block.src_nodes[:block.num_dst] == block.dst_nodes).all()
        assert list(zip(block.edge_src.tolist(), block.edge_dst.tolist(), strict=True)) == edges
        assert (np.diff(block.edge_dst) >= 0).all()
    # each dst node's edges are its sample: count = min(degree, fanout), true neighbors
    indptr, indices = graph[1], graph[2]
    outer = mfg.blocks[-1]
    assert outer.dst_nodes.tolist() == [5, 7, 150, 33]
    assert mfg.target_index.tolist() == [0, 1, 0, 2, 1, 3]
    degree = indptr[outer.dst_nodes + 1] - indptr[outer.dst_nodes]
    assert (outer.in_degrees() == np.minimum(degree, 6)).all()
    for j, v in enumerate(outer.dst_nodes):
        neighbors = set(indices[int(indptr[v]):int(indptr[v + 1])].tolist())
        assert set(outer.src_nodes[outer.edge_src[outer.edge_dst == j]].tolist()) <= neighbors
    assert (mfg.input_nodes == mfg.blocks[0].src_nodes).all()
    assert mfg.output_nodes.tolist() == [5, 7, 150, 33]


def test_aggregated_blocks_need_no_innermost_ids(graph):
    image = graph[0]
    result = golden.sample(image, [1, 2, 3], [5, 5], seed=4, aggregate=True)
    full = to_blocks(result.node_list, result.counts, 3, [5, 5])
    frontiers = golden.hop_frontiers(result.node_list, result.counts, 3, [5, 5])
    short = to_blocks(result.node_list[:frontiers[1].size], result.counts, 3, [5, 5], aggregated=True)
    assert len(short.blocks) == 1 and short.aggregated
    assert (short.innermost_entry == full.innermost_entry).all()
    assert (full.blocks[0].dst_entry == full.innermost_entry).all()
    assert (short.blocks[0].edge_src == full.blocks[1].edge_src).all()
    assert (short.input_nodes == full.blocks[0].dst_nodes).all()
    with pytest.raises(ValueError, match="counts"):
        to_blocks(result.node_list, result.counts[:2], 3, [5, 5])


def _sage_conv_reference(model, mfg, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # torch_geometric's import warns about torch.jit.script
        nn = pytest.importorskip("torch_geometric.nn")
    h = x
    for i, (layer, block) in enumerate(zip(model.layers, mfg.blocks, strict=True)):
        conv = nn.SAGEConv(layer.lin_l.in_features, layer.lin_l.out_features, aggr="mean")
        with torch.no_grad():
            conv.lin_l.weight.copy_(layer.lin_l.weight)
            conv.lin_l.bias.copy_(layer.lin_l.bias)
            conv.lin_r.weight.copy_(layer.lin_r.weight)
        edge_index = torch.from_numpy(block.edge_index)
        h = conv((h, h[:block.num_dst]), edge_index, size=(block.num_src, block.num_dst))
        if i < len(model.layers) - 1:
            h = torch.relu(h)
    return h[torch.from_numpy(mfg.target_index)]


@pytest.mark.parametrize("fanouts", [[10], [6, 4], [5, 3, 2]])
def test_graphsage_equals_sageconv(graph, fanouts):
    image, _, _, features = graph
    torch.manual_seed(0)
    targets = np.array([0, 9, 17, 9, 120, 199])
    result = golden.sample(image, targets, fanouts, seed=11, aggregate=True)
    mfg = to_blocks(result.node_list, result.counts, targets.size, fanouts)
    model = GraphSAGE(12, 16, 5, num_layers=len(fanouts)).eval()
    x = torch.from_numpy(features[mfg.input_nodes])
    with torch.no_grad():
        ours = model(mfg, x)
        reference = _sage_conv_reference(model, mfg, x)
        # the innermost layer from the device's (self, sum, count) rows gives the same outputs
        last_counts = torch.from_numpy(result.counts[-result.self_rows.shape[0]:].astype(np.int64))
        aggregated = model.forward_aggregated(mfg, torch.from_numpy(result.self_rows),
                                              torch.from_numpy(result.sums), last_counts)
    assert ours.shape == (targets.size, 5)
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(aggregated, ours, rtol=1e-4, atol=1e-5)
    assert (ours[1] == ours[3]).all()   # duplicate targets, identical outputs


def test_block_mean_and_layer(graph):
    image = graph[0]
    result = golden.sample(image, [3, 4], [7], seed=1)
    block = to_blocks(result.node_list, result.counts, 2, 1).blocks[0]
    h = torch.arange(block.num_src * 2, dtype=torch.float32).reshape(-1, 2)
    mean = block_mean(block, h)
    for j in range(block.num_dst):
        rows = h[torch.from_numpy(block.edge_src[block.edge_dst == j])]
        expected = rows.mean(0) if len(rows) else torch.zeros(2)
        torch.testing.assert_close(mean[j], expected)
    with pytest.raises(ValueError, match="positive"):
        SAGELayer(0, 3)
    with pytest.raises(ValueError, match="at least one layer"):
        GraphSAGE(3, 3, 3, 0)


def test_features_to_tensor_widens_exactly():
    bf16 = np.array([0x3F80, 0xC000, 0x0001], np.uint16)
    assert features_to_tensor(bf16, "bf16").tolist() == torch.tensor(bf16.view(np.int16)).view(
        torch.bfloat16).float().tolist()
    assert features_to_tensor(np.array([-3, 4], np.int8), FeatureDtype.INT8).tolist() == [-3.0, 4.0]
