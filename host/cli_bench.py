"""``smartsage bench``: the benchmark whose figures docs/benchmarks.md records (``nox -s bench``).

On an R-MAT image (built once into the work directory; the build rate is measured), for batches of
``--batch`` targets with ``--fanouts``:

- sampled edges per second of the golden model and of the C-simulated HLS kernel (checked identical);
- bytes sent to the host per mini-batch: the device with exact aggregation, the device gathering
  features without aggregating, the mmap sampler and the O_DIRECT sampler (cold page cache), with
  each backend's storage reads, bytes read from storage and pages (docs/user-guide.md, section 4;
  the device by the golden model's read rule and as the C-simulated HLS kernel issues them);
- with ``--rtl``: the RTL co-simulation benchmark (cycles per sampled edge, IOPS under the PM983 model).

Wall-clock figures depend on the machine's load; the byte counts and cycle counts do not.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import time

import numpy as np
from rich.console import Console

from smartsage.spec.image import GraphImage, Split


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmarks: build rate, sampling rate, traffic to the host",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=int, default=20, help="R-MAT scale (default 20)")
    p.add_argument("--edge-factor", type=int, default=16)
    p.add_argument("--feature-dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--fanouts", default="25,10")
    p.add_argument("--repeats", type=int, default=5, help="commands per measurement")
    p.add_argument("--workdir", type=pathlib.Path, default=pathlib.Path("build/bench"))
    p.add_argument("--rebuild", action="store_true", help="rebuild the image even if it exists")
    p.add_argument("--rtl", action="store_true", help="also run the RTL co-simulation benchmark (slow)")
    p.add_argument("-o", "--output", type=pathlib.Path, help="write the report (markdown) here")
    p.set_defaults(func=run)
    kinds = p.add_subparsers(dest="bench_kind", metavar="KIND", help="another benchmark: outofcore")
    from . import cli_outofcore

    cli_outofcore.register_into(kinds)


def run(args) -> int:
    from .cli_sample import parse_fanouts

    console = Console(stderr=True)
    fanouts = parse_fanouts(args.fanouts)
    args.workdir.mkdir(parents=True, exist_ok=True)
    image_path = args.workdir / f"rmat{args.scale}-ef{args.edge_factor}-f{args.feature_dim}.img"
    report: dict = {"machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores, load "
                               f"{__import__('os').getloadavg()[0]:.2f}",
                    "image": str(image_path), "batch": args.batch, "fanouts": list(fanouts)}
    commands = [f"smartsage bench --scale {args.scale} --edge-factor {args.edge_factor} --feature-dim "
                f"{args.feature_dim} --batch {args.batch} --fanouts {args.fanouts} --repeats {args.repeats}"
                + (" --rtl" if args.rtl else "")]

    if args.rebuild or not image_path.exists():
        from .graphs.communities import NodeDataConfig
        from .graphs.rmat import RmatConfig, generate_rmat

        with console.status(f"building R-MAT scale {args.scale}"):
            start = time.perf_counter()
            header, _ = generate_rmat(image_path, RmatConfig(scale=args.scale, edge_factor=args.edge_factor, seed=1),
                                      NodeDataConfig(feature_dim=args.feature_dim, seed=1))
            seconds = time.perf_counter() - start
        report["build"] = {"seconds": seconds, "csr_edges": header.num_edges,
                           "edges_per_s": header.num_edges / seconds}

    with GraphImage(image_path) as image:
        report["graph"] = {"num_nodes": image.num_nodes, "num_edges": image.num_edges,
                           "feature_dim": image.feature_dim, "feature_dtype": image.feature_dtype.cli_name}
        report["rates"] = _rates(console, image, fanouts, args)
        report["traffic"] = _traffic(console, image_path, image, fanouts, args)
    if args.rtl:
        from .backends import rtl

        with console.status("RTL co-simulation benchmark"):
            report["rtl"] = rtl.benchmark(image_path, fanouts, args.batch)
    text = _markdown(report, commands[0])
    print(text)
    if args.output:
        args.output.write_text(text)
        (args.output.with_suffix(".json")).write_text(json.dumps(report, indent=2))
        console.print(f"written to {args.output}")
    return 0


def _rates(console, image, fanouts, args) -> dict:
    from .backends import hls

    out = {}
    for aggregate in (False, True):
        with console.status(f"sampling rate, golden vs HLS{' with aggregation' if aggregate else ''}"):
            out["aggregate" if aggregate else "sample"] = hls.benchmark(image, list(fanouts), args.batch,
                                                                        args.repeats, aggregate=aggregate, seed=1)
    return out


def _traffic(console, image_path, image, fanouts, args) -> dict:
    """Bytes to the host per mini-batch by backend, for the same batches of train targets.

    The baselines drop the page cache before every batch (a graph far larger than the host's memory).
    """
    from .train import batch_seed, open_sampler

    train = image.split_nodes(Split.TRAIN)
    order = np.random.default_rng(1).permutation(train)
    batches = [(order[b * args.batch:(b + 1) * args.batch], batch_seed(1, 0, b)) for b in range(args.repeats)]
    out: dict = {}
    id_bytes = image.header.index_dtype.itemsize
    row_bytes = image.header.feature_row_bytes
    gather_only = 0
    for backend in ("golden", "hls", "mmap", "direct"):
        with console.status(f"traffic: {backend}"):
            cold = {"cold_each_batch": True} if backend in ("mmap", "direct") else {}
            sampler = open_sampler(backend, image_path, **cold)
            try:
                for targets, seed in batches:
                    batch = sampler.sample(targets, fanouts, seed, aggregate=True)
                    if backend == "golden":
                        # The same device without aggregation sends every frontier's ids and counts and
                        # one feature row per entry of F_L (the device does not deduplicate).
                        sizes = batch.frontier_sizes
                        gather_only += (sizes[-1] - len(targets)) * id_bytes + 4 * sum(sizes[:-1]) + \
                            sizes[-1] * row_bytes
                io = dict(sampler.io.__dict__)
            finally:
                sampler.close()
        out[backend] = {k: None if v is None else v / len(batches) for k, v in io.items()}
    out["gather_only"] = {"bytes_to_host": gather_only / len(batches)}
    return out


def _markdown(r: dict, command: str) -> str:
    g = r["graph"]
    lines = [
        "# Benchmarks",
        "",
        f"Made by `{command}` (machine: {r['machine']}).",
        f"Image: R-MAT, {g['num_nodes']:,} nodes, {g['num_edges']:,} CSR entries, {g['feature_dim']} x "
        f"{g['feature_dtype']} features; batch {r['batch']}, fanouts {','.join(map(str, r['fanouts']))}.",
        "",
    ]
    if "build" in r:
        b = r["build"]
        lines += [f"Image build: {b['csr_edges']:,} CSR entries in {b['seconds']:.1f} s = "
                  f"{b['edges_per_s'] / 1e6:.2f} M edges/s (whole build: generation, sort, features, checksums).", ""]
    lines += ["## Sampling rate (wall clock, results checked identical)", "",
              "| command | golden (numpy) | HLS kernel (g++ C-simulation) |", "|---|---:|---:|"]
    for key, label in (("sample", "sampling"), ("aggregate", "sampling + aggregation")):
        rate = r["rates"][key]
        lines.append(f"| {label} | {_rate(rate, 'golden')} | {_rate(rate, 'hls')} |")
    t = r["traffic"]
    dev = t["golden"]["bytes_to_host"]
    lines += ["", "## I/O per mini-batch (baselines: page cache dropped before every batch)", "",
              "What each backend counts as a storage read: docs/user-guide.md, section 4.", "",
              "| backend | bytes to host | vs device with aggregation | bytes read from storage | storage reads "
              "| 4 KiB pages |", "|---|---:|---:|---:|---:|---:|"]
    rows = [("device: sample + exact aggregation (golden, read rule)", t["golden"]),
            ("device: the same, HLS kernel (C simulation, its accesses)", t["hls"]),
            ("device: sample + gather (no aggregation)", t["gather_only"]),
            ("mmap sampler", t["mmap"]),
            ("O_DIRECT sampler", t["direct"])]
    for label, io in rows:
        value = io["bytes_to_host"]
        lines.append(f"| {label} | {value:,.0f} | {value / dev:.1f}x | " + " | ".join(
            _count(io.get(key)) for key in ("storage_bytes", "storage_reads", "storage_pages")) + " |")
    if "rtl" in r:
        lines += ["", "## RTL co-simulation", "", "```", json.dumps(r["rtl"], indent=2), "```"]
    lines.append("")
    return "\n".join(lines)


def _count(value) -> str:
    """A per-batch count of the I/O table; '-' where the backend does not count it."""
    return "-" if value is None else f"{value:,.0f}"


def _rate(rate: dict, backend: str) -> str:
    return (f"{rate[f'{backend}_edges_per_second'] / 1e6:.2f} M edges/s "
            f"(median {rate[f'{backend}_edges_per_second_median'] / 1e6:.2f})")
