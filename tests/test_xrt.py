"""The pyxrt adapter (smartsage.host.xrt) against a fake pyxrt that implements the documented calls it uses:
the driver's commands run unchanged and give the golden model's results."""

from __future__ import annotations

import fake_pyxrt
import numpy as np
import pytest

from smartsage.host.driver import SamplerDriver
from smartsage.host.graphs.communities import NodeDataConfig
from smartsage.host.graphs.rmat import RmatConfig, generate_rmat
from smartsage.host.xrt import XrtDevice, XrtError, load_pyxrt
from smartsage.spec import golden
from smartsage.spec.image import GraphImage


@pytest.fixture(scope="module")
def image_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("xrt") / "rmat9.img"
    generate_rmat(path, RmatConfig(scale=9, edge_factor=6, num_classes=3, seed=4),
                  NodeDataConfig(num_classes=3, feature_dim=8, seed=4))
    return path


@pytest.fixture(autouse=True)
def fresh_fake():
    fake_pyxrt.CALLS.clear()
    fake_pyxrt.NEXT_STATE = None
    yield


@pytest.mark.parametrize("placement", ["copy", "p2p"])
@pytest.mark.parametrize("aggregate", [False, True])
def test_driver_runs_unchanged_on_the_adapter(image_path, placement, aggregate):
    targets, fanouts = np.array([3, 17, 40, 3, 200]), (5, 3)
    with XrtDevice(image_path, "smartsage.xclbin", image_placement=placement, pyxrt_module=fake_pyxrt) as device:
        driver = SamplerDriver(device)
        for seed in (1, 2):
            batch = driver.sample(targets, fanouts, seed, aggregate=aggregate)
            with GraphImage(image_path) as image:
                ref = golden.sample(image, targets, fanouts, seed, aggregate=aggregate)
            keep = batch.node_list.size
            assert (batch.node_list == ref.node_list[:keep]).all() and (batch.counts == ref.counts).all()
            assert keep == (batch.frontier_sizes[-2] if aggregate else ref.node_list.size)
            if aggregate:
                assert (batch.self_rows == ref.self_rows).all()
                assert (batch.sums.view(np.uint32) == ref.sums.view(np.uint32)).all()
        assert device.link.commands == 2 and device.link.bytes_to_host > 0
    names = [c[0] for c in fake_pyxrt.CALLS]
    assert names[:5] == ["device", "xclbin", "register_xclbin", "hw_context", "kernel"]
    # the image buffer in the storage master's group (0), every other buffer in m_axi_mem's (1)
    bos = [c for c in fake_pyxrt.CALLS if c[0] == "bo"]
    assert bos[0][2:] == ("p2p" if placement == "p2p" else "normal", 0)
    assert all(c[2:] == ("normal", 1) for c in bos[1:])
    # the image crosses PCIe once when copied; a P2P buffer is filled through its mapping
    image_syncs = [c for c in fake_pyxrt.CALLS if c[0] == "sync" and c[2] == bos[0][1]]
    assert image_syncs == ([("sync", "XCL_BO_SYNC_BO_TO_DEVICE", bos[0][1], 0)] if placement == "copy" else [])


def test_a_failed_run_raises(image_path):
    with XrtDevice(image_path, "x.xclbin", pyxrt_module=fake_pyxrt) as device:
        fake_pyxrt.NEXT_STATE = fake_pyxrt.ert_cmd_state.ERT_CMD_STATE_ERROR
        with pytest.raises(XrtError, match="ERROR"):
            SamplerDriver(device).sample([1, 2], (3,), 0)


def test_kernel_arguments_must_be_buffers_of_the_device(image_path):
    with XrtDevice(image_path, "x.xclbin", pyxrt_module=fake_pyxrt) as device:
        descriptor = device.alloc(4096)
        with pytest.raises(XrtError, match="no buffer object"):
            device.kernel()(device.image_address + 64, descriptor.address())
        device.reset_allocations()
        with pytest.raises(XrtError, match="descriptor"):
            device.kernel()(device.image_address, descriptor.address())


def test_missing_pyxrt_and_bad_arguments(image_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pyxrt(name, *args, **kwargs):
        if name == "pyxrt":
            raise ImportError("No module named 'pyxrt'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyxrt)
    with pytest.raises(XrtError, match="setup.sh"):
        load_pyxrt()
    with pytest.raises(ValueError, match="placement"):
        XrtDevice(image_path, "x.xclbin", image_placement="dma", pyxrt_module=fake_pyxrt)
