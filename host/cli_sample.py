"""``smartsage sample``: run one sampling command on an image with a chosen backend and save the result.

The layout of the .npz it writes is documented in docs/sample-output.md.

Backends are looked up in :data:`SAMPLE_BACKENDS`: a name maps to a callable, or to a
``"module:function"`` string imported on first use (so a backend that needs a compiler or a simulator
costs nothing until it is chosen). A backend is called as::

    backend(image, targets, fanouts, seed, aggregate, config) -> result

with a :class:`~smartsage.spec.image.GraphImage`, targets in the image's id width, fanouts as a tuple
of ints, a u64 seed, a bool and a :class:`~smartsage.spec.config.KernelConfig`, and returns an object
with the attributes of :class:`~smartsage.spec.golden.GoldenResult`: ``header`` (a ResultHeader),
``node_list``, ``counts``, ``self_rows`` and ``sums`` (None without aggregation).
"""

from __future__ import annotations

import argparse
import importlib
import time
from collections.abc import Callable

import numpy as np

from smartsage.spec.config import CONFIGS, get_config
from smartsage.spec.descriptor import RESULT_FIELDS, Status
from smartsage.spec.golden import hop_frontiers, sample, status_message
from smartsage.spec.image import GraphImage, Split

__all__ = ["SAMPLE_BACKENDS", "register", "resolve_backend", "default_targets", "read_targets",
           "result_arrays", "parse_fanouts"]

DEFAULT_BATCH_SIZE = 1024


def _golden(image, targets, fanouts, seed, aggregate, config):
    return sample(image, targets, fanouts, seed, aggregate=aggregate, config=config)


#: Backend name -> callable or "module:function" (imported when first chosen).
SAMPLE_BACKENDS: dict[str, Callable | str] = {
    "golden": _golden,
    "hls": "smartsage.host.backends.hls:sample",
    "mmap": "smartsage.host.backends.software:sample_mmap",
    "direct": "smartsage.host.backends.software:sample_direct",
    "rtl": "smartsage.host.backends.rtl:sample",
}


def resolve_backend(name: str) -> Callable:
    """The backend callable registered under ``name``.

    Raises
    ------
    ValueError
        No such backend.
    """
    try:
        entry = SAMPLE_BACKENDS[name]
    except KeyError:
        raise ValueError(f"Unknown backend {name!r}; known: {', '.join(SAMPLE_BACKENDS)}") from None
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
    return entry


def parse_fanouts(text: str) -> tuple[int, ...]:
    """``"25,10"`` -> (25, 10). Raises ValueError naming the bad part."""
    try:
        fanouts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"Fanouts must be comma-separated integers like 25,10, not {text!r}") from None
    if any(k < 1 for k in fanouts):
        raise ValueError(f"Fanouts must be positive, not {text!r}")
    return fanouts


def read_targets(path: str) -> np.ndarray:
    """Target node ids from a ``.npy`` file (1-D integers) or a text file (integers separated by
    whitespace or commas; ``#`` starts a comment)."""
    if path.endswith(".npy"):
        targets = np.load(path, allow_pickle=False)
        if targets.ndim != 1 or targets.dtype.kind not in "iu":
            raise ValueError(f"{path}: expected a 1-D integer array, found {targets.dtype} {targets.shape}")
        return targets
    values = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            for token in line.split("#", 1)[0].replace(",", " ").split():
                try:
                    values.append(int(token))
                except ValueError:
                    raise ValueError(f"{path}:{number}: not a node id: {token!r}") from None
    return np.array(values, np.int64)


def default_targets(image: GraphImage, batch_size: int, seed: int, pool: np.ndarray | None = None) -> np.ndarray:
    """A seeded draw of ``batch_size`` distinct train nodes (all nodes if the image has no train split).

    ``numpy.random.default_rng(seed).choice(pool, batch_size, replace=False)``, in draw order. ``pool``
    may pass the train nodes (``image.split_nodes(Split.TRAIN)``) when drawing many batches.
    """
    gen = np.random.default_rng(seed)
    if image.header.num_train:
        pool = image.split_nodes(Split.TRAIN) if pool is None else pool
        if batch_size > pool.size:
            raise ValueError(f"Batch size {batch_size} exceeds the {pool.size} train nodes")
        return pool[gen.choice(pool.size, batch_size, replace=False)]
    if batch_size > image.num_nodes:
        raise ValueError(f"Batch size {batch_size} exceeds the {image.num_nodes} nodes")
    return gen.choice(image.num_nodes, batch_size, replace=False).astype(np.int64)


def result_arrays(result, targets: np.ndarray, fanouts: tuple[int, ...], feature_dtype: str | None = None
                  ) -> dict[str, np.ndarray]:
    """The arrays of the .npz (docs/sample-output.md) for one successful command's result."""
    targets = np.asarray(targets)
    frontiers = hop_frontiers(result.node_list, result.counts, targets.size, fanouts)
    out = {
        "targets": targets.astype(np.int64),
        "fanouts": np.array(fanouts, np.int64),
        "node_list": np.asarray(result.node_list),
        "counts": np.asarray(result.counts, np.uint32),
    }
    for name, _, _, _ in RESULT_FIELDS:
        out[f"header_{name}"] = np.array(int(getattr(result.header, name)), np.uint64)
    consumed = 0
    for hop, k in enumerate(fanouts):
        dst = frontiers[hop]
        counts = np.asarray(result.counts[consumed:consumed + dst.size], np.uint32)
        consumed += dst.size
        samples = frontiers[hop + 1][dst.size:].astype(np.int64)
        padded = np.full((dst.size, k), -1, np.int64)
        rows = np.repeat(np.arange(dst.size), counts)
        starts = np.zeros(dst.size, np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        padded[rows, np.arange(samples.size) - starts[rows]] = samples
        out[f"hop{hop}_dst"] = dst.astype(np.int64)
        out[f"hop{hop}_neighbors"] = padded
        out[f"hop{hop}_counts"] = counts
    if result.self_rows is not None:
        last = len(fanouts) - 1
        out["aggregate_nodes"] = out[f"hop{last}_dst"]
        out["aggregate_counts"] = out[f"hop{last}_counts"]
        out["self_features"] = np.asarray(result.self_rows)
        out["neighbor_sums"] = np.asarray(result.sums)
        out["feature_dtype"] = np.array(feature_dtype or "")
    return out


def _run(args: argparse.Namespace) -> int:
    backend = resolve_backend(args.backend)
    fanouts = parse_fanouts(args.fanouts)
    config = get_config(args.config)
    if not 0 <= args.seed < 1 << 64:
        raise ValueError(f"Seed must be an unsigned 64-bit integer, not {args.seed}")
    if args.repeat < 0:
        raise ValueError(f"Repeat count must be non-negative, not {args.repeat}")
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"Batch size must be positive, not {args.batch_size}")
    with GraphImage(args.image) as image:
        if args.targets:
            targets = read_targets(args.targets)
            if args.batch_size is not None:
                if args.batch_size > targets.size:
                    raise ValueError(f"{args.targets} holds {targets.size} targets, fewer than --batch-size "
                                     f"{args.batch_size}")
                targets = targets[:args.batch_size]
            if targets.size == 0:
                raise ValueError(f"{args.targets} holds no targets")
        else:
            targets = default_targets(image, args.batch_size or DEFAULT_BATCH_SIZE, args.seed)
        if targets.min() < 0 or targets.max() >= image.num_nodes:
            bad = int(targets[(targets < 0) | (targets >= image.num_nodes)][0])
            raise ValueError(f"Target {bad} is not a node of the image ({image.num_nodes} nodes)")
        targets = targets.astype(image.header.index_dtype.numpy_dtype)
        start = time.perf_counter()
        if args.waves:
            if args.backend != "rtl":
                raise ValueError(f"--waves needs --backend rtl (the co-simulated kernel), not {args.backend}")
            result = backend(image, targets, fanouts, args.seed, args.aggregate, config, waves=args.waves)
            print(f"waves: {args.waves}")
        else:
            result = backend(image, targets, fanouts, args.seed, args.aggregate, config)
        elapsed = time.perf_counter() - start
        if result.header.status != Status.OK:
            raise ValueError(f"backend {args.backend}: {status_message(result.header)}")
        arrays = result_arrays(result, targets, fanouts, image.feature_dtype.cli_name)
        arrays["backend"] = np.array(args.backend)
        arrays["seed"] = np.array(args.seed, np.uint64)
        np.savez(args.output, **arrays)
        edges = int(result.header.edges_sampled)
        print(f"{args.backend}: {targets.size} targets, fanouts {','.join(map(str, fanouts))}, {edges} sampled "
              f"edges in {elapsed * 1e3:.1f} ms{', aggregated' if args.aggregate else ''} -> {args.output}")
        if args.repeat:
            _throughput(args, image, backend, targets.size, fanouts, config)
    return 0


def _throughput(args, image: GraphImage, backend: Callable, batch_size: int, fanouts, config) -> None:
    """``--repeat N``: N more batches (seeds seed+1..seed+N; targets drawn per seed unless --targets)."""
    pool = image.split_nodes(Split.TRAIN) if image.header.num_train else None
    fixed = read_targets(args.targets)[:batch_size] if args.targets else None
    id_dtype = image.header.index_dtype.numpy_dtype
    edges, elapsed, cpu = 0, 0.0, 0.0
    for i in range(1, args.repeat + 1):
        seed = (args.seed + i) % (1 << 64)
        targets = fixed if fixed is not None else default_targets(image, batch_size, seed, pool)
        start, start_cpu = time.perf_counter(), time.process_time()
        result = backend(image, targets.astype(id_dtype), fanouts, seed, args.aggregate, config)
        elapsed += time.perf_counter() - start
        cpu += time.process_time() - start_cpu
        if result.header.status != Status.OK:
            raise ValueError(f"backend {args.backend}, seed {seed}: {status_message(result.header)}")
        edges += int(result.header.edges_sampled)
    print(f"{args.backend}: {args.repeat} more batches, {edges / args.repeat:.0f} sampled edges per batch, "
          f"{elapsed / args.repeat * 1e3:.1f} ms per batch, {edges / elapsed / 1e6:.2f} M sampled edges/s "
          f"(process CPU time {cpu / args.repeat * 1e3:.1f} ms per batch)")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sample", help="sample one mini-batch from an image and save it (.npz)",
        description="Run one sampling command (targets, fanouts, seed) on IMAGE with a backend and write "
                    "per-hop dst ids, padded neighbor ids and counts (and, with --aggregate, self features "
                    "and neighbor sums) to an .npz; layout in docs/sample-output.md.")
    parser.add_argument("image", help="storage image (.img)")
    parser.add_argument("--backend", default="golden",
                        help=f"sampling backend (default golden; known: {', '.join(SAMPLE_BACKENDS)})")
    parser.add_argument("--batch-size", "-b", type=int, default=None,
                        help=f"targets per batch (default {DEFAULT_BATCH_SIZE}; with --targets: the first B)")
    parser.add_argument("--fanouts", default="25,10", help="fanout per hop, hop 0 first (default 25,10)")
    parser.add_argument("--seed", type=int, default=0, help="u64 seed of the sampler and the target draw")
    parser.add_argument("--targets", help="node ids (.npy, or text); default: a seeded draw of train nodes")
    parser.add_argument("--aggregate", action="store_true",
                        help="also return self features and neighbor feature sums of the last frontier")
    parser.add_argument("--config", default="default", choices=sorted(CONFIGS),
                        help="kernel configuration whose limits apply (default: default)")
    parser.add_argument("--repeat", type=int, default=0, metavar="N",
                        help="then time N more batches (seeds seed+1..seed+N) and print sampled edges/s")
    parser.add_argument("--waves", metavar="FILE",
                        help="--backend rtl: write the command's waveform to FILE (VCD; FST where lz4.h is there)")
    parser.add_argument("-o", "--output", required=True, help="output .npz")
    parser.set_defaults(func=_run)
