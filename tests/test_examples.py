"""The documented examples run and do what their docs say."""

import importlib.util
import pathlib

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_karate_club_imports_and_trains(tmp_path):
    karate = _load("karate_club")
    image = karate.build_image(tmp_path / "karate.img")
    history = karate.train(image, epochs=20)
    assert history[-1]["loss"] < history[0]["loss"] / 5
    assert history[-1]["val_acc"] >= 0.75 and history[-1]["test_acc"] >= 0.75  # 2 clubs: chance is about 0.5


def test_io_report_without_rtl(tmp_path):
    """The table of docs/user-guide.md section 4 (its software and C-simulated rows)."""
    example = _load("io_report")
    report = example.io_report(example.build_image(tmp_path / "rmat10.img"), ["golden", "hls", "mmap", "direct"])
    assert all(io["storage_reads"] > 0 and io["storage_bytes"] > 0 and io["bytes_to_host"] > 0
               for io in report.values())
    table = example.markdown(report)
    docs = (EXAMPLES.parent / "docs" / "user-guide.md").read_text()
    for line in table.splitlines()[2:]:
        assert line in docs, f"docs/user-guide.md lacks the row {line!r} (rerun examples/io_report.py)"
