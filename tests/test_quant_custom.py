"""A user's quantizer with only ``fake(x)`` works by "module:Class" and through the entry-point group
``precision_lab.quantizers``; ``precision-lab formats`` lists it."""
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from precision_lab.quant import base, fake_quantize, get_quantizer, known_quantizers, registry


class OnlyFake:
    """Round to a multiple of 1/8 (the whole quantizer: no quantize/dequantize, no attributes)."""

    def fake(self, x):
        return torch.round(x * 8) / 8


class SignFake(base.Quantizer):
    name = "signfake"

    def fake(self, x):
        return torch.sign(x)


@pytest.fixture
def clean_registry(monkeypatch):
    """Let a test register or discover plugins without leaking them into other tests."""
    registry._load_builtins()  # before the copy: the built-ins register once per process
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)


def test_module_colon_class():
    x = torch.tensor([[0.1, 0.3, -1.06]])
    q = get_quantizer(f"{__name__}:OnlyFake")
    assert isinstance(q, OnlyFake)
    assert fake_quantize(q, x).tolist() == [[0.125, 0.25, -1.0]]
    # rbits from the state machine are not passed to a quantizer that takes none
    assert fake_quantize(q, x, rbits=torch.zeros(1, 3, dtype=torch.int64)).dtype == torch.float32
    assert torch.equal(fake_quantize(get_quantizer(f"{__name__}:SignFake"), x), torch.sign(x))


def test_bad_custom_specs():
    with pytest.raises(ValueError, match="cannot load custom quantizer"):
        get_quantizer(f"{__name__}:Missing")
    with pytest.raises(ValueError, match="cannot load custom quantizer"):
        get_quantizer("no_such_module_xyz:Q")
    with pytest.raises(NotImplementedError, match="implements only fake"):
        SignFake().quantize(torch.ones(2))


def test_entry_point(tmp_path, monkeypatch, clean_registry, capsys):
    dist = tmp_path / "myquant_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myquant-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[precision_lab.quantizers]\neighths = {__name__}:OnlyFake\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert "eighths" in known_quantizers()
    q = get_quantizer("eighths")
    assert isinstance(q, OnlyFake)
    assert fake_quantize(q, torch.tensor([0.3])).tolist() == [0.25]
    # the CLI lists plugins next to the built-ins
    from precision_lab.cli import main

    assert main(["formats", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"eighths", "nvfp4", "fp16-sr"} <= {r["name"] for r in rows}


def test_register_quantizer_by_name(clean_registry):
    registry.register_quantizer("sign", SignFake)
    assert torch.equal(get_quantizer("sign").fake(torch.tensor([-2.0, 3.0])), torch.tensor([-1.0, 1.0]))
    with pytest.raises(ValueError, match="already registered"):
        registry.register_quantizer("sign", OnlyFake)


def test_formats_command(capsys):
    from precision_lab.cli import main

    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["format", "bits/elem", "block"]
    for name in ("fp32", "bf16-sr", "fp8e4m3-row", "nvfp4", "nvfp4-2d-sr", "mxfp4-floor"):
        assert any(line.split()[0] == name for line in lines[2:]), name
    assert main(["formats", "--json", "--filter", "nvfp4"]) == 0
    rows = json.loads(capsys.readouterr().out)
    nv = next(r for r in rows if r["name"] == "nvfp4")
    assert nv == {"name": "nvfp4", "bits_per_element": 4.5, "block_size": 16,
                  "scale_format": "e4m3 per 16 + fp32 per matrix", "rounding": "rne",
                  "special": "NaN/Inf input: error; zero block: scale 0"}
    assert all("nvfp4" in r["name"] for r in rows)


def _user_package(root, pkg):
    (root / pkg).mkdir()
    (root / pkg / "__init__.py").write_text("")
    (root / pkg / "myq.py").write_text("import torch\n\n\nclass Eighths:\n    def fake(self, x):\n"
                                       "        return torch.round(x * 8) / 8\n")


def test_module_colon_class_from_the_current_directory(tmp_path, monkeypatch):
    # a user's mypkg/myq.py beside them, no PYTHONPATH: found, and sys.path is left as it was
    _user_package(tmp_path, "cwd_quant_pkg")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if os.path.abspath(p or ".") != str(tmp_path)])
    before = list(sys.path)
    q = get_quantizer("cwd_quant_pkg.myq:Eighths")
    assert fake_quantize(q, torch.tensor([0.3, -1.06])).tolist() == [0.25, -1.0]
    assert sys.path == before
    with pytest.raises(ValueError, match="current directory"):
        get_quantizer("cwd_quant_pkg.nope:Eighths")


def test_policy_with_a_custom_quantizer_from_the_current_directory_in_the_cli(tmp_path):
    # the console script puts its own folder on sys.path, not the current directory (unlike python -m)
    _user_package(tmp_path, "cli_quant_pkg")
    script = Path(sys.executable).parent / "precision-lab"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(script), "sim", "--steps", "32", "--heads", "1", "--rows", "16", "--cols", "16",
                        "--avg", "8", "--policies", "fp32", "conventional:cli_quant_pkg.myq:Eighths",
                        "--no-plot", "-o", str(tmp_path / "out")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "conventional:cli_quant_pkg.myq:Eighths" in json.loads((tmp_path / "out.json").read_text())["results"]
