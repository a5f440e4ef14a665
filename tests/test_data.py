"""Data sources for KL studies: a local parquet in PG-19's format, jsonl, txt, the offline default."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from precision_lab.data import default_corpus, load_documents, read_source
from precision_lab.models.tokenizer import build_byte_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_byte_tokenizer()


def _pg19_parquet(path, texts):
    """A parquet file with emozilla/pg19-test's columns."""
    table = pa.table({
        "short_book_title": [f"Book {i}" for i in range(len(texts))],
        "publication_date": [1890 + i for i in range(len(texts))],
        "url": [f"http://www.gutenberg.org/ebooks/{1000 + i}" for i in range(len(texts))],
        "text": texts,
    })
    pq.write_table(table, path)
    return path


def test_local_pg19_parquet(tmp_path, tok):
    p = _pg19_parquet(tmp_path / "test-00000-of-00001.parquet", ["a" * 300, "b" * 50, "c" * 400, "dé" * 200])
    docs = load_documents(str(p), tok, n_docs=2, tokens=256, skip_short=True)
    assert [d.meta["short_book_title"] for d in docs] == ["Book 0", "Book 2"]    # the short one skipped
    assert docs[0].tokens.tolist() == [ord("a")] * 256 and docs[1].tokens.shape == (256,)
    assert docs[0].meta["url"].endswith("1000") and docs[0].meta["source_tokens"] == 300
    # lengths 300, 50, 400, 600: one message says how many are long enough and every setting that works
    with pytest.raises(ValueError) as e:
        load_documents(str(p), tok, n_docs=2, tokens=256)
    assert str(e.value).startswith(f"data source {str(p)!r} has 3 of 4 documents with >= 256 tokens (longest: 600); "
                                   "2 asked for; the first too short is ")
    assert "'Book 1', 50 tokens" in str(e.value)
    assert str(e.value).split("What would work: ")[1].split("; or ")[:3] == [
        "--tokens 50 (the first 2 documents)", "--tokens 400 --skip-short (the 2 longest)",
        "--skip-short (keeps --tokens 256)"]
    with pytest.raises(ValueError) as e:
        load_documents(str(p), tok, n_docs=4, tokens=100, skip_short=True)
    assert "has 3 of 4 documents with >= 100 tokens" in str(e.value)
    assert str(e.value).split("What would work: ")[1].split("; or ")[:2] == [
        "--tokens 50 (the first 4 documents)", "--docs 3 --skip-short (keeps --tokens 100)"]


def test_the_default_text_says_once_what_would_work(tmp_path, tok):
    import re

    with pytest.raises(ValueError) as e:
        load_documents("default", tok, n_docs=4, tokens=4096)
    assert "has 0 of 4 documents with >= 4096 tokens" in str(e.value)
    fitting = int(re.search(r"--tokens (\d+) \(the first 4 documents\)", str(e.value)).group(1))
    assert len(load_documents("default", tok, n_docs=4, tokens=fitting)) == 4        # the suggestion works
    with pytest.raises(ValueError):
        load_documents("default", tok, n_docs=4, tokens=fitting + 1)               # and is the longest that does
    with pytest.raises(ValueError) as e:                                            # --skip-short: the same account
        load_documents("default", tok, n_docs=4, tokens=4096, skip_short=True)
    assert "has 0 of 4 documents" in str(e.value) and f"--tokens {fitting} " in str(e.value)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError) as e:                                            # nothing impossible suggested
        load_documents(str(tmp_path / "empty.txt"), tok, n_docs=1, tokens=1024)
    assert "has 0 of 1 documents" in str(e.value) and "--tokens" not in str(e.value)


def test_jsonl_txt_dir_and_default(tmp_path, tok):
    j = tmp_path / "d.jsonl"
    j.write_text("\n".join(json.dumps({"text": t, "id": i}) for i, t in enumerate(["x" * 40, "y" * 40])))
    assert [d.text[0] for d in read_source(str(j))] == ["x", "y"]
    (tmp_path / "b.txt").write_text("second")
    (tmp_path / "a.txt").write_text("first")
    assert [d.text for d in read_source(str(tmp_path))] == ["first", "second"]
    docs = default_corpus()
    assert len(docs) == 4 and all(len(d.text.encode()) > 2048 for d in docs)
    assert len(load_documents("default", tok, n_docs=4, tokens=2048)) == 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"body": "no text"}))
    with pytest.raises(ValueError, match="no 'text' field"):
        read_source(str(bad))


def test_missing_sources(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        read_source(str(tmp_path / "nope.parquet"))
    with pytest.raises(ValueError, match="no 'text' column"):
        pq.write_table(pa.table({"body": ["x"]}), tmp_path / "t.parquet")
        read_source(str(tmp_path / "t.parquet"))
    # the hub dataset cannot be reached offline (tests run with HF_DATASETS_OFFLINE=1): a clear message
    with pytest.raises(ValueError, match="emozilla/pg19-test"):
        read_source("pg19")
