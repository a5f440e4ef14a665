"""The trained byte-level hybrids shipped in precision_lab/assets/models: listed as "trained" presets,
loaded by name with their weights checked against the model card, reproducing the card's held-out
bits per byte on CPU, and refused with a clear error when a weight file is damaged."""
import json
import shutil
import subprocess
import sys

import pytest
import torch

from precision_lab.models import list_presets, load_model
from precision_lab.models.presets import TRAINED, load_trained, trained_card, trained_folder

NAMES = sorted(TRAINED)



def test_trained_presets_are_listed():
    kinds = {p["name"]: p["kind"] for p in list_presets()}
    assert all(kinds[n] == "trained" for n in NAMES) and len(NAMES) == 2
    out = subprocess.run([sys.executable, "-m", "precision_lab.cli", "models"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    for n in NAMES:
        assert any(line.split()[:2] == [n, "trained"] for line in out.stdout.splitlines()), out.stdout


@pytest.mark.parametrize("name", NAMES)
def test_card_numbers_and_split(name):
    card = trained_card(name)
    res = card["results"]
    assert res["heldout_bytes"] == 1_412_046 and 0 < res["heldout_bpb"] < 2.2
    # held-out works were never trained on: both editions of every held-out work are held out
    train, held = set(card["data"]["train"]), set(card["data"]["heldout"])
    assert not train & held and len(held) == 10
    assert card["parameters"] < 15e6 and card["status"] == "final"
    readme = trained_folder(name).joinpath("README.md").read_text()
    assert f"| held-out bits per byte | {res['heldout_bpb']:.4f} ({res['heldout_bytes']} bytes) |" in readme


@pytest.mark.parametrize("name", NAMES)
def test_shipped_weights_reproduce_the_card(name):
    """The first 2048-token window of every held-out document, fp32 on CPU: the bits per byte the
    card records for exactly that check."""
    from precision_lab.gutenberg import gutenberg_documents
    from precision_lab.models.tokenizer import build_byte_tokenizer
    from precision_lab.training import bits_per_byte, contiguous_windows

    check = trained_card(name)["results"]["heldout_bpb_check"]
    tok = build_byte_tokenizer()
    ids = [torch.tensor(tok(d.text, add_special_tokens=False)["input_ids"]) for d in gutenberg_documents("heldout")]
    x, y = contiguous_windows(ids, check["window"], max_windows_per_doc=check["windows_per_doc"], full_only=True)
    model, _ = load_model(name)
    r = bits_per_byte(model, x, y, batch_size=2)
    assert r["bytes"] == check["bytes"]
    assert r["bpb"] == pytest.approx(check["bpb"], abs=2e-3)


def test_a_damaged_weight_file_is_refused(tmp_path, monkeypatch):
    name = NAMES[0]
    folder = tmp_path / name
    shutil.copytree(str(trained_folder(name)), folder)
    blob = bytearray((folder / "model.safetensors").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (folder / "model.safetensors").write_bytes(bytes(blob))
    import precision_lab.models.presets as presets

    monkeypatch.setattr(presets, "trained_folder", lambda n: folder)
    with pytest.raises(ValueError, match=r"model\.safetensors is corrupted: sha256"):
        load_trained(name)
    (folder / "model.safetensors").write_bytes(bytes(blob[:1000]))
    with pytest.raises(ValueError, match="corrupted"):
        load_trained(name)
    card = json.loads((folder / "card.json").read_text())
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="missing"):
        load_trained(name)
    assert "model.safetensors" in card["files"]
