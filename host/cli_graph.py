"""``smartsage graph``: build, import, inspect and verify storage images.

    smartsage graph generate --kind rmat --scale 20 --edge-factor 16 -o g.img
    smartsage graph generate --kind kronecker --scale 3 -o k.img
    smartsage graph generate --default -o demo.img
    smartsage graph import edges.txt --symmetrize --drop-self-loops -o g.img
    smartsage graph info g.img [--json] [--stats]
    smartsage graph verify g.img

Faults in an image surface as :class:`~smartsage.spec.image.ImageFormatError`; ``smartsage.host.cli``
prints them as one line naming the section and the fault, with a non-zero exit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

import numpy as np

from smartsage.spec.image import FeatureDtype, GraphImage, ImageHeader, verify_image
from smartsage.spec.image_writer import (
    DEFAULT_MEMORY_BUDGET,
    MemoryBudgetError,
    ProgressMeter,
    format_bytes,
    parse_size,
    peak_rss,
    process_rss,
)

#: Memory a build keeps besides the writer's edge data: generated or read edge chunks and the
#: prefetch queue, one block of node data, allocator slack (bytes; node data rows add to it).
BUILD_RESERVE = 192 << 20
#: The smallest edge-data budget a command-line build accepts.
MIN_EDGE_BUDGET = 16 << 20

__all__ = ["register"]


def register(subparsers) -> None:
    graph = subparsers.add_parser("graph", help="build, import, inspect and verify storage images",
                                  description="Build, import, inspect and verify storage images.")
    commands = graph.add_subparsers(dest="graph_command", required=True, metavar="ACTION")
    _register_generate(commands)
    _register_import(commands)
    _register_info(commands)
    _register_verify(commands)


# ---- shared options
def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], not {text}")
    return value


def _feature_dtype(text: str) -> FeatureDtype:
    try:
        return FeatureDtype.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _add_build_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", required=True, metavar="IMAGE", help="the image to write")
    parser.add_argument("--memory-budget", type=_size, default=None, metavar="BYTES",
                        help="peak memory (resident set) of the whole build process, e.g. 512M, 4G; the "
                             "edge list may be any multiple of it (default: 1G of edge data plus what the "
                             "process holds besides)")
    parser.add_argument("--edge-budget", type=_size, default=None, metavar="BYTES",
                        help="the writer's memory for edge data alone (spill buffers, sort blocks), instead of "
                             "--memory-budget; for tests and tuning")
    parser.add_argument("--temp-dir", metavar="DIR", default=None,
                        help="where the spill files go (default: next to the output)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: when stderr is a terminal)")


def _progress(args) -> bool:
    return sys.stderr.isatty() if args.progress is None else args.progress


def edge_budget(process_budget: int | None, reserve: int = BUILD_RESERVE) -> int:
    """The writer's edge-data budget inside a whole-process budget (bytes).

    What the process already holds (interpreter, numpy, scipy: measured now) and ``reserve`` come
    off the top. ``None``: the default edge budget, the process unbounded.
    """
    if process_budget is None:
        return DEFAULT_MEMORY_BUDGET
    held = process_rss()
    edge = process_budget - held - reserve
    if edge < MIN_EDGE_BUDGET:
        raise MemoryBudgetError(
            f"memory budget {format_bytes(process_budget)} is too small: the process already holds "
            f"{format_bytes(held)} (interpreter and libraries) and keeps {format_bytes(reserve)} for edge "
            f"chunks and node data, which leaves less than the {format_bytes(MIN_EDGE_BUDGET)} of edge data a "
            f"build needs; give at least {format_bytes(held + reserve + MIN_EDGE_BUDGET)}")
    return edge


def _writer_budget(args, reserve: int) -> int:
    if args.edge_budget is not None:
        if args.memory_budget is not None:
            raise ValueError("give --memory-budget (the whole process) or --edge-budget (edge data), not both")
        return args.edge_budget
    return edge_budget(args.memory_budget, reserve)


def _node_reserve(feature_dim: int, itemsize: int = 4) -> int:
    """Reserve for one block of node data (features generated as float64, encoded, written)."""
    from smartsage.host.graphs.communities import NODE_BLOCK

    return BUILD_RESERVE + NODE_BLOCK * feature_dim * (8 + 8 + itemsize)


def _report_build(output: str, header: ImageHeader, stats: dict, seconds: float, generated: int | None,
                  process_budget: int | None = None, writer_budget: int | None = None) -> None:
    rate = header.num_edges / seconds if seconds > 0 else float("inf")
    parts = [f"wrote {output}: {header.num_nodes:,} nodes, {header.num_edges:,} edges "
             f"({header.index_dtype.name.lower()} indices)"]
    if header.feature_dim:
        parts.append(f"features {header.feature_dtype.cli_name} x {header.feature_dim}")
    if header.num_classes:
        parts.append(f"{header.num_classes} classes")
    parts.append(f"split {header.num_train:,}/{header.num_val:,}/{header.num_test:,}")
    print(", ".join(parts))
    line = f"built in {seconds:.2f} s: {rate:,.0f} edges/s"
    if generated is not None:
        line += f" ({generated:,} generated edges, {generated / seconds:,.0f}/s)" if seconds > 0 else ""
    line += f"; {stats.get('blocks', 0)} sort blocks, file {header.file_size / 2**20:,.1f} MiB"
    print(line)
    peak = peak_rss()
    memory = f"memory: peak RSS {format_bytes(peak)}"
    if process_budget is not None:
        memory += f" of the {format_bytes(process_budget)} budget ({100 * peak / process_budget:.0f}%)"
    if writer_budget is not None:
        memory += f", {format_bytes(writer_budget)} of it for edge data"
    print(memory + f"; disk: peak {format_bytes(stats.get('disk_peak_bytes', 0))} "
                   f"(spill files up to {format_bytes(stats.get('spill_peak_bytes', 0))}, then the image)")


@contextlib.contextmanager
def _writing(output: str):
    """Turn an OS error while writing (disk full, ...) into one line: the CLI prints ValueError
    without a traceback. Missing files and permissions are already reported that way."""
    try:
        yield
    except OSError as err:
        if isinstance(err, (FileNotFoundError, PermissionError, IsADirectoryError)):
            raise
        raise ValueError(f"cannot write {output}: {err.strerror or err}") from err


# ---- generate
def _register_generate(commands) -> None:
    p = commands.add_parser(
        "generate", help="generate a synthetic graph with learnable labels (R-MAT or Kronecker)",
        description="Generate a synthetic graph image: Graph500 R-MAT or a Kronecker expansion of a seed "
                    "graph, with planted communities as labels, class-conditional features and a "
                    "train/val/test split (docs/graphs.md).")
    p.add_argument("--kind", choices=("rmat", "kronecker"), default="rmat", help="generator (default: rmat)")
    p.add_argument("--default", action="store_true",
                   help="the embedded default graph of `smartsage demo` (other graph options ignored)")
    p.add_argument("--scale", type=int, help="rmat: log2 of the node count; kronecker: the power k "
                                             "(seed nodes^k nodes)")
    p.add_argument("--edge-factor", type=float, default=None,
                   help="generated edges per node (rmat default 16; kronecker default: the full power)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--classes", type=int, default=None,
                   help="number of classes (rmat default 8; kronecker: a power of the seed's classes, default 4)")
    p.add_argument("--homophily", type=_fraction, default=0.6,
                   help="rmat: fraction of edges rewired inside their source's class (default 0.6)")
    p.add_argument("--no-permute", dest="permute", action="store_false",
                   help="rmat: keep R-MAT node ids (no Graph500 relabeling)")
    p.add_argument("--seed-graph", metavar="IMAGE", help="kronecker: expand this (small) image instead of "
                                                          "Zachary's karate club")
    p.add_argument("--feature-dim", type=int, default=64, help="feature elements per node (default 64)")
    p.add_argument("--feature-dtype", type=_feature_dtype, default=FeatureDtype.FP32,
                   help="fp32, fp16, bf16 or int8 (default fp32)")
    p.add_argument("--feature-snr", type=float, default=1.0,
                   help="class-mean separation in noise standard deviations (default 1.0)")
    p.add_argument("--train", type=_fraction, default=0.6, help="train fraction (default 0.6)")
    p.add_argument("--val", type=_fraction, default=0.2, help="validation fraction (default 0.2)")
    p.add_argument("--test", type=_fraction, default=0.2, help="test fraction (default 0.2)")
    p.add_argument("--no-symmetrize", dest="symmetrize", action="store_false", default=None,
                   help="keep generated edges directed (default: symmetrize)")
    p.add_argument("--keep-self-loops", dest="drop_self_loops", action="store_false",
                   help="keep self loops (default: drop)")
    p.add_argument("--keep-duplicates", dest="drop_duplicates", action="store_false",
                   help="keep duplicate edges (default: drop)")
    _add_build_options(p)
    p.set_defaults(func=_cmd_generate)


def _cmd_generate(args) -> int:
    from smartsage.host.graphs import DEFAULT_GRAPH
    from smartsage.host.graphs.communities import NodeDataConfig

    if args.default:
        g = DEFAULT_GRAPH
        args.kind, args.scale, args.edge_factor, args.seed = g["kind"], g["scale"], g["edge_factor"], g["seed"]
        args.classes, args.homophily, args.feature_dim = g["classes"], g["homophily"], g["feature_dim"]
        args.feature_dtype, args.feature_snr = FeatureDtype.parse(g["feature_dtype"]), g["feature_snr"]
        args.train, args.val, args.test, args.permute = 0.6, 0.2, 0.2, True
        args.symmetrize, args.drop_self_loops, args.drop_duplicates, args.seed_graph = None, True, True, None
    if args.scale is None:
        raise ValueError("graph generate needs --scale (or --default)")
    if args.seed_graph and args.kind != "kronecker":
        raise ValueError("--seed-graph applies to --kind kronecker only")
    classes = args.classes if args.classes is not None else (8 if args.kind == "rmat" else 4)
    node_data = NodeDataConfig(num_classes=classes, feature_dim=args.feature_dim,
                               feature_dtype=args.feature_dtype, feature_snr=args.feature_snr,
                               train=args.train, val=args.val, test=args.test, seed=args.seed)
    writer_budget = _writer_budget(args, _node_reserve(args.feature_dim))
    options = dict(drop_self_loops=args.drop_self_loops, drop_duplicates=args.drop_duplicates,
                   memory_budget=writer_budget, progress=_progress(args), temp_dir=args.temp_dir)
    start = time.perf_counter()
    with _writing(args.output):
        if args.kind == "rmat":
            from smartsage.host.graphs.rmat import RmatConfig, generate_rmat

            edge_factor = 16 if args.edge_factor is None else args.edge_factor
            if edge_factor != int(edge_factor):
                raise ValueError(f"R-MAT edge factor must be an integer, not {edge_factor}")
            config = RmatConfig(scale=args.scale, edge_factor=int(edge_factor), num_classes=classes,
                                homophily=args.homophily, permute=args.permute, seed=args.seed)
            symmetrize = True if args.symmetrize is None else args.symmetrize
            header, stats = generate_rmat(args.output, config, node_data, symmetrize=symmetrize, **options)
        else:
            from smartsage.host.graphs.kronecker import KroneckerConfig, SeedGraph, generate_kronecker

            seed_graph = SeedGraph.from_image(args.seed_graph) if args.seed_graph else None
            config = KroneckerConfig.for_classes(args.scale, classes, edge_factor=args.edge_factor,
                                                 seed=args.seed, seed_graph=seed_graph)
            header, stats = generate_kronecker(args.output, config, node_data, symmetrize=args.symmetrize,
                                               **options)
    _report_build(args.output, header, stats, time.perf_counter() - start, config.num_edges,
                  args.memory_budget, writer_budget)
    return 0


# ---- import
def _register_import(commands) -> None:
    p = commands.add_parser(
        "import", help="import an edge list, .npy/.npz edge_index or scipy .npz matrix",
        description="Import a graph into a storage image. INPUT: a text edge list ('src dst' per line, "
                    "'#' or '%%' comments, extra columns ignored), a .npy/.npz edge_index of shape (2, E), "
                    "or a scipy sparse matrix saved with scipy.sparse.save_npz. scipy matrices and PyG "
                    "Data objects in memory: smartsage.host.graphs.importers.import_graph.")
    p.add_argument("input", metavar="INPUT", help="the graph file")
    p.add_argument("--format", choices=("auto", "edgelist", "npy", "npz", "scipy"), default="auto",
                   help="input format (default: by suffix)")
    p.add_argument("--num-nodes", type=int, default=None,
                   help="node count (default: the node data's length, else the largest id + 1)")
    p.add_argument("--features", metavar="NPY", help="(N, F) features (.npy)")
    p.add_argument("--labels", metavar="NPY", help="(N,) integer labels, -1 unlabeled (.npy)")
    p.add_argument("--split", metavar="NPY", help="(N,) split codes 0 none, 1 train, 2 val, 3 test (.npy)")
    p.add_argument("--classes", type=int, default=None, help="class count (default: largest label + 1)")
    p.add_argument("--feature-dtype", type=_feature_dtype, default=None,
                   help="store features as fp32, fp16, bf16 or int8 (default: the input's)")
    p.add_argument("--symmetrize", action="store_true", help="add the reverse of every edge")
    p.add_argument("--drop-duplicates", action="store_true", help="keep one copy of repeated edges")
    p.add_argument("--drop-self-loops", action="store_true", help="drop edges v -> v")
    _add_build_options(p)
    p.set_defaults(func=_cmd_import)


def _cmd_import(args) -> int:
    from smartsage.host.graphs.importers import import_graph

    feature_dim = 0
    if args.features:
        with open(args.features, "rb") as f:
            version = np.lib.format.read_magic(f)
            shape = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                     else np.lib.format.read_array_header_2_0(f))[0]
            feature_dim = int(shape[1]) if len(shape) == 2 else 0
    writer_budget = _writer_budget(args, _node_reserve(feature_dim))
    start = time.perf_counter()
    with _writing(args.output):
        header, stats = import_graph(
            args.input, args.output, format=args.format, num_nodes=args.num_nodes, features=args.features,
            labels=args.labels, split=args.split, num_classes=args.classes, feature_dtype=args.feature_dtype,
            symmetrize=args.symmetrize, drop_duplicates=args.drop_duplicates,
            drop_self_loops=args.drop_self_loops, memory_budget=writer_budget, progress=_progress(args),
            temp_dir=args.temp_dir)
    _report_build(args.output, header, stats, time.perf_counter() - start, None, args.memory_budget,
                  writer_budget)
    return 0


# ---- info
def _register_info(commands) -> None:
    p = commands.add_parser("info", help="print an image's header, sections and (optionally) statistics",
                            description="Print an image's header and section table (reads the header "
                                        "only; --stats streams the graph for degree and label statistics).")
    p.add_argument("image", metavar="IMAGE")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--stats", action="store_true",
                   help="also degree statistics, class sizes and edge label agreement (streams the image: "
                        "memory is one byte per node plus a chunk)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress of --stats on stderr (default: when stderr is a terminal)")
    p.set_defaults(func=_cmd_info)


def graph_statistics(image: GraphImage, chunk_nodes: int = 1 << 20, progress=None) -> dict:
    """Degrees, class sizes and the fraction of edges joining nodes of one class (streamed).

    Memory: the labels, packed into the narrowest integer that holds them (one byte per node for
    up to 127 classes), plus one chunk of indptr and its indices. Sections are read with ``pread``
    (:meth:`GraphImage.read_array`), so nothing of the file counts toward the resident set.
    ``progress`` is an optional callable ``(entries_done, entries_total)`` (indptr and index entries).
    """
    from smartsage.spec.image import SectionKind

    n = image.num_nodes
    degrees_max, isolated = 0, 0
    same, labeled_edges = 0, 0
    classes = np.zeros(max(image.num_classes, 0), np.int64)
    label_dtype = np.int8 if image.num_classes <= 127 else (np.int16 if image.num_classes <= 32767 else np.int32)
    labels = np.empty(n, label_dtype) if image.num_classes else None
    if labels is not None:
        for start in range(0, n, 1 << 22):
            labels[start:start + (1 << 22)] = image.read_array(SectionKind.LABELS, start, start + (1 << 22))
    total = n + image.num_edges
    done = 0
    max_edges = max(chunk_nodes * 16, 1 << 20)
    start = 0
    while start < n:
        end = min(start + chunk_nodes, n)
        bounds = image.read_array(SectionKind.INDPTR, start, end + 1).astype(np.int64)
        if bounds[-1] - bounds[0] > max_edges and end - start > 1:  # bounded: fewer nodes per chunk
            end = start + max(int(np.searchsorted(bounds, bounds[0] + max_edges, side="right")) - 1, 1)
            bounds = bounds[:end - start + 1]
        degree = np.diff(bounds)
        if degree.size:
            degrees_max = max(degrees_max, int(degree.max()))
        isolated += int(np.count_nonzero(degree == 0))
        if labels is not None:
            chunk_labels = labels[start:end]
            known = chunk_labels[chunk_labels >= 0].astype(np.int64)
            classes += np.bincount(known, minlength=image.num_classes)[:image.num_classes]
            neighbors = image.read_array(SectionKind.INDICES, int(bounds[0]), int(bounds[-1]))
            own = np.repeat(chunk_labels, degree)
            other = labels[neighbors]
            del neighbors
            both = (own >= 0) & (other >= 0)
            labeled_edges += int(np.count_nonzero(both))
            same += int(np.count_nonzero(both & (own == other)))
            del own, other, both
        done += (end - start) + int(bounds[-1] - bounds[0])
        if progress is not None:
            progress(done, total)
        start = end
    return {
        "degree_mean": image.num_edges / n if n else 0.0,
        "degree_max": degrees_max,
        "isolated_nodes": isolated,
        "class_sizes": classes.tolist(),
        "edge_label_agreement": same / labeled_edges if labeled_edges else None,
        "chance_agreement": float(((classes / classes.sum()) ** 2).sum()) if classes.sum() else None,
    }


def _cmd_info(args) -> int:
    with GraphImage(args.image) as image:
        summary = image.summary()
        if args.stats:
            meter = ProgressMeter(_progress(args), f"stats {os.path.basename(args.image)}")
            meter.task("entries", image.num_nodes + image.num_edges, "entries")
            try:
                summary["stats"] = graph_statistics(
                    image, progress=lambda done, total: meter.update("entries", done, total))
            finally:
                meter.close()
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    h = summary
    flags = [name for name, on in (("symmetrized", h["symmetrized"]), ("no self loops", h["self_loops_dropped"]),
                                   ("no duplicates", h["duplicates_dropped"])) if on]
    none = h["num_nodes"] - h["num_train"] - h["num_val"] - h["num_test"]
    rows = [
        ("image", f"{h['path']} (format version {h['version']}, {h['file_size']:,} bytes)"),
        ("nodes", f"{h['num_nodes']:,}"),
        ("edges", f"{h['num_edges']:,} ({h['index_dtype']} indices)" + (f", {', '.join(flags)}" if flags else "")),
        ("features", f"{h['feature_dtype']} x {h['feature_dim']}" if h["feature_dim"] else "none"),
        ("classes", f"{h['num_classes']}" if h["num_classes"] else "unlabeled"),
        ("split", f"train {h['num_train']:,} / val {h['num_val']:,} / test {h['num_test']:,} / none {none:,}"),
    ]
    if "stats" in h:
        s = h["stats"]
        rows.append(("degree", f"mean {s['degree_mean']:.2f}, max {s['degree_max']:,}, "
                               f"{s['isolated_nodes']:,} isolated nodes"))
        if s["edge_label_agreement"] is not None:
            rows.append(("homophily", f"{s['edge_label_agreement']:.3f} of edges join one class "
                                      f"(chance {s['chance_agreement']:.3f})"))
            rows.append(("class sizes", " ".join(f"{c:,}" for c in s["class_sizes"])))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print(f"{'sections':<{width}}  {'name':<9} {'offset':>14} {'bytes':>16} {'count':>16}  crc32")
    for s in h["sections"]:
        print(f"{'':<{width}}  {s['name']:<9} {s['offset']:>14,} {s['length']:>16,} {s['count']:>16,}  {s['crc32']}")
    return 0


# ---- verify
def _register_verify(commands) -> None:
    p = commands.add_parser("verify", help="check every invariant and checksum of an image",
                            description="Check an image: header, section bounds and alignment, dtype codes, "
                                        "indptr monotone and ending at the edge count, indices below the node "
                                        "count, labels, split codes and counts, every CRC-32. Exit 0 if it "
                                        "is sound; else one line naming the section and the fault, exit 2.")
    p.add_argument("image", metavar="IMAGE")
    p.add_argument("--json", action="store_true", help="print the image summary as JSON on success")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")
    p.set_defaults(func=_cmd_verify)


def _cmd_verify(args) -> int:
    start = time.perf_counter()
    meter = ProgressMeter(_progress(args), f"verify {os.path.basename(args.image)}")
    meter.task("read", None, "B")
    try:
        summary = verify_image(args.image, progress=lambda done, total: meter.update("read", done, total))
    finally:
        meter.close()
    seconds = time.perf_counter() - start
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        split = f"{summary['num_train']:,}/{summary['num_val']:,}/{summary['num_test']:,}"
        print(f"{args.image}: ok ({summary['num_nodes']:,} nodes, {summary['num_edges']:,} edges, "
              f"{summary['feature_dtype']} x {summary['feature_dim']} features, {summary['num_classes']} classes, "
              f"split {split}; {summary['file_size'] / 2**20:,.1f} MiB checked in {seconds:.2f} s, "
              f"{summary['file_size'] / 2**20 / max(seconds, 1e-9):,.0f} MiB/s, peak RSS {format_bytes(peak_rss())})")
    return 0

