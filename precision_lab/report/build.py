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
import os
import re
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

from precision_lab.bench.generate_schema import PLAIN

from .common import model_class, provenance_line
from .document import Bullets, Code, Document, Heading, Paragraph, Table
from .results import (
    KINDS,
    Result,
    ResultError,
    data_name,
    device_str,
    is_equivalence,
    load_results,
    model_name,
    setup_key,
)
from .sections import Context, renderers
from .style import PolicyColors

SECTION_TITLES = {
    "sim": "Single-layer simulation",
    "kl": "KL divergence vs generated length",
    "kl-layers": "Per-layer sensitivity",
    "lmeval": "Task accuracy (lm-eval)",
    "bench-kernels": "Decode kernel benchmarks",
    "bench-scan": "Teacher-forced scan benchmarks",
    "bench-quant": "Quantizer kernel benchmarks",
    "bench-kl": "KL engine benchmark",
    "bench-generate": "Generation benchmark (whole models)",
}


MANIFEST = ".precision-lab-report.json"


def build_report(paths, out_dir, title: str | None = None) -> Path:
    """Write the report for result files ``paths`` into ``out_dir``; returns ``out_dir/index.html``.

    paths:   result JSON files (or run folders holding summary.json / lmeval.json)
    out_dir: the report folder (created). A rebuild removes or replaces only files an earlier build
             wrote (listed in ``out_dir/.precision-lab-report.json``); any other file is left alone,
             and a file of the user's where the report would write one is refused.
    Raises ``ResultError`` (a ValueError) for corrupted, foreign or mixed inputs and for such name
    clashes; nothing in ``out_dir`` changes then.
    """
    results = load_results(list(paths))
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Built in a staging folder beside the target and moved in only when complete, so a refused or
    # failed build leaves an existing report as it was (and creates nothing new).
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    try:
        _build(results, stage, title or f"precision-lab report: {out.resolve().name}")
        new = sorted(str(f.relative_to(stage)) for f in stage.rglob("*") if f.is_file())
        owned = _files_written_before(out)
        clashes = [f for f in new if (out / f).exists() and f not in owned]
        if clashes:
            raise ResultError(f"{out}: {', '.join(clashes[:3])}{' ...' if len(clashes) > 3 else ''} already exist(s) "
                              "and precision-lab report did not write it; nothing was changed. Move it or choose "
                              "another -o folder")
        for f in owned:  # the previous build's files: replaced, or removed when this build has no such file
            (out / f).unlink(missing_ok=True)
        for f in new:
            (out / f).parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / f, out / f)
        (out / MANIFEST).write_text(json.dumps({"written_by": "precision-lab report", "files": new}, indent=1))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return out / "index.html"


def _files_written_before(out: Path) -> set[str]:
    """Files (relative paths) an earlier build wrote into ``out``: the manifest's list or, for a
    report built before manifests existed, its index files and the figures/data its index.md names."""
    manifest = out / MANIFEST
    if manifest.exists():
        try:
            return {str(f) for f in json.loads(manifest.read_text())["files"]}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ResultError(f"{manifest}: unreadable ({e}); it lists the files an earlier report build wrote. "
                              "Delete the report folder or choose another -o folder") from e
    index = out / "index.md"
    if not index.exists() or "Built by `precision-lab report`" not in index.read_text(encoding="utf-8"):
        return set()
    named = re.findall(r"\b((?:figures|data)/[\w.+-]+\.(?:png|json))", index.read_text(encoding="utf-8"))
    return {"index.md", "index.html", *named}


def _build(results: list[Result], out: Path, title: str) -> None:
    data_names = _copy_inputs(results, out / "data")
    ctx = Context(out, PolicyColors(_all_policies(results)))
    doc = Document(title)
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
            try:
                doc.add(*render[kind](group, ctx))
            except (KeyError, TypeError, IndexError, AttributeError) as e:
                # a file that passed the top-level checks but whose inner layout is not the producer's
                # (truncated by hand, written by another version): name it instead of a traceback
                names = ", ".join(str(r.path) for r in group)
                raise ResultError(f"{names}: a {kind!r} result without the layout this version reads "
                                  f"({type(e).__name__}: {e}); the file is corrupted or from another version") from e
    doc.add(*_provenance_appendix(results, data_names))
    (out / "index.md").write_text(doc.to_markdown(), encoding="utf-8")
    (out / "index.html").write_text(doc.to_html(), encoding="utf-8")


def _all_policies(results: list[Result]) -> list[str]:
    names: list[str] = ["fp32"]
    for r in results:
        d = r.data
        if r.kind == "sim":
            names += [] if is_equivalence(r) else list(r.typed.results)
        elif r.kind in ("kl", "kl-layers") and isinstance(d.get("results"), dict):
            names += list(d["results"])
        elif r.kind == "lmeval":
            names += r.typed.policies
        elif r.kind == "bench-scan":
            names += [x.policy for x in r.typed.rows]
        elif r.kind == "bench-kernels":
            names.append("shared:fp32")  # the ReplaySSM kernels of its figures (sections/bench.py)
        elif r.kind == "bench-generate":
            names += [x for x in r.typed.settings.rows if x != PLAIN]
    return names


def _copy_inputs(results: list[Result], dest: Path) -> dict[Path, str]:
    dest.mkdir(parents=True)
    names: dict[Path, str] = {}
    for i, r in enumerate(results):
        stem = r.name.replace("/", "-").removesuffix(".json")
        stem = re.sub(rf"^\d+-{re.escape(r.kind)}-", "", stem)  # a copy from an earlier report's data/
        name = f"{i + 1:02d}-{r.kind}-{stem}.json"
        shutil.copyfile(r.path, dest / name)
        names[r.path] = f"data/{name}"
    return names


def _inputs_table(results: list[Result], data_names) -> Table:
    rows = []
    for r in results:
        prov = r.provenance
        pols = _all_policies([r])[1:] if r.kind != "lmeval" else r.typed.policies
        rows.append([f"`{data_names[r.path]}`", r.kind, model_name(r) or "—", data_name(r) or "—",
                     ", ".join(dict.fromkeys(pols)) or "—", str(prov.get("git") or "unknown"),
                     device_str(prov), str(prov.get("created", "—"))])
    return Table(["file (copied from the input)", "kind", "model", "data", "policies", "git", "device", "created"],
                 rows, caption="Result files this report was built from")


def _caveats(results: list[Result]) -> list:
    """What the results can and cannot show, stated plainly from their provenance."""
    items = []
    by_model: dict[str, list[str]] = defaultdict(list)
    for r in results:
        if r.kind in ("kl", "kl-layers", "lmeval") or (r.kind == "bench-kl" and model_name(r)):
            by_model[model_name(r) or ""].append(f"`{r.name}`")
    for m, files in by_model.items():
        cls = model_class(m)
        where = f" ({', '.join(files)})"
        if cls == "tiny":
            items.append(f"Model `{m}`{where} is a tiny random-init preset (a few layers, byte vocabulary, initialised "
                         "so its SSM heads have long memory). It shows that the pipeline runs end to end and how the "
                         "policies rank on a model where state errors accumulate by construction; it does not show "
                         "the size of the effect on a trained model.")
        elif cls == "shape":
            items.append(f"Model `{m}`{where} has the layer and state shapes of a published checkpoint but random "
                         "weights. Its timings transfer to the real model; its KL or accuracy numbers do not (random "
                         "logits are near uniform and hide state errors).")
        elif cls == "trained":
            items.append(f"Model `{m}`{where} is a small byte-level hybrid trained by precision-lab on Project "
                         "Gutenberg's Shakespeare (model card: precision_lab/assets/models/{m}/README.md), "
                         "measured on held-out plays it never saw. Its dynamics are trained ones (decays, state "
                         "scales, logit sensitivity); it is ~500x smaller than the published 4B models and reads "
                         "bytes, not tokens, so magnitudes do not transfer one to one.")
        elif cls == "checkpoint":
            items.append(f"Model `{m}`{where} is a pretrained checkpoint.")
        else:
            items.append(f"{where.strip(' ()')}: the file does not name its model; treat it as unverified.")
    for r in results:
        if r.kind == "lmeval":
            cfg = r.typed.provenance.config
            if cfg.synthetic:
                items.append(f"`{r.name}` is scored on the shipped SYNTHETIC task rows (a smoke test of the "
                             "pipeline); its accuracies say nothing about the real benchmarks.")
            if cfg.limit is not None:
                items.append(f"`{r.name}` is limited to {cfg.limit} items per task; CIs are correspondingly wide.")
    sims = [f"`{r.name}`" for r in results if r.kind == "sim" and not is_equivalence(r)]
    if sims:
        items.append(f"Simulation results ({', '.join(sims)}) come from one synthetic layer with random inputs and "
                     "no model: they measure how state storage error propagates through the recurrence at "
                     "controlled memory lengths, not its effect on a model's predictions.")
    benches = defaultdict(list)
    for r in results:
        if r.kind.startswith("bench"):
            benches[device_str(r.provenance)].append(f"`{r.name}`")
    for dev, files in benches.items():
        items.append(f"Benchmarks {', '.join(files)} ran on {dev} with random inputs (kernel speed does not depend "
                     "on trained weights); their timings hold for that device and those shapes only.")
    for r in results:
        if r.kind == "bench-generate" and r.typed.check.status != "passed":
            items.append(f"`{r.name}`: " + {
                "skipped": "the generation benchmark's correctness check was SKIPPED; its timings and ratios are "
                           "unverified (the fast path was not checked against the torch decode engine).",
                "failed": "the generation benchmark's correctness check FAILED; its ratios are not results and no "
                          "target counts as met."}[r.typed.check.status])
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
