"""``smartsage sample --backend rtl --waves FILE``: the command's waveform, for debugging a mismatch."""

from __future__ import annotations

import numpy as np
import pytest

from smartsage.host.cli import main
from smartsage.spec.image import write_image

pytestmark = pytest.mark.sim


@pytest.mark.slow   # a second, traced Verilator build of the kernel: minutes of both cores on a fresh machine
def test_sample_rtl_writes_the_commands_waveform(tmp_path, capsys):
    rng = np.random.default_rng(3)
    degrees = rng.integers(0, 6, 64)
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.uint64)
    write_image(tmp_path / "g.img", indptr, rng.integers(0, 64, int(indptr[-1])).astype(np.uint32))
    waves = tmp_path / "waves" / "cmd.vcd"
    assert main(["sample", str(tmp_path / "g.img"), "--backend", "rtl", "--config", "small", "--fanouts", "3,2",
                 "--targets", _targets(tmp_path), "--waves", str(waves), "-o", str(tmp_path / "out.npz")]) == 0
    assert f"waves: {waves}" in capsys.readouterr().out
    text = waves.read_bytes()
    if text.startswith(b"$"):                            # VCD: the kernel's ports, then value changes
        assert b"$timescale" in text and b" m_axi_storage__arvalid " in text and b"\n#" in text
    else:                                                # FST (built where lz4.h is installed)
        assert len(text) > 1000
    assert not list(tmp_path.glob("smartsage-cosim-*"))


def _targets(tmp_path) -> str:
    path = tmp_path / "targets.txt"
    path.write_text("1 5 9 5\n")
    return str(path)


def test_waves_need_the_rtl_backend(tmp_path, capsys):
    write_image(tmp_path / "g.img", np.array([0, 1, 1], np.uint64), np.array([1], np.uint32))
    assert main(["sample", str(tmp_path / "g.img"), "--waves", str(tmp_path / "w.vcd"), "-b", "1",
                 "-o", str(tmp_path / "o.npz")]) == 2
    assert "--waves needs --backend rtl" in capsys.readouterr().err
