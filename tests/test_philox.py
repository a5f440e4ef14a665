"""The CPU Philox port equals Triton's tl.randint4x / tl.randint bit for bit (docs/design.md §4.8), the
SR counter layouts of quant/philox.py separate every field, and the Triton helpers of
kernels/common/philox.py spread one Philox call over 8 elements exactly as the CPU port does."""

import pytest
import torch
import triton
import triton.language as tl
from precision_lab.kernels.common.philox import flat_sr_bits, philox_lanes, sr_bits, sr_bits_cols
from precision_lab.quant import philox

# Philox4x32-10 of seed 1234 at offsets 0 and 1: the four words of each call (tl.randint4x), of
# which tl.randint returns the first.
KNOWN_4X = {0: [546353992, 3665621163, 1140953199, 3419031310],
            1: [2666454581, 482218876, 4196888723, 343858512]}
KNOWN_RANDINT = [546353992, 2666454581, 1070188760, 3055983166]


def test_known_answers_of_the_cpu_port():
    assert philox.randint(1234, torch.arange(4)).tolist() == KNOWN_RANDINT
    words = torch.stack(philox.randint4x(1234, torch.arange(2)), dim=-1)
    assert words.tolist() == [KNOWN_4X[0], KNOWN_4X[1]]


@triton.jit
def _randint4x_kernel(out_ptr, first_ptr, off_ptr, seed, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    off = tl.load(off_ptr + i, mask=m, other=0)
    w0, w1, w2, w3 = tl.randint4x(seed, off)
    tl.store(out_ptr + 4 * i, w0.to(tl.int64) & 0xFFFFFFFF, mask=m)
    tl.store(out_ptr + 4 * i + 1, w1.to(tl.int64) & 0xFFFFFFFF, mask=m)
    tl.store(out_ptr + 4 * i + 2, w2.to(tl.int64) & 0xFFFFFFFF, mask=m)
    tl.store(out_ptr + 4 * i + 3, w3.to(tl.int64) & 0xFFFFFFFF, mask=m)
    tl.store(first_ptr + i, tl.randint(seed, off).to(tl.int64) & 0xFFFFFFFF, mask=m)


def _triton_randint4x(seed: int, offsets: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor]:
    n = offsets.numel()
    out = torch.empty(n, 4, dtype=torch.int64, device=device)
    first = torch.empty(n, dtype=torch.int64, device=device)
    _randint4x_kernel[(triton.cdiv(n, 128),)](out, first, offsets.to(device), seed, n, BLOCK=128)
    return out.cpu(), first.cpu()


def test_known_answer_of_tl_randint4x(device):
    """Triton itself (the interpreter on CPU): the four words of a call, and tl.randint = word 0."""
    words, first = _triton_randint4x(1234, torch.arange(4), device)
    assert words[:2].tolist() == [KNOWN_4X[0], KNOWN_4X[1]]
    assert first.tolist() == KNOWN_RANDINT
    assert torch.equal(first, words[:, 0])


def test_cpu_port_equals_tl_randint4x_on_64bit_counters_and_seeds(device):
    g = torch.Generator().manual_seed(0)
    offsets = torch.randint(-(2**62), 2**62, (300,), generator=g, dtype=torch.int64)
    offsets[:3] = torch.tensor([0, 1, -(2**63)])  # incl. the read-copy bit (bit 63)
    for seed in (0, 1234, philox.layer_seed(7, 3), philox.layer_seed(2**32 - 1, 2**31)):
        words, first = _triton_randint4x(seed, offsets, device)
        assert torch.equal(words, torch.stack(philox.randint4x(seed, offsets), dim=-1)), seed
        assert torch.equal(first, philox.randint(seed, offsets)), seed


# ---------------------------------------------------------------------------------------------
# The lane mapping: one call, eight 16-bit values
# ---------------------------------------------------------------------------------------------
def _lane_by_hand(seed: int, counter: int, lane: int) -> int:
    """The documented mapping, from the four words: lane l = half l % 2 of word l // 2."""
    word = int(philox.randint4x(seed, torch.tensor([counter]))[lane // 2][0])
    return (word >> (16 * (lane % 2))) & 0xFFFF


def test_group_bits_follow_the_documented_lanes():
    seed, counters = 99, torch.tensor([[0, 5], [7, -(2**63) | 3]])
    bits = philox.group_bits(seed, counters)
    assert bits.shape == (2, 16) and int(bits.min()) >= 0 and int(bits.max()) < 2**16
    for i in range(2):
        for j in range(16):
            assert int(bits[i, j]) == _lane_by_hand(seed, int(counters[i, j // 8]), j % 8), (i, j)


def test_state_rbits_are_grouped_not_one_call_per_element():
    """Element (row, col) of a [R, C] state is lane col % 8 of group row·ceil(C/8) + col // 8: checked
    by hand for every element of a matrix whose rows end in a partial group, and shown to differ from
    the one-call-per-element layout (a kernel drawing that would fail every SR bit test)."""
    seed, layer, seq, head, event, copy = 5, 3, 2, 1, 7, philox.COPY_READ
    R, C = 3, 13  # 2 groups per row, the second one partial
    bits = philox.state_rbits(seed, layer, seq, head, event, (R, C), copy)
    key = philox.layer_seed(seed, layer)
    base = (event << philox.EVENT_SHIFT) | (seq << philox.SEQ_SHIFT) | (head << philox.HEAD_SHIFT)
    base -= 1 << 63  # the copy bit, as a signed int64
    for row in range(R):
        for col in range(C):
            counter = base | (row * 2 + col // 8)
            assert int(bits[row, col]) == _lane_by_hand(key, counter, col % 8), (row, col)
    per_element = philox.randint(key, base | torch.arange(R * C)).reshape(R, C) & 0xFFFF
    assert int((per_element == bits).sum()) < 3


def test_flat_rbits_group_the_flat_index():
    bits = philox.flat_rbits(11, 37)
    assert [int(b) for b in bits] == [_lane_by_hand(11, i // 8, i % 8) for i in range(37)]
    assert torch.equal(philox.flat_rbits(11, 20, start=13), bits[13:33])  # any window of the same stream


# ---------------------------------------------------------------------------------------------
# The Triton helpers, bit for bit against the CPU port
# ---------------------------------------------------------------------------------------------
@triton.jit
def _lanes_kernel(out_ptr, cnt_ptr, seed, M: tl.constexpr, G: tl.constexpr):
    cnt = tl.load(cnt_ptr + tl.arange(0, M)[:, None] * G + tl.arange(0, G)[None, :])
    bits = philox_lanes(seed, cnt)
    tl.store(out_ptr + tl.arange(0, M)[:, None] * (8 * G) + tl.arange(0, 8 * G)[None, :], bits.to(tl.int64))


def test_philox_lanes_equals_group_bits(device):
    g = torch.Generator().manual_seed(1)
    cnt = torch.randint(-(2**63), 2**63 - 1, (4, 2), generator=g, dtype=torch.int64)
    out = torch.empty(4, 16, dtype=torch.int64, device=device)
    _lanes_kernel[(1,)](out, cnt.to(device), 1234, M=4, G=2)
    assert torch.equal(out.cpu(), philox.group_bits(1234, cnt))


@triton.jit
def _sr_bits_kernel(out_ptr, R, C, seed, seq, head, event, row0, COPY: tl.constexpr, BR: tl.constexpr,
                    BC: tl.constexpr):
    rows = row0 + tl.arange(0, BR)
    cols = tl.arange(0, BC)
    r = sr_bits(seed, seq.to(tl.int64), head, event.to(tl.int64), rows, C, COPY, BC)
    m = (rows < R)[:, None] & (cols < C)[None, :]
    tl.store(out_ptr + rows[:, None] * C + cols[None, :], r.to(tl.int64), mask=m)


@pytest.mark.parametrize("C,BC", [(32, 32), (13, 16), (20, 32), (40, 64)])
@pytest.mark.parametrize("copy", [philox.COPY_UPDATE, philox.COPY_READ])
def test_triton_sr_bits_equal_state_rbits(C, BC, copy, device):
    """The state tiles' SR values (row blocks at an offset, columns padded to a power of two)."""
    R, BR = 10, 4
    seed, layer, seq, head, event = 77, 5, 300, 9, 4000
    out = torch.full((R, C), -1, dtype=torch.int64, device=device)
    for row0 in range(0, R, BR):
        _sr_bits_kernel[(1,)](out, R, C, philox.layer_seed(seed, layer), seq, head, event, row0, COPY=copy, BR=BR,
                              BC=BC)
    assert torch.equal(out.cpu(), philox.state_rbits(seed, layer, seq, head, event, (R, C), copy))


@triton.jit
def _sr_bits_cols_kernel(out_ptr, R, C, seed, seq, head, event, COPY: tl.constexpr, BR: tl.constexpr,
                         BW: tl.constexpr):
    # the tile's four column blocks of BW, each drawing its own values (what the decode flushes do)
    rows = tl.arange(0, BR)
    for q in tl.static_range(4):
        cols = q * BW + tl.arange(0, BW)
        r = sr_bits_cols(seed, seq.to(tl.int64), head, event.to(tl.int64), rows, C, q * BW, COPY, BW)
        m = (rows < R)[:, None] & (cols < C)[None, :]
        tl.store(out_ptr + rows[:, None] * C + cols[None, :], r.to(tl.int64), mask=m)


@pytest.mark.parametrize("C,BW", [(32, 8), (20, 8), (64, 16), (56, 16)])
@pytest.mark.parametrize("copy", [philox.COPY_UPDATE, philox.COPY_READ])
def test_triton_sr_bits_cols_equal_state_rbits(C, BW, copy, device):
    """Column blocks of whole groups draw the same values as the whole tile (docs/design.md §4.8)."""
    R = 10
    seed, layer, seq, head, event = 77, 5, 300, 9, 4000
    out = torch.full((R, C), -1, dtype=torch.int64, device=device)
    _sr_bits_cols_kernel[(1,)](out, R, C, philox.layer_seed(seed, layer), seq, head, event, COPY=copy, BR=16, BW=BW)
    assert torch.equal(out.cpu(), philox.state_rbits(seed, layer, seq, head, event, (R, C), copy))


@triton.jit
def _flat_bits_kernel(out_ptr, seed, start, M: tl.constexpr, W: tl.constexpr):
    r = flat_sr_bits(seed, start, M, W)
    tl.store(out_ptr + tl.arange(0, M)[:, None] * W + tl.arange(0, W)[None, :], r.to(tl.int64))


def test_triton_flat_bits_equal_flat_rbits(device):
    out = torch.empty(2, 16, dtype=torch.int64, device=device)
    _flat_bits_kernel[(1,)](out, 2**40 + 3, 48, M=2, W=16)
    assert torch.equal(out.cpu().flatten(), philox.flat_rbits(2**40 + 3, 32, start=48))


_COMPILE_SR_BITS = r"""
import re, sys
import triton
import triton.language as tl
try:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    GPUTarget("cuda", 90, 32)
except Exception as e:
    sys.exit(f"SKIP {e!r}")
from precision_lab.kernels.common.philox import sr_bits

@triton.jit
def tile(out_ptr, C, seed, seq, head, event, BR: tl.constexpr, BC: tl.constexpr, PER_ELEMENT: tl.constexpr):
    rows = tl.arange(0, BR)
    cols = tl.arange(0, BC)
    if PER_ELEMENT:  # the layout this replaces: one call per element's own counter
        off = (event << 44) | (seq << 28) | (head.to(tl.int64) << 16) | (rows[:, None] * C + cols[None, :]).to(tl.int64)
        r = tl.randint(seed, off) & 0xFFFF
    else:
        r = sr_bits(seed, seq, head, event, rows, C, 0, BC)
    tl.store(out_ptr + rows[:, None] * C + cols[None, :], r.to(tl.int32))

for per_element in (False, True):
    src = ASTSource(fn=tile, signature={"out_ptr": "*i32", "C": "i32", "seed": "i64", "seq": "i64", "head": "i32",
                                        "event": "i64", "BR": "constexpr", "BC": "constexpr", "PER_ELEMENT": "constexpr"},
                    constexprs={(6,): 16, (7,): 64, (8,): per_element})
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=1)).asm["ptx"]
    print(len(re.findall(r"\bmul\.hi\.u32\b", ptx)))
"""


def test_compiled_sr_bits_run_one_philox_call_per_8_elements(tmp_path):
    """The point of the layout: compiled for the H200 (no GPU needed), a state tile's SR bits cost one
    Philox call per 8 elements — 10 rounds of at most 2 high multiplies — not one per element."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compile, do not interpret
    script = tmp_path / "compile_sr_bits.py"  # Triton reads a kernel's source from its file
    script.write_text(_COMPILE_SR_BITS)
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode and "SKIP" in r.stderr:
        pytest.skip(f"this Triton cannot target sm_90: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr[-3000:]
    grouped, per_element = (int(n) for n in r.stdout.split())
    per_thread = 16 * 64 // 32  # elements of the [16, 64] tile per thread (1 warp)
    assert 0 < grouped <= 2 * philox.N_ROUNDS * per_thread // philox.GROUP, grouped
    assert per_element > 4 * grouped, (per_element, grouped)  # the check can tell the two layouts apart


# ---------------------------------------------------------------------------------------------
# Counter fields
# ---------------------------------------------------------------------------------------------
def test_counter_layout_fields_do_not_collide():
    offs = philox.sr_offsets(torch.tensor([0, 1]).view(2, 1, 1), torch.tensor([0, 1]).view(1, 2, 1),
                             torch.tensor([0, 1]).view(1, 1, 2), (4, 20))
    assert offs.shape == (2, 2, 2, 4, 3)  # 3 groups per row of 20
    assert offs.unique().numel() == offs.numel() == 2 * 2 * 2 * 4 * 3
    read = philox.sr_offsets(0, 0, 0, (1, 64), copy=philox.COPY_READ)
    assert (read < 0).all()  # bit 63 set
    assert set(read.flatten().tolist()).isdisjoint(philox.sr_offsets(0, 0, 0, (1, 64)).flatten().tolist())
    assert philox.sr_offsets(0, 0, 0, (2, 20))[1, 0] == 3  # a row starts a new group


def test_state_rbits_shape_and_determinism():
    a = philox.state_rbits(5, 2, torch.arange(3).view(3, 1), torch.arange(4).view(1, 4), 1, (6, 10))
    b = philox.state_rbits(5, 2, torch.arange(3).view(3, 1), torch.arange(4).view(1, 4), 1, (6, 10))
    assert a.shape == (3, 4, 6, 10) and torch.equal(a, b)
    assert int(a.min()) >= 0 and int(a.max()) < 2**16
    c = philox.state_rbits(6, 2, torch.arange(3).view(3, 1), torch.arange(4).view(1, 4), 1, (6, 10))
    assert not torch.equal(a, c)


def test_layout_range_errors():
    with pytest.raises(ValueError, match="head"):
        philox.sr_offsets(0, 1 << philox.HEAD_BITS, 0, (1, 4))
    philox.sr_offsets(0, 0, 0, (1 << philox.GROUP_BITS, 8))  # 65,536 groups: the largest matrix
    with pytest.raises(ValueError, match="groups"):
        philox.sr_offsets(0, 0, 0, (1 << philox.GROUP_BITS, 9))
    with pytest.raises(ValueError, match="seed"):
        philox.layer_seed(-1, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: the torch port's int64 arithmetic on CUDA")
def test_state_bits_drawn_on_the_gpu_equal_the_cpu_port():
    """The torch state writer draws a GPU state's SR bits on the GPU (int64 products wrap the same way)."""
    from precision_lab.quant.philox import state_rbits

    args = (1234, 7, torch.tensor([[3], [65535]]), torch.arange(5).view(1, 5), 9, (16, 40))
    cpu = state_rbits(*args, copy=1)
    gpu = state_rbits(*args, copy=1, device="cuda")
    assert gpu.device.type == "cuda" and torch.equal(gpu.cpu(), cpu)
