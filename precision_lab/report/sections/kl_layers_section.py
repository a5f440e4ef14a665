"""Section for ``kind: "kl-layers"`` (``precision-lab kl --per-layer``): KL when exactly one SSM layer
stores its state under a lossy policy and every other layer runs the policy's matched reference (the
same arithmetic with fp32 storage); a table per layer and a bar figure, with the policy in every
layer and the floor for scale."""
from __future__ import annotations

import numpy as np

from precision_lab.evals.kl_schema import WITHIN_FLOOR

from ..common import MISSING, fmt, provenance_line
from ..document import Figure, Heading, Note, Paragraph, Table
from ..results import Result, ResultError, model_name
from ..style import new_figure
from . import Context
from .kl_section import WITHIN_MARK


def _cell(o: dict) -> str:
    ci = o.get("doc_ci95")
    return (f"{fmt(o.get('mean'))} " + (f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci else MISSING)
            + (f" {WITHIN_MARK}" if o.get("verdict") == WITHIN_FLOOR else ""))


def render(results: list[Result], ctx: Context) -> list:
    res: dict[str, dict] = {}
    layers = None
    for r in results:
        for p, v in r.data["results"].items():
            if "per_layer" not in v or "all_layers" not in v:
                raise ResultError(f"{r.path}: policy {p!r} has no per-layer results")
            res[p] = v
        if layers is not None and r.data["ssm_layers"] != layers:
            raise ResultError(f"{r.path}: another model's SSM layers than {results[0].path}")
        layers = r.data["ssm_layers"]
    names = list(res)
    model = model_name(results[0]) or "unknown model"
    data = results[0].data["data"]
    blocks: list = [
        Heading(f"Per-layer sensitivity: {model}, {data.get('docs')} docs × {data.get('tokens')} tokens", 3),
        Paragraph("KL(p_reference ‖ p_row) when exactly one SSM layer stores its state under the policy and every "
                  "other SSM layer runs the policy's matched reference (the same arithmetic with fp32 storage); "
                  "the reference row runs the matched reference everywhere. The row *all layers* is the policy in "
                  f"every layer, the row *floor* KL(p_fp32 ‖ p_reference). Means over all "
                  f"{data.get('decode_tokens')} decode positions with 95 % percentile-bootstrap intervals over "
                  f"documents; {WITHIN_MARK}: within floor."),
    ]
    head = ["SSM layer", "module", "kind"] + names
    rows = []
    for L in layers:
        cells = []
        for p in names:
            hit = [x for x in res[p]["per_layer"] if x["layer"] == L["index"]]
            cells.append(_cell(hit[0]["overall"]) if hit else MISSING)
        rows.append([str(L["index"]), f"`{L['module']}`", str(L.get("kind"))] + cells)
    rows.append(["all layers", MISSING, MISSING] + [_cell(res[p]["all_layers"]["overall"]) for p in names])
    rows.append(["floor", MISSING, MISSING] + [fmt(res[p]["all_layers"]["overall"].get("floor_mean")) for p in names])
    blocks.append(Table(head, rows, caption=f"Mean KL (nats per token) with one SSM layer under the policy, {model}"))

    fig, ax = new_figure(max(6.0, 1.0 + 0.5 * len(layers) * len(names)), 4.2)
    width = 0.8 / max(1, len(names))
    x = np.arange(len(layers))
    for k, p in enumerate(names):
        per = {e["layer"]: e["overall"] for e in res[p]["per_layer"]}
        means = [per.get(L["index"], {}).get("mean", np.nan) for L in layers]
        lo = [m - (per.get(L["index"], {}).get("doc_ci95") or [m, m])[0] for m, L in zip(means, layers)]
        hi = [(per.get(L["index"], {}).get("doc_ci95") or [m, m])[1] - m for m, L in zip(means, layers)]
        pos = x - 0.4 + width * (k + 0.5)
        ax.bar(pos, means, width, color=ctx.colors(p), label=p, yerr=[lo, hi], capsize=2, error_kw={"lw": 0.8})
        ax.axhline(res[p]["all_layers"]["overall"]["mean"], color=ctx.colors(p), ls="--", lw=1.0)
        fl = res[p]["all_layers"]["overall"].get("floor_mean")
        if fl and fl > 0:
            ax.axhline(fl, color=ctx.colors(p), ls=":", lw=0.8)
    ax.set_xticks(x, [f"{L['index']}\n{L.get('kind')}" for L in layers], fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("SSM layer (in model order)")
    ax.set_ylabel("mean KL(p_reference ‖ p_row) (nats per token)")
    ax.set_title(f"{model}: one SSM layer under the policy, the others on its matched reference", fontsize=9)
    ax.legend(fontsize=7)
    path = ctx.figure(fig, f"kl-layers-{model}")
    blocks.append(Figure(path, "Mean KL with one SSM layer under the policy (bars, 95 % intervals over documents); "
                               "dashed: the policy in every layer; dotted: the floor."))
    blocks.append(Note(provenance_line(results, names)))
    return blocks
