"""Run a co-simulation plan from Python (pytest, the RTL backend, the benchmark).

:func:`run_plan` builds (or reuses) the Verilator model of the configuration, writes the plan to a
private directory, runs :mod:`smartsage.cosim.kernel_cocotb` through ``cocotb_tools.runner`` and
returns the results. Each call has its own test directory, so calls may run in parallel (pytest-xdist
workers) against one shared build.

Environment: ``SMARTSAGE_WAVES=1`` records an FST waveform (a separate build with tracing) into the
test directory, which is then kept and printed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from smartsage.spec.config import KernelConfig

from .build import TOP_NAME, build_kernel, setup_verilator
from .scoreboard import CommandSpec
from .storage import IDEAL, SsdTiming

__all__ = ["PlanResult", "run_plan", "CosimFailure"]

DEFAULT_IMAGE_BASE = 1 << 36


class CosimFailure(AssertionError):
    """A co-simulation ended with scoreboard mismatches, a hang or a crash."""


@dataclasses.dataclass
class PlanResult:
    results: list[dict]
    wall_s: float
    cycles: int
    seed: int
    test_dir: Path | None


def run_plan(config: KernelConfig, image_path, commands: list[CommandSpec], *, timing: SsdTiming = IDEAL,
             backpressure: float = 0.0, seed: int | None = None, watchdog_cycles: int = 2_000_000,
             image_base: int = DEFAULT_IMAGE_BASE, waves: bool | None = None, check: bool = True,
             raw_cycles: int = 0, raw_memory=None, raw_descriptor: int = 0,
             raw_image_offset: int = 0) -> PlanResult:
    """Co-simulate ``commands`` on the kernel built for ``config``.

    Parameters
    ----------
    config : KernelConfig
    image_path :
        Storage image (memory-mapped by the storage model).
    commands : list of CommandSpec
    timing : SsdTiming
        Storage timing (default: ideal memory).
    backpressure : float
        Probability of an idle/stall cycle on every AXI channel.
    seed : int, optional
        Seed of the backpressure generators (drawn and printed when None).
    watchdog_cycles : int
        A command that raises no ap_done within this many cycles fails (no test hangs).
    waves : bool, optional
        Record FST waves (default: ``SMARTSAGE_WAVES`` environment variable).
    check : bool
        Raise :class:`CosimFailure` on any scoreboard mismatch (else return the results).
    raw_cycles : int
        Instead of commands, run the idle kernel's clock this many cycles with no Python per cycle
        (raw Verilator speed of the same build; ``wall_s``/``cycles`` of the result).
    raw_memory, raw_descriptor, raw_image_offset :
        Instead of laid-out commands, run the one command whose descriptor lies at
        ``raw_descriptor`` of this device memory (a ``.npy`` path of a uint8 array, updated in place),
        with the image argument ``image_base + raw_image_offset`` (the driver's interface).
    """
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 31)
    print(f"cosim seed {seed} (config {config.name}, {len(commands)} commands)")
    if waves is None:
        waves = os.environ.get("SMARTSAGE_WAVES", "") not in ("", "0")
    build = build_kernel(config, waves=waves)
    setup_verilator()
    test_dir = Path(tempfile.mkdtemp(prefix="smartsage-cosim-"))
    plan = {
        "config": config.to_json(), "image": os.fspath(Path(image_path).resolve()), "seed": seed,
        "timing": timing.to_dict(), "backpressure": backpressure, "watchdog_cycles": watchdog_cycles,
        "image_base": image_base, "commands": [c.to_dict() for c in commands], "raw_cycles": raw_cycles,
        "raw_memory": os.fspath(raw_memory) if raw_memory is not None else None,
        "raw_descriptor": raw_descriptor, "raw_image_offset": raw_image_offset,
    }
    plan_path = test_dir / "plan.json"
    results_path = test_dir / "results.json"
    plan_path.write_text(json.dumps(plan))
    from cocotb_tools.runner import get_runner

    runner = get_runner("verilator")
    error = None
    try:
        runner.test(test_module="smartsage.cosim.kernel_cocotb", hdl_toplevel=TOP_NAME,
                    hdl_toplevel_lang="verilog", build_dir=build.directory, test_dir=test_dir,
                    results_xml=str(test_dir / "results.xml"), waves=waves,
                    extra_env={"SMARTSAGE_COSIM_PLAN": str(plan_path),
                               "SMARTSAGE_COSIM_RESULTS": str(results_path)},
                    log_file=test_dir / "sim.log")
    except BaseException as err:  # pytest-mode runner raises on a failed cocotb test
        error = err
    if not results_path.exists():
        log = (test_dir / "sim.log").read_text(errors="replace")[-4000:] if (test_dir / "sim.log").exists() else ""
        raise CosimFailure(f"co-simulation produced no results (seed {seed}); log tail:\n{log}") from error
    summary = json.loads(results_path.read_text())
    from cocotb_tools.check_results import get_results

    _, failed = get_results(test_dir / "results.xml")
    problems = [p for r in summary["results"] for p in r["problems"]]
    keep = waves or failed or problems
    result = PlanResult(summary["results"], summary["wall_s"], summary["cycles"], seed,
                        test_dir if keep else None)
    if not keep:
        shutil.rmtree(test_dir, ignore_errors=True)
    else:
        print(f"cosim directory kept: {test_dir}")
    expected_results = 1 if raw_memory is not None else len(commands)
    if check and (failed or problems or (not raw_cycles and len(summary["results"]) != expected_results)):
        raise CosimFailure(f"co-simulation failed (seed {seed}, replay with the same commands and seed): "
                           + " | ".join(problems or ["cocotb test failed"]))
    return result
