"""Bit-reproducible training: the same seed gives the same losses run after run, on every backend.

Every backend returns the same batches for the same seed (the counter-based RNG, docs/spec.md), so
what varies between runs is torch's CPU arithmetic: with several intra-op threads some kernels
split their reductions differently from run to run (two identical runs were seen to differ at
1e-8 in the epoch loss). :func:`make_deterministic` fixes the thread count (1 by default) and
turns on ``torch.use_deterministic_algorithms``, which raises on any op that has no deterministic
implementation instead of silently varying. Both settings are process-wide.

Cost: measured in docs/performance.md ("Reproducible training"); on this project's 2-core
machine one thread was faster than two, because the pipeline's prefetch thread and other jobs
already compete for the cores.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch

__all__ = ["make_deterministic", "deterministic", "TorchSettings"]


@dataclasses.dataclass(frozen=True)
class TorchSettings:
    """The process-wide torch settings that :func:`make_deterministic` changes."""

    deterministic_algorithms: bool
    num_threads: int

    @classmethod
    def current(cls) -> TorchSettings:
        return cls(torch.are_deterministic_algorithms_enabled(), torch.get_num_threads())

    def apply(self) -> None:
        torch.use_deterministic_algorithms(self.deterministic_algorithms)
        torch.set_num_threads(self.num_threads)


def make_deterministic(threads: int | None = 1) -> TorchSettings:
    """Deterministic algorithms and a fixed intra-op thread count. Returns the previous settings.

    ``threads``: torch's intra-op threads (``None``: keep the current count, which is then what a
    rerun must use too to reproduce the losses bit for bit).
    """
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ValueError(f"Thread count must be a positive integer, not {threads!r}")
    previous = TorchSettings.current()
    TorchSettings(True, previous.num_threads if threads is None else threads).apply()
    return previous


@contextlib.contextmanager
def deterministic(threads: int | None = 1):
    """:func:`make_deterministic` for the duration of a ``with`` block (settings restored after)."""
    previous = make_deterministic(threads)
    try:
        yield
    finally:
        previous.apply()
