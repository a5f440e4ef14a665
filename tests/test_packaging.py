"""Packaging promises of docs/design.md §2: mapped subpackages, loud bare imports, the console script."""
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


@pytest.mark.parametrize("name", ["kernels", "quant", "evals"])
def test_bare_import_from_repo_root_fails_loudly(name):
    r = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0 and f"precision_lab.{name}" in r.stderr


def test_console_script_help_lists_subcommands():
    r = subprocess.run([sys.executable, "-m", "precision_lab.cli", "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "formats" in r.stdout
