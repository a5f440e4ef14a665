"""The quantizer kernel benchmark: Triton quantize/dequantize on a state-shaped fp32 tensor.

One run:
1. builds an fp32 "state" x [B, H, R, C] (``problems.quant_state``);
2. checks every kernel against the torch reference (precision_lab.quant) on the device, bit for bit
   (codes, block scales, global scales; dequantized values), chunk by chunk over the first axis;
   a kernel whose check fails gets no throughput number;
3. measures the copy ceiling (``ceiling.copy_ceiling``) and times each kernel with
   triton.testing.do_bench (median; the L2 is flushed before every call, and x is ≫ the 50 MB L2);
4. writes bench_quant.json (kind "bench-quant", ``schema.QuantKernelsResult``) and bench_quant.png
   (GB/s bars, copy ceiling line).

Bytes per call: ``byte_models.QUANT_BYTES_MODEL``. Target: NVFP4 quantize of an fp32 state at
≥ 80% of the measured copy bandwidth.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .byte_models import QUANT_BYTES_MODEL, quant_bytes
from .problems import quant_state
from .schema import QuantKernel, QuantKernelsResult, QuantTarget, ReferenceTime, dump, run_provenance
from .timing import do_bench_ms

SEED = 1234  # Philox key for the SR kernels


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Bit-for-bit equality of two tensors (or both None)."""
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def run(*, shape=(256, 128, 64, 128), out_dir="reports/bench", rep_ms: float = 200.0, check_chunk: int = 32,
        target: float = 0.8, device="cuda") -> int:
    """The benchmark on ``device`` ("cpu": a smoke run under the Triton interpreter, timings
    meaningless). Writes bench_quant.json / .png into ``out_dir``; returns the exit status (1 when a
    check failed)."""
    dev = str(device)
    smoke = dev != "cuda"
    settings = {"shape": list(shape), "rep_ms": rep_ms, "check_chunk": check_chunk, "target": target}
    run_provenance(smoke=smoke, settings=settings)  # no commit to record: stop before spending device time

    def sync() -> None:
        if dev == "cuda":
            torch.cuda.synchronize()

    from precision_lab.kernels.quant import triton_quant as tq
    from precision_lab.kernels.quant.reference import dequantize as ref_deq
    from precision_lab.kernels.quant.reference import quantize as ref_q
    from precision_lab.quant.philox import flat_rbits

    from .ceiling import copy_ceiling
    from .plots import quant_plot

    shape = tuple(shape)
    x = quant_state(shape, dev)
    N, C = x.numel(), shape[-1]
    M = N // (shape[-2] * C)
    lead0 = shape[0]
    print(f"state {shape} fp32: {N * 4 / 2**30:.2f} GiB, {M} matrices", flush=True)

    # ---------------- the kernels under test: name → (callable, bytes per call) ----------------
    qt_nvfp4 = tq.nvfp4_quantize(x)
    qt_fp8 = tq.quantize(x, "fp8e4m3")
    cases = {
        "nvfp4 quantize": lambda: tq.nvfp4_quantize(x, check_finite=False),
        "nvfp4-sr quantize": lambda: tq.nvfp4_quantize(x, sr=True, seed=SEED, check_finite=False),
        "nvfp4 dequantize": lambda: tq.nvfp4_dequantize(qt_nvfp4),
        "fp8e4m3 quantize": lambda: tq.quantize(x, "fp8e4m3"),
        "fp8e4m3 dequantize": lambda: tq.dequantize(qt_fp8),
        "fp16-sr quantize": lambda: tq.quantize(x, "fp16-sr", seed=SEED),
        "bf16-sr quantize": lambda: tq.quantize(x, "bf16-sr", seed=SEED),
        "fp8e4m3-sr quantize": lambda: tq.quantize(x, "fp8e4m3-sr", seed=SEED),
        "fp8e5m2-sr quantize": lambda: tq.quantize(x, "fp8e5m2-sr", seed=SEED),
    }
    cases = {name: (fn, quant_bytes(name, N, M)) for name, fn in cases.items()}

    # ---------------- correctness on the device, bit for bit, before any timing ----------------
    def check(name: str) -> tuple[bool, str]:
        ok, detail = True, ""
        if name == "nvfp4 dequantize":
            out = tq.nvfp4_dequantize(qt_nvfp4)
        elif name == "fp8e4m3 dequantize":
            out = tq.dequantize(qt_fp8)
        else:
            got = cases[name][0]()
        for s in range(0, lead0, check_chunk):
            e = min(lead0, s + check_chunk)
            xs = x[s:e]
            if name.endswith("dequantize"):
                qt = qt_nvfp4 if name.startswith("nvfp4") else qt_fp8
                sub = type(qt)(qt.data[s:e], None if qt.scale is None else qt.scale[s:e],
                               None if qt.global_scale is None else qt.global_scale[s:e],
                               tuple(xs.shape), qt.format)
                if not same(out[s:e], ref_deq(sub)):
                    ok, detail = False, f"dequantized values differ in slice {s}:{e}"
                continue
            fmt = name.removesuffix(" quantize")
            rb = None
            if fmt.endswith("-sr"):  # the kernel's Philox counters run over the flat index into the whole x
                per = N // lead0  # elements per leading-axis slice
                rb = flat_rbits(SEED, (e - s) * per, start=s * per, device=dev).reshape(xs.shape)
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
    # (SR variants against the checked SR default; layout "block": one thread per 16-element block, the
    # default; "tile": a block over 4 threads, the kernel before the one-thread-per-block rewrite)
    n_mat = shape[-2] * C
    variants = {f"nvfp4 quantize [tile {t}, {w} warps]": (False, t, w, None)
                for t, w in ((n_mat, 8), (n_mat, 16), (max(16, n_mat // 2), 4))}
    variants.update({
        "nvfp4 quantize [tile layout, 4 warps]": (False, None, 4, "tile"),
        "nvfp4-sr quantize [block layout, 8 warps]": (True, None, 8, "block"),
        "nvfp4-sr quantize [tile layout, 8 warps]": (True, None, 8, "tile"),
    })
    qt_sr = tq.nvfp4_quantize(x, sr=True, seed=SEED, check_finite=False)
    for vname, (sr, t, w, lay) in variants.items():
        fn = (lambda sr=sr, t=t, w=w, lay=lay: tq.nvfp4_quantize(x, sr=sr, seed=SEED if sr else None,
                                                                 check_finite=False, tile=t, num_warps=w, layout=lay))
        default = "nvfp4-sr quantize" if sr else "nvfp4 quantize"
        cases[vname] = (fn, cases[default][1])
        got = fn()
        ok = results[default]["check"] == "pass" and all(
            same(getattr(got, f), getattr(qt_sr if sr else qt_nvfp4, f)) for f in ("data", "scale", "global_scale"))
        results[vname] = {"check": "pass" if ok else "FAIL",
                          "check_detail": "bit-equal to the checked default launch" if ok else "differs from default"}
        print(f"check {vname:22s} {results[vname]['check']}", flush=True)
        del got

    # ---------------- timing ----------------
    def bench(fn) -> float:
        return do_bench_ms(fn, rep_ms, smoke=smoke)

    ceiling = None if smoke else copy_ceiling(dev)
    if ceiling is not None:
        print(f"copy ceiling: {ceiling.GBps:.0f} GB/s ({ceiling.method})", flush=True)
    kernels: dict[str, QuantKernel] = {}
    for name, (fn, nbytes) in cases.items():
        r = results[name]
        k = kernels[name] = QuantKernel(check=r["check"], check_detail=r["check_detail"], bytes=int(nbytes))
        if k.check != "pass":
            print(f"{name:22s} not timed: correctness check failed", flush=True)
            continue
        ms = bench(fn)
        k.median_ms, k.GBps, k.elements_per_s = ms, nbytes / ms / 1e6, N / ms * 1e3
        k.frac_of_copy = k.GBps / ceiling.GBps if ceiling else None
        print(f"{name:22s} {ms:8.4f} ms  {k.GBps:7.0f} GB/s"
              + (f"  {100 * k.frac_of_copy:5.1f}% of copy" if ceiling else ""), flush=True)

    # the torch reference on the same tensor, for scale (one chunk, extrapolated per element)
    ref_time = None
    if kernels["nvfp4 quantize"].check == "pass":
        xs = x[:check_chunk]
        ref_ms = bench(lambda: ref_q(xs, "nvfp4"))
        ref_time = ReferenceTime(median_ms_chunk=ref_ms, chunk_shape=list(xs.shape),
                                 median_ms_full_extrapolated=ref_ms * N / xs.numel())
        print(f"torch reference nvfp4 quantize: {ref_ms:.3f} ms per chunk {tuple(xs.shape)}", flush=True)

    achieved = kernels["nvfp4 quantize"].frac_of_copy
    out = QuantKernelsResult(
        provenance=run_provenance(smoke=smoke, settings=settings), ceiling=ceiling, peers={}, shape=list(shape),
        dtype="float32", timing="triton.testing.do_bench median, L2 flushed before each call",
        implementation="precision_lab.kernels.quant.triton_quant", sr_seed=SEED, state_bytes=4 * N, n_elements=N,
        n_matrices=M, kernels=kernels, torch_reference_nvfp4=ref_time,
        target=QuantTarget(kernel="nvfp4 quantize", fraction_of_copy=target, achieved_fraction=achieved,
                           met=achieved is not None and achieved >= target),
        bytes_model=dict(QUANT_BYTES_MODEL))
    out_dir = Path(out_dir)
    dump(out, out_dir / "bench_quant.json")
    quant_plot(out, out_dir / "bench_quant.png")
    print(f"wrote {out_dir / 'bench_quant.json'} and bench_quant.png; target met: {out.target.met}", flush=True)
    return 0 if all(k.check == "pass" for k in kernels.values()) else 1
