"""The teacher-forced scan benchmark: check and time the Triton scans (the KL engine's fast path).

One run does, in order:
1. the memory ceiling: a device-to-device copy of 1 GiB (bytes read + written) with CUDA events;
2. correctness on the device, per architecture and policy: the scan kernel against its torch
   reference (kernels/<op>/scan_reference.py; relative RMS of outputs and final states) at batch 1
   over ``check_T`` tokens of the timed shape (the same compiled kernel; ``run_layer`` against the
   decode engine is tests/test_engine_triton.py's job); a policy whose check fails gets no
   throughput number;
3. timing of one layer's scan over T tokens × batch B, bf16 inputs, fp32 state, for a
   Qwen3.5-4B GDN layer (32 value heads, 16 key heads, K = V = 128) and a Nemotron-3-Super Mamba-2
   layer (128 heads, P = 64, N = 128, 8 groups): median of CUDA-event timings (inputs are GBs, far
   beyond the 60 MB L2, so every run reads them from HBM);
4. bench_scan.json (kind "bench-scan") in ``out_dir``.

Bytes: ``byte_models.SCAN_BYTES_MODEL``; GB/s = bytes / median time; "% of copy" compares with
step 1.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from .byte_models import SCAN_BYTES_MODEL, scan_bytes
from .problems import gdn_scan_inputs, mamba2_scan_inputs
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
    from precision_lab.kernels.engine import FP32_CHUNK
    from precision_lab.kernels.gdn.scan import gdn_recurrent_scan, gdn_replay_scan
    from precision_lab.kernels.mamba2.scan import mamba2_recurrent_scan, mamba2_replay_scan
    from precision_lab.kernels.scan_formats import FMT_FP32, KERNEL_FORMATS

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
    from precision_lab.kernels.engine import FP32_CHUNK
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
        tol: float = 3e-3, out_dir="reports/bench", smoke: bool = False, argv=()) -> int:
    """The benchmark on the CUDA device (``smoke``: tiny shapes under the Triton interpreter,
    timings meaningless). Writes bench_scan.json (bench_scan_smoke.json) into ``out_dir``; returns
    the exit status (1 when a check failed)."""
    from precision_lab.layer import run_layer
    from precision_lab.policy import StatePolicy
    from precision_lab.provenance import provenance

    device = "cpu" if smoke else "cuda"
    t_start = time.time()
    gen = torch.Generator(device=device).manual_seed(0)
    policies = [StatePolicy.parse(p) for p in policies]
    out: dict = {"kind": "bench-scan", "schema_version": 1,
                 "provenance": provenance(script="scripts/bench_scan.py", argv=list(argv), smoke=smoke),
                 "bytes_model": SCAN_BYTES_MODEL}

    # 1. memory ceiling --------------------------------------------------------------------------
    if device == "cuda":
        n = (1 << 30) // 4
        src = torch.randn(n, device=device, generator=gen)
        dst = torch.empty_like(src)
        ms = event_median_ms(lambda: dst.copy_(src), 10)
        out["copy_ceiling"] = {"bytes": 2 * n * 4, "ms": ms, "GBps": 2 * n * 4 / ms / 1e6}
        del src, dst
        print(f"copy ceiling: {out['copy_ceiling']['GBps']:.0f} GB/s")
    ceiling = out.get("copy_ceiling", {}).get("GBps")

    # 2 + 3. per architecture: check each policy's kernel on a slice of the timed shape (same
    # compiled kernel: lengths are not specialised), then time it over the whole batch sweep.
    if smoke:
        shapes = {"gdn": dict(HK=1, HV=2, K=32, V=16), "mamba2": dict(H=2, P=16, G=1, N=32)}
        T, T_check = 64, 48
    else:
        shapes = {"gdn": dict(HK=16, HV=32, K=128, V=128), "mamba2": dict(H=128, P=64, G=8, N=128)}
        T_check = check_T
    out["shapes"] = {"gdn": {"model": "Qwen3.5-4B GDN layer", **shapes["gdn"]},
                     "mamba2": {"model": "Nemotron-3-Super Mamba-2 layer", **shapes["mamba2"]}, "T": T}
    stamp = lambda: f"[{time.time() - t_start:6.1f}s]"
    checks, rows = [], []
    for arch, shp in shapes.items():
        dims = ((shp["HK"], shp["HV"], shp["K"], shp["V"]) if arch == "gdn" else (shp["H"], shp["P"], shp["G"], shp["N"]))
        H, R, C = (shp["HV"], shp["V"], shp["K"]) if arch == "gdn" else (shp["H"], shp["P"], shp["N"])
        mk = gdn_scan_inputs if arch == "gdn" else mamba2_scan_inputs
        ok_pols = []
        sl = mk(1, T_check, *dims, device, torch.bfloat16, gen)
        s1 = torch.randn(1, H, R, C, device=device, generator=gen) * 0.1
        for pol in policies:
            entry = {"arch": arch, "policy": pol.short_str(), "against": "scan_reference", "T": T_check, "B": 1}
            try:
                t0 = time.time()
                fn, which = kernel_call(sl, pol, s1)
                res = fn()
                y, u, r = res if which == "replay" else (res[0], res[1], res[1])
                entry["first_call_s"] = time.time() - t0   # includes the compile
                yr, ur, rr = reference_call(sl, pol, s1)
                e = {"y": rel_rms(y, yr), "update": rel_rms(u, ur), "read": rel_rms(r, rr)}
                # y is stored in the inputs' dtype (bf16): its own rounding is up to 2^-8 relative
                tol_y = tol + (2.0 ** -8 if y.dtype == torch.bfloat16 else 0.0)
                entry.update(rel_rms=e, ok=e["y"] < tol_y and e["update"] < tol and e["read"] < tol)
            except Exception as ex:  # noqa: BLE001 - record and keep going
                entry.update(error=repr(ex)[:500], ok=False)
            checks.append(entry)
            if entry["ok"]:
                ok_pols.append(pol)
            msg = (f"{entry['rel_rms']['y']:.1e}/{entry['rel_rms']['update']:.1e}/{entry['rel_rms']['read']:.1e}"
                   f" (first call {entry['first_call_s']:.1f}s)" if "rel_rms" in entry else entry["error"][:200])
            print(f"{stamp()} check {arch:6s} {pol.short_str():28s} y/update/read rel RMS {msg}"
                  + ("" if entry["ok"] else "  FAIL"), flush=True)
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
                try:
                    ms = event_median_ms(fn, reps) if device == "cuda" else float("nan")
                except Exception as ex:  # noqa: BLE001
                    rows.append({"arch": arch, "policy": name, "B": Bsz, "T": T, "error": repr(ex)[:500]})
                    print(f"{stamp()} time  {arch} {name} B={Bsz}: ERROR {ex!r}"[:300], flush=True)
                    continue
                nb = scan_bytes(inp, 2 if pol.mode == "split" else 1)
                row = {"arch": arch, "policy": name, "kernel": which, "B": Bsz, "T": T, "ms": ms,
                       "tokens_per_s": Bsz * T / ms * 1e3, "bytes": nb, "GBps": nb / ms / 1e6,
                       "pct_of_copy": (nb / ms / 1e6 / ceiling * 100) if ceiling else None}
                rows.append(row)
                print(f"{stamp()} time  {arch:6s} {name:28s} B={Bsz} T={T}: {ms:9.2f} ms "
                      f"{row['tokens_per_s'] / 1e6:7.3f} Mtok/s {row['GBps']:7.1f} GB/s"
                      + (f" ({row['pct_of_copy']:.1f}% of copy)" if ceiling else ""), flush=True)
            if Bsz == batches[0] and device == "cuda" and ok_pols:
                # the whole engine (validation, initial casts; no edges since T % L == 0)
                pol = ok_pols[-1]
                ms = event_median_ms(lambda p=pol, i=inp, s=s0: run_layer(i, p, engine="triton", initial_state=s), 1)
                rows.append({"arch": arch, "policy": pol.short_str(), "kernel": "run_layer(engine='triton')",
                             "B": Bsz, "T": T, "ms": ms, "tokens_per_s": Bsz * T / ms * 1e3})
                print(f"{stamp()} time  {arch:6s} run_layer(engine='triton') {pol.short_str()} B={Bsz}: {ms:.2f} ms",
                      flush=True)
            del inp, s0
            if device == "cuda":
                torch.cuda.empty_cache()
    out["checks"] = checks
    failed = [c for c in checks if not c["ok"]]
    out["timings"] = rows
    out["elapsed_s"] = time.time() - t_start
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    path = Path(out_dir) / ("bench_scan_smoke.json" if smoke else "bench_scan.json")
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}; {len(checks) - len(failed)}/{len(checks)} checks passed; {out['elapsed_s']:.0f} s")
    return 0 if not failed else 1
