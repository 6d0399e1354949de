"""``smartsage bench outofcore``: GraphSAGE training on an image larger than the memory it is given.

Every backend (dram, mmap, direct, device) runs the same batches in a child process; mmap and direct,
whose reads go through the host's memory, are confined to ``--memory-budget`` by a memory cgroup (dram
holds the whole image: the upper bound; the device's reads are the card's and its time is modelled).
Writes a markdown table (``-o``), the JSON of every batch and a plot beside it. See
smartsage.host.outofcore and docs/outofcore.md.
"""

from __future__ import annotations

import argparse
import pathlib
import shlex
import sys

from .cli_graph import _size
from .cli_train import fanouts_argument

DEFAULT_IMAGE = pathlib.Path("build/outofcore/rmat23-ef16-f128.img")


def register_into(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("outofcore", help="training on an image larger than the memory given",
                                    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image", type=pathlib.Path, default=DEFAULT_IMAGE, help=f"the image (default {DEFAULT_IMAGE})")
    p.add_argument("--build", action="store_true",
                   help="build the image first if it does not exist (R-MAT, --scale/--edge-factor/--feature-dim)")
    p.add_argument("--scale", type=int, default=23, help="R-MAT scale of a built image (default 23)")
    p.add_argument("--edge-factor", type=int, default=16)
    p.add_argument("--feature-dim", type=int, default=128)
    p.add_argument("--memory-budget", type=_size, default=1 << 30, metavar="BYTES",
                   help="memory of each confined backend, page cache included (default 1G; the image must be "
                        ">= 4x larger)")
    p.add_argument("--no-cgroup", dest="confine", action="store_false",
                   help="no memory cgroup: drop the image's page cache before every batch instead")
    p.add_argument("--batch", type=int, default=1024, help="targets per batch (default 1024)")
    p.add_argument("--fanouts", type=fanouts_argument, default=(25, 10), help="hop 0 first (default 25,10)")
    p.add_argument("--batches", type=int, default=10,
                   help="batches measured serially per backend, as many again pipelined (default 10)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prefetch", type=int, default=2, help="pipeline depth of the pipelined batches (default 2)")
    p.add_argument("--backends", default="dram,mmap,direct,device", help="comma-separated subset")
    p.add_argument("--config", default="default", help="kernel build whose cycles the device model uses")
    p.add_argument("--workdir", type=pathlib.Path, default=pathlib.Path("build/outofcore"))
    p.add_argument("-o", "--output", type=pathlib.Path,
                   help="markdown report; the JSON (.json) and the plot (.png) are written beside it")
    p.add_argument("--from-json", type=pathlib.Path, metavar="JSON",
                   help="measure nothing: write the report and plot of an earlier run's JSON again")
    p.set_defaults(func=run)


def run(args) -> int:
    from .memlimit import CgroupError
    from .outofcore import OutOfCoreConfig, OutOfCoreError, markdown_report, plot_report, run_experiment

    command = "smartsage " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else \
        f"smartsage bench outofcore --image {args.image}"
    try:
        config = OutOfCoreConfig(image=args.image, memory_budget=args.memory_budget, batch_size=args.batch,
                                 fanouts=args.fanouts, hidden=args.hidden, seed=args.seed, batches=args.batches,
                                 backends=tuple(b.strip() for b in args.backends.split(",") if b.strip()),
                                 confine=args.confine, kernel_config=args.config, prefetch=args.prefetch)
        if args.from_json:
            import json

            results = json.loads(args.from_json.read_text())
            command = results.get("command", command)
        else:
            if args.build and not args.image.exists():
                _build(args)
            results = run_experiment(config, workdir=args.workdir / "runs",
                                     log=lambda line: print(line, file=sys.stderr))
            results["command"] = command
    except (OutOfCoreError, CgroupError) as err:
        print(f"smartsage: error: {err}", file=sys.stderr)
        return 2
    text = markdown_report(results, command)
    print(text)
    if args.output:
        import json

        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
        args.output.with_suffix(".json").write_text(json.dumps(results, indent=1))
        plot_report(results, args.output.with_suffix(".png"))
        print(f"written {args.output} and its .json and .png", file=sys.stderr)
    return 0


def _build(args) -> None:
    """The image, as ``smartsage graph generate --kind rmat --scale S --edge-factor E --feature-dim F --seed 0``."""
    from .cli import main

    args.image.parent.mkdir(parents=True, exist_ok=True)
    print(f"building {args.image}: smartsage graph generate --kind rmat --scale {args.scale} --edge-factor "
          f"{args.edge_factor} --feature-dim {args.feature_dim} --seed 0", file=sys.stderr)
    status = main(["graph", "generate", "--kind", "rmat", "--scale", str(args.scale), "--edge-factor",
                   str(args.edge_factor), "--feature-dim", str(args.feature_dim), "--seed", "0", "--no-progress",
                   "-o", str(args.image)])
    if status:
        raise SystemExit(status)
