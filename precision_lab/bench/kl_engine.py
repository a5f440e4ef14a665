"""The KL engine benchmark (the KL-vs-length machinery on one GPU):

1. side by side on the same stream (bf16 weights): teacher-forced engine vs token-by-token decode
   through the same adapters and policies -> speedup (token-by-token is timed over its first
   ``tbt_tokens`` decode steps and scaled per token; the JSON says so);
2. the long run: ``tokens`` (128K) x (fp32 reference + policies), KL per position included, stopped
   at ``time_limit`` seconds if not done; an unfinished run is extrapolated from the measured
   per-segment times (linear fit in position, since attention cost grows with it) and labelled;
3. correctness on the device: teacher-forced engine vs token-by-token decode with the weights cast
   to fp32, fp32 reference + the policies, short stream (``compare_engines`` verdicts). It runs last
   because its first call pays the Triton JIT and the fp32 token-by-token loop (206 s on the H200).

The model is a random-init preset (default ``qwen3.5-4b-shape``): timings only; its KL values mean
nothing. Writes a JSON of kind "bench-kl" (rewritten after each part, so a killed run keeps what
finished).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from .schema import (
    EngineCheck,
    EngineVerdict,
    KLEngineResult,
    LongRun,
    Segment,
    SideBySide,
    dump,
    run_provenance,
)


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def run(*, model="qwen3.5-4b-shape", policies=("shared:nvfp4", "split:fp32/nvfp4", "split:fp16-sr/nvfp4",
                                               "conventional:bf16"),
        tokens=131072, prefill=512, segment=4096, time_limit=120.0, side_tokens=512, tbt_tokens=32,
        check_tokens=16, engine="auto", device="auto", skip_check=False, out="reports/bench/bench_kl.json") -> int:
    """The benchmark (see the module docstring) on ``device`` ("auto": CUDA when present; on the CPU
    it is a smoke run). Returns the exit status."""
    from precision_lab.models._hf import import_transformers

    import_transformers()
    from precision_lab.evals.kl import kl_stream
    from precision_lab.models import apply_policy, load_model, policy_mixers
    from precision_lab.teacher_forced import (
        compare_engines,
        lm_logits,
        resolve_engine,
        teacher_forced_logits,
        token_by_token,
    )
    from precision_lab.teacher_forced import run as stream_segments

    from .ceiling import copy_ceiling

    settings = dict(model=model, policies=list(policies), tokens=tokens, prefill=prefill, segment=segment,
                    time_limit=time_limit, side_tokens=side_tokens, tbt_tokens=tbt_tokens, check_tokens=check_tokens,
                    engine=engine, device=device, skip_check=skip_check)
    dev = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
    smoke = dev.type != "cuda"
    run_provenance(smoke=smoke, settings=settings)  # no commit to record: stop before spending device time
    engine = resolve_engine(engine, dev)
    model_name, policies = model, list(policies)
    rows = ["fp32", *policies]
    G = len(rows)
    res = KLEngineResult(provenance=run_provenance(smoke=smoke, settings=settings),
                         ceiling=None if smoke else copy_ceiling(dev), peers={}, model=model_name, policies=policies,
                         engine=engine)

    def save():
        dump(res, out)

    def served(m):
        return sorted({f"{e}:{i}" for mix in policy_mixers(m) for (e, i) in mix.served})

    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    lm, _ = load_model(model_name, dtype=torch.bfloat16, device=dev)
    vocab_ids = min(lm.config.vocab_size, 50000)
    apply_policy(lm, rows, engine=engine, seed=0)
    _sync(dev)
    res.build_seconds = time.perf_counter() - t0
    res.model_params = sum(p.numel() for p in lm.parameters())
    print(f"built {model_name} ({res.model_params / 1e9:.2f}B params) in {res.build_seconds:.1f}s on {dev}", flush=True)

    # 1. side by side on one stream (bf16 weights)
    SP, SD, TB = prefill, side_tokens, min(tbt_tokens, side_tokens)
    ids = torch.randint(0, vocab_ids, (1, SP + SD), generator=gen)
    list(stream_segments(lm, ids[:, :SP + 64], prefill_len=SP, segment_len=64, engine=engine))   # warm-up (JIT)
    _sync(dev)
    segs = []
    for seg in stream_segments(lm, ids, prefill_len=SP, segment_len=SD, engine=engine):
        t0 = time.perf_counter()
        lm_logits(lm, seg.hidden)
        _sync(dev)
        segs.append((seg.prefill, seg.seconds + time.perf_counter() - t0))
    tf_decode = sum(s for p, s in segs if not p)
    tbt_steps = []      # one cached forward + its logits per decode token, on the decode engine
    for seg in stream_segments(lm, ids[:, :SP + TB], prefill_len=SP, segment_len=1, engine="decode"):
        t0 = time.perf_counter()
        lm_logits(lm, seg.hidden)
        _sync(dev)
        if not seg.prefill:
            tbt_steps.append(seg.seconds + time.perf_counter() - t0)
    tbt_per_tok = float(np.median(tbt_steps))
    res.side_by_side = SideBySide(
        prefill=SP, decode_tokens=SD, rows=G, weights="bfloat16", prefill_seconds=sum(s for p, s in segs if p),
        teacher_forced_seconds=tf_decode, teacher_forced_tok_per_s=SD / tf_decode, token_by_token_steps_timed=TB,
        token_by_token_seconds_per_step=tbt_per_tok, token_by_token_seconds_per_step_stat="median over the timed steps",
        token_by_token_seconds_for_stream=tbt_per_tok * SD,
        token_by_token_note=f"measured over {TB} steps, scaled to {SD}" if TB < SD else "measured",
        speedup=tbt_per_tok * SD / tf_decode,
        speedup_valid=None,   # set from the correctness check at the end
        implementations=served(lm))
    print(f"side by side: teacher-forced {SD} tokens in {tf_decode:.2f}s; token-by-token {tbt_per_tok * 1e3:.1f} ms/step "
          f"-> speedup {res.side_by_side.speedup:.1f}x", flush=True)
    save()

    # 2. the long run, KL included
    N = tokens
    ids = torch.randint(0, vocab_ids, (1, N), generator=gen)
    seg_times = []
    pos = [prefill]

    def prog(n):
        seg_times.append((pos[0], n, time.perf_counter()))
        pos[0] += n

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    kl, agree, nll = kl_stream(lm, ids, n_groups=G, prefill=prefill, segment=segment, engine=engine,
                               seq_ids=torch.tensor([0]), budget_bytes=8e9 if dev.type == "cuda" else 2.5e8,
                               progress=prog, max_seconds=time_limit)
    _sync(dev)
    elapsed = time.perf_counter() - t0
    done = int(np.isfinite(kl[0, 0]).sum())
    decode_n = N - prefill
    # per-segment seconds (the first entry is the prefill)
    stamps = [t0] + [t for _, _, t in seg_times]
    per = [(p, n, stamps[i + 1] - stamps[i]) for i, (p, n, _) in enumerate(seg_times)]
    est = elapsed
    note = "measured (complete)"
    if done < decode_n:
        dec = [(p, n, s) for p, n, s in per if p >= prefill and n == segment][1:] or per[-1:]
        x = np.array([p for p, _, _ in dec], float)
        y = np.array([s / n for _, n, s in dec], float)        # seconds per token vs position
        a_, b_ = (np.polyfit(x, y, 1) if len(x) >= 2 else (0.0, y[0]))
        rest = np.arange(prefill + done, N, dtype=float)
        est = elapsed + float(np.sum(np.maximum(a_ * rest + b_, y.min())))
        note = (f"EXTRAPOLATED: stopped after {done} of {decode_n} decode tokens at the {time_limit:.0f}s limit; "
                "remaining time from a linear fit of seconds/token vs position over the measured segments")
    res.long_run = LongRun(
        tokens=N, prefill=prefill, segment=segment, rows=G, weights="bfloat16", decode_tokens_done=done,
        seconds=elapsed, tokens_per_s_per_row=done / elapsed, estimated_seconds_full=est, estimate_note=note,
        target_seconds=300, segments=[Segment(start=p, tokens=n, seconds=s) for p, n, s in per],
        peak_gpu_mem_gib=(torch.cuda.max_memory_allocated(dev) / 2**30) if dev.type == "cuda" else None,
        mean_kl_by_policy_random_weights={p: float(np.nanmean(kl[i])) for i, p in enumerate(policies)},
        implementations=served(lm))
    print(f"long run: {done}/{decode_n} decode tokens x {G} rows in {elapsed:.1f}s; full run {est:.1f}s ({note})",
          flush=True)
    save()
    # 3. correctness, last so that the timings above come first (fp32 weights: the bf16 weights cast
    #    exactly, so both paths differ only in fp32 rounding)
    if not skip_check:
        lm.to(torch.float32)
        for m in policy_mixers(lm):
            m.served.clear()
        P, D = 32, check_tokens
        ids = torch.randint(0, vocab_ids, (1, P + D), generator=gen)
        t0 = time.perf_counter()
        a = teacher_forced_logits(lm, ids, prefill_len=P, segment_len=16, engine=engine)
        b = token_by_token(lm, ids, prefill_len=P)
        verdict = compare_engines(a, b, rows)
        res.check = EngineCheck(prefill=P, decode_tokens=D, segment=16, weights="float32",
                                verdicts={p: EngineVerdict(ok=bool(v["ok"]), disagreement=float(v["disagreement"]),
                                                           effect=float(v["effect"]), criterion=v.get("criterion"))
                                          for p, v in verdict.items()},
                                all_ok=all(v["ok"] for v in verdict.values()), seconds=time.perf_counter() - t0,
                                implementations=served(lm))
        res.side_by_side.speedup_valid = res.check.all_ok
        print("check:", {p: (v["ok"], f"{v['disagreement']:.2e}", f"{v['effect']:.2e}") for p, v in verdict.items()},
              flush=True)
        del a, b
        save()
    print(f"wrote {out}")
    return 0
