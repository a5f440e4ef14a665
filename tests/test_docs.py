"""The repository explains itself: every ``docs/<file>.md §N`` citation in code, help text and
Markdown names an existing file and section, and nothing outside ``reports/`` points at documents
that are not in the repository or speaks of how the project was organised rather than what it does."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()
BINARY_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".npz", ".npy", ".pt", ".parquet", ".gz", ".zip", ".pyc"}

# "docs/design.md §4", "docs/design.md §3, §4, §7", "docs/design.md §4–§6", "docs/design.md §5.2"
CITATION = re.compile(r"docs/(?P<file>[\w.-]+?)\.md(?P<secs>(?:(?:\s*(?:,|–|-|and|or)\s*|\s+)§\d+(?:\.\d+)*)*)")
SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
RANGE = re.compile(r"§(\d+)\s*[–-]\s*§(\d+)\b")
HEADING = re.compile(r"^#{2,4} (\d+(?:\.\d+)*)\.? ", re.M)

# References to documents that are not part of the repository, and words about how the work was
# organised (issues, helpers, sessions, people) rather than about the project.
FORBIDDEN = {
    "path outside the repository": re.compile(r"\.\./shared\b"),
    "external working note": re.compile(r"\b(?:DESIGN|PITFALLS|REFERENCE|STYLE)\.md\b"
                                        r"|\b(?:DESIGN|PITFALLS|REFERENCE|STYLE):? ?§|\b(?:DESIGN|PITFALLS)\b"),
    "issue number": re.compile(r"\bissues? #?\d+\b", re.I),
    "issue reference": re.compile(r"\bthe issue'?s\b", re.I),
    "helper reference": re.compile(r"\bH\d'?s? helpers?\b|\bH\d's\b|\bhelper #?\d+\b", re.I),
    "person reference": re.compile(r"\bthe lead(?:'s)?\b|\blead's\b", re.I),
    "session reference": re.compile(r"\bsessions?\b", re.I),
    "planning document": re.compile(r"\b(?:project card|working notes)\b", re.I),
}


def repo_files() -> list[str]:
    """Tracked and new (not ignored) files, relative to the root, outside reports/."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True, timeout=60).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):  # a copy without git: walk the tree instead
        skip = {".git", ".venv", "__pycache__", "reports", "build", "dist"}
        out = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
               if p.is_file() and not skip.intersection(p.relative_to(ROOT).parts)]
    return sorted(f for f in out if f and not f.startswith("reports/") and (ROOT / f).is_file())


def text_of(rel: str) -> str | None:
    if Path(rel).suffix.lower() in BINARY_SUFFIXES:
        return None
    try:
        return (ROOT / rel).read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def sections_of(doc: Path) -> set[str]:
    return set(HEADING.findall(doc.read_text(encoding="utf-8")))


def cited_sections(secs: str) -> list[str]:
    """Every section a citation's tail names, ranges expanded (§4–§6 → 4, 5, 6)."""
    out = SECTION.findall(secs)
    for lo, hi in RANGE.findall(secs):
        out += [str(n) for n in range(int(lo), int(hi) + 1)]
    return out


def bad_citations(text: str, docs_dir: Path = DOCS, own: Path | None = None) -> list[str]:
    """Citations in ``text`` whose file or section does not exist. ``own``: a docs file whose bare
    "§N" references mean its own sections."""
    bad, cache = [], {}

    def has(doc: Path, sec: str) -> bool:
        if doc not in cache:
            cache[doc] = sections_of(doc) if doc.is_file() else None
        return cache[doc] is not None and sec in cache[doc]

    spans = []
    for m in CITATION.finditer(text):
        doc = docs_dir / f"{m['file']}.md"
        spans.append(m.span())
        if not doc.is_file():
            bad.append(f"{m.group(0).strip()}: no file docs/{m['file']}.md")
            continue
        for sec in cited_sections(m["secs"]):
            if not has(doc, sec):
                bad.append(f"{m.group(0).strip()}: docs/{m['file']}.md has no section {sec}")
    if own is not None:
        for m in SECTION.finditer(text):
            if any(a <= m.start() < b for a, b in spans):
                continue
            if not has(own, m[1]):
                bad.append(f"§{m[1]}: {own.name} has no section {m[1]}")
    return bad


def forbidden_mentions(text: str) -> list[str]:
    hits = []
    for what, rx in FORBIDDEN.items():
        for m in rx.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            hits.append(f"line {line}: {what}: {m.group(0)!r}")
    return hits


# ------------------------------------------------------------------------------------------------
def test_docs_exist_with_numbered_sections():
    for name in ("README.md", "design.md", "pitfalls.md", "reference.md"):
        assert (DOCS / name).is_file(), f"docs/{name} is missing"
    for name in ("design.md", "pitfalls.md", "reference.md"):
        secs = [s for s in sections_of(DOCS / name) if "." not in s]
        assert secs, f"docs/{name} has no numbered sections"
        nums = sorted(int(s) for s in secs)
        assert nums == list(range(1, len(nums) + 1)), f"docs/{name}: top-level sections not numbered 1..n: {nums}"
    # sections the code relies on by number
    design = sections_of(DOCS / "design.md")
    assert {str(n) for n in range(1, 12)} <= design


def test_every_docs_citation_names_an_existing_file_and_section():
    problems, n_citations = [], 0
    for rel in repo_files():
        if rel == THIS:
            continue
        text = text_of(rel)
        if text is None:
            continue
        n_citations += len(CITATION.findall(text))
        own = ROOT / rel if rel.startswith("docs/") and rel.endswith(".md") and rel != "docs/README.md" else None
        problems += [f"{rel}: {p}" for p in bad_citations(text, own=own)]
    assert not problems, "citations into docs/ that do not resolve:\n" + "\n".join(problems)
    assert n_citations >= 50, f"only {n_citations} docs/ citations found; is the scan looking at the repository?"


def hand_written_reports() -> list[str]:
    """The READMEs under reports/: prose written by hand beside the result files (the generated
    reports and the result files themselves are left out)."""
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "reports").rglob("README.md"))


def test_no_external_notes_or_process_words():
    problems = []
    for rel in repo_files() + hand_written_reports():
        if rel == THIS:
            continue
        text = text_of(rel)
        if text is not None:
            problems += [f"{rel}: {h}" for h in forbidden_mentions(text)]
    assert not problems, "mentions of documents outside the repository or of process:\n" + "\n".join(problems)


# The checkers themselves must be able to fail.
@pytest.mark.parametrize("text, n_bad", [
    ("see docs/design.md §4", 0),
    ("(docs/design.md §3, §4, §7)", 0),
    ("docs/design.md §4–§6 and docs/design.md §5.2", 0),
    ("docs/design.md §99", 1),
    ("docs/design.md §4, §42", 1),
    ("docs/design.md §4.99", 1),
    ("docs/nowhere.md §1", 1),
    ("docs/pitfalls.md §1 and docs/reference.md §0", 1),
])
def test_citation_checker(text, n_bad):
    assert len(bad_citations(text)) == n_bad, bad_citations(text)


def test_citation_checker_reads_bare_sections_of_a_docs_file():
    own = DOCS / "design.md"
    assert bad_citations("as in §5.3 and §11", own=own) == []
    assert len(bad_citations("as in §57", own=own)) == 1


@pytest.mark.parametrize("text", [
    "see DESIGN §4", "PITFALLS.md says", "(PITFALLS: Packaging)", "(REFERENCE.md)", "STYLE.md §3",
    "REFERENCE §2", "../shared/DESIGN.md", "DESIGN gdn_fold",
    "Known answer (issue 2)", "the issue's targets", "H2's helpers", "the lead's setup.py",
    "measured earlier in the session", "in the same session", "One H200 session timed", "the project card asks",
])
def test_forbidden_words_are_found(text):
    assert forbidden_mentions(text), text


@pytest.mark.parametrize("text", [
    "Device helpers", "codecs helpers without documentation", "the leading axis", "issue-bound kernel",
    "REFERENCE_COPY_GBPS = 4246.0", "_STYLES = ('-', '--')", "STYLE = 'dark'", "H200's L2", "an H100 GPU",
    "docs/reference.md §4", "OCP MX v1.0 §6.3",
])
def test_legitimate_words_pass(text):
    assert not forbidden_mentions(text), forbidden_mentions(text)
