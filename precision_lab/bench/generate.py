"""Generation benchmark: ms per decode step of whole models under each state policy (the fast path
of ``precision_lab.generation`` against plain transformers), with a GPU correctness check first.

What a run does (``run``):

1. **Check** (tiny presets, fp32 weights, on the GPU): for every policy, the fast path (decode-step
   kernels, CUDA graphs) and the torch ``decode`` engine are fed the same tokens (the decode
   engine's own greedy generation) and their logits compared with the bound the teacher-forced
   engine uses (``precision_lab.teacher_forced.compare_engines``: fp32 to 2e-5 relative; a lossy policy's
   max KL(decode ‖ fast) ≤ 5 % of its own mean KL against fp32). The verdicts go into the JSON;
   timings of a run whose check failed are labelled so and no ratio is reported for them.
2. **Timing** (the published shapes, random init, bf16 weights): per preset, batch and row, one
   generation of ``new_tokens`` tokens after a ``prompt``-token prompt (each policy row after a
   2-token warm-up generation, so its prefill time excludes compilation); the median step time, the
   prefill time, tokens/s, and which implementation served each layer. Plain transformers is
   ``model.generate`` on the unadapted model (its own DynamicCache; timed over fewer steps when
   asked, since it is slow).

The ratios the targets use (each lossy row ÷ the ``fp32`` row, ``fp32`` ÷ plain transformers) come
from rows timed in the same run. The file's classes and checks are in ``generate_schema`` (no torch):
the run writes only what ``precision-lab report`` reads back (kind ``bench-generate``).
"""
from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import asdict
from pathlib import Path

import torch

from .generate_schema import PLAIN, SCHEMA, Graphs, Row, ratios, to_json

__all__ = ["PLAIN", "POLICIES", "SCHEMA", "Row", "check", "ratios", "run", "table", "time_rows"]

POLICIES = ("fp32", "conventional:bf16", "shared:nvfp4-sr", "split:fp32/nvfp4", "split:fp16-sr/nvfp4",
            "split:fp8e4m3-sr/nvfp4")


def _served(model) -> dict:
    """implementation -> number of SSM layers whose decode steps it served (from the report)."""
    if not hasattr(model, "precision_lab_report"):
        return {}
    out: dict[str, int] = {}
    for layer in model.precision_lab_report()["layers"]:
        steps = {k: v for k, v in layer["calls"].items()}
        if steps:
            main = max(steps, key=steps.get)
            out[main] = out.get(main, 0) + 1
    return out


def _reset_served(model) -> None:
    from precision_lab.models import policy_mixers

    for m in policy_mixers(model):
        m.served.clear()


def check(presets: list[str], policies: list[str], *, batch: int = 4, prompt: int = 48, new_tokens: int = 40,
          seed: int = 0) -> dict:
    """The GPU correctness check of the fast path (see the module docstring)."""
    from precision_lab.generation import generate
    from precision_lab.models import apply_policy, load_model
    from precision_lab.teacher_forced import compare_engines

    out = {"ok": True, "criterion": "precision_lab.teacher_forced.compare_engines (fp32: max|diff|/max|logit| < 2e-5; "
                                    "lossy: max KL(decode||fast) <= 0.05 x mean KL(fp32||policy))",
           "presets": {}}
    pols = ["fp32"] + [p for p in policies if p != "fp32"]
    for name in presets:
        model, _ = load_model(name, device="cuda", dtype=torch.float32)
        g = torch.Generator(device="cpu").manual_seed(seed)
        ids = torch.randint(0, 256, (batch, prompt), generator=g).cuda()
        fast, dec, same = [], [], {}
        for pol in pols:
            apply_policy(model, pol, engine="decode")
            ref = generate(model, ids, max_new_tokens=new_tokens, graphs=False)
            forced = ref.tokens[:, prompt:]
            d = generate(model, ids, max_new_tokens=new_tokens, graphs=False, forced=forced)
            apply_policy(model, pol, engine="auto")
            f = generate(model, ids, max_new_tokens=new_tokens, graphs=True, forced=forced)
            free = generate(model, ids, max_new_tokens=new_tokens, graphs=True)
            same[pol] = {"greedy_tokens_identical": float((free.tokens == ref.tokens).float().mean()),
                         "graphs": f.graphs, "served": _served(model)}
            fast.append(f.logits)
            dec.append(d.logits)
        verdict = compare_engines(torch.cat(fast), torch.cat(dec), pols)
        for pol, v in verdict.items():
            v.update(same[pol])
            for k in ("disagreement", "effect"):   # a NaN verdict is a failed one; JSON holds no NaN
                v[k] = v[k] if math.isfinite(v[k]) else None
        out["presets"][name] = verdict
        out["ok"] &= all(v["ok"] for v in verdict.values())
        del model
        torch.cuda.empty_cache()
    return out


def time_rows(preset: str, batch: int, rows: list[str], *, prompt: int, new_tokens: int, plain_tokens: int,
              seed: int = 0, on_row=None) -> list[Row]:
    """Timed generations of one preset and batch (bf16 weights, random init). The policy rows run
    first and the unadapted model last (its torch fallbacks are the slow part at large batch);
    ``on_row(row)`` is called after each row, so a run cut short keeps the rows it finished."""
    from precision_lab.generation import generate
    from precision_lab.models import apply_policy, load_model

    model, _ = load_model(preset, device="cuda", dtype=torch.bfloat16, seed=seed)
    g = torch.Generator(device="cpu").manual_seed(seed + batch)
    ids = torch.randint(0, 1000, (batch, prompt), generator=g).cuda()
    out: list[Row] = []

    def done(row: Row) -> None:
        out.append(row)
        if on_row is not None:
            on_row(row)

    for pol in [r for r in rows if r != PLAIN]:
        apply_policy(model, pol, engine="auto")
        try:
            # a short warm-up compiles the prefill's kernels for this batch, so ``prefill_s`` is the
            # prefill's run time, not its first compile
            generate(model, ids, max_new_tokens=2, graphs=False)
            _reset_served(model)
            res = generate(model, ids, max_new_tokens=new_tokens, graphs=True)
        except Exception as e:  # noqa: BLE001 - a failed row is recorded, the run goes on
            done(Row(preset, batch, pol, None, None, 0, None, None, error=f"{type(e).__name__}: {e}"[:500]))
            continue
        steps = res.step_seconds[4:] or res.step_seconds   # the first steps compile and capture
        med = statistics.median(steps)
        p90 = sorted(steps)[int(0.9 * (len(steps) - 1))]
        done(Row(preset, batch, pol, med * 1e3, p90 * 1e3, res.new_tokens, res.prefill_seconds,
                 batch / med, Graphs(**res.graphs), _served(model)))
        torch.cuda.synchronize()
    if PLAIN in rows:
        # the unadapted model as a new user would run it: loaded afresh (same seed, same weights)
        del model
        torch.cuda.empty_cache()
        model, _ = load_model(preset, device="cuda", dtype=torch.bfloat16, seed=seed)
        t0 = time.perf_counter()
        with torch.no_grad():
            pre = model.generate(input_ids=ids, max_new_tokens=1, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        prefill = time.perf_counter() - t0
        del pre
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(input_ids=ids, max_new_tokens=plain_tokens, min_new_tokens=plain_tokens,
                           do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        total = time.perf_counter() - t0
        per = (total - prefill) / max(plain_tokens - 1, 1)
        done(Row(preset, batch, PLAIN, per * 1e3, per * 1e3, plain_tokens - 1, prefill,
                 batch / per, Graphs(enabled=False), {"transformers": "unadapted"}))
    del model
    torch.cuda.empty_cache()
    return out


def table(result: dict) -> str:
    """Markdown table of a result file's rows."""
    lines = ["| preset | batch | row | ms/step (median) | prefill s | tokens/s | graphs | served |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        g = r["graphs"]
        gtxt = "—" if not g.get("enabled") else (f"{g.get('captured', 0)} captured" if not g.get("disabled_reason")
                                                 else "off: " + g["disabled_reason"][:40])
        served = ", ".join(f"{k} ×{v}" for k, v in r["served"].items()) or (r.get("error") or "")[:80]

        def num(x, spec):
            return "—" if x is None else format(x, spec)

        lines.append(f"| {r['preset']} | {r['batch']} | {r['row']} | {num(r['step_ms_median'], '.2f')} | "
                     f"{num(r['prefill_s'], '.2f')} | {num(r['tokens_per_s'], '.0f')} | {gtxt} | {served[:80]} |")
    return "\n".join(lines)


def run(*, presets: list[str], batches: list[int], rows: list[str], prompt: int, new_tokens: int,
        plain_tokens: int, check_presets: list[str], out: Path, skip_check: bool = False) -> dict:
    """Check, then time; writes the result JSON to ``out`` after every preset and batch (an
    interrupted run keeps what it measured), each time checked as the report reads it
    (``generate_schema.to_json``). Returns the result dict."""
    from precision_lab.bench.schema import require_commit
    from precision_lab.provenance import provenance

    if not torch.cuda.is_available():
        raise RuntimeError("the generation benchmark needs a CUDA GPU")
    require_commit()  # before any GPU time: a result without its commit is refused by the report
    settings = {"presets": presets, "batches": batches, "rows": rows, "prompt": prompt, "new_tokens": new_tokens,
                "plain_transformers_tokens": plain_tokens, "weights": "bfloat16, random init",
                "policy_prefill": "after a 2-token warm-up generation (excludes compilation)"}
    chk = {"ok": False, "skipped": True} if skip_check else check(check_presets, [r for r in rows if r != PLAIN])
    timed: list[Row] = []
    result: dict = {}
    prov = provenance()

    def save(row: Row | None = None) -> dict:
        if row is not None:
            timed.append(row)
        res = to_json({"schema": SCHEMA, "provenance": prov, "settings": settings, "check": chk,
                       "rows": [asdict(r) for r in timed],
                       "ratios": ratios(timed, bool(chk.get("ok")), skipped=skip_check)})
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(res, indent=1, allow_nan=False))
        tmp.replace(out)
        return res

    for preset in presets:
        for b in batches:
            n0 = len(timed)
            time_rows(preset, b, rows, prompt=prompt, new_tokens=new_tokens, plain_tokens=plain_tokens, on_row=save)
            result = save()
            print(table({"rows": [asdict(r) for r in timed[n0:]]}), flush=True)
    return result
