"""Independent golden reference for the element formats and the NVFP4/MX chains (tests only).

Nothing here shares code with ``rounding.py``: every format's value set is enumerated from its
field definition in float64, and rounding is a brute-force search for the grid neighbours of |x|
(``np.searchsorted`` over the sorted finite values), with the tie, saturation and special-value
policy of docs/design.md §5 restated from scratch. Slow but obviously right; used to test the bit-level
implementation at zero tolerance (codes, not just values).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np


@dataclass(frozen=True)
class Spec:
    exp_bits: int
    man_bits: int
    bias: int
    max_finite: float          # the largest finite value, as a literal
    nan: int | None            # canonical NaN magnitude code
    inf: int | None            # +inf magnitude code
    saturating: bool           # clamp |x| to max_finite first (satfinite)


SPECS = {
    "bf16": Spec(8, 7, 127, float.fromhex("0x1.fe00000000000p+127"), 0x7FC0, 0x7F80, False),
    "fp16": Spec(5, 10, 15, 65504.0, 0x7E00, 0x7C00, False),
    "e4m3": Spec(4, 3, 7, 448.0, 0x7F, None, True),
    "e5m2": Spec(5, 2, 15, 57344.0, 0x7E, 0x7C, True),
    "e2m1": Spec(2, 1, 1, 6.0, None, None, True),
}


@cache
def grid(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, codes): every finite non-negative value of the format in increasing order, float64."""
    s = SPECS[name]
    vals, codes = [], []
    for e in range(1 << s.exp_bits):
        for m in range(1 << s.man_bits):
            v = (m / 2**s.man_bits) * 2.0 ** (1 - s.bias) if e == 0 else (1 + m / 2**s.man_bits) * 2.0 ** (e - s.bias)
            if v <= s.max_finite:
                vals.append(v)
                codes.append((e << s.man_bits) | m)
    order = np.argsort(vals, kind="stable")
    return np.asarray(vals, dtype=np.float64)[order], np.asarray(codes, dtype=np.int64)[order]


def value_of(name: str, codes: np.ndarray) -> np.ndarray:
    """float64 value of codes (finite codes only; NaN/inf codes give NaN/inf)."""
    s = SPECS[name]
    nb = 1 + s.exp_bits + s.man_bits
    vals, gcodes = grid(name)
    table = np.full(1 << (nb - 1), np.nan)
    table[gcodes] = vals
    if s.inf is not None:
        table[s.inf] = np.inf
    codes = np.asarray(codes, dtype=np.int64)
    mag = codes & ((1 << (nb - 1)) - 1)
    out = table[mag]
    return np.where(codes >> (nb - 1) == 1, -out, out)


def round_codes(name: str, x: np.ndarray, r: np.ndarray | None = None) -> np.ndarray:
    """Codes of x (float64 array holding the exact input values) in format ``name``.

    r: None for round-to-nearest-even, else the 16-bit random values for stochastic rounding
    (round away from zero iff floor(frac · 2^16) + r >= 2^16).
    """
    s = SPECS[name]
    nb = 1 + s.exp_bits + s.man_bits
    x = np.asarray(x, dtype=np.float64)
    vals, codes = grid(name)
    if not s.saturating:  # IEEE overflow: the grid continues at 2^(emax+1), which is encoded as inf
        emax = (1 << s.exp_bits) - 2 - s.bias
        vals = np.append(vals, 2.0 ** (emax + 1))
        codes = np.append(codes, s.inf)
    a = np.abs(x)
    nan = np.isnan(x)
    a = np.where(nan, 0.0, a)
    if s.saturating:
        a = np.minimum(a, s.max_finite)
    else:
        a = np.minimum(a, vals[-1])  # inf and everything past 2^(emax+1) → inf
    i = np.clip(np.searchsorted(vals, a, side="right") - 1, 0, len(vals) - 1)
    lo = vals[i]
    j = np.minimum(i + 1, len(vals) - 1)
    hi = vals[j]
    exact = a == lo
    if r is None:
        mid = (lo + hi) / 2  # exact: lo + hi and halving are exact in float64 for these grids
        up = (a > mid) | ((a == mid) & (codes[i] % 2 == 1))
    else:
        frac = (a - lo) / np.where(hi > lo, hi - lo, 1.0)  # exact (Sterbenz; the divisor is a power of two)
        up = np.floor(frac * 65536.0) + (np.asarray(r, dtype=np.int64) & 0xFFFF) >= 65536
    mag = np.where(exact | ~up, codes[i], codes[j])
    if s.nan is not None:
        mag = np.where(nan, s.nan, mag)
    elif nan.any():
        raise ValueError(f"{name} has no NaN")
    sign = np.signbit(x).astype(np.int64)
    return mag | (sign << (nb - 1))


def nvfp4(x: np.ndarray, r: np.ndarray | None = None, group: str = "matrix"):
    """NVFP4 of x [..., R, C] (float32 array) by the docs/design.md §5 chain, in numpy float32 arithmetic.

    group: "matrix" or "row" (which elements share S_enc). Returns (element codes [..., R, C],
    E4M3 scale codes [..., R, C/16], S_dec ([...] or [..., R]) float32).
    """
    f = np.float32
    x = np.asarray(x, dtype=np.float32)
    ax = np.abs(x)
    amax = ax.max(axis=(-2, -1), keepdims=True) if group == "matrix" else ax.max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", over="ignore"):
        s_enc = np.where(amax == 0, f(1), np.minimum(f(2688) / amax, np.finfo(np.float32).max)).astype(np.float32)
        s_dec = (f(1) / s_enc).astype(np.float32)
        mul = (s_enc * f(1 / 6)).astype(np.float32)
        bamax = ax.reshape(*x.shape[:-1], x.shape[-1] // 16, 16).max(axis=-1)
        s_code = round_codes("e4m3", (bamax * mul).astype(np.float32).astype(np.float64))
        dec = (value_of("e4m3", s_code).astype(np.float32) * s_dec).astype(np.float32)
        enc = np.minimum(f(1) / dec, np.finfo(np.float32).max).astype(np.float32)
        y = (x * np.repeat(enc, 16, axis=-1)).astype(np.float32)
    codes = round_codes("e2m1", y.astype(np.float64), r)
    return codes, s_code, s_dec.reshape(amax.shape[:-2] if group == "matrix" else amax.shape[:-1])
