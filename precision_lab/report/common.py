"""Pieces every section uses: number formatting, the provenance line under each figure, and the
classification of models into trained / tiny / random-init for the caveats section."""
from __future__ import annotations

from .results import Result, data_name, device_str, finite, model_name

MISSING = "—"


def fmt(x, digits: int = 4) -> str:
    """A number as a table shows it: ints as they are, floats to ``digits`` significant digits,
    anything absent or non-numeric as an em dash (never a made-up value)."""
    if isinstance(x, bool) or x is None:
        return MISSING
    if isinstance(x, int):
        return str(x)
    if finite(x):
        return f"{x:.{digits}g}"
    return MISSING


def fmt_pts(x, signed: bool = False) -> str:
    """A fraction in [0, 1] shown in percentage points with two decimals."""
    if not finite(x):
        return MISSING
    return f"{100 * x:+.2f}" if signed else f"{100 * x:.2f}"


def provenance_line(results: list[Result], policies: list[str] | None = None) -> str:
    """One line under a figure or table: the files, policies, model, data, seeds, versions, git, device."""
    parts = []
    for r in results:
        prov = r.provenance
        v = prov.get("versions") or {}
        vers = ", ".join(f"{k} {v[k]}" for k in ("precision-lab", "torch", "triton", "transformers", "lm-eval")
                         if v.get(k))
        bits = [f"`{r.name}`"]
        m = model_name(r)
        if m:
            bits.append(f"model {m}")
        dn = data_name(r)
        if dn:
            bits.append(f"data {dn}")
        seeds = [f"{k} {prov[k]}" for k in ("seed", "sr_seed") if k in prov]
        if seeds:
            bits.append(", ".join(seeds))
        bits.append(f"git {prov.get('git') or 'unknown'}")
        bits.append(f"device {device_str(prov)}")
        if vers:
            bits.append(vers)
        if prov.get("created"):
            bits.append(f"created {prov['created']}")
        parts.append("; ".join(bits))
    pol = f"Policies: {', '.join(f'`{p}`' for p in policies)}. " if policies else ""
    return f"Provenance: {pol}" + " | ".join(parts)


# ------------------------------------------------------------------------------------------------
# what a result can show
# ------------------------------------------------------------------------------------------------
def model_class(name: str | None) -> str:
    """"tiny", "shape" (random-init copy of a published shape), "trained" (a model trained by
    precision-lab and shipped with it) or "checkpoint" for a model name.

    Preset names are looked up in the preset table; names that are not presets are checkpoints
    (hub ids or local paths) unless they look like a preset (tiny-*, *-shape) the installed version
    does not know.
    """
    if not name:
        return "unknown"
    try:
        from precision_lab.models.presets import PRESETS

        if name in PRESETS:
            return PRESETS[name].kind if PRESETS[name].kind in ("tiny", "shape", "trained") else "shape"
    except ImportError:  # pragma: no cover - the models package always ships with the report
        pass
    base = name.rstrip("/").rsplit("/", 1)[-1].lower()
    if base.startswith("tiny") or "random" in base:
        return "tiny"
    if base.endswith("-shape"):
        return "shape"
    return "checkpoint"
