#!/usr/bin/env python
"""Benchmark the Triton quantize/dequantize kernels on a state-shaped fp32 tensor (GPU only).

    python scripts/bench_quant.py                          # 256×128×64×128 fp32 (1 GiB), reports/bench/
    python scripts/bench_quant.py --shape 64 128 64 128 --out-dir /tmp/bench

What it does, in one run:
1. builds an fp32 "state" x [B, H, R, C] (randn times a per-matrix power of two);
2. checks every kernel against the torch reference (precision_lab.quant) on the GPU, bit for bit
   (codes, block scales, global scales; dequantized values), chunk by chunk over the leading axis;
   a kernel whose check fails gets no throughput number;
3. times each kernel and a device-to-device copy of x (the memory ceiling) with
   triton.testing.do_bench (median; the L2 is flushed before every call, and x is ≫ the 50 MB L2);
4. writes bench_quant.json (kind "bench-quant") and bench_quant.png (GB/s bars, copy ceiling line).

Bytes model (explicit, per call; N = numel, M = number of matrices):
    copy               read 4N + write 4N
    nvfp4 quantize     read 4N + write N/2 (codes) + N/16 (E4M3 scales) + 4M (global scales)
    nvfp4 dequantize   read N/2 + N/16 + 4M + write 4N
    fp8 quantize       read 4N + write N          fp8 dequantize   read N + write 4N
    fp16/bf16-sr quant read 4N + write 2N          (random bits drawn in the kernel: no bytes)
Target: NVFP4 quantize of an fp32 state at ≥ 80% of the measured copy bandwidth.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

SEED = 1234  # Philox key for the SR kernels


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--shape", type=int, nargs="+", default=[256, 128, 64, 128], help="state shape [..., R, C]")
    p.add_argument("--out-dir", default="reports/bench", help="where bench_quant.json/png go")
    p.add_argument("--rep-ms", type=float, default=200.0, help="do_bench repetition time per kernel (ms)")
    p.add_argument("--check-chunk", type=int, default=32, help="leading-axis slices per reference-check chunk")
    p.add_argument("--target", type=float, default=0.8, help="NVFP4 quantize target as a fraction of copy GB/s")
    p.add_argument("--smoke", action="store_true",
                   help="without a GPU: run the whole script under the Triton interpreter on a tiny shape "
                        "(checks the plumbing; its timings are meaningless and marked so)")
    return p.parse_args(argv)


def make_state(shape, device) -> torch.Tensor:
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(shape, device=device, generator=g)
    lead = shape[:-2]
    exps = torch.randint(-8, 9, lead, device=device, generator=g).to(torch.float32)
    return x * torch.exp2(exps)[..., None, None]


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def main(argv=None) -> int:
    args = parse_args(argv)
    dev = "cuda" if torch.cuda.is_available() else "cpu"

    def sync() -> None:
        if dev == "cuda":
            torch.cuda.synchronize()

    if dev == "cpu" and not args.smoke:
        print("bench_quant: needs a CUDA GPU (the CPU interpreter would time numpy, not the kernels); "
              "--smoke runs the plumbing on the CPU", file=sys.stderr)
        return 2
    if dev == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    from precision_lab.kernels.quant import triton_quant as tq
    from precision_lab.kernels.quant.reference import dequantize as ref_deq
    from precision_lab.kernels.quant.reference import quantize as ref_q
    from precision_lab.quant.philox import randint
    from triton.testing import do_bench

    from precision_lab.provenance import provenance

    shape = tuple(args.shape)
    x = make_state(shape, dev)
    N, C = x.numel(), shape[-1]
    M = N // (shape[-2] * C)
    lead0 = shape[0]
    print(f"state {shape} fp32: {N * 4 / 2**30:.2f} GiB, {M} matrices", flush=True)

    # ---------------- the kernels under test: name → (callable, bytes per call) ----------------
    qt_nvfp4 = tq.nvfp4_quantize(x)
    qt_fp8 = tq.quantize(x, "fp8e4m3")
    cases = {
        "nvfp4 quantize": (lambda: tq.nvfp4_quantize(x, check_finite=False), 4 * N + N // 2 + N // 16 + 4 * M),
        "nvfp4-sr quantize": (lambda: tq.nvfp4_quantize(x, sr=True, seed=SEED, check_finite=False),
                              4 * N + N // 2 + N // 16 + 4 * M),
        "nvfp4 dequantize": (lambda: tq.nvfp4_dequantize(qt_nvfp4), N // 2 + N // 16 + 4 * M + 4 * N),
        "fp8e4m3 quantize": (lambda: tq.quantize(x, "fp8e4m3"), 5 * N),
        "fp8e4m3 dequantize": (lambda: tq.dequantize(qt_fp8), 5 * N),
        "fp16-sr quantize": (lambda: tq.quantize(x, "fp16-sr", seed=SEED), 6 * N),
        "bf16-sr quantize": (lambda: tq.quantize(x, "bf16-sr", seed=SEED), 6 * N),
    }

    # ---------------- correctness on the GPU, bit for bit, before any timing ----------------
    def check(name: str) -> tuple[bool, str]:
        ok, detail = True, ""
        if name == "nvfp4 dequantize":
            out = tq.nvfp4_dequantize(qt_nvfp4)
        elif name == "fp8e4m3 dequantize":
            out = tq.dequantize(qt_fp8)
        else:
            got = cases[name][0]()
        for s in range(0, lead0, args.check_chunk):
            e = min(lead0, s + args.check_chunk)
            xs = x[s:e]
            if name.endswith("dequantize"):
                qt = qt_nvfp4 if name.startswith("nvfp4") else qt_fp8
                sub = type(qt)(qt.data[s:e], None if qt.scale is None else qt.scale[s:e],
                               None if qt.global_scale is None else qt.global_scale[s:e],
                               tuple(xs.shape), qt.format)
                if not same(out[s:e], ref_deq(sub)):
                    ok, detail = False, f"dequantized values differ in slice {s}:{e}"
                continue
            fmt = {"nvfp4 quantize": "nvfp4", "nvfp4-sr quantize": "nvfp4-sr", "fp8e4m3 quantize": "fp8e4m3",
                   "fp16-sr quantize": "fp16-sr", "bf16-sr quantize": "bf16-sr"}[name]
            rb = None
            if fmt.endswith("-sr"):  # the kernel's Philox counter is the flat index into the whole x
                per = N // lead0  # elements per leading-axis slice
                rb = randint(SEED, torch.arange(s * per, e * per, device=dev, dtype=torch.int64)).reshape(xs.shape)
            want = ref_q(xs, fmt, rbits=rb)
            for field in ("data", "scale", "global_scale"):
                g = getattr(got, field)
                if g is not None:
                    g = g[s:e]
                if not same(g, getattr(want, field)):
                    ok, detail = False, f"{field} differs in slice {s}:{e}"
            del want, rb
        sync()
        return ok, detail or "bit-exact vs precision_lab.quant on the whole tensor"

    results: dict[str, dict] = {}
    for name in cases:
        ok, detail = check(name)
        results[name] = {"check": "pass" if ok else "FAIL", "check_detail": detail}
        print(f"check {name:22s} {'pass' if ok else 'FAIL: ' + detail}", flush=True)
        if dev == "cuda":
            torch.cuda.empty_cache()

    # launch variants of the NVFP4 quantize kernel (same results by construction; checked against the
    # default launch, itself checked against the reference above)
    n_mat = shape[-2] * C
    variants = {f"nvfp4 quantize [tile {t}, {w} warps]": (t, w)
                for t, w in ((n_mat, 8), (n_mat, 16), (max(16, n_mat // 2), 4))}
    for vname, (t, w) in variants.items():
        fn = (lambda t=t, w=w: tq.nvfp4_quantize(x, check_finite=False, tile=t, num_warps=w))
        cases[vname] = (fn, cases["nvfp4 quantize"][1])
        got = fn()
        ok = results["nvfp4 quantize"]["check"] == "pass" and all(
            same(getattr(got, f), getattr(qt_nvfp4, f)) for f in ("data", "scale", "global_scale"))
        results[vname] = {"check": "pass" if ok else "FAIL",
                          "check_detail": "bit-equal to the checked default launch" if ok else "differs from default"}
        print(f"check {vname:22s} {results[vname]['check']}", flush=True)
        del got

    # ---------------- timing ----------------
    def bench(fn) -> float:
        if dev == "cpu":  # smoke mode: one timed call, only to exercise the code path
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
        return float(do_bench(fn, warmup=25, rep=args.rep_ms, return_mode="median"))

    copy_dst = [torch.empty_like(x)]
    copy_ms = bench(lambda: copy_dst[0].copy_(x))
    copy_bytes = 8 * N
    copy_gbps = copy_bytes / copy_ms / 1e6
    print(f"copy ceiling: {copy_ms:.4f} ms, {copy_gbps:.0f} GB/s", flush=True)
    copy_dst.clear()
    for name, (fn, nbytes) in cases.items():
        r = results[name]
        r["bytes"] = int(nbytes)
        if r["check"] != "pass":
            print(f"{name:22s} not timed: correctness check failed", flush=True)
            continue
        ms = bench(fn)
        r.update(median_ms=ms, gbps=nbytes / ms / 1e6, frac_of_copy=nbytes / ms / 1e6 / copy_gbps,
                 elements_per_s=N / ms * 1e3)
        print(f"{name:22s} {ms:8.4f} ms  {r['gbps']:7.0f} GB/s  {100 * r['frac_of_copy']:5.1f}% of copy", flush=True)

    # the torch reference on the same tensor, for scale (one chunk, extrapolated per element)
    ref_time = None
    if results["nvfp4 quantize"]["check"] == "pass":
        xs = x[: args.check_chunk]
        ref_ms = bench(lambda: ref_q(xs, "nvfp4"))
        ref_time = {"median_ms_chunk": ref_ms, "chunk_shape": list(xs.shape),
                    "median_ms_full_extrapolated": ref_ms * N / xs.numel()}
        print(f"torch reference nvfp4 quantize: {ref_ms:.3f} ms per chunk {tuple(xs.shape)}", flush=True)

    nv = results["nvfp4 quantize"]
    target = {"kernel": "nvfp4 quantize", "fraction_of_copy": args.target,
              "achieved_fraction": nv.get("frac_of_copy"),
              "met": bool(nv.get("frac_of_copy", 0.0) >= args.target)}
    out = {
        "kind": "bench-quant",
        "schema_version": 1,
        "provenance": provenance(bench="scripts/bench_quant.py", shape=list(shape), dtype="float32",
                                 timing="triton.testing.do_bench median, L2 flushed before each call",
                                 rep_ms=args.rep_ms, sr_seed=SEED,
                                 gpu_name=torch.cuda.get_device_name(0) if dev == "cuda" else None,
                                 smoke=dev == "cpu",
                                 implementation="precision_lab.kernels.quant.triton_quant"),
        "state_bytes": 4 * N,
        "n_elements": N,
        "n_matrices": M,
        "copy": {"median_ms": copy_ms, "bytes": copy_bytes, "gbps": copy_gbps},
        "kernels": results,
        "torch_reference_nvfp4": ref_time,
        "target": target,
        "bytes_model": {
            "copy": "read 4N + write 4N",
            "nvfp4 quantize": "read 4N + write N/2 codes + N/16 scales + 4M global scales",
            "nvfp4 dequantize": "read N/2 + N/16 + 4M + write 4N",
            "fp8 quantize/dequantize": "4N + N",
            "fp16/bf16-sr quantize": "read 4N + write 2N (random bits drawn in-kernel)",
        },
    }
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_quant.json").write_text(json.dumps(out, indent=2) + "\n")
    plot(out, out_dir / "bench_quant.png")
    print(f"wrote {out_dir / 'bench_quant.json'} and bench_quant.png; target met: {target['met']}", flush=True)
    return 0 if all(r["check"] == "pass" for r in results.values()) else 1


def plot(out: dict, path: Path) -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib.pyplot as plt

    names = [n for n, r in out["kernels"].items() if "gbps" in r]
    vals = [out["kernels"][n]["gbps"] for n in names]
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = ax.barh(names[::-1], vals[::-1], color="tab:blue")
    for b, n in zip(bars, names[::-1]):
        ax.text(b.get_width(), b.get_y() + b.get_height() / 2,
                f" {100 * out['kernels'][n]['frac_of_copy']:.0f}%", va="center", fontsize=8)
    copy = out["copy"]["gbps"]
    ax.axvline(copy, color="k", ls="--", label=f"copy ceiling {copy:.0f} GB/s")
    ax.axvline(out["target"]["fraction_of_copy"] * copy, color="tab:red", ls=":", label="NVFP4 quantize target")
    gpu = out["provenance"].get("gpu_name", "")
    ax.set_xlabel("GB/s (explicit bytes model)")
    ax.set_title(f"quantize/dequantize, fp32 state {tuple(out['provenance']['shape'])}, {gpu}", fontsize=9)
    ax.set_xlim(0, max(vals + [copy]) * 1.15 if vals else copy * 1.15)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
