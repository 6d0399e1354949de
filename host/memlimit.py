"""Memory confinement for out-of-core runs: a memory cgroup per child process, and its I/O counters.

A process that "has less memory than the image" is one whose memory cgroup limit is smaller than
the image: the kernel charges the page cache a process faults in to its cgroup and reclaims within
the limit, so an mmap sampler really re-reads evicted pages from the disk. Dropping the page cache
before a run (``posix_fadvise(DONTNEED)``) only makes the first touch cold; the cache then grows to
the machine's free memory. :class:`MemoryCgroup` does the former:

- cgroup v2 (the unified hierarchy with the ``memory`` controller): a child group with ``memory.max``;
  I/O from ``io.stat`` (``rbytes``, ``rios``).
- cgroup v1: a child of the ``memory`` hierarchy with ``memory.limit_in_bytes`` (and of ``blkio``
  where it is mounted, for ``blkio.throttle.io_serviced``/``io_service_bytes``).

The harness creates the group, starts the child inside it (``preexec_fn``: the child joins before it
executes anything, so everything it allocates is charged), reads the counters after the child ends
and removes the group. Creating a group needs write access to the hierarchy (root, or a delegated
subtree); without it :class:`CgroupError` says in one line what is missing.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import resource

__all__ = ["CgroupError", "MemoryCgroup", "ProcessIO", "process_io", "find_hierarchy"]

CGROUP_ROOT = pathlib.Path("/sys/fs/cgroup")


class CgroupError(RuntimeError):
    """A memory cgroup cannot be created or used here (the message names what is missing)."""


def _controllers(path: pathlib.Path) -> set[str]:
    try:
        return set((path / "cgroup.controllers").read_text().split())
    except OSError:
        return set()


def find_hierarchy(root: pathlib.Path = CGROUP_ROOT) -> tuple[str, pathlib.Path]:
    """``("v2", dir)`` or ``("v1", dir)``: where a memory-limited child group can be made.

    v2 is preferred where its root offers the ``memory`` controller (``/sys/fs/cgroup`` on current
    distributions, ``/sys/fs/cgroup/unified`` on hybrid ones); otherwise the v1 ``memory`` hierarchy.
    """
    for candidate in (root, root / "unified"):
        if "memory" in _controllers(candidate):
            return "v2", candidate
    if (root / "memory" / "memory.limit_in_bytes").exists():
        return "v1", root / "memory"
    raise CgroupError(f"no memory cgroup controller is mounted (looked for cgroup v2 'memory' in "
                      f"{root}/cgroup.controllers and {root}/unified, and for cgroup v1 {root}/memory)")


@dataclasses.dataclass
class MemoryCgroup:
    """A memory cgroup with a limit, made for the children of this process.

    Use :meth:`create`; then ``subprocess.Popen(..., preexec_fn=group.join)``; then :meth:`io` and
    :meth:`memory` for the counters; then :meth:`remove` (also as a context manager).
    """

    version: str
    path: pathlib.Path
    limit_bytes: int
    blkio_path: pathlib.Path | None = None

    @classmethod
    def create(cls, limit_bytes: int, name: str | None = None, root: pathlib.Path = CGROUP_ROOT,
               io_of: str | os.PathLike | None = None) -> MemoryCgroup:
        """Make a child group limited to ``limit_bytes`` (page cache included).

        ``io_of``: a file whose block device's reads :meth:`io` should count. cgroup v1 counts a
        group's block I/O only for devices with a throttle rule, so a rule that never binds (1 TiB/s)
        is set on that device.

        Raises
        ------
        ValueError
            A limit below 16 MiB (no Python process runs in it).
        CgroupError
            No memory controller, or no right to create a group in it.
        """
        if limit_bytes < 16 << 20:
            raise ValueError(f"Memory limit must be at least 16 MiB, not {limit_bytes!r} bytes")
        version, hierarchy = find_hierarchy(root)
        name = name or f"smartsage-{os.getpid()}"
        path = hierarchy / name
        try:
            if version == "v2":
                _enable_memory_controller(hierarchy)
            path.mkdir(exist_ok=True)
        except PermissionError:
            raise CgroupError(f"cannot create a memory cgroup: {hierarchy} is not writable by uid {os.getuid()} "
                              f"(run as root or in a delegated cgroup, or pass --no-cgroup)") from None
        except OSError as err:
            raise CgroupError(f"cannot create a memory cgroup in {hierarchy}: {err.strerror}") from None
        group = cls(version, path, int(limit_bytes))
        try:
            limit_file = "memory.max" if version == "v2" else "memory.limit_in_bytes"
            (path / limit_file).write_text(str(group.limit_bytes))
            if version == "v1" and (hierarchy / "memory.swappiness").exists():
                try:  # no swapping of the process's own memory: the limit binds on the page cache
                    (path / "memory.swappiness").write_text("0")
                except OSError:
                    pass
            blkio = hierarchy.parent / "blkio"
            if version == "v1" and (blkio / "blkio.throttle.io_serviced").exists():
                group.blkio_path = blkio / name
                group.blkio_path.mkdir(exist_ok=True)
                if io_of is not None:
                    _arm_blkio_counters(group.blkio_path, io_of)
        except OSError as err:
            group.remove()
            raise CgroupError(f"cannot set up the memory cgroup {path}: {err.strerror or err}") from None
        return group

    def join(self) -> None:
        """Move the calling process into the group (a ``preexec_fn`` for the child)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))
        if self.blkio_path is not None:
            (self.blkio_path / "cgroup.procs").write_text(str(os.getpid()))

    def io(self) -> dict:
        """Reads the group's members issued to block devices: ``{"read_bytes", "read_requests"}``.

        None values where the hierarchy has no I/O accounting (v1 without ``blkio``).
        """
        if self.version == "v2":
            totals = {"rbytes": 0, "rios": 0}
            try:
                for line in (self.path / "io.stat").read_text().splitlines():
                    for item in line.split()[1:]:
                        key, _, value = item.partition("=")
                        if key in totals:
                            totals[key] += int(value)
            except OSError:
                return {"read_bytes": None, "read_requests": None}
            return {"read_bytes": totals["rbytes"], "read_requests": totals["rios"]}
        if self.blkio_path is None:
            return {"read_bytes": None, "read_requests": None}
        return {"read_bytes": _blkio_reads(self.blkio_path / "blkio.throttle.io_service_bytes"),
                "read_requests": _blkio_reads(self.blkio_path / "blkio.throttle.io_serviced")}

    def memory(self) -> dict:
        """Peak usage and how often the limit was hit (``failcnt``; v2: ``memory.events`` ``max``)."""
        if self.version == "v2":
            peak = _read_int(self.path / "memory.peak")
            events = {}
            try:
                events = dict(line.split() for line in (self.path / "memory.events").read_text().splitlines())
            except (OSError, ValueError):
                pass
            return {"limit_bytes": self.limit_bytes, "peak_bytes": peak,
                    "limit_hits": int(events["max"]) if "max" in events else None}
        return {"limit_bytes": self.limit_bytes, "peak_bytes": _read_int(self.path / "memory.max_usage_in_bytes"),
                "limit_hits": _read_int(self.path / "memory.failcnt")}

    def remove(self) -> None:
        """Remove the group (after its processes have ended); a group still in use is left, silently."""
        for path in (self.path, self.blkio_path):
            if path is not None:
                try:
                    path.rmdir()
                except OSError:
                    pass

    def __enter__(self) -> MemoryCgroup:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _enable_memory_controller(hierarchy: pathlib.Path) -> None:
    control = hierarchy / "cgroup.subtree_control"
    enabled = set(control.read_text().split())
    for controller in ("memory", "io"):
        if controller not in enabled and controller in _controllers(hierarchy):
            try:
                control.write_text(f"+{controller}")
            except OSError:
                if controller == "memory":
                    raise


def _arm_blkio_counters(group: pathlib.Path, path: str | os.PathLike) -> None:
    """A non-binding read throttle on the device holding ``path`` (its disk if it is a partition)."""
    dev = os.stat(path).st_dev
    candidates = [f"{os.major(dev)}:{os.minor(dev)}"]
    try:  # a partition's throttle rule goes on its disk
        candidates.append((pathlib.Path(f"/sys/dev/block/{candidates[0]}/..") / "dev").read_text().strip())
    except OSError:
        pass
    for device in candidates:
        try:
            (group / "blkio.throttle.read_bps_device").write_text(f"{device} {1 << 40}")
            return
        except OSError:
            continue


def _read_int(path: pathlib.Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _blkio_reads(path: pathlib.Path) -> int | None:
    """Sum of the ``Read`` lines of a v1 blkio counter file (one per device)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    return sum(int(parts[2]) for parts in (line.split() for line in lines) if len(parts) == 3 and parts[1] == "Read")


@dataclasses.dataclass
class ProcessIO:
    """This process's own I/O counters: bytes it caused to be read from storage, read calls, major faults."""

    read_bytes: int
    read_calls: int
    major_faults: int

    def __sub__(self, other: ProcessIO) -> ProcessIO:
        return ProcessIO(*(getattr(self, f.name) - getattr(other, f.name) for f in dataclasses.fields(self)))


def process_io() -> ProcessIO:
    """``/proc/self/io`` (``read_bytes``: storage reads, page-cache misses and O_DIRECT; ``syscr``) and
    the major page faults of ``getrusage`` (every thread of the process)."""
    fields = {}
    try:
        for line in pathlib.Path("/proc/self/io").read_text().splitlines():
            key, _, value = line.partition(":")
            fields[key] = int(value)
    except OSError:
        pass
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return ProcessIO(fields.get("read_bytes", 0), fields.get("syscr", 0), usage.ru_majflt)
