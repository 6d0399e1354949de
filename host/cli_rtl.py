"""``smartsage rtl``: export the kernel for Vitis, synthesize it, check it formally.

- ``smartsage rtl export --config NAME -o DIR``: ``smartsage_kernel.v``, ``kernel.xml``, ``config.json``
  (and, with ``--lint``, Verilator's lint summary).
- ``smartsage rtl synth [--config NAME ...] -o DIR``: netlists, resource table vs the KU15P and the ECP5
  timing proxy (``DIR/report.md``); ``nox -s synth`` runs this. With ``--seed S`` (repeatable): the
  proxy on each placement seed, synthesized once, with the seeds' mean. With ``--salt K`` (repeatable,
  default 0): the proxy on each name salt, the harness instance named ``kernel_`` and K ``s`` instead of
  ``kernel`` (the same logic, another netlist), synthesized once per salt and placed once per seed, with
  the mean over salts x seeds: the names alone move the figure as much as the seed does, so designs are
  ranked on that mean. With ``--block NAME``: one block alone on the timing proxy (minutes instead of
  the whole kernel's tens of minutes), on each ``--seed`` and ``--salt`` too. A run whose place and
  route fails (nextpnr's error, or its time out) is reported as failed beside the others' figures, and
  the command then exits with status 1.
- ``smartsage rtl formal [--check NAME ...] -o DIR``: the SymbiYosys checks of smartsage.rtl.formal.
- ``smartsage rtl package --config NAME --platform P -o DIR``: package_xo Tcl, v++ link config and README
  for Vitis (smartsage.host.cli_package).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from smartsage.spec.config import CONFIGS, get_config

__all__ = ["register"]


def register(subparsers) -> None:
    """Add the ``rtl`` command group to the ``smartsage`` parser."""
    parser = subparsers.add_parser("rtl", help="export, synthesize and formally check the kernel's RTL")
    commands = parser.add_subparsers(dest="rtl_command", required=True, metavar="SUBCOMMAND")

    export = commands.add_parser("export", help="Verilog with Vitis port names and kernel.xml for package_xo")
    export.add_argument("--config", default="default", choices=sorted(CONFIGS), help="kernel configuration")
    export.add_argument("-o", "--output", type=pathlib.Path, required=True, help="output directory")
    export.add_argument("--lint", action="store_true", help="also run Verilator --lint-only -Wall")
    export.set_defaults(func=_export)

    synth = commands.add_parser("synth", help="yosys synth_xilinx resources vs KU15P and nextpnr-ecp5 timing")
    synth.add_argument("--config", action="append", choices=sorted(CONFIGS),
                       help="configuration to synthesize (repeatable; default: small and default)")
    synth.add_argument("--timing-config", action="append", choices=sorted(CONFIGS),
                       help="configuration for the ECP5 timing proxy (repeatable; default: small)")
    synth.add_argument("--no-timing", action="store_true", help="skip the ECP5 timing proxy")
    synth.add_argument("--seed", action="append", type=int, metavar="S", dest="seeds",
                       help="nextpnr placement seed of the timing proxy (repeatable: the kernel is synthesized "
                            "once and placed and routed once per seed, and the report gives the mean; default 1)")
    synth.add_argument("--salt", action="append", type=int, metavar="K", dest="salts",
                       help="name salt of the timing proxy: its harness instance is named kernel_ and K times s "
                            "(0, the default: kernel, the original names). Yosys' netlist depends on that name's "
                            "length, so the same logic routes differently on each salt, as on each --seed; rank "
                            "designs on the mean over salts x seeds (repeatable: synthesized once per salt, placed "
                            "and routed once per seed)")
    synth.add_argument("--block", action="append", metavar="BLOCK",
                       help="time only this block of the first --config (default small), alone, on the ECP5 "
                            "proxy (repeatable; host.synth.TIMING_BLOCKS, an unknown name lists them)")
    synth.add_argument("-o", "--output", type=pathlib.Path, required=True, help="output directory")
    synth.set_defaults(func=_synth)

    from . import cli_package
    cli_package.register(commands)

    formal = commands.add_parser(
        "formal", help="SymbiYosys checks: control, read engines, writers, the sequencer's write windows")
    formal.add_argument("--check", action="append", help="check to run (repeatable; default: all)")
    formal.add_argument("-o", "--output", type=pathlib.Path, required=True, help="work directory")
    formal.add_argument("-j", "--jobs", type=_positive_int, default=None,
                        help="checks run at once (default: one per CPU; each check is one solver process)")
    formal.set_defaults(func=_formal)


def _run_formal_check(name: str, workdir: pathlib.Path):
    from smartsage.rtl import formal

    return formal.run_check(formal.CHECKS[name], workdir)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _export(args: argparse.Namespace) -> int:
    from smartsage.host import synth

    config = get_config(args.config)
    files = synth.export(config, args.output)
    for kind, path in files.items():
        print(f"{kind}: {path}")
    if args.lint:
        report = synth.lint(files["verilog"])
        waived = ", ".join(f"{k} {v}" for k, v in sorted(report.waived.items()))
        print(f"lint: {len(report.findings)} findings; waived: {waived}")
        for line in report.findings:
            print(line)
        return 1 if report.findings else 0
    return 0


def _synth(args: argparse.Namespace) -> int:
    from smartsage.host import synth

    if args.seeds and args.no_timing:
        raise ValueError("--seed sweeps the timing proxy; it does not apply with --no-timing")
    if args.salts and args.no_timing:
        raise ValueError("--salt sweeps the timing proxy; it does not apply with --no-timing")
    seeds, salts = args.seeds or (1,), args.salts or (0,)
    if args.block:
        from smartsage.host.timing_paths import paths_markdown

        config = get_config((args.config or ["small"])[0])
        reports = synth.time_blocks(args.block, config, args.output, seeds=seeds, salts=salts)
        for report in reports:
            salt = f", salt {report.salt}" if args.salts else ""
            run = f"{report.config}{f' (seed {report.seed}{salt})' if args.seeds or args.salts else ''}"
            if report.failure is not None:
                print(f"{run}: failed: {report.failure}")
                continue
            print(f"{run}: "
                  f"{report.fmax_mhz:.1f} MHz (target {report.target_mhz:g}, speed grade "
                  f"{report.speed_grade}); critical path {report.critical_from} -> {report.critical_to}, "
                  f"{report.logic_levels} logic levels, {report.critical_ns:.1f} ns")
            if report.paths:
                print(paths_markdown(report.paths))
        if len(seeds) * len(salts) > 1:
            which = "Placement seeds and name salts: " if any(salts) else "Placement seeds: "
            for name in args.block:
                print(which + synth.seed_summary([r for r in reports if r.config == f"{config.name} {name}"]))
        return _failed_runs(reports)
    configs = args.config or ["small", "default"]
    timing = [] if args.no_timing else (args.timing_config or ["small"])
    results = synth.run_synth(args.output, configs, timing, seeds=seeds, salts=salts)
    print((args.output / "report.md").read_text(), end="")
    return _failed_runs(results["timing"])


def _failed_runs(reports) -> int:
    """The exit status of a timing run: 1 where a place and route failed (each failed run is in the
    report, the others' figures with it), after saying so on stderr."""
    failed = [r for r in reports if r.failure is not None]
    for r in failed:
        print(f"error: the place and route of {r.config} (seed {r.seed}, salt {r.salt}) failed: {r.failure}",
              file=sys.stderr)
    return 1 if failed else 0


def _formal(args: argparse.Namespace) -> int:
    from smartsage.rtl import formal

    names = args.check or list(formal.CHECKS)
    unknown = [n for n in names if n not in formal.CHECKS]
    if unknown:
        raise ValueError(f"Unknown formal check(s) {', '.join(unknown)}; known: {', '.join(formal.CHECKS)}")
    import os
    from concurrent.futures import ProcessPoolExecutor

    # the checks are independent solver runs: side by side, reported in order. Processes, not threads:
    # each check's CPU time is its process's children's (resource.RUSAGE_CHILDREN), one check at a time
    failed = 0
    with ProcessPoolExecutor(max_workers=args.jobs or os.cpu_count() or 1) as pool:
        runs = [(name, pool.submit(_run_formal_check, name, args.output / name)) for name in names]
        for name, run in runs:
            check, result = formal.CHECKS[name], run.result()
            print(f"{name}: {result.status} ({check.mode}, {check.engine}, depth {check.depth}, "
                  f"{result.seconds:.1f} s, {result.cpu_seconds:.1f} s CPU)", flush=True)
            failed += not result.passed
    return 1 if failed else 0
