"""Loading result JSON for reports: every file must say what it is (``kind``, ``schema_version``,
``provenance``); anything else is refused with a message naming the file."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = ("sim", "kl", "lmeval", "bench-quant", "bench-kernels", "bench-scan", "bench-kl")
SCHEMA_VERSION = 1


class ResultError(ValueError):
    """A result file that cannot be used (corrupted, foreign, incompatible)."""


@dataclass
class Result:
    path: Path
    kind: str
    data: dict[str, Any]

    @property
    def provenance(self) -> dict[str, Any]:
        return self.data.get("provenance", {})


def load_result(path: str | Path) -> Result:
    path = Path(path)
    if path.is_dir():
        candidates = [path / "summary.json", path / "results.json"]
        found = [c for c in candidates if c.exists()]
        if not found:
            raise ResultError(f"{path}: a folder without summary.json or results.json")
        path = found[0]
    if not path.exists():
        raise ResultError(f"{path}: no such file")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ResultError(f"{path}: not valid JSON ({e}); the file is corrupted or not a result file") from e
    if not isinstance(data, dict) or "kind" not in data:
        raise ResultError(f"{path}: not a precision-lab result (no 'kind' key)")
    kind = data["kind"]
    if kind not in KINDS:
        raise ResultError(f"{path}: unknown result kind {kind!r}; reports read {', '.join(KINDS)}")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ResultError(f"{path}: schema_version {data.get('schema_version')!r}, this version reads {SCHEMA_VERSION}")
    if not isinstance(data.get("provenance"), dict):
        raise ResultError(f"{path}: no provenance; reports only use results that say what produced them")
    return Result(path, kind, data)


def load_results(paths) -> list[Result]:
    results = [load_result(p) for p in paths]
    if not results:
        raise ResultError("no result files given")
    return results
