"""The PyG/DGL loader: batches in PyG's NeighborLoader form and DGL's blocks, the same commands as
``smartsage train``, and PyG's own GraphSAGE forward equal to smartsage's model on the same weights."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from smartsage.host.blocks import to_blocks
from smartsage.host.graphs.communities import NodeDataConfig
from smartsage.host.graphs.rmat import RmatConfig, generate_rmat
from smartsage.host.loader import NeighborLoader, pyg_view, sage_first_layer
from smartsage.host.model import GraphSAGE
from smartsage.host.train import EVAL_EPOCH, batch_seed
from smartsage.spec import golden
from smartsage.spec.image import GraphImage, Split

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pyg_nn = pytest.importorskip("torch_geometric.nn")


@pytest.fixture(scope="module")
def image_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("loader") / "rmat10.img"
    generate_rmat(path, RmatConfig(scale=10, edge_factor=8, num_classes=4, seed=2),
                  NodeDataConfig(num_classes=4, feature_dim=12, seed=2))
    return path


def _copy_weights(ours: GraphSAGE, theirs) -> None:
    with torch.no_grad():
        for layer, conv in zip(ours.layers, theirs.convs, strict=True):
            conv.lin_l.weight.copy_(layer.lin_l.weight)
            conv.lin_l.bias.copy_(layer.lin_l.bias)
            conv.lin_r.weight.copy_(layer.lin_r.weight)


@pytest.mark.parametrize("fanouts", [[6], [5, 3], [4, 3, 2]])
def test_pyg_graphsage_forward_equals_ours(image_path, fanouts):
    """torch_geometric's GraphSAGE on the Data (flat edge_index, trim_to_layer) = smartsage's GraphSAGE on
    the batch's blocks, same weights."""
    with NeighborLoader(image_path, fanouts, batch_size=40, shuffle=True, seed=5) as loader:
        targets = loader.input_nodes[:40]
        batch = loader.sample(targets, 1234)
        data = loader.to_data(batch)
    torch.manual_seed(0)
    ours = GraphSAGE(12, 16, 4, num_layers=len(fanouts)).eval()
    theirs = pyg_nn.GraphSAGE(12, 16, num_layers=len(fanouts), out_channels=4).eval()
    _copy_weights(ours, theirs)
    with torch.no_grad():
        expected = ours(batch.mfg, data.x)
        trimmed = theirs(data.x, data.edge_index, num_sampled_nodes_per_hop=data.num_sampled_nodes,
                         num_sampled_edges_per_hop=data.num_sampled_edges)[:data.batch_size]
        full = theirs(data.x, data.edge_index)[:data.batch_size]
    torch.testing.assert_close(trimmed, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(full, expected, rtol=1e-5, atol=1e-5)  # trimming only saves work


def test_pyg_semantics_match_a_naive_breadth_first_sampler(image_path):
    """Each node keeps the sample of the hop where it was first reached: rebuilt from the spec's
    per-(hop, node) samples one node at a time."""
    fanouts, seed = (4, 3, 2), 77
    with GraphImage(image_path) as image:
        targets = image.split_nodes(Split.TRAIN)[:8]
        result = golden.sample(image, targets, fanouts, seed)
        batch = pyg_view(to_blocks(result.node_list, result.counts, targets.size, fanouts), targets.size, seed)

        def own_sample(v, hop):       # v's hop-h sample: v is in F_hop of any command that reaches it
            r = golden.sample(image, [v], fanouts[:hop + 1], seed)
            block = to_blocks(r.node_list, r.counts, 1, hop + 1).blocks[0]   # hop `hop`, innermost
            return block.src_nodes[block.edge_src[block.edge_dst == 0]]

        n_id, edges, frontier, seen = list(targets), [], list(targets), set(targets.tolist())
        sizes = [len(targets)]
        for hop in range(len(fanouts)):
            fresh = []
            for v in frontier:
                for u in own_sample(int(v), hop):
                    edges.append((int(u), int(v)))
                    if int(u) not in seen:
                        seen.add(int(u))
                        fresh.append(int(u))
            n_id += fresh
            sizes.append(len(fresh))
            frontier = fresh
    assert batch.n_id.tolist() == n_id
    assert batch.num_sampled_nodes == sizes
    assert sorted(map(tuple, batch.n_id[batch.edge_index].T.tolist())) == sorted(edges)
    # hop-ordered: every edge of hop h ends at a node first reached at hop h
    bounds = np.cumsum([0] + sizes)
    start = 0
    for hop, count in enumerate(batch.num_sampled_edges):
        dst = batch.edge_index[1, start:start + count]
        assert ((dst >= bounds[hop]) & (dst < bounds[hop + 1])).all()
        start += count


def test_dgl_blocks_are_the_devices_message_flow_graph(image_path):
    fanouts = (5, 3)
    with NeighborLoader(image_path, fanouts, batch_size=32, semantics="dgl") as loader:
        data = next(iter(loader))
        with GraphImage(image_path) as image:
            targets = image.split_nodes(Split.TRAIN)[:32]
            result = golden.sample(image, targets, fanouts, batch_seed(0, EVAL_EPOCH, 0))
    mfg = to_blocks(result.node_list, result.counts, 32, fanouts)
    assert data.n_id.tolist() == mfg.nodes.tolist()
    assert (data.n_id[:32].numpy() == targets).all() and data.input_id.tolist() == list(range(32))
    for block, ref in zip(data.blocks, mfg.blocks, strict=True):
        assert (block.srcdata["_ID"].numpy() == ref.src_nodes).all()
        assert (block.dstdata["_ID"].numpy() == ref.dst_nodes).all()
        src, dst = block.edges()
        assert (src.numpy() == ref.edge_src).all() and (dst.numpy() == ref.edge_dst).all()
        assert block.num_dst_nodes() == ref.num_dst and block.in_degrees().sum() == ref.num_edges
    assert data.num_sampled_edges == [mfg.blocks[1].num_edges, mfg.blocks[0].num_edges]   # hop 0 first
    # per-block PyG SAGEConv equals smartsage's model
    torch.manual_seed(1)
    ours = GraphSAGE(12, 8, 4, num_layers=2).eval()
    theirs = pyg_nn.GraphSAGE(12, 8, num_layers=2, out_channels=4).eval()
    _copy_weights(ours, theirs)
    with torch.no_grad():
        h = data.x
        for i, (conv, block) in enumerate(zip(theirs.convs, data.blocks, strict=True)):
            h = conv((h, h[:block.num_dst_nodes()]), block.edge_index)
            h = torch.relu(h) if i == 0 else h
        torch.testing.assert_close(h[:32], ours(mfg, data.x), rtol=1e-5, atol=1e-5)


def test_aggregated_batch_carries_the_devices_rows_and_trains_like_smartsage(image_path):
    """With aggregation: x = the device's self rows of D_1, agg_sum/agg_count its exact sums; PyG's convs
    on them (sage_first_layer, then a flat forward of the outer layer) = smartsage's forward_aggregated."""
    fanouts = (5, 3)
    with NeighborLoader(image_path, fanouts, batch_size=24, shuffle=True, aggregate=True, seed=9) as loader:
        data = next(iter(loader))
        assert loader.epoch == 1
    with GraphImage(image_path) as image:
        order = np.random.default_rng([9, 0]).permutation(image.split_nodes(Split.TRAIN))
        targets = order[:24]
        assert (data.n_id[:24].numpy() == targets).all()      # the batches of `smartsage train --seed 9`
        result = golden.sample(image, targets, fanouts, batch_seed(9, 0, 0), aggregate=True)
        mfg = to_blocks(result.node_list[:result.counts.size], result.counts, 24, fanouts, aggregated=True)
        assert (data.x.numpy() == image.features[data.n_id.numpy()]).all()
    rows = mfg.innermost_entry
    assert (data.agg_sum.numpy().view(np.uint32) == result.sums[rows].view(np.uint32)).all()
    assert (data.agg_count.numpy() == result.counts[-result.self_rows.shape[0]:][rows]).all()
    torch.manual_seed(2)
    ours = GraphSAGE(12, 8, 4, num_layers=2).eval()
    theirs = pyg_nn.GraphSAGE(12, 8, num_layers=2, out_channels=4).eval()
    _copy_weights(ours, theirs)
    with torch.no_grad():
        h = torch.relu(sage_first_layer(theirs.convs[0], data))
        out = theirs.convs[1](h, data.edge_index)[:24]
        expected = ours.forward_aggregated(mfg, torch.from_numpy(result.self_rows), torch.from_numpy(result.sums),
                                           torch.from_numpy(result.counts[-result.self_rows.shape[0]:].astype(np.int64)))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_loader_arguments_are_checked(image_path):
    with pytest.raises(ValueError, match="semantics='dgl'"):
        NeighborLoader(image_path, [3], aggregate=True, semantics="pyg")
    with pytest.raises(ValueError, match="num_neighbors"):
        NeighborLoader(image_path, [0])
    with pytest.raises(ValueError, match="distinct"):
        NeighborLoader(image_path, [3], input_nodes=[1, 2, 1])
    with pytest.raises(ValueError, match="split name"):
        NeighborLoader(image_path, [3], input_nodes="everything")
    with pytest.raises(ValueError, match="Unknown backend"):
        NeighborLoader(image_path, [3], backend="nope")
    with NeighborLoader(image_path, [3], batch_size=100, input_nodes="val") as loader:
        assert len(loader) == -(-loader.input_nodes.size // 100)
        assert sum(d.batch_size for d in loader) == loader.input_nodes.size
        first = [d.n_id for d in loader][0]
        again = [d.n_id for d in loader][0]
        assert torch.equal(first, again)        # unshuffled: the same commands every pass


def test_example_trains_pyg_graphsage(image_path):
    import importlib.util
    import pathlib

    from smartsage.host.train import TrainConfig

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "pyg_graphsage.py"
    spec = importlib.util.spec_from_file_location("pyg_graphsage", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    config = TrainConfig(epochs=3, batch_size=128, fanouts=(6, 4), hidden=16, seed=3, max_eval_nodes=256)
    history = example.train_pyg(image_path, config, progress=None)
    assert history[-1]["loss"] < history[0]["loss"]
    assert history[-1]["test_acc"] > 0.5      # 4 planted classes: chance is about 0.25


def test_shuffled_batches_are_the_commands_of_smartsage_train(image_path):
    from smartsage.host.train import epoch_commands

    with NeighborLoader(image_path, [3], batch_size=100, shuffle=True, seed=4) as loader:
        for epoch in range(2):
            got = [(d.n_id[:d.batch_size].numpy(), d.command_seed) for d in loader]
            want = epoch_commands(loader.input_nodes, 4, epoch, 100)
            assert len(got) == len(want)
            for (nodes, seed), (targets, command_seed) in zip(got, want, strict=True):
                assert (nodes == targets).all() and seed == command_seed
