"""The host's batch pipeline: the next mini-batch's command runs while the model trains on this one.

Training alternates two kinds of work: preparing a batch (one device command, or a software sampler's
sampling and gathering: storage reads and numpy) and computing on it (block building, forward,
backward, optimizer step: torch). They use different resources, so :func:`sampled_batches` runs the
commands in a background thread, at most ``depth`` batches ahead of the consumer (a bounded queue),
and hands them over in command order. numpy, torch and the I/O calls release the GIL in their loops,
so a thread is enough for the two to overlap.

Results are identical to the serial loop: every command is a pure function of (image, targets,
fanouts, seed) (docs/spec.md, counter-based randomness), the producer only calls the sampler, and
every use of torch's random state (dropout) stays in the consumer's thread, in the same order.
``depth = 0`` runs the commands inline, in the consumer's thread (the serial loop).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

__all__ = ["prefetch", "PreparedBatch", "sampled_batches"]


def prefetch(items: Iterable, depth: int = 2) -> Iterator:
    """Iterate ``items`` produced ahead in a background thread (order kept, errors re-raised).

    At most ``depth`` items wait in the queue (plus the one the producer holds). An exception raised
    by the producer is raised in the consumer at the position where the failing item would have
    come. The producer stops when the consumer stops early (a ``break`` or an exception).
    """
    if depth < 1:
        raise ValueError(f"Prefetch depth must be a positive integer, not {depth!r}")
    slots: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        slots.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            slots.put((done, None))
        except BaseException as err:  # handed to the consumer
            slots.put((done, err))

    worker = threading.Thread(target=produce, name="smartsage-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item, err = slots.get()
            if item is done:
                if err is not None:
                    raise err
                return
            yield item
    finally:
        stop.set()
        while worker.is_alive():
            try:
                slots.get_nowait()
            except queue.Empty:
                worker.join(timeout=0.05)


@dataclasses.dataclass
class PreparedBatch:
    """One command's result, as the consumer receives it.

    Members
    -------
    index:
        Position of the command in the sequence.
    targets, seed:
        The command's targets and seed.
    batch:
        What the sampler returned (a :class:`~smartsage.host.driver.DeviceBatch`).
    sample_seconds:
        Wall time of the ``sample`` call itself (in the producer's thread when prefetching).
    wait_seconds:
        Wall time the consumer waited for this batch: equal to ``sample_seconds`` in the serial
        loop, less when the command overlapped the previous batch's training.
    """

    index: int
    targets: np.ndarray
    seed: int
    batch: object
    sample_seconds: float
    wait_seconds: float = 0.0


def sampled_batches(sampler, commands: Sequence[tuple[np.ndarray, int]], fanouts, *, aggregate: bool = True,
                    depth: int = 2) -> Iterator[PreparedBatch]:
    """Run ``sampler.sample(targets, fanouts, seed, aggregate)`` for each ``(targets, seed)`` command.

    ``depth`` > 0: commands run in a background thread, up to ``depth`` ahead; 0: inline (serial).
    Yields :class:`PreparedBatch` in command order; a command's exception (a
    :class:`~smartsage.host.driver.DeviceError`, an I/O error) is raised when its batch is due.
    """
    if depth < 0:
        raise ValueError(f"Prefetch depth must be a non-negative integer, not {depth!r}")
    fanouts = tuple(fanouts)

    def run() -> Iterator[PreparedBatch]:
        for index, (targets, seed) in enumerate(commands):
            start = time.perf_counter()
            batch = sampler.sample(targets, fanouts, seed, aggregate=aggregate)
            yield PreparedBatch(index, targets, seed, batch, time.perf_counter() - start)

    source = run() if depth == 0 else prefetch(run(), depth)
    while True:
        start = time.perf_counter()
        try:
            prepared = next(source)
        except StopIteration:
            return
        prepared.wait_seconds = time.perf_counter() - start
        yield prepared
