"""Sessions: ``nox -s tests`` (the README's test command), ``lint``, ``demo`` (the main job), ``cosim``, ``bench``,
``outofcore`` (training on an image larger than the memory given; docs/outofcore.md).

Every session installs the project with its extras into its own virtual environment, so a fresh machine
needs only Python 3.11 and nox. ``torch==2.13.0`` is pinned in pyproject.toml: it installs the CPU wheel that
lies on the project's machines (see ../shared/TOOLCHAIN.md).
"""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "venv"
PYTHON = "3.11"


def _install(session: nox.Session, extras: str = "dev") -> None:
    session.install("-e", f".[{extras}]")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The test suite on 2 cores (CI's selection: everything but @slow). Extra args go to pytest."""
    _install(session)
    workers = os.environ.get("SMARTSAGE_TEST_WORKERS", "2")
    args = session.posargs or ["-m", "not slow"]
    session.run("python", "-m", "pytest", "-n", workers, "--durations=15", *args)


@nox.session(python=PYTHON)
def slow(session: nox.Session) -> None:
    """The long randomized runs (@slow): bigger graphs, millions of adder operand pairs."""
    _install(session)
    session.run("python", "-m", "pytest", "-n", "2", "-m", "slow", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.5")
    session.run("ruff", "check", ".")


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The main job on the embedded default graph (see README)."""
    _install(session)
    session.run("smartsage", "demo", *session.posargs)


@nox.session(python=PYTHON)
def cosim(session: nox.Session) -> None:
    """Only the RTL co-simulation tests (cocotb on Verilator)."""
    _install(session)
    session.run("python", "-m", "pytest", "-n", "2", "-m", "sim", *session.posargs)


@nox.session(python=PYTHON)
def synth(session: nox.Session) -> None:
    """Export, lint, synth_xilinx resources vs KU15P, ECP5 timing proxy, formal -> build/synth (docs/synthesis.md)."""
    _install(session)
    session.run("smartsage", "rtl", "synth", "-o", "build/synth", *session.posargs)
    session.run("smartsage", "rtl", "formal", "-o", "build/synth/formal")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks whose figures docs/benchmarks.md and docs/performance-rtl.md record.

    ``smartsage bench``: image build rate, golden vs HLS sampling rate, bytes to the host by backend;
    ``python -m smartsage.cosim.bench``: the RTL kernel's cycles per edge, IOPS under the PM983 model,
    co-simulation speed. Pass ``-- --scale 16`` etc. to the first.
    """
    _install(session)
    session.run("smartsage", "bench", "-o", "docs/benchmarks.md", *session.posargs)
    session.run("python", "-m", "smartsage.cosim.bench", "--config", "default", "-o", "build/bench/rtl.json")


@nox.session(python=PYTHON)
def outofcore(session: nox.Session) -> None:
    """Training on an image 5x larger than the memory each backend is given (docs/outofcore.md).

    Builds the R-MAT scale-23 image with 128 fp32 features (5.1 GiB) if it is not there, then runs
    ``smartsage bench outofcore`` with a 1 GiB memory cgroup per backend (root, or a delegated cgroup,
    is needed; ``-- --no-cgroup`` drops the page cache per batch instead). About 20 minutes on the
    project's 2-core machine. Pass ``-- --scale 24 --image build/outofcore/rmat24.img`` for a larger one.
    """
    _install(session)
    session.run("smartsage", "bench", "outofcore", "--build", "-o", "docs/outofcore/rmat23.md", *session.posargs)
