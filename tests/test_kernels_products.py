"""fp32 products with hand-split TF32 operands (kernels/common/products.py).

``tf32_big`` is checked bit for bit against an independent float64 rounding (nearest, ties away from
zero, subnormals included). ``dot_tf32x3`` with the hand split (BY_HAND=True) is checked against the float64
product to the accuracy of three TF32 products everywhere, and on a GPU bit for bit against Triton's
own ``input_precision="tf32x3"`` (the interpreter multiplies fp32 exactly and has no TF32 to compare).
"""
import math

import pytest
import torch
import triton
import triton.language as tl
from precision_lab.kernels.common.products import dot_tf32x3, tf32_big

M, K, N = 16, 16, 32


@triton.jit
def _products_kernel(a_ptr, b_ptr, split_ptr, triton_ptr, big_ptr,
                     M: tl.constexpr, K: tl.constexpr, N: tl.constexpr, BY_HAND: tl.constexpr):
    m, k, n = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    tl.store(split_ptr + m[:, None] * N + n[None, :], dot_tf32x3(a, b, BY_HAND))
    tl.store(triton_ptr + m[:, None] * N + n[None, :], tl.dot(a, b, input_precision="tf32x3"))
    tl.store(big_ptr + m[:, None] * K + k[None, :], tf32_big(a))


def _tf32_nearest_away(x: float) -> float:
    """x rounded to 10 mantissa bits, nearest, ties away from zero, in float64 (exact)."""
    if x == 0 or not math.isfinite(x):
        return x
    e = max(math.floor(math.log2(abs(x))), -126)
    ulp = 2.0 ** (e - 10)
    return math.copysign(math.floor(abs(x) / ulp + 0.5) * ulp, x)


def _operands(seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g) * torch.exp2(torch.randint(-20, 21, (M, K), generator=g).float())
    b = torch.randn(K, N, generator=g) * torch.exp2(torch.randint(-20, 21, (K, N), generator=g).float())
    # ties (low 13 bits exactly half a TF32 ulp), values one bit off a tie, subnormals, zeros
    bits = a.view(torch.int32)
    bits[0] = (bits[0] & ~0x1FFF) | 0x1000
    bits[1, :8] = (bits[1, :8] & ~0x1FFF) | 0x0FFF
    bits[1, 8:] = (bits[1, 8:] & ~0x1FFF) | 0x1001
    a[2, :4] = torch.tensor([1e-39, -3e-40, 2.0 ** -140, -(2.0 ** -130)])
    a[2, 4] = 0.0
    a[2, 5] = -0.0
    return a, b


@pytest.mark.parametrize("seed", [0, 1])
def test_tf32_split_products(seed, device):
    a, b = _operands(seed)
    out = {name: torch.empty(shape, device=device) for name, shape in
           (("split", (M, N)), ("triton", (M, N)), ("big", (M, K)))}
    _products_kernel[(1,)](a.to(device), b.to(device), out["split"], out["triton"], out["big"], M, K, N, BY_HAND=True)
    big = out["big"].cpu()
    want = torch.tensor([[_tf32_nearest_away(float(x)) for x in row] for row in a.tolist()], dtype=torch.float32)
    assert torch.equal(big.view(torch.int32), want.view(torch.int32))
    # three TF32 products: the dropped small·small term and the tensor cores' truncation of the small
    # parts leave about 2^-21 of Σ|a||b| per element
    exact = a.double() @ b.double()
    scale = a.double().abs() @ b.double().abs()
    assert ((out["split"].cpu().double() - exact).abs() <= 2.0 ** -19 * scale).all()
    if device == "cuda":
        assert torch.equal(out["split"].view(torch.int32), out["triton"].view(torch.int32))
