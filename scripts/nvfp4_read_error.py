"""Error of the non-flush step's NVFP4 products (``read_state_dot``, every ``fp4_decode``) against
float64, on random and adversarial states and vectors. On a GPU this measures the compiled code
(the tensor cores' accumulation for ``"mma"``); on a CPU the interpreter's (numpy fp32).

    python scripts/nvfp4_read_error.py [--out errors.json] [--slots 32]

Per case and decode: the largest and the median |error| / Σ|e·v| over the rows, and the largest
|error| / |S v|, all in units of 2^-24 (an fp32 rounding), and how many rows came out NaN.
"""
from __future__ import annotations

import argparse
import json
import os

import torch


def _setup():
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


_setup()

import triton  # noqa: E402
from precision_lab.kernels.common.launch import FP4_DECODES  # noqa: E402
from precision_lab.kernels.common.read_probe import nvfp4_read_products  # noqa: E402
from precision_lab.kernels.decode_state import PackedState  # noqa: E402


def read_dot(pool: PackedState, v, w, fp4: str, dev: str, BR: int = 64):
    return nvfp4_read_products(pool, v, w, fp4, dev, BR)


def cases(S: int, R: int, C: int, g: torch.Generator):
    """(name, state [S, 1, R, C], v, w)."""
    x = torch.randn(S, 1, R, C, generator=g)
    yield "random state, randn bf16 v / fp32 w", x, torch.randn(C, generator=g).to(torch.bfloat16), \
        torch.randn(C, generator=g)
    unit = lambda: torch.nn.functional.normalize(torch.randn(C, generator=g), dim=0)  # noqa: E731
    yield "random state, unit-norm fp32 v, w", x, unit(), unit() * C ** -0.5
    # cancellation: pairs of equal elements with opposite vector entries, plus a small remainder
    x = torch.randn(S, 1, R, C // 2, generator=g).repeat_interleave(2, -1)
    v = torch.randn(C // 2, generator=g).repeat_interleave(2)
    v[1::2] *= -1
    v = v + 2.0**-12 * torch.randn(C, generator=g)
    yield "cancellation", x, v.to(torch.bfloat16), v
    # one large product among small ones in every block (alignment inside the tensor-core sum):
    # elements ±6 and ±0.5 (exact in E2M1 under one block scale), vector entries 1 and ~2^-20
    x = torch.full((S, 1, R, C), 0.5)
    x[..., ::16] = 6.0
    x = x * torch.where(torch.rand(S, 1, R, C, generator=g) < 0.5, -1.0, 1.0)
    v = (1 + torch.rand(C, generator=g)) * 2.0**-20
    v[::16] = 1.0
    yield "one large product per block", x, v.to(torch.bfloat16), v
    # same-sign products of the largest size (growth of the accumulator)
    x = torch.full((S, 1, R, C), 6.0) * (1 + 0.01 * torch.rand(S, 1, R, C, generator=g))
    v = 1 + torch.rand(C, generator=g)
    yield "same-sign largest products", x, v.to(torch.bfloat16), v
    # random signs across 2^±20 in both the state and the vector
    x = torch.randn(S, 1, R, C, generator=g) * 2.0 ** torch.randint(-20, 20, (S, 1, R, C), generator=g).float()
    v = torch.randn(C, generator=g) * 2.0 ** torch.randint(-20, 20, (C,), generator=g).float()
    yield "wide range, random signs", x, v.to(torch.bfloat16), v


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--slots", type=int, default=32, help="state matrices per case (128 × 128 each)")
    args = ap.parse_args(argv)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    decodes = FP4_DECODES if dev == "cuda" else tuple(d for d in FP4_DECODES if d != "ptx")
    g = torch.Generator().manual_seed(0)
    R = C = 128
    out = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu (interpreter)",
           "triton": triton.__version__, "cases": {}}
    for name, x, v, w in cases(args.slots, R, C, g):
        q = PackedState.quantize(x, "nvfp4")
        pool = PackedState("nvfp4", q.data.to(dev), q.scale.to(dev), q.gscale.to(dev), R, C)
        vals = q.dequantize()[:, 0].double()
        res = {}
        for fp4 in decodes:
            for got, vec, tag in zip(read_dot(pool, v, w, fp4, dev), (v, w), ("v", "w")):
                want = vals @ vec.double()
                bound = vals.abs() @ vec.double().abs()
                err = (got.double() - want).abs()
                nz = want != 0
                e_b = err[bound > 0] / bound[bound > 0] * 2.0**24
                res[f"{fp4}:{tag} ({str(vec.dtype)[6:]})"] = {
                    "max_err_over_sum_abs": e_b.max().item(), "median_err_over_sum_abs": e_b.median().item(),
                    "max_rel_err": (err[nz] / want[nz].abs() * 2.0**24).max().item() if nz.any() else 0.0,
                    "nan_rows": int(torch.isnan(got).sum())}
        out["cases"][name] = res
        print(name)
        for k, r in res.items():
            print(f"  {k:14s} max {r['max_err_over_sum_abs']:8.3f}  median {r['median_err_over_sum_abs']:7.3f}  "
                  f"max rel {r['max_rel_err']:12.1f}  NaN {r['nan_rows']}  (units of 2^-24)", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
