"""``smartsage demo``: the main job on the embedded default graph.

1. builds the default graph (deterministic planted-community R-MAT) and verifies its image;
2. runs a few mini-batches (sample and aggregate) through the RTL co-simulation and checks them bit for
   bit against the golden model (cycles per batch from the kernel's own counter);
3. samples the same batches with the mmap and O_DIRECT baselines (cold page cache) and compares the
   bytes that reach the host;
4. trains GraphSAGE for a few epochs on the device's (self, neighbor sum, count) rows;
5. prints one summary and saves a plot (loss/accuracy per epoch, bytes to the host by backend).
"""

from __future__ import annotations

import json
import pathlib
import time

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from smartsage.spec import golden
from smartsage.spec.config import get_config
from smartsage.spec.descriptor import Flags
from smartsage.spec.image import GraphImage, Split, verify_image

DEMO_FANOUTS = (10, 5)
DEMO_BATCH = 256
#: Targets per co-simulated batch (the first of each demo batch): keeps the demo within minutes.
RTL_TARGETS = 32


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="the main job on the embedded default graph", description=__doc__,
                              formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("smartsage-demo"),
                   help="directory for the image, results and plot (default: ./smartsage-demo)")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--rtl-batches", type=int, default=2, help="mini-batches co-simulated on the RTL (0: skip)")
    p.add_argument("--rtl-config", default="small", help="kernel build configuration for the co-simulation")
    p.add_argument("--compare-batches", type=int, default=8, help="mini-batches for the traffic comparison")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def _progress(console):
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=console, transient=True)


def run(args) -> int:
    from .graphs import default_graph
    from .train import TrainConfig, Trainer, batch_seed, open_sampler

    console = Console()
    args.out.mkdir(parents=True, exist_ok=True)
    image_path = args.out / "default.img"
    started = time.perf_counter()
    summary: dict = {}

    # 1. the graph
    with console.status("building the default graph"):
        default_graph(image_path)
        info = verify_image(image_path)
    console.print(f"[bold]1. default graph[/]: {info['num_nodes']:,} nodes, {info['num_edges']:,} edges, "
                  f"{info['feature_dim']} x {info['feature_dtype']} features, {info['num_classes']} classes, "
                  f"{info['num_train']}/{info['num_val']}/{info['num_test']} train/val/test -> {image_path} (verified)")
    summary["graph"] = {k: info[k] for k in ("num_nodes", "num_edges", "feature_dim", "feature_dtype",
                                             "num_classes", "num_train", "num_val", "num_test")}

    with GraphImage(image_path) as image:
        train_nodes = image.split_nodes(Split.TRAIN)
        order = np.random.default_rng([args.seed, 0]).permutation(train_nodes)
        batches = [(order[b * DEMO_BATCH:(b + 1) * DEMO_BATCH], batch_seed(args.seed, 0, b))
                   for b in range(max(args.compare_batches, args.rtl_batches))]
        references = [golden.sample(image, t, DEMO_FANOUTS, s, aggregate=True) for t, s in batches]

    # 2. the RTL co-simulation
    summary["rtl"] = _rtl_step(console, args, image_path, batches[:args.rtl_batches], references)

    # 3. traffic to the host: device vs the software baselines
    traffic = {}
    for backend in ("golden", "mmap", "direct"):
        sampler = open_sampler(backend, image_path, **({} if backend == "golden" else {"cold_each_batch": True}))
        try:
            for (targets, seed), reference in zip(batches[:args.compare_batches], references, strict=False):
                batch = sampler.sample(targets, DEMO_FANOUTS, seed, aggregate=True)
                if not (np.array_equal(batch.counts, reference.counts)
                        and np.array_equal(batch.sums.view(np.uint32), reference.sums.view(np.uint32))):
                    raise RuntimeError(f"the {backend} backend disagrees with the golden model")
            traffic[backend] = dict(sampler.io.__dict__)
        finally:
            sampler.close()
    per_batch = {b: t["bytes_to_host"] / args.compare_batches for b, t in traffic.items()}
    # the whole I/O report per batch (storage reads, pages, bytes from storage, bytes to the host)
    summary["io_per_batch"] = {b: {k: None if v is None else v / args.compare_batches for k, v in t.items()}
                               for b, t in traffic.items()}
    console.print(f"[bold]3. bytes to the host per mini-batch[/] (batch {DEMO_BATCH}, fanouts "
                  f"{','.join(map(str, DEMO_FANOUTS))}; page cache dropped before every batch): "
                  f"device {per_batch['golden'] / 1024:,.0f} KiB, "
                  f"mmap {per_batch['mmap'] / 1024:,.0f} KiB ({per_batch['mmap'] / per_batch['golden']:.1f}x), "
                  f"O_DIRECT {per_batch['direct'] / 1024:,.0f} KiB ({per_batch['direct'] / per_batch['golden']:.1f}x); "
                  f"identical results on all three")
    summary["traffic_per_batch"] = per_batch

    # 4. training
    sampler = open_sampler("golden", image_path)
    config = TrainConfig(epochs=args.epochs, batch_size=DEMO_BATCH, fanouts=DEMO_FANOUTS, hidden=64, seed=args.seed,
                         max_eval_nodes=None)
    try:
        with _progress(console) as progress:
            task = progress.add_task("training", total=None)
            trainer = Trainer(sampler, config, progress=lambda d, t, s: progress.update(
                task, completed=d, total=t, description=s))
            trainer.fit(on_epoch=lambda r: progress.console.print(
                f"   epoch {r['epoch']}: loss {r['loss']:.4f}, val {r['val_acc']:.4f}, test {r['test_acc']:.4f}"))
    finally:
        sampler.close()
    history = trainer.history
    console.print(f"[bold]4. GraphSAGE[/] ({len(DEMO_FANOUTS)} layers, mean, on the device's aggregated rows): "
                  f"test accuracy {history[-1]['test_acc']:.4f} after {len(history)} epochs "
                  f"(chance {1 / info['num_classes']:.4f})")
    summary["training"] = [{k: r[k] for k in ("epoch", "loss", "val_acc", "test_acc")} for r in history]

    # 5. summary and plot
    plot = args.out / "demo.png"
    _plot(plot, history, per_batch)
    summary["seconds"] = time.perf_counter() - started
    (args.out / "demo.json").write_text(json.dumps(summary, indent=2))
    table = Table(title="smartsage demo")
    table.add_column("what")
    table.add_column("value", justify="right")
    rtl = summary["rtl"]
    if rtl.get("batches"):
        table.add_row("RTL vs golden (bit for bit)", f"{rtl['batches']} batches identical")
        table.add_row("RTL cycles per batch", f"{rtl['cycles_per_batch']:,.0f}")
        table.add_row("RTL storage reads per batch", f"{rtl['storage_reads_per_batch']:,.0f}")
    else:
        table.add_row("RTL co-simulation", rtl.get("skipped", "not run"))
    table.add_row("bytes to host per batch: device", f"{per_batch['golden']:,.0f}")
    table.add_row("bytes to host per batch: mmap", f"{per_batch['mmap']:,.0f}")
    table.add_row("mmap / device", f"{per_batch['mmap'] / per_batch['golden']:.1f}x")
    table.add_row("test accuracy", f"{history[-1]['test_acc']:.4f}")
    table.add_row("wall time", f"{summary['seconds']:.0f} s")
    console.print(table)
    console.print(f"plot: {plot}   results: {args.out / 'demo.json'}")
    return 0


def _rtl_step(console, args, image_path, batches, references) -> dict:
    """Co-simulate the batches' sampling on the RTL kernel; the cosim scoreboard compares the whole device
    memory with the golden model after every command and raises on any difference."""
    if args.rtl_batches <= 0:
        return {"skipped": "--rtl-batches 0"}
    from smartsage.cosim.runner import run_plan
    from smartsage.cosim.scoreboard import CommandSpec

    config = get_config(args.rtl_config)
    specs = [CommandSpec(targets=[int(t) for t in targets[:RTL_TARGETS]], fanouts=list(DEMO_FANOUTS), seed=int(seed),
                         flags=int(Flags.AGGREGATE)) for targets, seed in batches]
    with console.status(f"co-simulating {len(specs)} mini-batches on the RTL ({config.name} build; the first run "
                        "compiles the Verilator model, about a minute)"):
        plan = run_plan(config, image_path, specs, seed=args.seed, watchdog_cycles=20_000_000)
    cycles = [int(r["header"]["cycles"]) for r in plan.results]
    edges = [int(r["header"]["edges_sampled"]) for r in plan.results]
    outcome = {"batches": len(specs), "targets_per_batch": RTL_TARGETS, "config": config.name,
               "cycles_per_batch": sum(cycles) / len(cycles), "edges_per_batch": sum(edges) / len(edges),
               "sim_wall_s": plan.wall_s}
    # the AXI reads the kernel issued on its storage port (the storage model's count) and its byte counter
    for key, name in (("storage_reads", "storage_reads"), ("storage_pages", "storage_pages"),
                      ("storage_read_bytes", "storage_bytes")):
        outcome[f"{name}_per_batch"] = sum(int(r[key]) for r in plan.results) / len(plan.results)
    console.print(f"[bold]2. RTL co-simulation[/] ({config.name}: {config.lanes} lanes, {config.data_width}-bit AXI, "
                  f"ideal memory): {len(specs)} mini-batches of {RTL_TARGETS} targets sampled and aggregated "
                  f"bit-identical to the golden model (whole device memory compared: node list, counts, self rows, "
                  f"neighbor sums); {outcome['cycles_per_batch']:,.0f} cycles per batch, "
                  f"{outcome['storage_reads_per_batch']:,.0f} storage reads (AXI transactions) over "
                  f"{outcome['storage_pages_per_batch']:,.0f} pages, {outcome['storage_bytes_per_batch']:,.0f} "
                  "bytes read from storage per batch.")
    return outcome


def _plot(path: pathlib.Path, history: list[dict], per_batch: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_bytes) = plt.subplots(1, 2, figsize=(10, 4))
    epochs = [r["epoch"] for r in history]
    ax_loss.plot(epochs, [r["loss"] for r in history], "o-", label="train loss")
    ax_acc = ax_loss.twinx()
    ax_acc.plot(epochs, [r["val_acc"] for r in history], "s--", color="tab:green", label="val acc")
    ax_acc.plot(epochs, [r["test_acc"] for r in history], "^--", color="tab:red", label="test acc")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_xticks(epochs)
    ax_loss.set_ylabel("loss")
    ax_acc.set_ylabel("accuracy")
    ax_loss.set_title("GraphSAGE on device-aggregated rows")
    ax_loss.legend(loc="upper left")
    ax_acc.legend(loc="upper right")
    names = {"golden": "device\n(sample+aggregate)", "mmap": "mmap", "direct": "O_DIRECT"}
    ax_bytes.bar([names[k] for k in per_batch], [v / 1024 for v in per_batch.values()],
                 color=["tab:blue", "tab:orange", "tab:gray"])
    ax_bytes.set_ylabel("KiB to the host per mini-batch")
    ax_bytes.set_title("Traffic to the host (cache dropped per batch)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
