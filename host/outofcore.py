"""The out-of-core experiment: GraphSAGE training on an image larger than the memory it is given.

``smartsage bench outofcore`` (and ``nox -s outofcore``) runs the same training batches (same
targets, same command seeds: :func:`~smartsage.host.train.epoch_commands`) through every backend,
each in a child process of its own:

``dram``
    The upper bound: the image copied into the child's memory before training. It cannot run under
    a budget smaller than the image, so it runs unconfined (and is skipped where the machine's free
    memory cannot hold the image).
``mmap``, ``direct``
    The software baselines (:mod:`smartsage.host.backends.software`), confined to the memory budget.
``device``
    The golden model, the device's function: it provides the batches (identical to every other
    backend's) on which the host's block building and training are measured; the device's own
    command time is modelled (:mod:`smartsage.host.perfmodel`, see docs/performance-model.md), since
    no SmartSSD is attached here. It runs unconfined: its storage reads and its device memory (the
    driver's model of the card's DDR, hundreds of MB) are the card's, not the host's, and the host
    phases it measures (blocks, compute) do no I/O.

Confinement is a memory cgroup (:mod:`smartsage.host.memlimit`): the child joins a group limited to
the budget before it executes anything, so its own memory and the page cache it faults in share
the budget, and an mmap sampler re-reads from the disk what the kernel evicted. ``--no-cgroup``
instead drops the image's pages from the page cache before every batch (what a far larger image
would see), and says so. Before each backend the image's pages are dropped from the page cache.

Per batch each child records wall seconds by phase (``sampling``: the command's sampling part;
``aggregation``: gathering feature rows and summing them; ``blocks``: message-flow graphs and input
tensors; ``compute``: forward, backward and the optimizer step), the project's own I/O accounting
(storage reads, pages, bytes, bytes to the host) and the kernel's (``/proc/self/io`` read bytes and
read calls, major page faults); the parent adds the cgroup's block-I/O counters and peak memory.
The first ``batches`` run serially (the phase split); the next ``batches`` (the next epoch's
first) run with the prefetching pipeline, whose wall time per batch is the pipelined figure.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

__all__ = ["OutOfCoreConfig", "OutOfCoreError", "BACKENDS", "run_experiment", "markdown_report", "plot_report",
           "check_inputs"]

BACKENDS = ("dram", "mmap", "direct", "device")
#: The backends whose storage reads go through the host's memory: these run under the budget.
CONFINED = ("mmap", "direct")
CONFINEMENT_NOTE = ("mmap and direct each in a memory cgroup of the budget (dram holds the whole image and the "
                    "device stand-in reads the card's storage: both unconfined)")
PHASES = ("sampling", "aggregation", "blocks", "compute")
#: The image must be at least this many times larger than the memory budget.
MIN_IMAGE_RATIO = 4.0
GIB = 1 << 30


class OutOfCoreError(RuntimeError):
    """The experiment cannot run as configured (the message names the cause and the fix)."""


@dataclasses.dataclass
class OutOfCoreConfig:
    """What one out-of-core run measures.

    Parameters
    ----------
    image:
        The storage image (at least ``MIN_IMAGE_RATIO`` x ``memory_budget`` bytes).
    memory_budget:
        Bytes each confined child may use, its own memory and its page cache together.
    batch_size, fanouts, hidden, seed:
        The training batches and model (as ``smartsage train``).
    batches:
        Batches measured serially per backend; as many again are measured pipelined.
    backends:
        A subset of :data:`BACKENDS`.
    confine:
        A memory cgroup per child (False: ``--no-cgroup``, the page cache dropped before every batch).
    kernel_config:
        The kernel build whose cycles and clock the device model uses.
    prefetch:
        Pipeline depth of the pipelined batches.
    """

    image: pathlib.Path
    memory_budget: int = GIB
    batch_size: int = 1024
    fanouts: tuple[int, ...] = (25, 10)
    hidden: int = 64
    seed: int = 0
    batches: int = 10
    backends: tuple[str, ...] = BACKENDS
    confine: bool = True
    kernel_config: str = "default"
    prefetch: int = 2

    def __post_init__(self):
        self.image = pathlib.Path(self.image)
        self.fanouts = tuple(int(k) for k in self.fanouts)
        unknown = [b for b in self.backends if b not in BACKENDS]
        if unknown:
            raise ValueError(f"Unknown backend {unknown[0]!r}; known: {', '.join(BACKENDS)}")
        if self.batches < 1:
            raise ValueError(f"Batches must be a positive integer, not {self.batches!r}")
        if self.memory_budget < 64 << 20:
            raise ValueError(f"Memory budget must be at least 64 MiB, not {self.memory_budget!r} bytes")

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["image"] = str(self.image)
        return out


def _gib(n: int | float) -> str:
    return f"{n / GIB:.2f} GiB"


def check_inputs(config: OutOfCoreConfig) -> int:
    """The image's size, after checking that it exists and is large enough for the budget.

    Raises
    ------
    OutOfCoreError
        No image at the path; an image smaller than ``MIN_IMAGE_RATIO`` x the budget.
    """
    if not config.image.exists():
        raise OutOfCoreError(f"no image at {config.image}: build one with `smartsage graph generate --kind rmat "
                             f"--scale 23 --edge-factor 16 --feature-dim 128 -o {config.image}` (or pass --build)")
    size = config.image.stat().st_size
    if size < MIN_IMAGE_RATIO * config.memory_budget:
        raise OutOfCoreError(f"image {config.image} is {_gib(size)}, less than {MIN_IMAGE_RATIO:g}x the memory budget "
                             f"of {_gib(config.memory_budget)}: lower --memory-budget to at most "
                             f"{_gib(size / MIN_IMAGE_RATIO)} or build a larger image")
    return size


# ------------------------------------------------------------------------------------- the child

def _batch_digest(batch) -> str:
    """A fingerprint of one batch's result: every backend must give the same.

    With aggregation the device's node list ends at the last frontier whose rows it returns (the last
    hop's samples are summed, not listed); a host-side sampler lists them too. The fingerprint covers
    what both return: that prefix, the counts, the self rows and the sums.
    """
    h = hashlib.blake2b(digest_size=12)
    rows = batch.self_rows.shape[0]
    for array in (batch.node_list[:rows], batch.counts, batch.self_rows, batch.sums):
        h.update(memoryview(array.tobytes()))
    return h.hexdigest()


def _worker(spec: dict) -> dict:
    """Run in the child: serial then pipelined batches of one backend; returns the per-batch records."""
    import numpy as np  # noqa: F401  (imported before the measurement starts)
    import torch

    from smartsage.spec.config import get_config

    from .memlimit import process_io
    from .train import TrainConfig, Trainer, open_sampler

    # One torch thread: the second core runs the prefetching thread's command (2-core machines).
    torch.set_num_threads(spec.get("torch_threads", 1))
    backend = spec["backend"]
    config = get_config(spec["kernel_config"])
    started = time.perf_counter()
    io_start = process_io()
    if backend == "device":
        sampler = open_sampler("golden", spec["image"], config)
    elif backend == "dram":
        sampler = open_sampler("dram", spec["image"], config)
    else:
        options = {"cold": False, "cold_each_batch": not spec["confine"]}
        if backend == "mmap":
            options["forget_each_batch"] = True
        sampler = open_sampler(backend, spec["image"], config, **options)
    setup = {"seconds": time.perf_counter() - started, "read_bytes": (process_io() - io_start).read_bytes}
    records: list[dict] = []
    state = {"io": process_io(), "acct": dataclasses.replace(sampler.io), "pipelined": False}

    def on_batch(step: dict) -> None:
        now, acct = process_io(), dataclasses.replace(sampler.io)
        kernel, before = now - state["io"], state["acct"]
        phases = getattr(sampler, "last_phases", None)
        batch = step["batch"]
        record = {
            "index": step["index"], "seed": step["seed"], "loss": step["loss"], "pipelined": state["pipelined"],
            "wait": step["wait"], "command": step["command"], "blocks": step["blocks"], "compute": step["compute"],
            "sampling": None if phases is None else phases["sampling"],
            "aggregation": None if phases is None else phases["aggregation"],
            "edges": int(batch.header.edges_sampled), "digest": _batch_digest(batch),
            "kernel": {"read_bytes": kernel.read_bytes, "read_calls": kernel.read_calls,
                       "major_faults": kernel.major_faults},
            "accounting": {f.name: (None if getattr(acct, f.name) is None
                                    else getattr(acct, f.name) - getattr(before, f.name))
                           for f in dataclasses.fields(acct)},
        }
        records.append(record)
        state["io"], state["acct"] = now, acct

    train = TrainConfig(epochs=2, batch_size=spec["batch_size"], fanouts=tuple(spec["fanouts"]), hidden=spec["hidden"],
                        seed=spec["seed"], max_eval_nodes=0, max_batches=spec["batches"], prefetch=0)
    try:
        trainer = Trainer(sampler, train, on_batch=on_batch)
        serial = trainer.train_epoch()
        trainer.config = dataclasses.replace(train, prefetch=spec["prefetch"])
        state["pipelined"] = True
        state["io"], state["acct"] = process_io(), dataclasses.replace(sampler.io)
        pipelined = trainer.train_epoch()
        image = sampler.image
        info = {"num_nodes": image.num_nodes, "num_edges": image.num_edges, "feature_dim": image.feature_dim,
                "feature_row_bytes": image.header.feature_row_bytes, "file_size": image.file_size,
                "train_nodes": int(trainer.train_nodes.size)}
    finally:
        sampler.close()
    return {"backend": backend, "setup": setup, "records": records, "image": info, "rss_anon_bytes": _rss_anon(),
            "serial_seconds": serial["seconds"], "pipelined_seconds": pipelined["seconds"],
            "torch_threads": torch.get_num_threads()}


def _rss_anon() -> int | None:
    """This process's anonymous resident memory (its own, not the page cache it maps), bytes."""
    try:
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def worker_main(argv: list[str] | None = None) -> int:
    """``python -m smartsage.host.outofcore SPEC.json OUT.json``: the child's entry point."""
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(pathlib.Path(argv[0]).read_text())
    result = _worker(spec)
    tmp = pathlib.Path(argv[1]).with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, argv[1])
    return 0


# ------------------------------------------------------------------------------------- the parent

def _drop_image_cache(path: pathlib.Path) -> None:
    from .backends.software import drop_page_cache

    os.sync()
    drop_page_cache(path)


def _run_child(config: OutOfCoreConfig, backend: str, workdir: pathlib.Path, log) -> dict:
    """One backend in a child process (confined unless dram or --no-cgroup); its result with counters."""
    from .memlimit import MemoryCgroup

    spec = {"backend": backend, "image": str(config.image), "kernel_config": config.kernel_config,
            "batch_size": config.batch_size, "fanouts": list(config.fanouts), "hidden": config.hidden,
            "seed": config.seed, "batches": config.batches, "prefetch": config.prefetch,
            "confine": config.confine}
    spec_path, out_path, err_path = (workdir / f"{backend}.{x}" for x in ("spec.json", "json", "log"))
    spec_path.write_text(json.dumps(spec))
    out_path.unlink(missing_ok=True)
    confined = config.confine and backend in CONFINED
    group = MemoryCgroup.create(config.memory_budget, name=f"smartsage-ooc-{os.getpid()}-{backend}",
                                io_of=config.image) if confined else None
    _drop_image_cache(config.image)
    started = time.perf_counter()
    try:
        with open(err_path, "w") as err:
            child = subprocess.run([sys.executable, "-m", "smartsage.host.outofcore", str(spec_path), str(out_path)],
                                   stdout=err, stderr=subprocess.STDOUT, preexec_fn=group.join if group else None,
                                   check=False)
        wall = time.perf_counter() - started
        counters = {"io": group.io(), "memory": group.memory()} if group else None
    finally:
        if group is not None:
            group.remove()
    if child.returncode != 0:
        tail = err_path.read_text()[-2000:].strip().splitlines()[-5:]
        if child.returncode == -signal.SIGKILL and confined:
            cause = (f"the {backend} child was killed (SIGKILL): its memory cgroup's limit of "
                     f"{_gib(config.memory_budget)} is below what the process itself needs; raise --memory-budget")
        else:
            cause = f"the {backend} child failed with exit status {child.returncode}"
        raise OutOfCoreError(f"{cause} (log: {err_path}): " + " | ".join(tail))
    result = json.loads(out_path.read_text())
    result.update(confined=confined, wall_seconds=wall, cgroup=counters)
    log(f"{backend}: {len(result['records'])} batches in {wall:.1f} s")
    return result


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _summarize(result: dict) -> dict:
    """Per-batch means of the serial batches by phase, of the pipelined batches' wall time, and I/O."""
    # The first serial batch warms up torch and the interpreter: kept in the JSON, left out of the means.
    serial = [r for r in result["records"] if not r["pipelined"]]
    serial = serial[1:] if len(serial) > 1 else serial
    # The first pipelined batch fills the pipeline (its command overlaps nothing): left out likewise.
    pipelined = [r for r in result["records"] if r["pipelined"]]
    pipelined = pipelined[1:] if len(pipelined) > 1 else pipelined
    phases = {p: _mean(r[p] for r in serial) for p in PHASES}
    if phases["sampling"] is None:  # the device stand-in: its command time is the model's, filled in later
        phases["sampling"] = phases["aggregation"] = None
    summary = {
        "phases": phases,
        "command": _mean(r["command"] for r in serial),
        "serial_batch": _mean(r["command"] + r["blocks"] + r["compute"] for r in serial),
        # The consumer's wall time per batch in the steady state: waiting for the batch, then training on it.
        "pipelined_batch": _mean(r["wait"] + r["blocks"] + r["compute"] for r in pipelined),
        "host_batch": _mean(r["blocks"] + r["compute"] for r in serial),
        "kernel": {k: _mean(r["kernel"][k] for r in serial) for k in ("read_bytes", "read_calls", "major_faults")},
        "accounting": {k: _mean(r["accounting"][k] for r in serial)
                       for k in ("storage_reads", "storage_pages", "storage_bytes", "bytes_to_host")},
        "edges": _mean(r["edges"] for r in serial),
    }
    if result.get("cgroup"):
        total = len(result["records"])
        io = result["cgroup"]["io"]
        summary["cgroup"] = {"read_bytes_per_batch": None if io["read_bytes"] is None else io["read_bytes"] / total,
                             "read_requests_per_batch": None if io["read_requests"] is None
                             else io["read_requests"] / total,
                             **result["cgroup"]["memory"]}
    return summary


#: Device variants the harness models: (SSD, attachment, on-board cache bytes). "this-disk" is the disk
#: the software baselines ran on, probed (so baselines and model share one device).
DEVICE_VARIANTS = (("this-disk", "flash", 0), ("this-disk", "p2p", 0), ("PM983", "flash", 0),
                   ("PM983", "p2p", 0), ("PM983", "p2p", GIB))


def _device_model(config: OutOfCoreConfig, results: dict, log, disk_probe=None) -> dict | None:
    """The device rows: each serial batch's command time modelled (:mod:`smartsage.host.perfmodel`) from
    its exact read trace, with the host phases (blocks, compute) measured on the device run's batches.

    Serial seconds per batch = device command + host; pipelined = the larger of the two (the next
    command runs while the host trains). The on-board cache persists across the batches of a variant.
    """
    try:
        from . import perfmodel
    except ImportError:  # a build without the model: the measured rows stand alone
        log("device: smartsage.host.perfmodel is not in this build: device time not modelled")
        return None
    from smartsage.spec.config import get_config
    from smartsage.spec.image import GraphImage, Split

    from .backends.software import drop_page_cache
    from .train import epoch_commands

    device = results["runs"].get("device")
    if not device or "records" not in device:
        return None
    kernel = get_config(config.kernel_config)
    # The disk the baselines just ran on, measured now (its figures move with the machine's load).
    probe = disk_probe if disk_probe is not None else perfmodel.probe_disk(config.image, cache=False)
    ssds = {"this-disk": _monotone(perfmodel.SsdModel.from_probe(probe)), "PM983": perfmodel.PM983}
    serial = [r for r in device["records"] if not r["pipelined"]]
    host = {r["index"]: r["blocks"] + r["compute"] for r in serial}
    phases = {r["index"]: (r["blocks"], r["compute"]) for r in serial}
    measured = [i for i in sorted(host) if i > 0] or sorted(host)  # batch 0 warms up (as in the summary)
    with GraphImage(config.image) as image:
        train_nodes = image.split_nodes(Split.TRAIN)
        commands = epoch_commands(train_nodes, config.seed, 0, config.batch_size, config.batches)
        traces = [perfmodel.read_trace(image, targets, config.fanouts, seed, aggregate=True, config=kernel)
                  for targets, seed in commands]
    drop_page_cache(config.image)
    rows = []
    for ssd_name, attachment, cache_bytes in DEVICE_VARIANTS:
        model = perfmodel.DeviceModel(kernel, ssds[ssd_name], attachment)
        cache = perfmodel.PageCache(cache_bytes)
        times = [model.batch_time(trace, cache) for trace in traces]
        hops = len(config.fanouts)
        per = []
        for i in measured:
            t = times[i]
            sampling = sum(p["time_s"] for p in t.phases[:hops])
            aggregation = sum(p["time_s"] for p in t.phases[hops:]) + t.pcie_s
            per.append({"sampling": sampling, "aggregation": aggregation, "blocks": phases[i][0],
                        "compute": phases[i][1], "serial": t.total_s + host[i],
                        "pipelined": max(t.total_s, host[i]), "to_host": t.bytes_to_host, "bound": t.bound,
                        "flash_reads": t.flash_reads, "cache_hits": t.cache_hits})
        row = {"name": f"device {ssd_name} {attachment}" + (f" {cache_bytes / GIB:g}GiB" if cache_bytes else ""),
               "ssd": ssd_name, "attachment": attachment, "cache_bytes": cache_bytes}
        for key in ("sampling", "aggregation", "blocks", "compute", "serial", "pipelined", "to_host",
                    "flash_reads", "cache_hits"):
            row[key] = _mean(p[key] for p in per)
        bounds = [p["bound"] for p in per]
        row["bound"] = max(set(bounds), key=bounds.count)
        rows.append(row)
        log(f"{row['name']}: {row['serial']:.3f} s/batch serial, {row['pipelined']:.3f} pipelined "
            f"(bound: {row['bound']})")
    rows += _baseline_rows(config, results, perfmodel, ssds, traces, measured, log)
    return {"probe": probe.to_dict(), "check": _model_check(results, rows, measured),
            "kernel_config": kernel.name, "clock_mhz": kernel.clock_mhz, "rows": rows}


def _monotone(ssd):
    """The probed IOPS table made non-decreasing in queue depth: a disk does not get slower with more reads
    in flight; a dip in the table is the probe's noise on a shared machine (the other load's I/O)."""
    if not ssd.iops_by_queue_depth:
        return ssd
    best, table = 0.0, []
    for depth, iops in sorted(ssd.iops_by_queue_depth):
        best = max(best, iops)
        table.append((depth, best))
    return dataclasses.replace(ssd, iops_by_queue_depth=tuple(table))


def _baseline_rows(config, results, perfmodel, ssds, traces, measured, log) -> list[dict]:
    """mmap and direct modelled on each SSD: their page and run counts from the traces, the host CPU of the
    command measured as the dram backend's (the same golden code with no I/O), the host phases measured
    on each baseline's own run. mmap's page cache across batches is the budget less the sampler's own
    anonymous memory (measured), as in the cgroup."""
    summary = results["summary"]
    if "dram" not in summary:
        return []
    cpu = {r["index"]: r["command"] for r in results["runs"]["dram"]["records"] if not r["pipelined"]}
    rows = []
    for backend in ("mmap", "direct"):
        run = results["runs"].get(backend)
        if not run or "records" not in run:
            continue
        host = {r["index"]: (r["blocks"], r["compute"]) for r in run["records"] if not r["pipelined"]}
        rss = run.get("rss_anon_bytes") or 0
        cache_bytes = max(0, config.memory_budget - rss) if run.get("confined") else 0
        for ssd_name, ssd in ssds.items():
            cache = perfmodel.PageCache(cache_bytes) if backend == "mmap" and cache_bytes else None
            per = []
            for i in range(len(traces)):
                if backend == "mmap":
                    t = perfmodel.mmap_time(traces[i], ssd, host_cpu_s=cpu[i], cache=cache)
                else:
                    t = perfmodel.direct_time(traces[i], ssd, host_cpu_s=cpu[i])
                if i in measured:
                    blocks, compute = host[i]
                    per.append({"command": t.total_s, "io": t.io_s, "blocks": blocks, "compute": compute,
                                "serial": t.total_s + blocks + compute, "to_host": t.bytes_to_host,
                                "pipelined": max(t.total_s, blocks + compute)})
            storage = "flash latency (QD1 faults)" if backend == "mmap" else "flash IOPS"
            row = {"name": f"{backend} {ssd_name}", "backend": backend, "ssd": ssd_name, "cache_bytes": cache_bytes,
                   "sampling": None, "aggregation": None,
                   "bound": storage if _mean(p["io"] for p in per) > _mean(p["command"] - p["io"] for p in per)
                   else "host software"}
            for key in ("command", "io", "blocks", "compute", "serial", "pipelined", "to_host"):
                row[key] = _mean(p[key] for p in per)
            rows.append(row)
            log(f"{row['name']} (model): {row['command']:.3f} s per command")
    return rows


def _model_check(results: dict, rows: list[dict], measured: list[int]) -> list[dict]:
    """The model of each baseline on this disk beside its measured command time (same batches)."""
    check = []
    for row in rows:
        if row.get("backend") in ("mmap", "direct") and row["ssd"] == "this-disk":
            run = results["runs"][row["backend"]]
            got = _mean(r["command"] for r in run["records"] if not r["pipelined"] and r["index"] in measured)
            check.append({"backend": row["backend"], "measured_s": got, "modelled_s": row["command"],
                          "residual": row["command"] / got - 1 if got else None})
    return check


def run_experiment(config: OutOfCoreConfig, workdir: pathlib.Path | None = None, log=print,
                   disk_probe=None) -> dict:
    """Run every backend of ``config`` and return the results (the JSON of ``smartsage bench outofcore``).

    ``disk_probe``: the :class:`~smartsage.host.disk_probe.DiskProbe` of the image's disk for the device
    model (default: measured after the runs).

    Raises
    ------
    OutOfCoreError
        Missing or too small image, a child that failed (its log named).
    CgroupError
        Confinement asked for but no memory cgroup can be made here (the message says what is missing).
    """
    from .memlimit import MemoryCgroup

    size = check_inputs(config)
    if config.confine:  # fail before any backend runs, with the one line that names what is missing
        MemoryCgroup.create(config.memory_budget, name=f"smartsage-ooc-{os.getpid()}-check").remove()
    else:
        log("--no-cgroup: no memory confinement; the image's pages are dropped from the page cache before every "
            "batch instead (an approximation of an image far larger than memory)")
    workdir = pathlib.Path(workdir or tempfile.mkdtemp(prefix="smartsage-ooc-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"image {config.image}: {_gib(size)}, {size / config.memory_budget:.1f}x the "
        f"{_gib(config.memory_budget)} budget")
    runs: dict[str, dict] = {}
    for backend in config.backends:
        if backend == "dram" and not _fits_in_memory(size):
            runs[backend] = {"backend": backend, "skipped": f"the image ({_gib(size)}) does not fit in the free "
                                                            f"memory of this machine"}
            log(f"dram: skipped ({runs[backend]['skipped']})")
            continue
        runs[backend] = _run_child(config, backend, workdir, log)
    ran = [r for r in runs.values() if "records" in r]
    digests = {r["backend"]: [x["digest"] for x in r["records"]] for r in ran}
    reference = next(iter(digests.values()), [])
    identical = all(d == reference for d in digests.values())
    if not identical:
        raise OutOfCoreError("backends returned different batches for the same commands: "
                             + ", ".join(f"{b}: {d[:2]}" for b, d in digests.items()))
    image = ran[0]["image"] if ran else {}
    batches_per_epoch = math.ceil(image.get("train_nodes", 0) / config.batch_size)
    results = {
        "config": config.to_dict(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": _machine(), "image": image, "image_bytes": size, "batches_per_epoch": batches_per_epoch,
        "identical_batches": identical, "runs": runs,
        "summary": {b: _summarize(r) for b, r in runs.items() if "records" in r},
    }
    model = _device_model(config, results, log, disk_probe)
    if model is not None:
        results["device_model"] = model
    return results


def _fits_in_memory(size: int) -> bool:
    try:
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return size < 0.8 * int(line.split()[1]) * 1024
    except OSError:
        pass
    return True


def _machine() -> dict:
    info = {"cpus": os.cpu_count()}
    try:
        info["load_average"] = list(os.getloadavg())
    except OSError:
        pass
    return info


# ------------------------------------------------------------------------------------- reports

def _rows(results: dict) -> list[dict]:
    """One row per backend (and per modelled device variant): per-batch seconds by phase and traffic."""
    rows = []
    for backend, s in results["summary"].items():
        if backend == "device":
            continue
        rows.append({"name": backend, "kind": "measured", **s["phases"], "serial": s["serial_batch"],
                     "pipelined": s["pipelined_batch"], "to_host": s["accounting"]["bytes_to_host"],
                     "storage_bytes": s["accounting"]["storage_bytes"], "kernel_read_bytes": s["kernel"]["read_bytes"],
                     "cgroup_read_bytes": (s.get("cgroup") or {}).get("read_bytes_per_batch"),
                     "major_faults": s["kernel"]["major_faults"]})
    for variant in (results.get("device_model") or {}).get("rows", []):
        rows.append({"kind": "modelled", **variant})
    return rows


def _fmt(value, spec=".3f") -> str:
    return "-" if value is None else format(value, spec)


def _mb(value) -> str:
    return "-" if value is None else f"{value / 1e6:,.1f}"


def markdown_report(results: dict, command: str) -> str:
    """The docs/ table of one run: per-batch time by phase, epoch time, traffic and the kernel's reads."""
    cfg = results["config"]
    epoch = results["batches_per_epoch"]
    lines = [
        f"Run {results['date']}: `{command}`",
        "",
        f"Image `{cfg['image']}`: {results['image'].get('num_nodes', 0):,} nodes, "
        f"{results['image'].get('num_edges', 0):,} CSR entries, {results['image'].get('feature_row_bytes', 0)} "
        f"feature bytes per node, {_gib(results['image_bytes'])}; memory budget {_gib(cfg['memory_budget'])} "
        f"({results['image_bytes'] / cfg['memory_budget']:.1f}x smaller than the image), "
        f"{CONFINEMENT_NOTE if cfg['confine'] else 'NO cgroup: page cache dropped before every batch'}"
        f"; batch {cfg['batch_size']}, fanouts {','.join(map(str, cfg['fanouts']))}, {cfg['batches']} serial + "
        f"{cfg['batches']} pipelined batches per backend (prefetch {cfg['prefetch']}); an epoch is {epoch:,} batches. "
        f"Machine: {results['machine'].get('cpus')} CPUs, load average "
        f"{', '.join(f'{x:.1f}' for x in results['machine'].get('load_average', []))} at the end.",
        "",
        "| backend | sampling s | aggregation s | blocks s | compute s | serial s/batch | pipelined s/batch "
        "| epoch (pipelined) | time / dram | speedup over mmap | to host MB/batch | bound by |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    rows = _rows(results)
    dram = next((r["pipelined"] for r in rows if r["name"] == "dram"), None)
    mmap = next((r["pipelined"] for r in rows if r["name"] == "mmap"), None)
    for r in rows:
        label = r["name"] + (" (model)" if r["kind"] == "modelled" else "")
        ratio = f"{r['pipelined'] / dram:.2f}x" if dram and r["pipelined"] else "-"
        speedup = f"{mmap / r['pipelined']:.2f}x" if mmap and r["pipelined"] else "-"
        hours = r["pipelined"] * epoch / 3600 if r["pipelined"] is not None else None
        lines.append(f"| {label} | {_fmt(r['sampling'])} | {_fmt(r['aggregation'])} | {_fmt(r['blocks'])} | "
                     f"{_fmt(r['compute'])} | {_fmt(r['serial'])} | {_fmt(r['pipelined'])} | "
                     f"{_fmt(hours, '.2f')} h | {ratio} | {speedup} | {_mb(r['to_host'])} | {r.get('bound', '')} |")
    lines += [
        "",
        "Reads per batch, the project's accounting beside the kernel's counters (serial batches):",
        "",
        "| backend | accounted storage MB | kernel read MB (/proc/self/io) | cgroup block reads MB | "
        "cgroup read requests | major faults | kernel / accounted |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for backend, s in results["summary"].items():
        acct, kern = s["accounting"]["storage_bytes"], s["kernel"]["read_bytes"]
        cg = s.get("cgroup") or {}
        ratio = f"{kern / acct:.2f}" if acct and kern is not None else "-"
        lines.append(f"| {backend} | {_mb(acct)} | {_mb(kern)} | {_mb(cg.get('read_bytes_per_batch'))} | "
                     f"{_fmt(cg.get('read_requests_per_batch'), ',.0f')} | {_fmt(s['kernel']['major_faults'], ',.0f')}"
                     f" | {ratio} |")
    check = (results.get("device_model") or {}).get("check") or []
    if check:
        lines += ["", "The performance model of each baseline on this disk (probed after the runs) beside its "
                  "measured command time, same batches:", "",
                  "| baseline | measured s/command | modelled s/command | residual |", "|---|---:|---:|---:|"]
        lines += [f"| {c['backend']} | {_fmt(c['measured_s'])} | {_fmt(c['modelled_s'])} | "
                  f"{_fmt(None if c['residual'] is None else 100 * c['residual'], '+.0f')}% |" for c in check]
        probe = results["device_model"]["probe"]
        lines += ["", f"Disk probe: {probe['qd1_latency_us']:.0f} us at queue depth 1, "
                  + ", ".join(f"{float(v):,.0f} IOPS at QD {k}" for k, v in probe["iops"].items())
                  + f", {probe['seq_bandwidth_gbs']:.2f} GB/s sequential, mmap fault {probe['mmap_fault_us']:.0f} us."]
    return "\n".join(lines) + "\n"


def plot_report(results: dict, path: pathlib.Path) -> None:
    """Epoch time per backend stacked by phase, and traffic to the host per batch (the paper's figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in _rows(results) if r["serial"] is not None][::-1]  # top to bottom as in the table
    epoch = results["batches_per_epoch"]
    names = [r["name"] + (" (model)" if r["kind"] == "modelled" else " (measured)") for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.42 * len(rows) + 1.6), sharey=True,
                                      gridspec_kw={"width_ratios": [3, 2]})
    left_edge = [0.0] * len(rows)
    colors = {"sampling": "#4c72b0", "aggregation": "#dd8452", "blocks": "#55a868", "compute": "#c44e52"}
    unsplit = [r.get("command") if r["sampling"] is None else None for r in rows]
    if any(unsplit):  # a modelled baseline's command: not split into sampling and aggregation
        widths = [(u or 0.0) * epoch / 3600 for u in unsplit]
        left.barh(names, widths, left=left_edge, label="command (model, unsplit)", color="#999999")
        left_edge = [b + w for b, w in zip(left_edge, widths, strict=True)]
    for phase in PHASES:
        widths = [(r[phase] or 0.0) * epoch / 3600 for r in rows]
        left.barh(names, widths, left=left_edge, label=phase, color=colors[phase])
        left_edge = [b + w for b, w in zip(left_edge, widths, strict=True)]
    piped = [(r["pipelined"] or 0) * epoch / 3600 for r in rows]
    left.scatter(piped, names, marker="|", s=300, color="black", zorder=3, label="pipelined epoch")
    for y, (serial, pipe) in enumerate(zip(left_edge, piped, strict=True)):
        left.text(max(serial, pipe), y, f"  {pipe:.2f} h", va="center", fontsize=7)
    left.set_xlabel("epoch time, hours (bars: serial phases; |: pipelined)")
    ratio = results["image_bytes"] / results["config"]["memory_budget"]
    left.set_title(f"GraphSAGE epoch ({epoch:,} batches), image {ratio:.1f}x the memory budget")
    left.legend(fontsize=7, loc="lower right")
    traffic = [(r["to_host"] or 0) / 1e6 for r in rows]
    right.barh(names, traffic, color="#8172b3")
    right.set_xscale("log")
    right.set_xlim(left=0.5)
    for y, mb in enumerate(traffic):
        right.text(max(mb, 0.5), y, f" {mb:,.1f}", va="center", fontsize=7)
    right.set_xlabel("MB to the host per batch (log)")
    right.set_title("traffic to the host")
    left.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(worker_main())
