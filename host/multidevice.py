"""Several devices in one host: each holds a replica of the image, a thread per device keeps it busy.

A host with N SmartSSDs stores a replica of the image on each. :class:`MultiDeviceSampler` opens one
sampler per device (any backend of :data:`~smartsage.host.train.SAMPLER_BACKENDS`; each opens its own
replica path, or the same file) and runs a sequence of mini-batch commands on all of them at once:
one thread per device, one command in flight per device (the driver's buffers belong to one command),
each thread taking the next command as soon as its device is free. Batches come back in command
order. Every command is a pure function of (image, targets, fanouts, seed) (docs/spec.md), so which
device ran it never changes its result: N devices give exactly the batches, and so the losses, of one.

``device_time`` emulates a device's own time for the software backends, whose commands are host CPU
work: after a command, its thread sleeps until the modeled device time has passed (a host waiting
on ``run.wait()`` for real hardware sleeps the same way). :func:`ssd_command_seconds` models the
SmartSSD's SSD from the command's storage reads (docs/ARCHITECTURE: ~85 us latency, 540 K random
reads/s) and its PCIe Gen3 x4 link to the host.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from smartsage.spec.config import CONFIGS, KernelConfig

from .backends.software import IOCounters
from .pipeline import PreparedBatch

__all__ = ["MultiDeviceSampler", "ssd_command_seconds", "SSD_LATENCY_S", "SSD_IOPS", "LINK_BYTES_PER_S",
           "throughput"]

#: SmartSSD storage model (docs/ARCHITECTURE.md, "Storage timing model"): 4 KiB read latency,
#: random-read ceiling, and the host link.
SSD_LATENCY_S = 85e-6
SSD_IOPS = 540e3
LINK_BYTES_PER_S = 3.9e9


def ssd_command_seconds(sampler, batch) -> float:
    """Modeled device time of the command that just ran on ``sampler``: one storage latency, the
    reads at the SSD's random-read ceiling, and the results over the host link."""
    stats = getattr(getattr(getattr(sampler, "device", None), "backend", None), "last_stats", None)
    reads = int(stats.read_requests) if stats is not None else 0
    return SSD_LATENCY_S + reads / SSD_IOPS + int(getattr(batch, "bytes_to_host", 0)) / LINK_BYTES_PER_S


class MultiDeviceSampler:
    """N samplers (devices) behind the sampler interface, run concurrently.

    Parameters
    ----------
    samplers:
        One opened sampler per device (:func:`~smartsage.host.train.open_sampler`), all on replicas of
        one image.
    device_time:
        Optional ``(sampler, batch) -> seconds``: the modeled time of the command just run; its
        thread sleeps until that much time has passed since the command started.

    Members
    -------
    image:
        The first device's image (the replicas are identical).
    name:
        ``"<backend> x N"``.
    """

    def __init__(self, samplers: Sequence, *, device_time: Callable | None = None):
        if not samplers:
            raise ValueError("A multi-device sampler needs at least one device")
        self.samplers = list(samplers)
        headers = {(s.image.num_nodes, s.image.num_edges, s.image.header.sections) for s in self.samplers}
        if len(headers) != 1:
            raise ValueError("The devices' images differ: every device must hold a replica of one image")
        self.image = self.samplers[0].image
        self.name = f"{getattr(self.samplers[0], 'name', '?')} x {len(self.samplers)}"
        self.device_time = device_time
        self._free: list = list(self.samplers)
        self._free_cv = threading.Condition()
        self.busy_seconds = [0.0] * len(self.samplers)
        self.commands_run = [0] * len(self.samplers)

    @classmethod
    def open(cls, backend: str, image_paths: str | os.PathLike | Sequence[str | os.PathLike],
             devices: int | None = None, config: KernelConfig = CONFIGS["default"], *,
             device_time: Callable | None = None,
             **options) -> MultiDeviceSampler:
        """Open ``devices`` samplers of ``backend``: device i on ``image_paths[i]`` (a list of replicas),
        or every device on the one path given (each opens its own handle)."""
        from .train import open_sampler

        paths = [image_paths] if isinstance(image_paths, (str, os.PathLike)) else list(image_paths)
        devices = len(paths) if devices is None else devices
        if not isinstance(devices, int) or devices < 1:
            raise ValueError(f"Device count must be a positive integer, not {devices!r}")
        if len(paths) not in (1, devices):
            raise ValueError(f"{len(paths)} image replicas given for {devices} devices")
        samplers = []
        try:
            for i in range(devices):
                samplers.append(open_sampler(backend, paths[i % len(paths)], config, **options))
            return cls(samplers, device_time=device_time)
        except BaseException:
            for sampler in samplers:
                sampler.close()
            raise

    @property
    def num_devices(self) -> int:
        return len(self.samplers)

    @property
    def io(self) -> IOCounters:
        """The devices' I/O counters, summed (a fresh object: read it before and after)."""
        total = IOCounters(storage_reads=0, storage_pages=0)
        for field in dataclasses.fields(total):
            values = [getattr(s.io, field.name) for s in self.samplers]
            setattr(total, field.name, None if any(v is None for v in values) else sum(values))
        return total

    def _run(self, device: int, targets, fanouts, seed: int, aggregate: bool):
        sampler = self.samplers[device]
        start = time.perf_counter()
        batch = sampler.sample(targets, fanouts, seed, aggregate=aggregate)
        if self.device_time is not None:
            remaining = self.device_time(sampler, batch) - (time.perf_counter() - start)
            if remaining > 0:
                time.sleep(remaining)
        self.busy_seconds[device] += time.perf_counter() - start
        self.commands_run[device] += 1
        return batch

    def sample(self, targets, fanouts, seed: int, aggregate: bool = False):
        """One command on the first free device (thread-safe; blocks while every device is busy)."""
        with self._free_cv:
            while not self._free:
                self._free_cv.wait()
            sampler = self._free.pop(0)
        try:
            return self._run(self.samplers.index(sampler), targets, fanouts, seed, aggregate)
        finally:
            with self._free_cv:
                self._free.append(sampler)
                self._free_cv.notify()

    def prepared_batches(self, commands: Sequence[tuple[np.ndarray, int]], fanouts, *, aggregate: bool = True,
                         depth: int = 2) -> Iterator[PreparedBatch]:
        """Run every ``(targets, seed)`` command, all devices at once; yield the batches in order.

        Each device's thread takes the next command when its device is free; at most
        ``num_devices + depth`` batches are done but not yet consumed. A command's exception is raised
        when its batch is due (and stops the other threads). The interface of
        :func:`smartsage.host.pipeline.sampled_batches`, which the trainer uses for one device.
        """
        if depth < 0:
            raise ValueError(f"Prefetch depth must be a non-negative integer, not {depth!r}")
        commands = list(commands)
        fanouts = tuple(fanouts)
        window = self.num_devices + depth
        state = {"next": 0, "consumed": 0, "stop": False}
        results: dict[int, tuple[PreparedBatch | None, BaseException | None]] = {}
        cv = threading.Condition()

        def work(device: int) -> None:
            while True:
                with cv:
                    while not state["stop"] and state["next"] < len(commands) and \
                            state["next"] >= state["consumed"] + window:
                        cv.wait()
                    if state["stop"] or state["next"] >= len(commands):
                        return
                    index = state["next"]
                    state["next"] += 1
                targets, seed = commands[index]
                start = time.perf_counter()
                try:
                    batch = self._run(device, targets, fanouts, seed, aggregate)
                    item = (PreparedBatch(index, targets, seed, batch, time.perf_counter() - start), None)
                except BaseException as err:  # handed to the consumer at this command's position
                    item = (None, err)
                with cv:
                    results[index] = item
                    if item[1] is not None:
                        state["stop"] = True
                    cv.notify_all()
                if item[1] is not None:
                    return

        threads = [threading.Thread(target=work, args=(d,), name=f"smartsage-device{d}", daemon=True)
                   for d in range(self.num_devices)]
        for thread in threads:
            thread.start()
        try:
            for index in range(len(commands)):
                start = time.perf_counter()
                with cv:
                    while index not in results:
                        if state["stop"] and not any(t.is_alive() for t in threads) and index not in results:
                            raise RuntimeError("a device thread stopped without a result")  # pragma: no cover
                        cv.wait(timeout=0.5)
                    prepared, err = results.pop(index)
                    state["consumed"] = index + 1
                    cv.notify_all()
                if err is not None:
                    raise err
                prepared.wait_seconds = time.perf_counter() - start
                yield prepared
        finally:
            with cv:
                state["stop"] = True
                cv.notify_all()
            for thread in threads:
                thread.join()

    def close(self) -> None:
        for sampler in self.samplers:
            sampler.close()

    def __enter__(self) -> MultiDeviceSampler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def throughput(image_path, backend: str, devices: int, *, batches: int = 32, batch_size: int = 256,
               fanouts: tuple[int, ...] = (10, 5), modeled: bool = False, seed: int = 0,
               config: KernelConfig = CONFIGS["default"]) -> dict:
    """Batches per second of ``batches`` AGGREGATE commands on ``devices`` devices (sampling only)."""
    with MultiDeviceSampler.open(backend, image_path, devices, config,
                                 device_time=ssd_command_seconds if modeled else None) as sampler:
        rng = np.random.default_rng(seed)
        commands = [(rng.integers(0, sampler.image.num_nodes, batch_size, dtype=np.int64), seed * 1000 + b)
                    for b in range(batches)]
        start = time.perf_counter()
        edges = 0
        for prepared in sampler.prepared_batches(commands, fanouts, depth=0):
            edges += int(prepared.batch.header.edges_sampled)
        seconds = time.perf_counter() - start
    return {"backend": backend, "devices": devices, "modeled_device_time": modeled, "batches": batches,
            "batch_size": batch_size, "fanouts": list(fanouts), "seconds": seconds,
            "batches_per_s": batches / seconds, "sampled_edges_per_s": edges / seconds}


def main(argv: list[str] | None = None) -> int:
    """``python -m smartsage.host.multidevice IMAGE --devices 1,2,4``: batches/s per device count."""
    parser = argparse.ArgumentParser(prog="python -m smartsage.host.multidevice", description=main.__doc__)
    parser.add_argument("image")
    parser.add_argument("--backend", default="golden")
    parser.add_argument("--devices", default="1,2,4", help="device counts, comma separated")
    parser.add_argument("--batches", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--modeled", action="store_true",
                        help="each command also takes the SSD model's device time (ssd_command_seconds)")
    args = parser.parse_args(argv)
    for devices in (int(d) for d in args.devices.split(",")):
        r = throughput(args.image, args.backend, devices, batches=args.batches, batch_size=args.batch_size,
                       modeled=args.modeled)
        print(f"{r['backend']} x {devices}{' (modeled device time)' if r['modeled_device_time'] else ''}: "
              f"{r['batches_per_s']:.2f} batches/s, {r['sampled_edges_per_s']:,.0f} sampled edges/s "
              f"({r['batches']} batches in {r['seconds']:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
