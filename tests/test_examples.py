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
