"""``smartsage model``: the performance model's commands (docs/performance-model.md).

* ``model probe DIR``: measure this machine's disk with O_DIRECT (cached JSON).
* ``model project --image IMG``: epoch time per backend at the image's scale from sampled read
  traces (the full-scale projection of issue 12, part 3).
* ``model calibrate-cosim``: the device model against the RTL co-simulation (PM983 storage model).
* ``model calibrate-host --image IMG``: the mmap and O_DIRECT estimates against measured sampling.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from smartsage.spec import golden
from smartsage.spec.config import get_config
from smartsage.spec.image import GraphImage

from . import perfmodel as pm

GIB = 1 << 30


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, not {text!r}") from None


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, not {text!r}") from None


def train_targets(image: GraphImage, batch: int, batches: int, seed: int) -> tuple[list[np.ndarray], int]:
    """``batches`` batches of ``batch`` training targets drawn (seeded) from the image's train split
    (nodes with an edge when the split is empty), and the number of candidate training nodes."""
    degree_ok = None
    try:
        split = np.asarray(image.split)
        candidates = np.flatnonzero(split == 1)
    except Exception:  # no split section
        candidates = np.zeros(0, np.int64)
    if candidates.size == 0:
        degree_ok = np.diff(np.asarray(image.indptr).astype(np.int64)) > 0
        candidates = np.flatnonzero(degree_ok)
    generator = np.random.default_rng(seed)
    out = []
    for _ in range(batches):
        out.append(np.sort(generator.choice(candidates, size=min(batch, candidates.size), replace=False)))
    return out, int(candidates.size)


# ---------------------------------------------------------------------------------------- project

def _train_seconds(trace: pm.ReadTrace, dim: int, hidden: int, classes: int, repeats: int = 3) -> float:
    """Measured forward + backward + step of a 2-layer GraphSAGE-mean on a batch of this shape
    (random features and a random block structure of the batch's sizes; torch CPU)."""
    import torch

    torch.manual_seed(0)
    sizes = [trace.num_targets] + [0] * len(trace.fanouts)
    total = trace.num_targets
    for h, edges in enumerate(trace.edges):
        total += edges
        sizes[h + 1] = total
    layers = []
    in_dim = dim
    for i in range(len(trace.fanouts)):
        out_dim = classes if i == len(trace.fanouts) - 1 else hidden
        layers.append((torch.nn.Linear(in_dim, out_dim), torch.nn.Linear(in_dim, out_dim, bias=False)))
        in_dim = out_dim
    params = [p for pair in layers for lin in pair for p in lin.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3)
    x = torch.randn(sizes[-1], dim)
    # block l: dst = first sizes[L-1-l] nodes, each with its sampled neighbors among src
    blocks = []
    for layer in range(len(trace.fanouts)):
        hop = len(trace.fanouts) - 1 - layer
        n_dst, n_edges = sizes[hop], trace.edges[hop]
        dst = torch.randint(0, n_dst, (n_edges,))
        src = torch.randint(0, sizes[hop + 1], (n_edges,))
        blocks.append((n_dst, dst, src))
    y = torch.randint(0, classes, (trace.num_targets,))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        h = x
        for (lin_l, lin_r), (n_dst, dst, src) in zip(layers, blocks, strict=True):
            agg = torch.zeros(n_dst, h.shape[1]).index_add_(0, dst, h[src])
            deg = torch.bincount(dst, minlength=n_dst).clamp(min=1).unsqueeze(1)
            h = lin_l(agg / deg) + lin_r(h[:n_dst])
            if lin_l.out_features != classes:
                h = torch.relu(h)
        loss = torch.nn.functional.cross_entropy(h, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def project(image_path, *, batch: int = 1024, fanouts=(25, 10), batches: int = 20, seed: int = 1,
            feature_dim: int = 128, feature_itemsize: int = 4, caches_gib=(0, 1, 4), ssd: pm.SsdModel = pm.PM983,
            config_name: str = "default", clock_mhz: float | None = None, train_s: float | None = None,
            hidden: int = 256, classes: int = 172, train_nodes: int | None = None, mmap_fault_us: float | None = None,
            direct_per_read_us: float = 5.0, host_gbs: float = 10.0, measure_train: bool = False,
            progress=None) -> dict:
    """The projection (docs/performance-model.md, section 4): epoch time per backend from ``batches``
    sampled read traces of ``image_path``, extrapolated to an epoch of ``train_nodes`` targets.

    Host CPU per batch is measured: golden sampling of the batch a second time (its pages then
    resident: the DRAM-only sampler), a feature gather of the batch's rows from memory (a copy at
    ``host_gbs``). Training per batch is ``train_s`` (default 20 ms: a GPU-class GraphSAGE step, an
    assumption stated in the report); ``measure_train`` also measures a 2-layer GraphSAGE-mean step
    of the batch's shape on this machine's CPU (reported as ``train_cpu_measured_s``).

    Device time is modelled on the second half of the sampled batches, after the on-board caches
    were warmed with the first half (a cache that starts empty every epoch would understate it; one
    that had seen the very batches measured would overstate it). ``direct_per_read_us`` is the
    O_DIRECT sampler's host software per read (default 5 us: a C thread pool or io_uring on one
    core; the project's Python thread pool costs far more, see the calibration)."""
    config = get_config(config_name)
    say = progress or (lambda *_: None)
    with GraphImage(image_path) as image:
        targets, candidates = train_targets(image, batch, batches, seed)
        epoch_batches = int(np.ceil((train_nodes or candidates) / batch))
        dim = image.feature_dim or feature_dim
        item = image.header.feature_row_bytes // image.feature_dim if image.feature_dim else feature_itemsize
        traces, sample_cpu = [], []
        for i, t in enumerate(targets):
            start = time.perf_counter()
            trace = pm.read_trace(image, t, fanouts, seed + i, aggregate=True, config=config,
                                  feature_dim=dim, feature_itemsize=item)
            cold = time.perf_counter() - start
            start = time.perf_counter()
            golden.sample(image, t, fanouts, seed + i, aggregate=False, config=config)
            sample_cpu.append(time.perf_counter() - start)
            traces.append(trace)
            say(f"batch {i + 1}/{len(targets)}: {trace.requests:,} device reads, "
                f"{trace.mmap_pages().size:,} mmap pages, trace {cold:.1f} s, warm sampling {sample_cpu[-1]:.3f} s")
        train_cpu = _train_seconds(traces[0], dim, hidden, classes) if measure_train else None
        if train_s is None:
            train_s = 0.020
        num_nodes = image.num_nodes
        graph_bytes = image.header.file_size
        indptr_bytes = (num_nodes + 1) * 8
    sample_s = float(np.median(sample_cpu))
    row_bytes = dim * item
    gather_cpu = [t.node_list_entries * row_bytes / (host_gbs * 1e9) for t in traces]
    host_gather_s = float(np.mean(gather_cpu))
    # Host work after the device's aggregation: divide the sums (two rows per node of D_1), small.
    agg_host_s = float(np.mean([t.last_frontier * row_bytes * 2 / (host_gbs * 1e9) for t in traces]))
    dram_bytes = graph_bytes + num_nodes * row_bytes
    rows = []

    def add(backend: str, cache_gib, phases: dict, to_host: float, flash_reads: float, bound: str, note=""):
        io_stage = sum(v for k, v in phases.items() if k != "train")
        serial = pm.epoch_time(list(phases.values()), epoch_batches, pipelined=False)
        piped = pm.epoch_time([io_stage, phases["train"]], epoch_batches, pipelined=True)
        rows.append(dict(backend=backend, cache_gib=cache_gib, per_batch_s=phases, batch_s=sum(phases.values()),
                         epoch_serial_s=serial, epoch_pipelined_s=piped, bytes_to_host=to_host,
                         storage_reads=flash_reads, bound=bound, note=note))

    add("DRAM-only", None, {"sampling": sample_s, "features": host_gather_s, "train": train_s}, 0, 0,
        "host software", f"needs {dram_bytes / GIB:.1f} GiB of host memory for the image")
    mm = [pm.mmap_time(t, ssd, 0.0, fault_us=mmap_fault_us, sampling_only=True) for t in traces]
    mm_feat = [pm.mmap_time(t, ssd, 0.0, fault_us=mmap_fault_us).io_s - m.io_s
               for t, m in zip(traces, mm, strict=True)]
    add("mmap", None, {"sampling": sample_s + float(np.mean([m.io_s for m in mm])),
                       "features": host_gather_s + float(np.mean(mm_feat)), "train": train_s},
        float(np.mean([pm.mmap_time(t, ssd).bytes_to_host for t in traces])),
        float(np.mean([pm.mmap_time(t, ssd).reads for t in traces])), "flash latency (QD1 faults)")
    dd = [pm.direct_time(t, ssd, per_read_us=direct_per_read_us, sampling_only=True) for t in traces]
    dfull = [pm.direct_time(t, ssd, per_read_us=direct_per_read_us) for t in traces]
    direct_feat = float(np.mean([f.io_s - d.io_s for f, d in zip(dfull, dd, strict=True)]))
    add("O_DIRECT", None, {"sampling": sample_s + float(np.mean([d.io_s for d in dd])),
                           "features": host_gather_s + direct_feat,
                           "train": train_s},
        float(np.mean([d.bytes_to_host for d in dfull])), float(np.mean([d.reads for d in dfull])),
        "host software (per-read cost)" if direct_per_read_us and 1e6 / direct_per_read_us < ssd.rate(64)
        else "flash IOPS")
    for attachment in ("flash", "p2p"):
        model = pm.DeviceModel(config=config, ssd=ssd, attachment=attachment, clock_mhz=clock_mhz)
        for cache_gib in caches_gib:
            cap = int(cache_gib * GIB)
            if attachment == "p2p":
                if cap + indptr_bytes > model.ddr_bytes:
                    cap = max(0, model.ddr_bytes - indptr_bytes)
            for aggregate in (False, True):
                cache = pm.PageCache(cap)
                warm = len(traces) // 2
                for t in traces[:warm]:  # warming needs no timing: the pages through the cache
                    view = t if aggregate else _sampling_only(t)
                    if attachment == "p2p":
                        for phase in range(view.num_phases):
                            mask = (view.page_phase == phase) & (view.page_section >= pm.SECTIONS.index("indices"))
                            cache.stage(view.pages[mask])
                    else:
                        cache.access(view.pages)
                times, gathers = [], []
                for t in traces[warm:]:
                    view = t if aggregate else _sampling_only(t)
                    times.append(model.batch_time(view, cache))
                    if not aggregate:  # the host gathers D_0's features itself, O_DIRECT at a deep queue
                        gathers.append(pm.direct_time(t, ssd, gathers=[t.feature_gather],
                                                      per_read_us=direct_per_read_us))
                dev = float(np.mean([x.total_s for x in times]))
                bounds = [x.bound for x in times]
                bound = max(set(bounds), key=bounds.count)
                name = ("device sampling + aggregation" if aggregate else "device sampling") + \
                    (" [SmartSSD P2P]" if attachment == "p2p" else "")
                if aggregate:
                    phases = {"sampling": dev, "features": agg_host_s, "train": train_s}
                    to_host = float(np.mean([x.bytes_to_host for x in times]))
                    reads = float(np.mean([x.flash_reads for x in times]))
                else:
                    feat = float(np.mean([g.io_s for g in gathers]))
                    phases = {"sampling": dev, "features": feat + host_gather_s, "train": train_s}
                    to_host = float(np.mean([x.bytes_to_host + g.bytes_to_host
                                             for x, g in zip(times, gathers, strict=True)]))
                    reads = float(np.mean([x.flash_reads + g.reads for x, g in zip(times, gathers, strict=True)]))
                    if feat > dev:
                        bound = "flash IOPS (host feature gather)"
                note = f"DDR pool {cap / GIB:.2f} GiB after indptr" if attachment == "p2p" else ""
                add(name, cache_gib, phases, to_host, reads, bound, note)
    by = {(r["backend"], r["cache_gib"]): r for r in rows}
    dram = by[("DRAM-only", None)]
    mmap_row = by[("mmap", None)]
    for r in rows:
        r["vs_dram_serial"] = r["epoch_serial_s"] / dram["epoch_serial_s"]
        r["speedup_vs_mmap_serial"] = mmap_row["epoch_serial_s"] / r["epoch_serial_s"]
        r["vs_dram_pipelined"] = r["epoch_pipelined_s"] / dram["epoch_pipelined_s"]
        r["speedup_vs_mmap_pipelined"] = mmap_row["epoch_pipelined_s"] / r["epoch_pipelined_s"]
        r["traffic_vs_mmap"] = mmap_row["bytes_to_host"] / r["bytes_to_host"] if r["bytes_to_host"] else None
    return dict(image=os.fspath(image_path), num_nodes=num_nodes, graph_bytes=graph_bytes,
                feature_dim=dim, feature_itemsize=item, batch=batch, fanouts=list(fanouts), batches_sampled=len(traces),
                train_candidates=candidates, epoch_batches=epoch_batches, ssd=ssd.name, config=config.name,
                clock_mhz=clock_mhz or config.clock_mhz, host_sampling_s=sample_s, train_s=train_s,
                train_cpu_measured_s=train_cpu, direct_per_read_us=direct_per_read_us,
                mmap_fault_us=mmap_fault_us or ssd.fault_us,
                mean_device_reads=float(np.mean([t.requests for t in traces])),
                mean_mmap_pages=float(np.mean([t.mmap_pages().size for t in traces])), rows=rows)


def _sampling_only(trace: pm.ReadTrace) -> pm.ReadTrace:
    """The trace without its aggregation reads (device sampling only)."""
    import dataclasses

    keep = trace.req_section != pm.SECTIONS.index("features")
    keep_pages = trace.page_section != pm.SECTIONS.index("features")
    return dataclasses.replace(
        trace, req_section=trace.req_section[keep], req_phase=trace.req_phase[keep],
        req_bytes=trace.req_bytes[keep], req_entry=trace.req_entry[keep], req_first_page=trace.req_first_page[keep],
        req_num_pages=trace.req_num_pages[keep], pages=trace.pages[keep_pages],
        page_section=trace.page_section[keep_pages], page_phase=trace.page_phase[keep_pages], aggregate=False,
        host_gathers=[g for g in trace.host_gathers if g.section != "features"])


def format_projection(report: dict, pipelined: bool = False) -> str:
    key = "pipelined" if pipelined else "serial"
    lines = [f"| backend | on-board cache | per batch (ms): sampling / features / train | epoch {key} (s) "
             f"| vs DRAM | speedup vs mmap | to host per batch (MB) | traffic vs mmap | binds |",
             "|---|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in report["rows"]:
        p = r["per_batch_s"]
        cache = "-" if r["cache_gib"] is None else f"{r['cache_gib']:g} GiB"
        traffic = "-" if r["traffic_vs_mmap"] is None else f"{r['traffic_vs_mmap']:.1f}x less"
        lines.append(f"| {r['backend']} | {cache} | {p['sampling'] * 1e3:.1f} / {p['features'] * 1e3:.1f} / "
                     f"{p['train'] * 1e3:.1f} | {r[f'epoch_{key}_s']:.1f} | {r[f'vs_dram_{key}']:.2f}x | "
                     f"{r[f'speedup_vs_mmap_{key}']:.2f}x | {r['bytes_to_host'] / 1e6:.2f} | {traffic} | "
                     f"{r['bound']} |")
    return "\n".join(lines)


def plot_projection(report: dict, path) -> None:
    """Epoch time per backend stacked by phase, and traffic to the host per backend (0 GiB and the
    largest cache shown for the device rows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    caches = sorted({r["cache_gib"] for r in report["rows"] if r["cache_gib"] is not None})
    show = [c for c in (caches[0], caches[-1]) if c is not None] if caches else []
    rows = [r for r in report["rows"] if r["cache_gib"] is None or r["cache_gib"] in show]
    labels = [r["backend"].replace(" + ", "\n+ ").replace(" [", "\n[")
              + ("" if r["cache_gib"] is None else f"\n{r['cache_gib']:g} GiB") for r in rows]
    eb = report["epoch_batches"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 5.5), gridspec_kw={"width_ratios": [2.2, 1]})
    bottom = np.zeros(len(rows))
    for phase, color in (("sampling", "#4c72b0"), ("features", "#dd8452"), ("train", "#55a868")):
        values = np.array([r["per_batch_s"][phase] * eb for r in rows])
        ax1.bar(range(len(rows)), values, bottom=bottom, color=color, label=phase)
        bottom += values
    ax1.set_xticks(range(len(rows)), labels, fontsize=6.5, rotation=60, ha="right")
    ax1.set_ylabel("epoch time, serial (s)")
    ax1.set_yscale("log")
    ax1.legend()
    ax1.set_title(f"{report['num_nodes']:,} nodes, batch {report['batch']}, fanouts {report['fanouts']}, "
                  f"{report['ssd']}", fontsize=9)
    ax2.bar(range(len(rows)), [r["bytes_to_host"] / 1e6 for r in rows], color="#8172b3")
    ax2.set_xticks(range(len(rows)), labels, fontsize=6.5, rotation=60, ha="right")
    ax2.set_ylabel("bytes to the host per batch (MB)")
    ax2.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cmd_project(args) -> int:
    if not os.path.exists(args.image):
        raise FileNotFoundError(f"Image {args.image} does not exist")
    ssd = pm.ssd_preset(args.ssd)
    report = project(args.image, batch=args.batch, fanouts=args.fanouts, batches=args.batches, seed=args.seed,
                     feature_dim=args.feature_dim, caches_gib=args.cache_gib, ssd=ssd, config_name=args.config,
                     clock_mhz=args.clock_mhz, train_s=None if args.train_ms is None else args.train_ms / 1e3,
                     train_nodes=args.train_nodes, direct_per_read_us=args.direct_per_read_us,
                     measure_train=args.measure_train,
                     progress=(lambda m: print(m, flush=True)) if args.progress else None)
    print(format_projection(report))
    print()
    print(format_projection(report, pipelined=True))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(report, f, indent=1)
    if args.plot:
        plot_projection(report, args.plot)
    return 0


# ----------------------------------------------------------------------------------- calibration

def calibrate_cosim(image_path, cases, config_name: str = "small", seed: int = 1) -> list[dict]:
    """Device model vs co-simulation (PM983 storage model) for each case
    ``(batch, fanouts, aggregate, cache_bytes)``: one command per co-simulation run."""
    import dataclasses

    from smartsage.cosim.runner import run_plan
    from smartsage.cosim.scoreboard import CommandSpec
    from smartsage.cosim.storage import PM983
    from smartsage.spec.descriptor import Flags

    config = get_config(config_name)
    out = []
    with GraphImage(image_path) as image:
        degree = np.diff(np.asarray(image.indptr).astype(np.int64))
        candidates = np.flatnonzero(degree > 0)
        for batch, fanouts, aggregate, cache_bytes in cases:
            targets = np.random.default_rng(seed + batch).choice(candidates, batch, replace=False)
            targets = targets.astype(np.uint32)
            spec = CommandSpec(targets=targets.tolist(), fanouts=list(fanouts), seed=seed,
                               flags=int(Flags.AGGREGATE) if aggregate else 0)
            expected = golden.sample(image, targets, fanouts, seed, aggregate=aggregate, config=config)
            timing = dataclasses.replace(PM983, cache_bytes=int(cache_bytes))
            start = time.perf_counter()
            run = run_plan(config, image_path, [spec], timing=timing, seed=seed,
                           watchdog_cycles=60_000 * (3 * expected.stats.read_requests + 20))
            wall = time.perf_counter() - start
            res = run.results[0]
            cycles = res["header"]["cycles"]
            measured = cycles / (config.clock_mhz * 1e6)
            trace = pm.read_trace(image, targets, fanouts, seed, aggregate, config, granularity="rtl")
            model = pm.DeviceModel(config=config)
            t = model.batch_time(trace, pm.PageCache(int(cache_bytes)))
            out.append(dict(config=config.name, batch=batch, fanouts=list(fanouts), aggregate=aggregate,
                            cache_bytes=int(cache_bytes), cosim_cycles=cycles, cosim_s=measured,
                            cosim_flash_pages=res["storage"]["flash_pages"],
                            cosim_cache_hits=res["storage"]["cache_hits"],
                            cosim_transactions=res.get("storage_reads"), model_requests=trace.requests,
                            model_flash_reads=t.flash_reads, model_cache_hits=t.cache_hits,
                            model_kernel_s=t.kernel_s, residual=t.kernel_s / measured - 1, wall_s=wall,
                            phases=t.phases))
            print(json.dumps({k: v for k, v in out[-1].items() if k != "phases"}), flush=True)
    return out


def calibrate_host(image_path, batch: int, fanouts, batches: int, seed: int, aggregate: bool,
                   backends=("mmap", "direct"), probe_reads: int = 400) -> list[dict]:
    """mmap / O_DIRECT model vs measured sampling time per batch (cold page cache every batch).

    On a shared machine the disk's figures move with the other jobs' load (seen here: QD1 faults
    from 57 to 469 us within minutes), so the disk is probed on the image itself right before every
    measured batch (``probe_reads`` random reads per queue depth and as many mmap faults), and
    each batch is modelled with the probe next to it (``model_s``); ``model_global_s`` uses one probe
    taken before all batches. Host CPU per batch: the same batch warm (every page resident) through
    the mmap sampler (for mmap) or the plain golden model (for O_DIRECT, whose copies are I/O)."""
    from .backends.software import DirectSampler, MmapSampler

    image_path = os.path.abspath(image_path)
    global_disk = pm.SsdModel.from_probe(pm.probe_disk(image_path, reads=4 * probe_reads, cache=False))
    out = []
    with GraphImage(image_path) as image:
        targets, _ = train_targets(image, batch, batches, seed)
        cpu, traces = [], []
        for i, t in enumerate(targets):   # host CPU per batch: the same command warm (pages resident)
            traces.append(pm.read_trace(image, t, fanouts, seed + i, aggregate))
            golden.sample(image, t, fanouts, seed + i, aggregate=aggregate)
            start = time.perf_counter()
            golden.sample(image, t, fanouts, seed + i, aggregate=aggregate)
            cpu.append(time.perf_counter() - start)
    # mmap: the host CPU of the instrumented sampler itself, warm (the batch again, every page resident)
    cpu_mmap = []
    with MmapSampler(image_path, cold=False) as sampler:
        for i, t in enumerate(targets):
            sampler.sample(t, fanouts, seed + i, aggregate=aggregate)
            start = time.perf_counter()
            sampler.sample(t, fanouts, seed + i, aggregate=aggregate)
            cpu_mmap.append(time.perf_counter() - start)
    for name in backends:
        cls = MmapSampler if name == "mmap" else DirectSampler
        host_cpu = cpu_mmap if name == "mmap" else cpu
        with cls(image_path, cold=True, cold_each_batch=True) as sampler:
            for i, t in enumerate(targets):
                probe = pm.probe_disk(image_path, reads=probe_reads, seq_bytes=16 << 20, cache=False, seed=i,
                                      faults=probe_reads)
                disk = pm.SsdModel.from_probe(probe)
                before = sampler.io.storage_reads
                start = time.perf_counter()
                sampler.sample(t, fanouts, seed + i, aggregate=aggregate)
                measured = time.perf_counter() - start
                reads = sampler.io.storage_reads - before
                model = pm.mmap_time if name == "mmap" else pm.direct_time
                est = model(traces[i], disk, host_cpu[i])
                est_global = model(traces[i], global_disk, host_cpu[i])
                out.append(dict(backend=name, batch=batch, fanouts=list(fanouts), aggregate=aggregate, index=i,
                                measured_s=measured, model_s=est.total_s, model_io_s=est.io_s,
                                model_global_s=est_global.total_s, host_cpu_s=host_cpu[i], measured_reads=reads,
                                model_reads=est.reads, fault_us=probe.mmap_fault_us,
                                qd1_us=probe.qd1_latency_us, iops=probe.iops,
                                residual=est.total_s / measured - 1,
                                residual_global=est_global.total_s / measured - 1))
                print(json.dumps(out[-1]), flush=True)
    return out


def cosim_table(rows: list[dict]) -> str:
    """Markdown residual table of :func:`calibrate_cosim` results."""
    lines = ["| config | batch | fanouts | aggregate | DRAM cache | cosim flash pages / hits | model flash / hits "
             "| cosim time (ms) | model time (ms) | residual |",
             "|---|---:|---|---|---:|---|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['batch']} | {','.join(map(str, r['fanouts']))} | "
                     f"{'yes' if r['aggregate'] else 'no'} | {r['cache_bytes'] / 1024:g} KiB | "
                     f"{r['cosim_flash_pages']} / {r['cosim_cache_hits']} | {r['model_flash_reads']} / "
                     f"{r['model_cache_hits']} | {r['cosim_s'] * 1e3:.3f} | {r['model_kernel_s'] * 1e3:.3f} | "
                     f"{r['residual'] * 100:+.1f}% |")
    res = np.array([r["residual"] for r in rows])
    if res.size:
        lines.append(f"\n{res.size} runs: mean |residual| {np.mean(np.abs(res)) * 100:.1f}%, "
                     f"max {np.max(np.abs(res)) * 100:.1f}%.")
    return "\n".join(lines)


def host_table(rows: list[dict]) -> str:
    """Markdown residual table of :func:`calibrate_host` results, one line per (backend, setting)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["backend"], r["batch"], tuple(r["fanouts"]), r["aggregate"]), []).append(r)
    lines = ["| backend | batch | fanouts | aggregate | batches | reads per batch (measured = model) "
             "| measured s/batch | model s/batch (probe next to it) | residual of sums | per-batch residuals "
             "| model s/batch (one probe) | residual |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for (backend, batch, fanouts, aggregate), rs in groups.items():
        meas = sum(r["measured_s"] for r in rs)
        model = sum(r["model_s"] for r in rs)
        glob = sum(r["model_global_s"] for r in rs)
        same = all(r["measured_reads"] == r["model_reads"] for r in rs)
        reads = np.mean([r["measured_reads"] for r in rs])
        per = ", ".join(f"{r['residual'] * 100:+.0f}%" for r in rs)
        lines.append(f"| {backend} | {batch} | {','.join(map(str, fanouts))} | {'yes' if aggregate else 'no'} | "
                     f"{len(rs)} | {reads:,.0f} ({'equal' if same else 'DIFFER'}) | {meas / len(rs):.3f} | "
                     f"{model / len(rs):.3f} | {(model / meas - 1) * 100:+.1f}% | {per} | {glob / len(rs):.3f} | "
                     f"{(glob / meas - 1) * 100:+.1f}% |")
    return "\n".join(lines)


def _cmd_tables(args) -> int:
    cosim, host = [], []
    for path in args.cosim or []:
        cosim += json.load(open(path))
    for path in args.host or []:
        host += json.load(open(path))
    if cosim:
        print(cosim_table(cosim))
        print()
    if host:
        print(host_table(host))
    return 0


def _cmd_calibrate_cosim(args) -> int:
    cases = []
    for batch in args.batches:
        for cache in args.cache_bytes:
            cases.append((batch, args.fanouts, args.aggregate, cache))
    out = calibrate_cosim(args.image, cases, args.config, args.seed)
    print(cosim_table(out))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def _cmd_calibrate_host(args) -> int:
    out = calibrate_host(args.image, args.batch, args.fanouts, args.batches, args.seed, args.aggregate,
                         tuple(args.backends.split(",")))
    print(host_table(out))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def _cmd_probe(args) -> int:
    probe = pm.probe_disk(args.path, refresh=args.refresh)
    print(json.dumps(probe.to_dict(), indent=1))
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("model", help="the performance model: projection, calibration, disk probe",
                                   description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="model_command", required=True, metavar="SUBCOMMAND")

    p = sub.add_parser("project", help="epoch time per backend at the image's scale (sampled read traces)")
    p.add_argument("--image", required=True, help="the image (featureless images get virtual feature rows)")
    p.add_argument("--batch", type=int, default=1024, help="targets per batch (default 1024)")
    p.add_argument("--fanouts", type=_ints, default=[25, 10], help="fanouts (default 25,10)")
    p.add_argument("--batches", type=int, default=20, help="batches sampled (default 20)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--feature-dim", type=int, default=128, help="virtual feature width (default 128, fp32)")
    p.add_argument("--cache-gib", type=_floats, default=[0, 1, 4], help="on-board cache sizes (default 0,1,4)")
    p.add_argument("--ssd", default="PM983", help="SSD preset: PM983 (default) or PM1733")
    p.add_argument("--config", default="default", help="kernel config (default: default)")
    p.add_argument("--clock-mhz", type=float, default=None, help="kernel clock (default: the config's)")
    p.add_argument("--train-ms", type=float, default=None,
                   help="training per batch (default 20: a GPU-class step, an assumption)")
    p.add_argument("--measure-train", action="store_true",
                   help="also measure a GraphSAGE step of the batch's shape on this CPU (reported only)")
    p.add_argument("--train-nodes", type=int, default=None,
                   help="training nodes per epoch (default: the image's train split)")
    p.add_argument("--direct-per-read-us", type=float, default=5.0,
                   help="host software per O_DIRECT read (default 5; 0: the drive binds)")
    p.add_argument("-o", "--output", help="write the report as JSON")
    p.add_argument("--plot", help="write the plot (PNG)")
    p.add_argument("--progress", action="store_true")
    p.set_defaults(func=_cmd_project)

    p = sub.add_parser("calibrate-cosim", help="device model vs RTL co-simulation (PM983 model)")
    p.add_argument("--image", required=True)
    p.add_argument("--config", default="small")
    p.add_argument("--batches", type=_ints, default=[32, 64, 128], help="batch sizes (default 32,64,128)")
    p.add_argument("--fanouts", type=_ints, default=[10])
    p.add_argument("--cache-bytes", type=_ints, default=[0, 1 << 20])
    p.add_argument("--aggregate", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("-o", "--output")
    p.set_defaults(func=_cmd_calibrate_cosim)

    p = sub.add_parser("calibrate-host", help="mmap / O_DIRECT model vs measured sampling on this disk")
    p.add_argument("--image", required=True)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--fanouts", type=_ints, default=[10, 5])
    p.add_argument("--batches", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--aggregate", action="store_true")
    p.add_argument("--backends", default="mmap,direct")
    p.add_argument("-o", "--output")
    p.set_defaults(func=_cmd_calibrate_host)

    p = sub.add_parser("tables", help="markdown residual tables from calibration JSON files")
    p.add_argument("--cosim", nargs="*", help="calibrate-cosim JSON files")
    p.add_argument("--host", nargs="*", help="calibrate-host JSON files")
    p.set_defaults(func=_cmd_tables)

    p = sub.add_parser("probe", help="measure this machine's disk with O_DIRECT (cached)")
    p.add_argument("path", help="a file to read, or a directory for a temporary file")
    p.add_argument("--refresh", action="store_true", help="measure again")
    p.set_defaults(func=_cmd_probe)
