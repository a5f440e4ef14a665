"""fp32 accuracy of the multiple-choice play task (``evals/tasks/play_choice.py``) on CPU, to check
that a model does a design clearly above chance before any GPU run.

    python scripts/play_choice_fp32.py --model gutenberg-qwen3.5 --kind word
    python scripts/play_choice_fp32.py --model gutenberg-nemotron-h --kind speaker --distractors recent --k 2

Items: ``make_items`` on the held-out plays (``--data``, default ``gutenberg``), buckets 256-1023 and
1024-4095 bytes, ``--per-bucket`` per play (default 2: 40 items over the 10 held-out documents).
Each item is scored with the model's own forward (no policy, the fp32 reference), the context run
once and branched per choice, three ways:

- ``acc``: as lm-eval scores it, the context's trailing whitespace moved into every choice;
- ``acc_unmoved``: each choice right after the context as written; the script counts the items whose
  chosen answer is the same both ways (the shared whitespace term cannot change it);
- ``acc_last256``: the same with only the last 256 bytes of the context, which says how much the
  model draws on anything further back.

Prints one JSON line (and writes it, with the provenance and every item's scores, to ``--out``).
reports/play-choice-cpu/ holds the runs the README quotes.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def choice_loglikelihoods(model, ctx: str, conts: list[str]) -> list[float]:
    """Summed log p of each continuation after ``ctx`` (bytes = tokens), the context run once."""
    import torch
    from transformers import DynamicCache

    from precision_lab.models.mixers import branch_stream

    cb = list(ctx.encode("utf-8"))
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([cb]), cache=cache, use_cache=True)
        last = torch.log_softmax(out.logits[0, -1].float(), -1)
        toks = [list(c.encode("utf-8")) for c in conts]
        width = max(max(map(len, toks)) - 1, 1)
        cache = branch_stream(cache, torch.zeros(len(toks), dtype=torch.long))
        inp = torch.full((len(toks), width), 32, dtype=torch.long)   # right-padded: never read
        for r, k in enumerate(toks):
            if len(k) > 1:
                inp[r, : len(k) - 1] = torch.tensor(k[:-1])
        lp = torch.log_softmax(model(input_ids=inp, cache=cache, use_cache=True).logits.float(), -1)
    res = []
    for r, k in enumerate(toks):
        v = float(last[k[0]])
        if len(k) > 1:
            v += float(lp[r, torch.arange(len(k) - 1), torch.tensor(k[1:])].sum())
        res.append(v)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="preset or path (e.g. gutenberg-qwen3.5)")
    ap.add_argument("--kind", choices=("word", "speaker"), default="word")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--distractors", default="other-plays", help="speaker items: other-plays | cast | recent")
    ap.add_argument("--data", default="gutenberg")
    ap.add_argument("--per-bucket", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-ablations", action="store_true", help="score only the lm-eval way (a third of the time)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="JSON file for the summary and every item's scores")
    args = ap.parse_args(argv)

    import torch
    from precision_lab.evals.tasks import play_choice as pc
    from precision_lab.evals.tasks.next_speaker import plays_from_source

    from precision_lab.models import load_model

    torch.set_num_threads(args.threads)
    items = pc.make_items(plays_from_source(args.data), kind=args.kind, k=args.k, distractors=args.distractors,
                          buckets=(256, 1024, 4096), per_bucket=args.per_bucket, seed=args.seed, max_context=4095)
    items = [it for it in items if it["context_bytes"] < 4096]
    model, _ = load_model(args.model, device="cpu")
    t0 = time.time()
    rows = []
    for it in items:
        ctx = it["context"]
        ws = ctx[len(ctx.rstrip()):]
        row = {"id": it["id"], "bucket": it["bucket"], "gold": it["gold"],
               "lmeval": choice_loglikelihoods(model, ctx.rstrip(), [ws + c for c in it["choices"]])}
        if not args.no_ablations:
            row["unmoved"] = choice_loglikelihoods(model, ctx, it["choices"])
            row["last256"] = choice_loglikelihoods(model, ctx[-256:], it["choices"])
        rows.append(row)
        print(f"{len(rows)}/{len(items)} {time.time() - t0:.0f} s", file=sys.stderr, flush=True)

    def argmax(x):
        return max(range(len(x)), key=x.__getitem__)

    def acc(key, bucket=None):
        sel = [r for r in rows if bucket is None or r["bucket"] == bucket]
        return round(sum(argmax(r[key]) == r["gold"] for r in sel) / len(sel), 4)

    buckets = list(dict.fromkeys(r["bucket"] for r in rows))
    summary = {"model": args.model, "kind": args.kind, "k": args.k,
               "distractors": args.distractors if args.kind == "speaker" else "same-length", "n": len(rows),
               "chance": round(1 / args.k, 4), "acc": acc("lmeval"),
               "acc_by_bucket": {b: acc("lmeval", b) for b in buckets}}
    if not args.no_ablations:
        same = sum(argmax(r["lmeval"]) == argmax(r["unmoved"]) for r in rows)
        summary.update(acc_unmoved=acc("unmoved"), same_answer_moved_or_not=f"{same}/{len(rows)}",
                       acc_last256=acc("last256"))
    summary["seconds"] = round(time.time() - t0)
    print(json.dumps(summary))
    if args.out:
        from precision_lab.provenance import provenance

        with open(args.out, "w") as fh:
            json.dump({"provenance": provenance(settings=vars(args)), "summary": summary, "items": rows}, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
