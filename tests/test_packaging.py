"""Packaging promises of docs/design.md §2: mapped subpackages, loud bare imports, the console script."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mapped_subpackages_resolve_to_the_repo_folders():
    import precision_lab.evals
    import precision_lab.kernels
    import precision_lab.quant

    for mod, folder in ((precision_lab.quant, "quant"), (precision_lab.kernels, "kernels"), (precision_lab.evals, "evals")):
        assert Path(mod.__file__).parent == ROOT / folder


@pytest.mark.parametrize("name", ["quant", "evals"])
def test_bare_import_from_repo_root_fails_loudly(name):
    r = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0 and f"precision_lab.{name}" in r.stderr


@pytest.mark.parametrize("use", ["kernels.quant", "from kernels import get_kernel"])
def test_bare_kernels_import_from_repo_root_is_empty_and_any_use_fails_loudly(use):
    # With no package named `kernels` installed (-S: no site-packages, so none is visible), `import
    # kernels` itself must succeed (optional-package probes import it), but it loads nothing
    code = f"import kernels\n{use if use.startswith('from') else 'print(' + use + ')'}"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "ImportError" in r.stderr and "precision_lab.kernels" in r.stderr, r.stderr


def test_bare_kernels_import_from_repo_root_returns_an_installed_package(tmp_path):
    # transformers >= 5.25 imports Hugging Face's `kernels` unconditionally: where a package of that
    # name is installed, the bare import from the root must return it, submodules included (a stand-in
    # package here, after the root on sys.path as site-packages would be)
    fake = tmp_path / "site" / "kernels"
    (fake / "_internals").mkdir(parents=True)
    (fake / "__init__.py").write_text("__version__ = '9.9'\n")
    (fake / "_internals" / "__init__.py").write_text("")
    (fake / "_internals" / "locking.py").write_text("def write_egg_lockfile(*a): return 'hub'\n")
    code = ("import sys, kernels\nfrom kernels._internals.locking import write_egg_lockfile\n"
            "assert sys.modules['kernels'] is kernels\nprint(kernels.__version__, kernels.__file__, write_egg_lockfile())")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    r = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    version, where, hub = r.stdout.split()
    assert (version, hub) == ("9.9", "hub") and Path(where) == fake / "__init__.py"


# Every step of an optional-package probe (transformers: find_spec, then metadata, then import_module
# with "no __version__ and no __file__" meaning absent), then transformers' own check, then every tiny
# preset built, first with transformers imported before precision_lab and then after it.
_PROBE_FROM_ROOT = """
import importlib, importlib.metadata, importlib.util, sys
assert sys.path[0] in ("", {root!r}), sys.path[:2]
first = {first!r}
if first == "transformers":
    import transformers
else:
    import precision_lab.models
try:
    hub = importlib.metadata.version("kernels")  # Hugging Face's kernel hub (transformers >= 5.25 needs it)
except importlib.metadata.PackageNotFoundError:
    hub = None
assert importlib.util.find_spec("kernels") is not None  # the repository folder, as on a user's machine
mod = importlib.import_module("kernels")
from transformers.utils.import_utils import is_kernels_available
if hub is None:  # the folder's empty stand-in: "not installed"
    assert getattr(mod, "__version__", "N/A") == "N/A" and getattr(mod, "__file__", None) is None
    assert is_kernels_available() is False
else:  # the installed package, not the folder
    assert mod.__version__ == hub and not mod.__file__.startswith({root!r} + "/kernels/"), mod.__file__
from precision_lab.models import PRESETS, load_model
tiny = [n for n, p in PRESETS.items() if p.kind == "tiny"]
for name in tiny:
    load_model(name)
print("built", len(tiny))
"""


@pytest.mark.parametrize("first", ["transformers", "precision_lab"])
def test_optional_kernels_probe_sees_absent_and_every_tiny_preset_builds_from_repo_root(first):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", _PROBE_FROM_ROOT.format(root=str(ROOT), first=first)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    from precision_lab.models import PRESETS

    assert r.stdout.split()[-1] == str(sum(p.kind == "tiny" for p in PRESETS.values()))


def test_console_script_help_lists_subcommands():
    r = subprocess.run([sys.executable, "-m", "precision_lab.cli", "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "formats" in r.stdout


_REGISTERED_AFTER_EDITABLE_INSTALL = """
import site, sys
site.addsitedir({site!r})                 # the editable wheel, as pip unpacks it into site-packages
sys.path.append({deps!r})                 # lm-eval and the other dependencies, without their .pth files
from lm_eval.api.registry import get_model
cls = get_model("replayssm")
import precision_lab
print(cls.__name__, precision_lab.__file__)
"""


def test_an_editable_install_registers_replayssm_with_lm_eval(tmp_path):
    # Build the editable wheel of a copy of the project (pip install -e does the same), unpack it into
    # an empty site directory, and ask lm-eval for the model in a fresh interpreter that has no other
    # start-up hooks: the install alone must make `lm_eval --model replayssm` resolve.
    import shutil
    import sysconfig
    import zipfile

    project = tmp_path / "project"
    for name in ("setup.py", "pyproject.toml", "README.md"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, project / name)
    for folder in ("precision_lab", "quant", "kernels", "evals"):
        shutil.copytree(ROOT / folder, project / folder, ignore=shutil.ignore_patterns("__pycache__"))
    build = ("from setuptools import build_meta; "
             f"print(build_meta.build_editable({str(tmp_path / 'dist')!r}))")
    r = subprocess.run([sys.executable, "-c", build], cwd=project, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    wheel = tmp_path / "dist" / r.stdout.strip().splitlines()[-1]
    site_dir = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site_dir)
    code = _REGISTERED_AFTER_EDITABLE_INSTALL.format(deps=sysconfig.get_paths()["purelib"], site=str(site_dir))
    # no PYTHONPATH either: a checkout on it (PYTHONPATH=. runs) would be found before the install
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    name, where = r.stdout.split()
    assert name == "ReplaySSMLM" and Path(where).is_relative_to(project)
