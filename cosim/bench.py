"""Kernel benchmark: the figures of docs/performance-rtl.md (``python -m smartsage.cosim.bench``).

:func:`run_benchmark` measures, on the co-simulated kernel:

1. cycles per sampled edge with ideal memory (R-MAT, fanouts 25,10, batch 1024 by default), and where
   the cycles go (per-edge and per-node costs of the microarchitecture);
2. with the PM983 storage model, random page reads per second achieved, as a fraction of the
   540 K IOPS ceiling (a smaller batch: every read waits ~85 us of simulated time);
3. bytes sent to the host per mini-batch (node list + counts + result header) against the 4 KiB pages
   an mmap sampler pulls for the same batch (every distinct page its reads touch, cold cache);
4. co-simulation speed (cycles and sampled edges per wall-second) next to raw Verilator speed of the
   same design (clock only, no Python per cycle).

The lead wires :func:`run_benchmark` into ``nox -s bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

from smartsage.spec import golden, rng
from smartsage.spec.config import KernelConfig, get_config
from smartsage.spec.descriptor import RESULT_HEADER_SIZE
from smartsage.spec.image import PAGE_SIZE, GraphImage, SectionKind

from .graphs import rmat_image
from .runner import run_plan
from .scoreboard import CommandSpec
from .storage import IDEAL, PM983

__all__ = ["run_benchmark", "measure_image", "mmap_pages", "main"]


def mmap_pages(image: GraphImage, result, targets: np.ndarray, fanouts, seed: int) -> int:
    """Distinct 4 KiB pages an mmap sampler touches for this batch (indptr and indices reads)."""
    header = image.header
    indptr = image.indptr
    indptr_off = header.section(SectionKind.INDPTR).offset
    indices_off = header.section(SectionKind.INDICES).offset
    item = header.index_dtype.itemsize
    frontiers = golden.hop_frontiers(result.node_list, result.counts, targets.size, fanouts)
    key = rng.command_key(seed)
    pages: set[int] = set()
    for hop, k in enumerate(fanouts):
        nodes = np.unique(frontiers[hop].astype(np.int64))
        pages.update(((indptr_off + nodes * 8) // PAGE_SIZE).tolist())
        pages.update(((indptr_off + nodes * 8 + 8) // PAGE_SIZE).tolist())
        lo = indptr[nodes].astype(np.int64)
        degree = indptr[nodes + 1].astype(np.int64) - lo
        small = degree <= k
        for start, d in zip(lo[small], degree[small], strict=True):
            if d:
                first = (indices_off + start * item) // PAGE_SIZE
                last = (indices_off + (start + d) * item - 1) // PAGE_SIZE
                pages.update(range(first, last + 1))
        big = ~small
        if big.any():
            keys = rng.node_key_np(rng.hop_key(key, hop), nodes[big].astype(np.uint64))
            positions, _ = golden.floyd_positions(keys, degree[big].astype(np.uint64), k)
            addresses = indices_off + (lo[big][:, None] + positions) * item
            pages.update((addresses.reshape(-1) // PAGE_SIZE).tolist())
    return len(pages)


def _targets(image: GraphImage, batch: int, seed: int) -> np.ndarray:
    """A seeded draw of distinct targets among the nodes with at least one edge (R-MAT leaves many
    isolated; a training batch is drawn from labelled, connected nodes)."""
    degree = np.diff(image.indptr.astype(np.int64))
    candidates = np.flatnonzero(degree > 0)
    generator = np.random.default_rng(seed)
    return generator.choice(candidates, size=min(batch, candidates.size), replace=False).astype(np.uint32)


def run_benchmark(config: KernelConfig, workdir, scale: int = 20, edge_factor: int = 16,
                  fanouts=(25, 10), batch: int = 1024, ssd_batch: int = 256, ssd_fanouts=(25,), seed: int = 1,
                  raw_cycles: int = 2_000_000) -> dict:
    """All four figures for ``config`` on an R-MAT graph (made in ``workdir`` once); returns a dict
    (also printed as JSON by :func:`main`)."""
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, f"rmat-s{scale}-e{edge_factor}-seed{seed}.img")
    start = time.perf_counter()
    if not os.path.exists(path):
        rmat_image(path, scale, edge_factor, seed)
    graph = {"scale": scale, "edge_factor": edge_factor, "seed": seed, "image_bytes": os.path.getsize(path),
             "generate_s": time.perf_counter() - start}
    report = measure_image(config, path, fanouts, batch, ssd_batch, ssd_fanouts, seed, raw_cycles)
    report["graph"] = graph
    return report


def measure_image(config: KernelConfig, path, fanouts=(25, 10), batch: int = 1024, ssd_batch: int = 256,
                  ssd_fanouts=(25,), seed: int = 1, raw_cycles: int = 2_000_000) -> dict:
    """The four figures of the module docstring on the image at ``path``."""
    report = {"config": config.name, "lanes": config.lanes, "data_width": config.data_width,
              "fanouts": list(fanouts), "batch": batch}
    with GraphImage(path) as image:
        targets = _targets(image, batch, seed)
        expected = golden.sample(image, targets, fanouts, seed, config=config)
        # 1 + 4: ideal memory, cosim speed
        run = run_plan(config, path, [CommandSpec(targets=targets.tolist(), fanouts=list(fanouts), seed=seed)],
                       timing=IDEAL, seed=seed, watchdog_cycles=200 * expected.node_list.size + 1_000_000)
        result = run.results[0]
        edges = result["header"]["edges_sampled"]
        cycles = result["header"]["cycles"]
        frontier_entries = result["header"]["counts_written"]
        report["ideal"] = {
            "edges": edges, "frontier_entries": frontier_entries, "kernel_cycles": cycles,
            "lanes": config.lanes,
            "cycles_per_edge": cycles / edges, "cycles_per_edge_per_lane": cycles / edges * config.lanes,
            "cosim_wall_s": result["wall_s"], "cosim_cycles_per_s": result["cycles"] / result["wall_s"],
            "cosim_edges_per_s": edges / result["wall_s"],
            "storage_transactions": result["storage_transactions"], "storage_pages": result["storage_pages"],
            "storage_transactions_by_master": result["storage_transactions_by_master"],
        }
        # 3: bytes to the host vs mmap
        id_bytes = image.header.index_dtype.itemsize
        to_host = edges * id_bytes + frontier_entries * 4 + RESULT_HEADER_SIZE
        pages = mmap_pages(image, expected, targets, fanouts, seed)
        report["host_bytes"] = {"device_to_host": to_host, "mmap_pages": pages,
                                "mmap_bytes": pages * PAGE_SIZE, "reduction": pages * PAGE_SIZE / to_host}
        # 2: PM983 page reads per second
        ssd_targets = targets[:ssd_batch]
        ssd_expected = golden.sample(image, ssd_targets, ssd_fanouts, seed, config=config)
        ssd = run_plan(config, path,
                       [CommandSpec(targets=ssd_targets.tolist(), fanouts=list(ssd_fanouts), seed=seed)],
                       timing=PM983, seed=seed,
                       watchdog_cycles=50_000 * (3 * ssd_expected.node_list.size + 10)).results[0]
        flash = ssd["storage"]["flash_pages"]
        seconds = ssd["header"]["cycles"] / (config.clock_mhz * 1e6)
        iops = flash / seconds
        report["pm983"] = {"batch": ssd_batch, "fanouts": list(ssd_fanouts),
                           "edges": ssd["header"]["edges_sampled"], "flash_pages": flash,
                           "kernel_cycles": ssd["header"]["cycles"], "seconds": seconds, "iops": iops,
                           "fraction_of_ceiling": iops / PM983.iops,
                           # cycles in which the flash could have started a page read but none was asked for
                           "starved_cycles": ssd["storage"]["starved_cycles"], "cosim_wall_s": ssd["wall_s"]}
    # 4: raw Verilator speed of the same build (clock only)
    raw = run_plan(config, path, [], seed=seed, raw_cycles=raw_cycles, check=False)
    report["raw_verilator_cycles_per_s"] = raw.cycles / raw.wall_s
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="default")
    parser.add_argument("--scale", type=int, default=20)
    parser.add_argument("--edge-factor", type=int, default=16)
    parser.add_argument("--fanouts", default="25,10")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--ssd-batch", type=int, default=256)
    parser.add_argument("--ssd-fanouts", default="25")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "smartsage-bench"))
    parser.add_argument("-o", "--output", help="write the report as JSON here")
    args = parser.parse_args(argv)
    report = run_benchmark(get_config(args.config), args.workdir, args.scale, args.edge_factor,
                           tuple(int(k) for k in args.fanouts.split(",")), args.batch, args.ssd_batch,
                           tuple(int(k) for k in args.ssd_fanouts.split(",")))
    text = json.dumps(report, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
