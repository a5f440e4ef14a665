"""Build a report folder from result JSON: ``index.md``, ``index.html`` (static, opens offline),
``figures/*.png`` and ``data/`` (a copy of every input, so the report carries what it was built from).

    build_report(["runs/sim/mamba2-32768.json", "runs/kl/tiny-qwen3.5/summary.json"], "reports/study")

The report only reads result files (never reruns anything). Inputs are validated and refused when
mixed or corrupted (``results.load_results``; the module docstring there says what "mixed" means).
Sections come in a fixed order (caveats, simulation, KL, lm-eval, benchmarks, provenance), each
result kind grouped by setup; every figure and table is followed by the provenance of the files it
was drawn from. Policy colours are fixed for the whole report (``style.PolicyColors``).
"""
from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

from .common import model_class, provenance_line
from .document import Bullets, Code, Document, Heading, Paragraph, Table
from .results import KINDS, Result, data_name, device_str, load_results, model_name, setup_key
from .sections import Context, renderers
from .style import PolicyColors

SECTION_TITLES = {
    "sim": "Single-layer simulation",
    "kl": "KL divergence vs generated length",
    "lmeval": "Task accuracy (lm-eval)",
    "bench-kernels": "Decode kernel benchmarks",
    "bench-scan": "Teacher-forced scan benchmarks",
    "bench-quant": "Quantizer kernel benchmarks",
    "bench-kl": "KL engine benchmark",
}


def build_report(paths, out_dir, title: str | None = None) -> Path:
    """Write the report for result files ``paths`` into ``out_dir``; returns ``out_dir/index.html``.

    paths:   result JSON files (or run folders holding summary.json / lmeval.json)
    out_dir: the report folder (created; figures/ and data/ inside it are rewritten)
    Raises ``ResultError`` (a ValueError) for corrupted, foreign or mixed inputs, before writing.
    """
    results = load_results(list(paths))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # figures/ and data/ belong to the report: clear them so a rebuild leaves no stale files
    for sub in ("figures", "data"):
        if (out / sub).is_dir():
            shutil.rmtree(out / sub)
    data_names = _copy_inputs(results, out / "data")

    ctx = Context(out, PolicyColors(_all_policies(results)))
    doc = Document(title or f"precision-lab report: {out.resolve().name}")
    doc.add(Paragraph("Built by `precision-lab report` from result files only; every number below is read from them "
                      "(an em dash marks a value the file does not hold). Policies are named by their "
                      "`short_str()`; each keeps one colour in every figure, fp32 in black."))
    doc.add(Heading("Inputs"), _inputs_table(results, data_names))
    doc.add(*_caveats(results))
    render = renderers()
    for kind in KINDS:
        of_kind = [r for r in results if r.kind == kind]
        if not of_kind:
            continue
        doc.add(Heading(SECTION_TITLES[kind]))
        groups: dict[str, list[Result]] = defaultdict(list)
        for r in of_kind:
            groups[setup_key(r)].append(r)
        for group in groups.values():
            doc.add(*render[kind](group, ctx))
    doc.add(*_provenance_appendix(results, data_names))
    (out / "index.md").write_text(doc.to_markdown(), encoding="utf-8")
    (out / "index.html").write_text(doc.to_html(), encoding="utf-8")
    return out / "index.html"


def _all_policies(results: list[Result]) -> list[str]:
    names: list[str] = ["fp32"]
    for r in results:
        d = r.data
        if r.kind in ("sim", "kl") and isinstance(d.get("results"), dict):
            names += list(d["results"])
        elif r.kind == "lmeval":
            names += list(d.get("policies", []))
        elif isinstance(d.get("timings"), list):
            names += [str(t["policy"]) for t in d["timings"] if "policy" in t]
        elif r.kind == "bench-kernels":
            names.append("shared:fp32")  # the ReplaySSM kernels of its figures (sections/bench.py)
    return names


def _copy_inputs(results: list[Result], dest: Path) -> dict[Path, str]:
    dest.mkdir(parents=True)
    names: dict[Path, str] = {}
    for i, r in enumerate(results):
        stem = r.name.replace("/", "-").removesuffix(".json")
        name = f"{i + 1:02d}-{r.kind}-{stem}.json"
        shutil.copyfile(r.path, dest / name)
        names[r.path] = f"data/{name}"
    return names


def _inputs_table(results: list[Result], data_names) -> Table:
    rows = []
    for r in results:
        prov = r.provenance
        pols = _all_policies([r])[1:] if r.kind != "lmeval" else r.data.get("policies", [])
        rows.append([f"`{data_names[r.path]}`", r.kind, model_name(r) or "—", data_name(r) or "—",
                     ", ".join(dict.fromkeys(pols)) or "—", str(prov.get("git") or "unknown"),
                     device_str(prov), str(prov.get("created", "—"))])
    return Table(["file (copied from the input)", "kind", "model", "data", "policies", "git", "device", "created"],
                 rows, caption="Result files this report was built from")


def _caveats(results: list[Result]) -> list:
    """What the results can and cannot show, stated plainly from their provenance."""
    items = []
    for r in results:
        m = model_name(r)
        if r.kind in ("kl", "lmeval") or (r.kind == "bench-kl" and m):
            cls = model_class(m)
            if cls == "tiny":
                items.append(f"`{r.name}` ({r.kind}): model `{m}` is a tiny random-init preset (a few layers, "
                             "byte vocabulary, initialised so its SSM heads have long memory). It shows that the "
                             "pipeline runs end to end and how the policies rank on a model where state errors "
                             "accumulate by construction; it does not show the size of the effect on a trained model.")
            elif cls == "shape":
                items.append(f"`{r.name}` ({r.kind}): model `{m}` has the layer and state shapes of a published "
                             "checkpoint but random weights. Its timings transfer to the real model; its KL or "
                             "accuracy numbers do not (random logits are near uniform and hide state errors).")
            elif cls == "checkpoint":
                items.append(f"`{r.name}` ({r.kind}): model `{m}` is a pretrained checkpoint.")
            else:
                items.append(f"`{r.name}` ({r.kind}): the file does not name its model; treat it as unverified.")
        if r.kind == "lmeval":
            cfg = r.provenance.get("config") or {}
            if cfg.get("synthetic"):
                items.append(f"`{r.name}`: scored on the shipped SYNTHETIC task rows (a smoke test of the "
                             "pipeline); its accuracies say nothing about the real benchmarks.")
            if cfg.get("limit") is not None:
                items.append(f"`{r.name}`: limited to {cfg['limit']} items per task; CIs are correspondingly wide.")
        if r.kind == "sim" and r.data.get("mode") != "equivalence":
            items.append(f"`{r.name}` (sim): one synthetic layer with random inputs and no model. It measures how "
                         "state storage error propagates through the recurrence at controlled memory lengths; it "
                         "does not measure its effect on a model's predictions.")
        if r.kind.startswith("bench"):
            dev = device_str(r.provenance)
            items.append(f"`{r.name}` ({r.kind}): timings on {dev} with random inputs (kernel speed does not "
                         "depend on trained weights); they hold for that device and those shapes only.")
    gits = sorted({str(r.provenance.get("git") or "unknown") for r in results})
    if len(gits) > 1:
        items.append(f"The inputs come from {len(gits)} source versions ({', '.join(gits)}); results of different "
                     "versions are compared as they are.")
    dirty = [r.name for r in results if str(r.provenance.get("git") or "").endswith("-dirty")]
    if dirty:
        items.append(f"{len(dirty)} input(s) were produced from a working tree with uncommitted changes "
                     "(git hash ending in -dirty): the hash alone does not pin their code.")
    return [Heading("What these results show (and what they do not)"),
            Bullets(items or ["No caveats derived from the inputs."])]


def _provenance_appendix(results: list[Result], data_names) -> list:
    blocks: list = [Heading("Provenance")]
    for r in results:
        prov = r.provenance
        blocks.append(Heading(f"{data_names[r.path]} ({r.kind})", 3))
        blocks.append(Paragraph(provenance_line([r])))
        keep = {k: prov[k] for k in ("command", "git", "versions", "device", "created") if k in prov}
        blocks.append(Code(json.dumps(keep, indent=1, default=str)))
    return blocks
