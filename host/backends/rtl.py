"""The ``rtl`` backends: commands executed by the co-simulated kernel (cocotb + Verilator).

- :class:`RtlBackend`: the driver's :class:`~smartsage.host.device.KernelBackend` (``execute`` one
  command on the device memory the driver laid out), for ``smartsage train --backend rtl`` and the
  device API;
- :func:`sample`: the ``smartsage sample --backend rtl`` entry point (below);
- :func:`benchmark`: the RTL figures of ``smartsage bench --rtl`` (smartsage.cosim.bench).

``smartsage sample IMAGE --backend rtl`` goes through :func:`sample`, which lays the command out in a
simulated device memory with worst-case output buffers (as the driver sizes them), runs the
Verilator model of the kernel built for ``config`` (cached per configuration) with ideal storage,
and returns the node list and counts (and, with AGGREGATE, the self rows and neighbor sums) *read
back from the simulated device memory* in the golden model's
:class:`~smartsage.spec.golden.GoldenResult` form, so the CLI writes the same .npz as
``--backend golden``. The co-simulation also checks every command against the golden model.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from smartsage.cosim.runner import run_plan
from smartsage.cosim.scoreboard import CommandSpec
from smartsage.host.driver import output_bounds
from smartsage.spec.config import CONFIGS, KernelConfig
from smartsage.spec.descriptor import Flags, ResultHeader
from smartsage.spec.golden import GoldenResult, SampleStats

__all__ = ["sample", "RtlBackend", "benchmark", "storage_stats"]

#: Watchdog budget per worst-case sampled edge (the kernel needs ~1.3-2 cycles per edge, plus
#: storage latency; the bound only has to catch a hang).
CYCLES_PER_EDGE_BOUND = 200
#: Watchdog budget per feature element the aggregation reads (with ideal memory it needs 1/16 cycle per
#: fp32 element at 512 bits, and at most ~8 per row of one element: adder latency, id reads).
CYCLES_PER_ELEMENT_BOUND = 50


def sample(image, targets, fanouts, seed: int, aggregate: bool = False,
           config: KernelConfig = CONFIGS["default"], seed_backpressure: int = 1, waves=None) -> GoldenResult:
    """Run one command on the co-simulated kernel; arguments as :func:`smartsage.spec.golden.sample`.

    ``waves``: a path: record the command's waveform there (a separately built, traced model: VCD, or FST
    where the build found ``lz4.h``; the file's suffix is then the simulator's, ``.vcd`` or ``.fst``).

    Raises
    ------
    smartsage.cosim.runner.CosimFailure
        The kernel disagreed with the golden model, hung or the simulator failed.
    """
    targets = np.asarray(targets)
    fanouts = [int(k) for k in fanouts]
    nodes_capacity, counts_capacity, last = output_bounds(int(targets.size), tuple(fanouts))
    dim, dtype = image.header.feature_dim, image.header.feature_dtype
    spec = CommandSpec(targets=[int(t) for t in targets], fanouts=fanouts, seed=int(seed),
                       flags=int(Flags.AGGREGATE) if aggregate else 0,
                       nodes_capacity=max(nodes_capacity, 1), counts_capacity=counts_capacity,
                       self_capacity=last * dim * dtype.itemsize, sum_capacity=last * dim * 4)
    watchdog = 1_000_000 + CYCLES_PER_EDGE_BOUND * nodes_capacity
    if aggregate:  # the rows of the last frontier and of its samples (docs/performance-rtl.md section 5)
        watchdog += CYCLES_PER_ELEMENT_BOUND * (last * (1 + fanouts[-1])) * max(dim, 1)
    plan = run_plan(config, image.path, [spec], seed=seed_backpressure, watchdog_cycles=watchdog,
                    waves=waves is not None)
    result = plan.results[0]
    if waves is not None:
        _keep_waves(plan.test_dir, waves)
    header = ResultHeader(**result["header"])
    id_dtype = image.header.index_dtype.numpy_dtype
    self_rows = sums = None
    if aggregate and header.status == 0:
        rows = _last_frontier(result["counts"], targets.size, len(fanouts))
        self_rows = np.frombuffer(bytes.fromhex(result["self_rows"]), dtype.numpy_storage)[:rows * dim]
        self_rows = self_rows.reshape(rows, dim).copy()
        sum_dtype = np.int32 if dtype.cli_name == "int8" else np.float32
        sums = np.frombuffer(bytes.fromhex(result["sums"]), sum_dtype)[:rows * dim].reshape(rows, dim).copy()
    return GoldenResult(header=header, node_list=np.asarray(result["node_list"], dtype=id_dtype),
                        counts=np.asarray(result["counts"], dtype=np.uint32), self_rows=self_rows, sums=sums,
                        stats=storage_stats(result, header.storage_bytes))


def _keep_waves(test_dir, target) -> None:
    """Move the simulator's dump out of the kept co-simulation directory to ``target``; remove the rest."""
    import pathlib
    import shutil

    test_dir = pathlib.Path(test_dir)
    dumps = [test_dir / name for name in ("dump.fst", "dump.vcd") if (test_dir / name).exists()]
    if not dumps:
        raise RuntimeError(f"the traced co-simulation wrote no dump.vcd/dump.fst (see {test_dir})")
    target = pathlib.Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(dumps[0], target)
    shutil.rmtree(test_dir, ignore_errors=True)


def storage_stats(result: dict, storage_bytes: int | None = None) -> SampleStats:
    """The storage accounting of one co-simulated command (a :func:`~smartsage.cosim.runner.run_plan` result).

    ``read_requests``: the AXI read transactions the kernel issued on ``m_axi_storage`` (AR handshakes,
    whatever their burst length, the image header words included); ``storage_pages``: the distinct 4 KiB
    storage pages they touched; ``storage_bytes``: the result header's count when given, else the bytes
    the transactions requested (beats x beat size), which the kernel's own counter equals.
    """
    return SampleStats(read_requests=int(result["storage_reads"]), storage_pages=int(result["storage_pages"]),
                       storage_bytes=int(result["storage_read_bytes"] if storage_bytes is None else storage_bytes))


def _last_frontier(counts, num_targets: int, hops: int) -> int:
    """|F_{L-1}| from the counts of every hop (hop h has |F_h| entries; |F_{h+1}| = |F_h| + their sum)."""
    frontier, start = num_targets, 0
    for _ in range(hops - 1):
        frontier, start = frontier + int(sum(counts[start:start + frontier])), start + frontier
    return frontier


class RtlBackend:
    """Executes each command on the co-simulated kernel, on the driver's own device memory.

    The memory goes to the simulation and back through a ``.npy`` file (one Verilator process per
    command: about a second of start-up). The co-simulation compares the outcome with the golden
    model's ``run_command`` on the same memory and raises :class:`~smartsage.cosim.runner.CosimFailure`
    on any difference (AGGREGATE included, see docs/rtl.md). The image
    lies at storage address 0; a command naming another storage address is run as is (the kernel
    then finds no image header there), without the golden comparison, which assumes address 0.
    """

    name = "rtl"
    #: ``last_stats.storage_pages`` is counted (the storage model's distinct 4 KiB pages per command).
    counts_pages = True

    def __init__(self, seed_backpressure: int = 1, watchdog_cycles: int = 50_000_000):
        self.seed_backpressure = seed_backpressure
        self.watchdog_cycles = watchdog_cycles
        self.last_cycles = 0
        #: Storage accounting of the last command (:func:`storage_stats`: the AXI reads it issued).
        self.last_stats = SampleStats(storage_pages=0)

    def execute(self, image, memory: np.ndarray, image_addr: int, descriptor_addr: int,
                config: KernelConfig) -> None:
        with tempfile.TemporaryDirectory(prefix="smartsage-rtl-") as workdir:
            path = os.path.join(workdir, "memory.npy")
            np.save(path, memory)
            result = run_plan(config, image.path, [], seed=self.seed_backpressure, image_base=0,
                              watchdog_cycles=self.watchdog_cycles, raw_memory=path,
                              raw_descriptor=descriptor_addr, raw_image_offset=image_addr,
                              check=image_addr == 0)
            memory[:] = np.load(path)
        self.last_cycles = result.results[0]["cycles"] if result.results else 0
        self.last_stats = storage_stats(result.results[0]) if result.results else SampleStats(storage_pages=0)


def benchmark(image_path, fanouts, batch: int, config: KernelConfig = CONFIGS["default"]) -> dict:
    """Cycles per edge (ideal memory), PM983 page-read rate, bytes to the host against mmap and the
    co-simulation speed on ``image_path`` (:func:`smartsage.cosim.bench.measure_image`)."""
    from smartsage.cosim.bench import measure_image

    return measure_image(config, image_path, tuple(int(k) for k in fanouts), batch,
                         ssd_batch=min(batch, 256), ssd_fanouts=tuple(int(k) for k in fanouts)[:1])
