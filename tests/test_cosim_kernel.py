"""Co-simulation of the sampler kernel (cocotb 2.1 + Verilator) against the golden model.

One Verilator build per configuration (cached, shared by xdist workers); one simulator process per
test, running many commands. Seeds are printed; a failure message names the seed and the command.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from smartsage.cosim.graphs import edge_case_image
from smartsage.cosim.runner import run_plan
from smartsage.cosim.scoreboard import CommandSpec
from smartsage.rtl.kernel import IMAGE_WORDS
from smartsage.spec.config import CONFIGS
from smartsage.spec.descriptor import Status
from smartsage.spec.image import IndexDtype

pytestmark = pytest.mark.sim


def _commands(rng: random.Random, graph, config, count: int) -> list[CommandSpec]:
    commands = []
    hub_free = [v for v in range(graph.num_nodes) if v != graph.hub]
    for n in range(count):
        hops = rng.randint(1, min(3, config.max_hops))
        kind = n % 4
        if kind == 0:      # fanout 1 everywhere
            fanouts = [1] * hops
        elif kind == 1:    # fanout larger than every degree but the hub's
            fanouts = [min(config.max_fanout, graph.max_small_degree + rng.randint(1, 4))] * hops
        else:
            fanouts = [rng.randint(1, min(config.max_fanout, 8)) for _ in range(hops)]
        batch = 1 if n % 5 == 0 else rng.randint(2, 6)
        targets = [rng.choice(hub_free) for _ in range(batch)]
        if n % 3 == 0:
            targets[0] = graph.hub
        if n % 4 == 3:
            targets[-1] = rng.choice(graph.isolated)
        if n % 6 == 2:
            targets += [rng.choice(graph.self_loops), rng.choice(graph.multi_edges), targets[0]]
        commands.append(CommandSpec(targets=targets, fanouts=fanouts[:2] if hops == 3 and batch > 4 else fanouts,
                                    seed=rng.getrandbits(64)))
    return commands


@pytest.mark.parametrize("config_name, backpressure", [("small", 0.3), ("wide2", 0.0), ("default", 0.2)])
def test_random_commands_bit_exact(tmp_path, config_name, backpressure):
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    config = CONFIGS[config_name]
    image = tmp_path / "edge_cases.img"
    graph = edge_case_image(image, seed)
    commands = _commands(random.Random(seed), graph, config, 10)
    result = run_plan(config, image, commands, backpressure=backpressure, seed=seed)
    assert len(result.results) == len(commands)
    statuses = [r["header"]["status"] for r in result.results]
    assert statuses == [Status.OK] * len(commands)
    # the hub (degree 100,000) costs at most `fanout` index reads, not its degree
    assert sum(r["header"]["edges_sampled"] for r in result.results) > 0


def test_u64_node_ids(tmp_path):
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    config = CONFIGS["small"]
    image = tmp_path / "wide_ids.img"
    graph = edge_case_image(image, seed, num_nodes=120, hub_degree=2_000, index_dtype=IndexDtype.U64)
    commands = _commands(random.Random(seed), graph, config, 4)
    result = run_plan(config, image, commands, backpressure=0.2, seed=seed)
    assert [r["header"]["status"] for r in result.results] == [Status.OK] * len(commands)


def test_hub_read_cost_bounded_by_fanout(tmp_path):
    """Sampling the degree-100,000 hub reads 2 indptr words and k index words, not its list."""
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    config = CONFIGS["small"]
    image = tmp_path / "hub.img"
    graph = edge_case_image(image, seed)
    k = 5
    result = run_plan(config, image, [CommandSpec(targets=[graph.hub], fanouts=[k], seed=seed)], seed=seed)
    header = result.results[0]["header"]
    assert header["status"] == Status.OK and header["edges_sampled"] == k
    beat = config.data_bytes
    header_words = len(IMAGE_WORDS)  # image header words read by the kernel
    assert header["storage_bytes"] == (header_words + 2 + k) * beat
    assert np.unique(result.results[0]["node_list"][1:]).size <= k


@pytest.mark.slow
@pytest.mark.parametrize("config_name", ["small", "default"])
def test_long_random_run(tmp_path, config_name):
    """A longer randomized run: 40 commands, larger batches, random backpressure."""
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    config = CONFIGS[config_name]
    image = tmp_path / "edge_cases.img"
    graph = edge_case_image(image, seed, num_nodes=2_000)
    rng = random.Random(seed)
    commands = _commands(rng, graph, config, 40)
    for command in commands[::4]:
        command.targets += [rng.randrange(graph.num_nodes) for _ in range(30)]
    result = run_plan(config, image, commands, backpressure=0.3, seed=seed)
    assert [r["header"]["status"] for r in result.results] == [Status.OK] * len(commands)


@pytest.mark.slow
def test_benchmark_runs_on_a_small_graph(tmp_path):
    from smartsage.cosim.bench import run_benchmark

    report = run_benchmark(CONFIGS["default"], tmp_path, scale=10, edge_factor=8, fanouts=(5, 3), batch=16,
                           ssd_batch=4, raw_cycles=20_000)
    print(report)
    assert report["ideal"]["edges"] > 0 and report["ideal"]["cycles_per_edge"] > 0
    assert report["host_bytes"]["mmap_pages"] > 0 and 0 < report["pm983"]["fraction_of_ceiling"] <= 1.0


def test_cycle_counts_ideal_and_ssd(tmp_path):
    """Cycle counts are deterministic: with ideal memory a small R-MAT batch on the 4-lane build costs
    at most 1.1 cycles per sampled edge per lane (issue 4's goal; 1.081 measured: cycles x lanes /
    edges; the lanes' storage read channels are the bound: one read per sampled id of a node with
    d > k, one per beat of ids otherwise, one read master per lane; the indptr pairs go through the
    sequencer's own master); under the PM983 model a one-node
    command costs three storage rounds (header words, indptr pair, index entries), not one round per
    header word."""
    from smartsage.cosim.bench import _targets
    from smartsage.cosim.graphs import rmat_image
    from smartsage.cosim.storage import PM983
    from smartsage.spec.image import GraphImage

    config = CONFIGS["default"]
    image = tmp_path / "rmat.img"
    rmat_image(image, 12, 16, 1)
    with GraphImage(image) as graph:
        targets = _targets(graph, 128, 1).tolist()
    result = run_plan(config, image, [CommandSpec(targets=targets, fanouts=[25, 10], seed=1)], seed=1)
    header = result.results[0]["header"]
    print("ideal:", header["cycles"], "cycles,", header["edges_sampled"], "edges")
    assert header["edges_sampled"] > 5_000
    assert config.lanes == 4
    assert header["cycles"] * config.lanes <= 1.1 * header["edges_sampled"]
    ssd = run_plan(config, image, [CommandSpec(targets=targets[:1], fanouts=[3], seed=1)], timing=PM983,
                   seed=1).results[0]["header"]
    round_trip = PM983.page_latency_us * config.clock_mhz
    print("PM983, one node:", ssd["cycles"], "cycles =", ssd["cycles"] / round_trip, "page latencies")
    assert 3 * round_trip < ssd["cycles"] < 3.3 * round_trip
