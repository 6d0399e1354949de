"""The ``smartsage`` command line.

Each command group lives in its own module (``cli_graph``, ``cli_sample``, ...) exposing
``register(subparsers)``; this module only wires them together and turns the project's typed
errors into one clear line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from smartsage.spec.image import ImageFormatError

#: Command modules, each with ``register(subparsers)``. A module that fails to import is a bug.
COMMAND_MODULES = (
    "smartsage.host.cli_graph",
    "smartsage.host.cli_sample",
    "smartsage.host.cli_train",
    "smartsage.host.cli_demo",
    "smartsage.host.cli_bench",
    "smartsage.host.cli_rtl",
    "smartsage.host.cli_model",
)

#: Exceptions that are the user's input at fault: printed as one line, exit status 2.
USER_ERRORS: tuple[type[BaseException], ...] = (ImageFormatError, ValueError, FileNotFoundError,
                                                 PermissionError, IsADirectoryError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="smartsage",
        description="Near-storage neighbor sampling and aggregation for GraphSAGE training.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:  # command group not built yet
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as err:
        prefix = f"{getattr(args, 'image', '')}: " if isinstance(err, ImageFormatError) and getattr(
            args, "image", None) else ""
        print(f"smartsage: error: {prefix}{err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("smartsage: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
