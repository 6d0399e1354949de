"""The distribution maps the design's folders under ``smartsage.`` and lists every subpackage."""

import pathlib
import tomllib

import smartsage

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_python_folder_is_a_listed_package():
    setuptools = _pyproject()["tool"]["setuptools"]
    package_dir = setuptools["package-dir"]
    listed = set(setuptools["packages"])
    found = set()
    for package, folder in package_dir.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            name = ".".join([package, *rel.parts])
            # A folder mapped explicitly is found through its own mapping.
            if any(name != p and name.startswith(p + ".") and (ROOT / f) == init.parent
                   for p, f in package_dir.items()):
                continue
            found.add(name)
    assert found == listed


def test_no_generic_top_level_names():
    setuptools = _pyproject()["tool"]["setuptools"]
    assert all(p == "smartsage" or p.startswith("smartsage.") for p in setuptools["packages"])


def test_layers_import_down_only():
    """spec imports nothing of the project; rtl only spec; cosim only rtl and spec."""
    allowed = {"spec": {"spec"}, "rtl": {"spec", "rtl"}, "cosim": {"spec", "rtl", "cosim"}}
    for folder, ok in allowed.items():
        for path in (ROOT / folder).rglob("*.py"):
            for line in path.read_text().splitlines():
                stripped = line.strip()
                for layer in ("spec", "rtl", "cosim", "host"):
                    if stripped.startswith((f"from smartsage.{layer}", f"import smartsage.{layer}")):
                        assert layer in ok, f"{path.relative_to(ROOT)} imports smartsage.{layer}: {stripped}"


def test_version():
    assert smartsage.__version__ == _pyproject()["project"]["version"]
