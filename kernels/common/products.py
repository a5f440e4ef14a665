"""fp32 matrix products on tensor cores with the operands split by hand.

``input_precision="tf32x3"`` computes an fp32 product as three TF32 products: each operand x is
split into big = x rounded to TF32 (``cvt.rna.tf32.f32``: nearest, ties away from zero) and
small = x − big (exact in fp32; the tensor cores read its top 19 bits), and
``small_a·big_b + big_a·small_b + big_a·big_b`` accumulate in that order. On sm_90 ptxas expands
each ``cvt.rna.tf32.f32`` to four instructions (add 2^12 to the bit pattern, mask the low 13
bits, and a compare and select that keep Inf and NaN unchanged). ``dot_tf32x3`` forms the same
big parts with the add and the mask alone and runs the same three TF32 products in the same
order, so the products are bit for bit those of ``tf32x3`` for every finite operand; only an
operand that is Inf or NaN, or whose rounding overflows to Inf, comes out differently (the
state is then beyond fp32 either way). In a flush the split was a third of the fold product's
instructions when it was measured (Mamba-2: 40 splits per thread at 16 rows × 2 warps, the fp32
flush's launch shape then).

``BY_HAND=False`` keeps Triton's split. Callers pass False in the interpreter, which multiplies fp32
tiles exactly (it has no TF32: the CPU tests see the product the split approximates), and where the
hand split measured slower: in Mamba-2's fp32-only flush, capped at 128 registers, the split parts
live as whole tiles before their layout conversion and the spill stack grew from 32 to 40 bytes
(H200, batch 256: 826 µs against 810; ``reports/diagnostics/mamba2-tf32-split.jsonl``), and again
after the flush took its new token into the product (777-800 µs against 745-756 at 16 rows × 2
warps; ``reports/diagnostics/mamba2-fold-new.jsonl``).
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def tf32_big(x):
    """x rounded to TF32, nearest with ties away from zero (the bit pattern's magnitude + half an
    ulp, then the low 13 bits cleared: the sign bit is untouched)."""
    return ((x.to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)


@triton.jit
def dot_tf32x3(a, b, BY_HAND: tl.constexpr):
    """a @ b of fp32 tiles as ``tl.dot(a, b, input_precision="tf32x3")`` computes it."""
    if BY_HAND:
        a_big = tf32_big(a)
        b_big = tf32_big(b)
        acc = tl.dot(a - a_big, b_big, input_precision="tf32")
        acc = tl.dot(a_big, b - b_big, acc, input_precision="tf32")
        return tl.dot(a_big, b_big, acc, input_precision="tf32")
    else:
        return tl.dot(a, b, input_precision="tf32x3")


@triton.jit
def dot_f32(a, b, PREC: tl.constexpr, BY_HAND: tl.constexpr):
    """a @ b at input precision PREC ("tf32x3" through ``dot_tf32x3``)."""
    if PREC == "tf32x3":
        return dot_tf32x3(a, b, BY_HAND)
    else:
        return tl.dot(a, b, input_precision=PREC)
