"""The teacher-forced scan benchmark: check and time the Triton scans (the KL engine's fast path).

One run does, in order:
1. the memory ceiling (``ceiling.copy_ceiling``);
2. correctness on the device, per architecture and policy: the scan kernel against its torch
   reference (kernels/<op>/scan_reference.py; relative RMS of outputs and final states) at batch 1
   over ``check_T`` tokens of the timed shape (the same compiled kernel; ``run_layer`` against the
   decode engine is tests/test_engine_triton.py's job); a policy whose check fails gets no
   throughput number;
3. timing of one layer's scan over T tokens × batch B, bf16 inputs, fp32 state, for a
   Qwen3.5-4B GDN layer (32 value heads, 16 key heads, K = V = 128) and a Nemotron-3-Super Mamba-2
   layer (128 heads, P = 64, N = 128, 8 groups): median of CUDA-event timings (inputs are GBs, far
   beyond the 60 MB L2, so every run reads them from HBM);
4. bench_scan.json (kind "bench-scan", ``schema.ScanKernelsResult``) in ``out_dir``.

Bytes: ``byte_models.SCAN_BYTES_MODEL``; GB/s = bytes / median time; "% of copy" compares with
step 1.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from .byte_models import SCAN_BYTES_MODEL, scan_bytes
from .problems import gdn_scan_inputs, mamba2_scan_inputs
from .schema import ScanCheck, ScanKernelsResult, ScanLayer, ScanRow, dump, run_provenance
from .timing import event_median_ms


def _call_parts(inp, policy, s0):
    """What the kernel and its reference are both called with: (is Mamba-2, positional inputs,
    GDN-only keywords, keywords common to every scan)."""
    m2 = inp.kind == "mamba2"
    args = ((inp.x, inp.dt, inp.A, inp.B, inp.C, inp.D, inp.dt_bias, inp.z) if m2
            else (inp.q, inp.k, inp.v, inp.g, inp.beta))
    gkw = {} if m2 else dict(scale=inp.scale, qk_l2norm=inp.qk_l2norm)
    common = dict(seq_ids=torch.arange(s0.shape[0]), seed=policy.seed, layer=0, event0=1)
    return m2, args, gkw, common


def kernel_call(inp, policy, s0):
    """A closure running the scan kernel that run_layer(engine='triton') would pick (no edges)."""
    from precision_lab.engines.triton_scan import FP32_CHUNK
    from precision_lab.kernels.common.formats import FMT_FP32, KERNEL_FORMATS
    from precision_lab.kernels.gdn.scan import gdn_recurrent_scan, gdn_replay_scan
    from precision_lab.kernels.mamba2.scan import mamba2_recurrent_scan, mamba2_replay_scan

    uf, us = KERNEL_FORMATS[policy.update]
    rf, rs = KERNEL_FORMATS[policy.read]
    m2, args, gkw, common = _call_parts(inp, policy, s0)
    if policy.mode == "conventional" and uf != FMT_FP32:
        fn = mamba2_recurrent_scan if m2 else gdn_recurrent_scan
        return lambda: fn(*args, s0, fmt=uf, sr=us, **gkw, **common), "recurrent"
    replay = policy.is_replay
    kw = dict(L=policy.buffer_len if replay else FP32_CHUNK, upd_fmt=uf, upd_sr=us, read_fmt=rf, read_sr=rs,
              split=policy.mode == "split", fold_partial=not replay, **common)
    if not m2:
        kw["recompute"] = policy.gdn_fold == "recompute"
    fn = mamba2_replay_scan if m2 else gdn_replay_scan
    return lambda: fn(*args, s0, s0, **gkw, **kw), "replay"


def reference_call(inp, policy, s0):
    """The torch reference of ``kernel_call``: (y, update state, read state)."""
    from precision_lab.engines.triton_scan import FP32_CHUNK
    from precision_lab.kernels.gdn.scan_reference import gdn_recurrent_scan_ref, gdn_replay_scan_ref
    from precision_lab.kernels.mamba2.scan_reference import mamba2_recurrent_scan_ref, mamba2_replay_scan_ref

    m2, args, gkw, common = _call_parts(inp, policy, s0)
    if policy.mode == "conventional" and policy.update != "fp32":
        fn = mamba2_recurrent_scan_ref if m2 else gdn_recurrent_scan_ref
        y, s = fn(*args, s0, fmt=policy.update, **gkw, **common)
        return y, s, s
    replay = policy.is_replay
    kw = dict(L=policy.buffer_len if replay else FP32_CHUNK, update=policy.update, read=policy.read,
              split=policy.mode == "split", fold_partial=not replay, **common)
    if not m2:
        kw["recompute"] = policy.gdn_fold == "recompute"
    fn = mamba2_replay_scan_ref if m2 else gdn_replay_scan_ref
    return fn(*args, s0, s0, **gkw, **kw)


def rel_rms(a, b) -> float:
    a, b = a.double(), b.double()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def run(*, T: int = 32768, batches=(1, 2, 4, 8),
        policies=("fp32", "shared:nvfp4-sr", "split:fp16-sr/nvfp4", "conventional:bf16"),
        recurrent_batches=(1, 8), reps: int = 3, time_budget: float = 200.0, check_T: int = 1024,
        tol: float = 3e-3, out_dir="reports/bench", smoke: bool = False) -> int:
    """The benchmark on the CUDA device (``smoke``: tiny shapes under the Triton interpreter,
    timings meaningless). Writes bench_scan.json (bench_scan_smoke.json) into ``out_dir``; returns
    the exit status (1 when a check failed)."""
    from precision_lab.layer import run_layer
    from precision_lab.policy import StatePolicy

    from .ceiling import copy_ceiling

    device = "cpu" if smoke else "cuda"
    settings = {"T": T, "batches": list(batches), "policies": list(policies),
                "recurrent_batches": list(recurrent_batches), "reps": reps, "time_budget": time_budget,
                "check_T": check_T, "tol": tol}
    run_provenance(smoke=smoke, settings=settings)  # no commit to record: stop before spending device time
    t_start = time.time()
    gen = torch.Generator(device=device).manual_seed(0)
    policies = [StatePolicy.parse(p) for p in policies]

    # 1. memory ceiling --------------------------------------------------------------------------
    copy = None if smoke else copy_ceiling(device)
    if copy is not None:
        print(f"copy ceiling: {copy.GBps:.0f} GB/s ({copy.method})")
    ceiling = copy.GBps if copy else None

    # 2 + 3. per architecture: check each policy's kernel on a slice of the timed shape (same
    # compiled kernel: lengths are not specialised), then time it over the whole batch sweep.
    if smoke:
        shapes = {"gdn": dict(HK=1, HV=2, K=32, V=16), "mamba2": dict(H=2, P=16, G=1, N=32)}
        T, T_check = 64, 48
    else:
        shapes = {"gdn": dict(HK=16, HV=32, K=128, V=128), "mamba2": dict(H=128, P=64, G=8, N=128)}
        T_check = check_T
    layers = {"gdn": ScanLayer(model="Qwen3.5-4B GDN layer", dims=shapes["gdn"]),
              "mamba2": ScanLayer(model="Nemotron-3-Super Mamba-2 layer", dims=shapes["mamba2"])}
    stamp = lambda: f"[{time.time() - t_start:6.1f}s]"
    checks: list[ScanCheck] = []
    rows: list[ScanRow] = []
    for arch, shp in shapes.items():
        dims = ((shp["HK"], shp["HV"], shp["K"], shp["V"]) if arch == "gdn" else (shp["H"], shp["P"], shp["G"], shp["N"]))
        H, R, C = (shp["HV"], shp["V"], shp["K"]) if arch == "gdn" else (shp["H"], shp["P"], shp["N"])
        mk = gdn_scan_inputs if arch == "gdn" else mamba2_scan_inputs
        ok_pols = []
        sl = mk(1, T_check, *dims, device, torch.bfloat16, gen)
        s1 = torch.randn(1, H, R, C, device=device, generator=gen) * 0.1
        for pol in policies:
            entry = ScanCheck(arch=arch, policy=pol.short_str(), against="scan_reference", T=T_check, B=1, ok=False)
            try:
                t0 = time.time()
                fn, which = kernel_call(sl, pol, s1)
                res = fn()
                y, u, r = res if which == "replay" else (res[0], res[1], res[1])
                entry.first_call_s = time.time() - t0   # includes the compile
                yr, ur, rr = reference_call(sl, pol, s1)
                e = {"y": rel_rms(y, yr), "update": rel_rms(u, ur), "read": rel_rms(r, rr)}
                # y is stored in the inputs' dtype (bf16): its own rounding is up to 2^-8 relative
                tol_y = tol + (2.0 ** -8 if y.dtype == torch.bfloat16 else 0.0)
                entry.rel_rms = e if all(v != float("inf") for v in e.values()) else None
                entry.ok = e["y"] < tol_y and e["update"] < tol and e["read"] < tol
            except Exception as ex:  # noqa: BLE001 - record and keep going
                entry.error, entry.ok = repr(ex)[:500], False
            checks.append(entry)
            if entry.ok:
                ok_pols.append(pol)
            msg = (f"{entry.rel_rms['y']:.1e}/{entry.rel_rms['update']:.1e}/{entry.rel_rms['read']:.1e}"
                   f" (first call {entry.first_call_s:.1f}s)" if entry.rel_rms else (entry.error or "non-finite")[:200])
            print(f"{stamp()} check {arch:6s} {pol.short_str():28s} y/update/read rel RMS {msg}"
                  + ("" if entry.ok else "  FAIL"), flush=True)
        del sl, s1
        for Bsz in batches:
            if time.time() - t_start > time_budget:
                print(f"{stamp()} time budget reached: skipping {arch} B={Bsz}", flush=True)
                continue
            inp = mk(Bsz, T, *dims, device, torch.bfloat16, gen)
            s0 = torch.randn(Bsz, H, R, C, device=device, generator=gen) * 0.1
            for pol in ok_pols:
                name = pol.short_str()
                if pol.mode == "conventional" and Bsz not in recurrent_batches:
                    continue
                fn, which = kernel_call(inp, pol, s0)
                nb = scan_bytes(inp, 2 if pol.mode == "split" else 1)
                if device != "cuda":  # a smoke run times nothing (interpreter timings would mean nothing)
                    rows.append(ScanRow(arch=arch, policy=name, B=Bsz, T=T, kernel=which, bytes=nb))
                    continue
                try:
                    ms = event_median_ms(fn, reps)
                except Exception as ex:  # noqa: BLE001
                    rows.append(ScanRow(arch=arch, policy=name, B=Bsz, T=T, kernel=which, error=repr(ex)[:500]))
                    print(f"{stamp()} time  {arch} {name} B={Bsz}: ERROR {ex!r}"[:300], flush=True)
                    continue
                row = ScanRow(arch=arch, policy=name, kernel=which, B=Bsz, T=T, ms=ms, tokens_per_s=Bsz * T / ms * 1e3,
                              bytes=nb, GBps=nb / ms / 1e6, pct_of_copy=(nb / ms / 1e6 / ceiling * 100) if ceiling else None)
                rows.append(row)
                print(f"{stamp()} time  {arch:6s} {name:28s} B={Bsz} T={T}: {ms:9.2f} ms "
                      f"{row.tokens_per_s / 1e6:7.3f} Mtok/s {row.GBps:7.1f} GB/s"
                      + (f" ({row.pct_of_copy:.1f}% of copy)" if ceiling else ""), flush=True)
            if Bsz == batches[0] and device == "cuda" and ok_pols:
                # the whole engine (validation, initial casts; no edges since T % L == 0)
                pol = ok_pols[-1]
                ms = event_median_ms(lambda p=pol, i=inp, s=s0: run_layer(i, p, engine="triton", initial_state=s), 1)
                rows.append(ScanRow(arch=arch, policy=pol.short_str(), kernel="run_layer(engine='triton')", B=Bsz, T=T,
                                    ms=ms, tokens_per_s=Bsz * T / ms * 1e3))
                print(f"{stamp()} time  {arch:6s} run_layer(engine='triton') {pol.short_str()} B={Bsz}: {ms:.2f} ms",
                      flush=True)
            del inp, s0
            if device == "cuda":
                torch.cuda.empty_cache()
    failed = [c for c in checks if not c.ok]
    seconds = time.time() - t_start
    out = ScanKernelsResult(provenance=run_provenance(smoke=smoke, settings=settings, seconds=seconds), ceiling=copy,
                            peers={}, T=T, layers=layers, bytes_model=SCAN_BYTES_MODEL, checks=checks, rows=rows)
    path = Path(out_dir) / ("bench_scan_smoke.json" if smoke else "bench_scan.json")
    dump(out, path)
    print(f"wrote {path}; {len(checks) - len(failed)}/{len(checks)} checks passed; {seconds:.0f} s")
    return 0 if not failed else 1
