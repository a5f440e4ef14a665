#!/usr/bin/env python
"""Check and time the teacher-forced Triton scans (the KL engine's fast path) on the GPU.

    python scripts/bench_scan.py                       # T = 32768, batch 1 2 4 8 -> reports/bench/
    python scripts/bench_scan.py --T 8192 --batches 1 4 --out-dir /tmp/bench
    python scripts/bench_scan.py --smoke               # no GPU: interpreter, tiny shapes (plumbing only)

One run does, in order:
1. the memory ceiling: a device-to-device copy of 1 GiB (bytes read + written) with CUDA events;
2. correctness on the GPU, per architecture and policy: the scan kernel against its torch reference
   (kernels/<op>/scan_reference.py; relative RMS of outputs and final states) at batch 1 over
   --check-T tokens of the timed shape (the same compiled kernel; ``run_layer`` against the decode
   engine is tests/test_engine_triton.py's job); a policy whose check fails gets no throughput number;
3. timing of one layer's scan over T tokens × batch B, bf16 inputs, fp32 state, for a
   Qwen3.5-4B GDN layer (32 value heads, 16 key heads, K = V = 128) and a Nemotron-3-Super Mamba-2
   layer (128 heads, P = 64, N = 128, 8 groups): median of CUDA-event timings (inputs are GBs, far
   beyond the 60 MB L2, so every run reads them from HBM);
4. bench_scan.json (kind "bench-scan") in --out-dir.

Bytes model (the fewest bytes a scan must move; each input read once, the output written once):
    GDN:     q, k 2·B·T·Hk·K·2 + v B·T·Hv·V·2 + g, beta 2·B·T·Hv·4 + o B·T·Hv·V·2
    Mamba-2: x, z 2·B·T·H·P·2 + dt B·T·H·2 + B, C 2·B·T·G·N·2 + y B·T·H·P·2
    plus the state: read and written once per copy, B·H·R·C·4 each.
GB/s = bytes / median time; "% of copy" compares with step 1.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bootstrap() -> None:
    """Import precision_lab.{quant,kernels} from this checkout even without ``pip install -e .``
    (the device machine runs the tree as copied)."""
    sys.path.insert(0, str(ROOT))
    try:
        importlib.import_module("precision_lab.engines.triton_scan")
        return
    except ImportError:
        pass
    import precision_lab

    for folder in ("quant", "kernels", "evals"):
        name = f"precision_lab.{folder}"
        if name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, ROOT / folder / "__init__.py",
                                                      submodule_search_locations=[str(ROOT / folder)])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        setattr(precision_lab, folder, mod)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--T", type=int, default=32768, help="tokens per sequence in the timed runs")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--policies", nargs="+",
                   default=["fp32", "shared:nvfp4-sr", "split:fp16-sr/nvfp4", "conventional:bf16"])
    p.add_argument("--recurrent-batches", type=int, nargs="+", default=[1, 8],
                   help="batches at which the (sequential, per-token) conventional scan is timed")
    p.add_argument("--reps", type=int, default=3, help="timed runs per configuration (median)")
    p.add_argument("--time-budget", type=float, default=200.0, help="seconds; later timings are skipped")
    p.add_argument("--check-T", type=int, default=1024, help="tokens of the batch-1 correctness check")
    p.add_argument("--tol", type=float, default=3e-3,
                   help="max relative RMS vs the torch reference (y in its dtype; a rare flip of a quantized "
                        "code moves a state by ~1e-3)")
    p.add_argument("--out-dir", default=str(ROOT / "reports" / "bench"))
    p.add_argument("--smoke", action="store_true", help="interpreter on tiny shapes; timings meaningless")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------
def gdn_inputs(Bsz, T, HK, HV, K, V, device, dtype, gen):
    from precision_lab.layer import GDNInputs

    r = lambda *s: torch.randn(*s, device=device, generator=gen)
    return GDNInputs(q=r(Bsz, T, HK, K).to(dtype), k=r(Bsz, T, HK, K).to(dtype), v=r(Bsz, T, HV, V).to(dtype),
                     g=-torch.rand(Bsz, T, HV, device=device, generator=gen) * 0.2 - 0.01,
                     beta=torch.rand(Bsz, T, HV, device=device, generator=gen))


def mamba2_inputs(Bsz, T, H, P, G, N, device, dtype, gen):
    from precision_lab.layer import Mamba2Inputs

    r = lambda *s: torch.randn(*s, device=device, generator=gen)
    return Mamba2Inputs(x=r(Bsz, T, H, P).to(dtype), dt=(r(Bsz, T, H) - 2).to(dtype),
                        A=-torch.rand(H, device=device, generator=gen) - 0.1,
                        B=(r(Bsz, T, G, N) * 0.3).to(dtype), C=(r(Bsz, T, G, N) * 0.3).to(dtype),
                        D=r(H), dt_bias=r(H) * 0.1, z=r(Bsz, T, H, P).to(dtype))


def nbytes_model(inp, copies: int) -> int:
    el = lambda t: t.numel() * t.element_size()
    if inp.kind == "gdn":
        Bsz, _, HV, V = inp.v.shape
        K = inp.q.shape[-1]
        io = el(inp.q) + el(inp.k) + el(inp.v) + el(inp.g) + el(inp.beta) + el(inp.v)
        state = Bsz * HV * V * K * 4
    else:
        Bsz, _, H, P = inp.x.shape
        N = inp.B.shape[-1]
        io = el(inp.x) + el(inp.z) + el(inp.dt) + el(inp.B) + el(inp.C) + el(inp.x)
        state = Bsz * H * P * N * 4
    return io + 2 * copies * state


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
    from precision_lab.kernels.gdn.scan import gdn_recurrent_scan, gdn_replay_scan
    from precision_lab.kernels.mamba2.scan import mamba2_recurrent_scan, mamba2_replay_scan
    from precision_lab.kernels.scan_formats import FMT_FP32, KERNEL_FORMATS

    from precision_lab.engines.triton_scan import FP32_CHUNK

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
    from precision_lab.kernels.gdn.scan_reference import gdn_recurrent_scan_ref, gdn_replay_scan_ref
    from precision_lab.kernels.mamba2.scan_reference import mamba2_recurrent_scan_ref, mamba2_replay_scan_ref

    from precision_lab.engines.triton_scan import FP32_CHUNK

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


def cuda_time(fn, reps: int) -> float:
    """Median milliseconds of ``reps`` runs after one warm-up (compile) run."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return sorted(ts)[len(ts) // 2]


# ---------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    args = parse_args(argv)
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    global torch
    import torch

    _bootstrap()
    from precision_lab.layer import run_layer
    from precision_lab.policy import StatePolicy
    from precision_lab.provenance import provenance

    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    if device == "cpu" and not args.smoke:
        print("no GPU: run with --smoke to check the plumbing under the interpreter", file=sys.stderr)
        return 2
    t_start = time.time()
    gen = torch.Generator(device=device).manual_seed(0)
    policies = [StatePolicy.parse(p) for p in args.policies]
    out: dict = {"kind": "bench-scan", "schema_version": 1,
                 "provenance": provenance(script="scripts/bench_scan.py", argv=sys.argv[1:], smoke=args.smoke),
                 "bytes_model": __doc__.split("Bytes model")[1].split("GB/s =")[0].strip()}

    # 1. memory ceiling --------------------------------------------------------------------------
    if device == "cuda":
        n = (1 << 30) // 4
        src = torch.randn(n, device=device, generator=gen)
        dst = torch.empty_like(src)
        ms = cuda_time(lambda: dst.copy_(src), 10)
        out["copy_ceiling"] = {"bytes": 2 * n * 4, "ms": ms, "GBps": 2 * n * 4 / ms / 1e6}
        del src, dst
        print(f"copy ceiling: {out['copy_ceiling']['GBps']:.0f} GB/s")
    ceiling = out.get("copy_ceiling", {}).get("GBps")

    # 2 + 3. per architecture: check each policy's kernel on a slice of the timed shape (same
    # compiled kernel: lengths are not specialised), then time it over the whole batch sweep.
    if args.smoke:
        shapes = {"gdn": dict(HK=1, HV=2, K=32, V=16), "mamba2": dict(H=2, P=16, G=1, N=32)}
        T, T_check = 64, 48
    else:
        shapes = {"gdn": dict(HK=16, HV=32, K=128, V=128), "mamba2": dict(H=128, P=64, G=8, N=128)}
        T, T_check = args.T, args.check_T
    out["shapes"] = {"gdn": {"model": "Qwen3.5-4B GDN layer", **shapes["gdn"]},
                     "mamba2": {"model": "Nemotron-3-Super Mamba-2 layer", **shapes["mamba2"]}, "T": T}
    stamp = lambda: f"[{time.time() - t_start:6.1f}s]"
    checks, rows = [], []
    tol = args.tol
    for arch, shp in shapes.items():
        dims = ((shp["HK"], shp["HV"], shp["K"], shp["V"]) if arch == "gdn" else (shp["H"], shp["P"], shp["G"], shp["N"]))
        H, R, C = (shp["HV"], shp["V"], shp["K"]) if arch == "gdn" else (shp["H"], shp["P"], shp["N"])
        mk = gdn_inputs if arch == "gdn" else mamba2_inputs
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
        for Bsz in args.batches:
            if time.time() - t_start > args.time_budget:
                print(f"{stamp()} time budget reached: skipping {arch} B={Bsz}", flush=True)
                continue
            inp = mk(Bsz, T, *dims, device, torch.bfloat16, gen)
            s0 = torch.randn(Bsz, H, R, C, device=device, generator=gen) * 0.1
            for pol in ok_pols:
                name = pol.short_str()
                if pol.mode == "conventional" and Bsz not in args.recurrent_batches:
                    continue
                fn, which = kernel_call(inp, pol, s0)
                try:
                    ms = cuda_time(fn, args.reps) if device == "cuda" else float("nan")
                except Exception as ex:  # noqa: BLE001
                    rows.append({"arch": arch, "policy": name, "B": Bsz, "T": T, "error": repr(ex)[:500]})
                    print(f"{stamp()} time  {arch} {name} B={Bsz}: ERROR {ex!r}"[:300], flush=True)
                    continue
                nb = nbytes_model(inp, 2 if pol.mode == "split" else 1)
                row = {"arch": arch, "policy": name, "kernel": which, "B": Bsz, "T": T, "ms": ms,
                       "tokens_per_s": Bsz * T / ms * 1e3, "bytes": nb, "GBps": nb / ms / 1e6,
                       "pct_of_copy": (nb / ms / 1e6 / ceiling * 100) if ceiling else None}
                rows.append(row)
                print(f"{stamp()} time  {arch:6s} {name:28s} B={Bsz} T={T}: {ms:9.2f} ms "
                      f"{row['tokens_per_s'] / 1e6:7.3f} Mtok/s {row['GBps']:7.1f} GB/s"
                      + (f" ({row['pct_of_copy']:.1f}% of copy)" if ceiling else ""), flush=True)
            if Bsz == args.batches[0] and device == "cuda" and ok_pols:
                # the whole engine (validation, initial casts; no edges since T % L == 0)
                pol = ok_pols[-1]
                ms = cuda_time(lambda p=pol, i=inp, s=s0: run_layer(i, p, engine="triton", initial_state=s), 1)
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
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    path = Path(args.out_dir) / ("bench_scan_smoke.json" if args.smoke else "bench_scan.json")
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}; {len(checks) - len(failed)}/{len(checks)} checks passed; {out['elapsed_s']:.0f} s")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
