"""``smartsage rtl package --config NAME --platform P -o DIR``: the Vitis packaging of the kernel (host/package.py)."""

from __future__ import annotations

import argparse
import pathlib

from smartsage.spec.config import CONFIGS, get_config

__all__ = ["register"]


def register(commands) -> None:
    """Add ``package`` to the ``smartsage rtl`` subcommands."""
    from .package import PLATFORMS

    p = commands.add_parser(
        "package", help="package_xo Tcl, v++ link config and README for a Vitis platform (SmartSSD, Alveo)",
        description="Write the exported kernel, kernel.xml, the Vivado package_xo script, the v++ link config "
                    "(one sp line per AXI master, the kernel clock) and a README with the commands to run.")
    p.add_argument("--config", default="default", choices=sorted(CONFIGS), help="kernel configuration")
    p.add_argument("--platform", default="smartssd",
                   help=f"one of {', '.join(PLATFORMS)} or a Vitis platform name (then --bank and --part)")
    p.add_argument("--bank", help="memory bank of every AXI master (default: the platform's, e.g. DDR[0])")
    p.add_argument("--part", help="FPGA part for the packaging project (default: the platform's)")
    p.add_argument("-o", "--output", type=pathlib.Path, required=True, help="output directory")
    p.set_defaults(func=_package)


def _package(args: argparse.Namespace) -> int:
    from .package import write_package

    files = write_package(get_config(args.config), args.output, args.platform, bank=args.bank, part=args.part)
    for kind, path in files.items():
        print(f"{kind}: {path}")
    print(f"next: cd {args.output} && vivado -mode batch -source package_xo.tcl (README.md)")
    return 0
