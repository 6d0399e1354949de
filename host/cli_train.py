"""``smartsage train``: GraphSAGE on an image's train/val/test split through a sampler backend."""

from __future__ import annotations

import argparse
import pathlib

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from smartsage.spec.config import get_config

from .cli_sample import parse_fanouts

#: Kept in step with smartsage.host.train.SAMPLER_BACKENDS (a test checks); the CLI does not import torch
#: until a command needs it.
BACKENDS = ("direct", "dram", "golden", "hls", "mmap", "rtl")


def fanouts_argument(text: str) -> tuple[int, ...]:
    try:
        return parse_fanouts(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train GraphSAGE through a sampler backend",
                              description=__doc__)
    p.add_argument("image", help="storage image")
    p.add_argument("--backend", choices=BACKENDS, default="golden")
    p.add_argument("--config", default="default", help="kernel build configuration (device backends)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--fanouts", type=fanouts_argument, default=(10, 5), help="hop 0 first, e.g. 25,10")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-nodes", type=int, default=4096, help="val/test nodes evaluated per epoch (0: all)")
    p.add_argument("--prefetch", type=int, default=2, metavar="N",
                   help="commands run ahead of training in a background thread (default 2; 0: serial loop)")
    p.add_argument("--checkpoint", type=pathlib.Path, help="checkpoint written after every epoch")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--json", type=pathlib.Path, help="write the per-epoch results as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from .train import TrainConfig, Trainer, open_sampler

    console = Console(stderr=True)
    config = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, fanouts=args.fanouts, hidden=args.hidden,
                         lr=args.lr, dropout=args.dropout, seed=args.seed,
                         max_eval_nodes=args.eval_nodes or None, prefetch=args.prefetch)
    if args.resume and args.checkpoint is None:
        raise ValueError("--resume needs --checkpoint")
    sampler = open_sampler(args.backend, args.image, get_config(args.config))
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=console, disable=args.quiet, transient=True) as progress:
            task = progress.add_task("training", total=None)

            def on_batch(done, total, description):
                progress.update(task, completed=done, total=total, description=description)

            trainer = Trainer(sampler, config, progress=on_batch)
            if args.resume and args.checkpoint.exists():
                trainer.load_checkpoint(args.checkpoint)
                console.print(f"resumed from {args.checkpoint} at epoch {trainer.epoch}")

            def on_epoch(record):
                progress.console.print(_epoch_line(record))

            trainer.fit(checkpoint=args.checkpoint, on_epoch=on_epoch)
    finally:
        sampler.close()
    Console().print(_table(trainer.history, args.backend))
    if args.json:
        trainer.write_results(args.json)
        console.print(f"results written to {args.json}")
    return 0


def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


def _epoch_line(r: dict) -> str:
    return (f"epoch {r['epoch']}: loss {r['loss']:.4f}  val {_fmt(r['val_acc'], '.4f')}  "
            f"test {_fmt(r['test_acc'], '.4f')}  {_fmt(r['sampled_edges_per_s'], ',.0f')} sampled edges/s  "
            f"{r['io']['bytes_to_host'] / 2**20:.1f} MiB to host  "
            f"(commands {r['phases']['command']:.2f} s, waited {r['phases']['wait']:.2f} s, "
            f"prefetch {r['prefetch']})")


def _table(history: list[dict], backend: str) -> Table:
    table = Table(title=f"GraphSAGE training ({backend} backend)")
    for column in ("epoch", "loss", "val acc", "test acc", "targets/s", "reads", "pages",
                   "storage MiB", "to host MiB"):
        table.add_column(column, justify="right")
    for r in history:
        table.add_row(str(r["epoch"]), f"{r['loss']:.4f}", _fmt(r["val_acc"], ".4f"), _fmt(r["test_acc"], ".4f"),
                      _fmt(r["targets_per_s"], ",.0f"), _fmt(r["io"]["storage_reads"], ",d"),
                      _fmt(r["io"]["storage_pages"], ",d"), f"{r['io']['storage_bytes'] / 2**20:.1f}",
                      f"{r['io']['bytes_to_host'] / 2**20:.1f}")
    return table

