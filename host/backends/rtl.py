"""The ``rtl`` sampling backend: one command executed by the co-simulated kernel (cocotb + Verilator).

``smartsage sample IMAGE --backend rtl`` goes through :func:`sample`, which lays the command out in a
simulated device memory with worst-case output buffers (as the driver sizes them), runs the
Verilator model of the kernel built for ``config`` (cached per configuration) with ideal storage,
and returns the node list and counts *read back from the simulated device memory* in the golden
model's :class:`~smartsage.spec.golden.GoldenResult` form, so the CLI writes the same .npz as
``--backend golden``. The co-simulation also checks every command against the golden model.

AGGREGATE is not built into the kernel yet (issue 6): the kernel refuses such a descriptor with
``BAD_DESCRIPTOR`` at the ``flags`` offset, and so does this backend.
"""

from __future__ import annotations

import numpy as np

from smartsage.cosim.runner import run_plan
from smartsage.cosim.scoreboard import CommandSpec
from smartsage.host.driver import output_bounds
from smartsage.spec.config import CONFIGS, KernelConfig
from smartsage.spec.descriptor import Flags, ResultHeader
from smartsage.spec.golden import GoldenResult, SampleStats

__all__ = ["sample"]

#: Watchdog budget per worst-case sampled edge (the one-lane kernel needs ~20 cycles per edge).
CYCLES_PER_EDGE_BOUND = 200


def sample(image, targets, fanouts, seed: int, aggregate: bool = False,
           config: KernelConfig = CONFIGS["default"], seed_backpressure: int = 1) -> GoldenResult:
    """Run one command on the co-simulated kernel; arguments as :func:`smartsage.spec.golden.sample`.

    Raises
    ------
    smartsage.cosim.runner.CosimFailure
        The kernel disagreed with the golden model, hung or the simulator failed.
    """
    targets = np.asarray(targets)
    fanouts = [int(k) for k in fanouts]
    nodes_capacity, counts_capacity, _ = output_bounds(int(targets.size), tuple(fanouts))
    spec = CommandSpec(targets=[int(t) for t in targets], fanouts=fanouts, seed=int(seed),
                       flags=int(Flags.AGGREGATE) if aggregate else 0,
                       nodes_capacity=max(nodes_capacity, 1), counts_capacity=counts_capacity)
    watchdog = 1_000_000 + CYCLES_PER_EDGE_BOUND * nodes_capacity
    result = run_plan(config, image.path, [spec], seed=seed_backpressure, watchdog_cycles=watchdog).results[0]
    header = ResultHeader(**result["header"])
    id_dtype = image.header.index_dtype.numpy_dtype
    return GoldenResult(header=header, node_list=np.asarray(result["node_list"], dtype=id_dtype),
                        counts=np.asarray(result["counts"], dtype=np.uint32), self_rows=None, sums=None,
                        stats=SampleStats(storage_bytes=header.storage_bytes))
