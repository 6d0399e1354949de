"""The out-of-core harness: its clear errors, memory cgroups that really bind, and a whole small run."""

import os
import pathlib
import subprocess
import sys

import pytest

from smartsage.host import memlimit, outofcore
from smartsage.host.cli import main
from smartsage.host.graphs.communities import NodeDataConfig
from smartsage.host.graphs.rmat import RmatConfig, generate_rmat
from smartsage.host.memlimit import CgroupError, MemoryCgroup
from smartsage.host.outofcore import OutOfCoreConfig, OutOfCoreError


def _cgroups_usable() -> str | None:
    """None when this process may make memory cgroups, else why not."""
    try:
        MemoryCgroup.create(64 << 20, name=f"smartsage-test-probe-{os.getpid()}").remove()
    except CgroupError as err:
        return str(err)
    return None


CGROUP_SKIP = _cgroups_usable()


@pytest.fixture(scope="module")
def small_image(tmp_path_factory):
    path = tmp_path_factory.mktemp("ooc") / "rmat11.img"
    generate_rmat(path, RmatConfig(scale=11, edge_factor=8, num_classes=4, seed=3),
                  NodeDataConfig(num_classes=4, feature_dim=64, seed=3))
    return path


# ------------------------------------------------------------------------------ clear errors

def test_missing_image_is_named_with_the_command_that_builds_it(tmp_path, capsys):
    missing = tmp_path / "nowhere.img"
    with pytest.raises(OutOfCoreError, match="no image at .*nowhere.img: build one with `smartsage graph generate"):
        outofcore.check_inputs(OutOfCoreConfig(image=missing))
    assert main(["bench", "outofcore", "--image", str(missing)]) == 2
    assert "smartsage: error: no image at" in capsys.readouterr().err


def test_an_image_smaller_than_four_budgets_is_refused(small_image, capsys):
    size = small_image.stat().st_size
    with pytest.raises(OutOfCoreError, match=r"less than 4x the memory budget of 1.00 GiB: lower --memory-budget"):
        outofcore.check_inputs(OutOfCoreConfig(image=small_image, memory_budget=1 << 30))
    assert size < 4 << 30
    assert main(["bench", "outofcore", "--image", str(small_image), "--memory-budget", "1G"]) == 2
    assert "less than 4x the memory budget" in capsys.readouterr().err


def test_bad_configurations_name_the_parameter(small_image):
    with pytest.raises(ValueError, match="Unknown backend 'ssd'; known: dram, mmap, direct, device"):
        OutOfCoreConfig(image=small_image, backends=("ssd",))
    with pytest.raises(ValueError, match="Memory budget must be at least 64 MiB"):
        OutOfCoreConfig(image=small_image, memory_budget=1 << 20)
    with pytest.raises(ValueError, match="Batches must be a positive integer, not 0"):
        OutOfCoreConfig(image=small_image, batches=0)


def test_no_memory_controller_is_one_clear_line(tmp_path):
    with pytest.raises(CgroupError, match="no memory cgroup controller is mounted"):
        MemoryCgroup.create(256 << 20, root=tmp_path)


def test_no_right_to_create_a_cgroup_names_the_hierarchy_and_the_way_out(tmp_path, monkeypatch):
    hierarchy = tmp_path / "memory"
    hierarchy.mkdir()
    (hierarchy / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    real_mkdir = pathlib.Path.mkdir

    def refuse(self, *args, **kwargs):
        if self.parent == hierarchy:
            raise PermissionError(13, "Permission denied")
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", refuse)
    with pytest.raises(CgroupError, match=r"memory is not writable by uid \d+ .*pass --no-cgroup"):
        MemoryCgroup.create(256 << 20, root=tmp_path)


def test_a_v1_hierarchy_is_found_and_configured(tmp_path):
    hierarchy = tmp_path / "memory"
    hierarchy.mkdir()
    (hierarchy / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert memlimit.find_hierarchy(tmp_path) == ("v1", hierarchy)
    group = MemoryCgroup.create(300 << 20, name="g", root=tmp_path)
    assert group.version == "v1" and (hierarchy / "g" / "memory.limit_in_bytes").read_text() == str(300 << 20)
    assert group.io() == {"read_bytes": None, "read_requests": None}  # no blkio hierarchy beside it
    group.remove()  # (a plain directory with files in it stays: only cgroupfs removes a group's files)


# ------------------------------------------------------------------------------ the real thing

@pytest.mark.skipif(CGROUP_SKIP is not None, reason=f"memory cgroups unavailable: {CGROUP_SKIP}")
def test_the_memory_limit_binds_and_the_io_counters_count(small_image):
    """A child that allocates more than its group's limit is killed; a child's O_DIRECT reads are counted."""
    hog = "b = bytearray(600 << 20); b[::4096] = b'x' * len(b[::4096]); print('survived')"
    with MemoryCgroup.create(256 << 20, name=f"smartsage-test-{os.getpid()}", io_of=small_image) as group:
        child = subprocess.run([sys.executable, "-c", hog], preexec_fn=group.join, capture_output=True, check=False)
        assert child.returncode == -9 and b"survived" not in child.stdout
        reader = (f"import mmap, os\nfd = os.open({str(small_image)!r}, os.O_RDONLY | os.O_DIRECT)\n"
                  "buf = mmap.mmap(-1, 1 << 20)\nprint(os.preadv(fd, [buf], 0))")
        child = subprocess.run([sys.executable, "-c", reader], preexec_fn=group.join, capture_output=True, check=True)
        got = int(child.stdout)
        assert got == min(1 << 20, small_image.stat().st_size)
        io = group.io()
        if io["read_bytes"] is not None:  # counted where the hierarchy accounts block I/O
            assert io["read_bytes"] >= got and io["read_requests"] >= 1
        memory = group.memory()
        assert memory["limit_bytes"] == 256 << 20 and memory["limit_hits"]


def _small_run(small_image, tmp_path, monkeypatch, confine, backends=outofcore.BACKENDS):
    from smartsage.host.disk_probe import DiskProbe

    monkeypatch.setattr(outofcore, "MIN_IMAGE_RATIO", 0.0)  # the rule is checked above; here a small image
    probe = DiskProbe(device="0:0", path=str(small_image), file_bytes=1 << 20, qd1_latency_us=100.0,
                      iops={1: 10_000.0, 32: 100_000.0, 64: 120_000.0}, seq_bandwidth_gbs=1.0, reads=1, when="now",
                      mmap_fault_us=110.0)
    config = OutOfCoreConfig(image=small_image, memory_budget=400 << 20, batch_size=64, fanouts=(4, 3), hidden=8,
                             batches=2, confine=confine, backends=backends)
    return outofcore.run_experiment(config, workdir=tmp_path / "runs", log=lambda line: None, disk_probe=probe)


def _check_run(results, tmp_path, backends=outofcore.BACKENDS):
    assert results["identical_batches"]
    assert set(results["summary"]) == set(backends)
    for backend, summary in results["summary"].items():
        assert summary["phases"]["blocks"] > 0, backend
        assert summary["phases"]["compute"] > 0 and summary["pipelined_batch"] > 0
    direct = results["summary"]["direct"]
    # O_DIRECT reads go to the disk, every one: the kernel's count is the project's accounting
    assert direct["kernel"]["read_bytes"] == direct["accounting"]["storage_bytes"] > 0
    losses = {b: [r["loss"] for r in run["records"]] for b, run in results["runs"].items()}
    assert all(v == losses["direct"] for v in losses.values())  # same batches, same model: same losses
    text = outofcore.markdown_report(results, "smartsage bench outofcore ...")
    outofcore.plot_report(results, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 10_000
    if "device" not in backends:
        return text
    assert results["summary"]["dram"]["accounting"]["storage_bytes"] == 0
    assert results["summary"]["dram"]["kernel"]["read_bytes"] == 0
    rows = results["device_model"]["rows"]
    assert [r["name"] for r in rows][:2] == ["device this-disk flash", "device this-disk p2p"]
    assert all(r["serial"] >= r["pipelined"] > 0 for r in rows)
    for name in ("| dram |", "| mmap |", "| direct |", "| device PM983 p2p (model) |"):
        assert name in text
    return text


@pytest.mark.skipif(CGROUP_SKIP is not None, reason=f"memory cgroups unavailable: {CGROUP_SKIP}")
def test_a_small_confined_run_of_every_backend(small_image, tmp_path, monkeypatch):
    results = _small_run(small_image, tmp_path, monkeypatch, confine=True)
    _check_run(results, tmp_path)
    for backend in ("mmap", "direct"):
        assert results["runs"][backend]["confined"] and results["runs"][backend]["cgroup"]["memory"]["limit_bytes"]
    assert not results["runs"]["dram"]["confined"] and not results["runs"]["device"]["confined"]


def test_a_small_run_without_cgroups_drops_the_cache_instead(small_image, tmp_path, monkeypatch):
    results = _small_run(small_image, tmp_path, monkeypatch, confine=False, backends=("mmap", "direct"))
    text = _check_run(results, tmp_path, backends=("mmap", "direct"))
    assert not any(run["confined"] for run in results["runs"].values())
    assert "NO cgroup: page cache dropped before every batch" in text
