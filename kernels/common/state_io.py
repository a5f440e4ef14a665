"""Device side of the decode kernels' packed state pools (the layouts: ``decode_state.PackedState``).

``load_state`` returns a head's [BR, BC] tile as fp32 (decoded in registers), ``store_state`` rounds
an fp32 tile and stores its codes, ``read_state_dot`` multiplies the stored codes with one or two
vectors without building the fp32 tile. ``load_state_cols`` / ``store_state_cols`` do the same for a
column block of the tile and ``store_state4`` stores a tile held as four column quarters (the
flushes: one quarter's SR values and rounding temporaries live at a time; NVFP4's global scale from
the amax over all quarters, ``state_amax``). Element codecs are the integer helpers of
``kernels/quant/codecs.py``; SR values come from ``philox.sr_bits`` (the quant/philox.py state-write
layout, one Philox call per 8 columns).
``program_slot`` is the prologue of every decode-step program.
"""
from __future__ import annotations

import triton
import triton.language as tl
from precision_lab.kernels.quant import codecs as qc

from .formats import C_BF16, C_E4M3, C_E5M2, C_FP16, C_FP32, C_NVFP4
from .philox import sr_bits_cols


@triton.jit
def program_slot(slot_ptr, R, BR: tl.constexpr):
    """The (row block, head, batch entry) of a decode-step program and its pool slot: returns
    (i_r, i_h, i_b, slot, rows, m_r) with ``slot`` the entry's slot as int64 (-1: a NULL / padded
    entry, to be skipped), ``rows`` the program's BR state rows and ``m_r`` their mask, all False for
    a skipped entry."""
    i_r, i_h, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slot_ptr + i_b).to(tl.int64)
    rows = i_r * BR + tl.arange(0, BR)
    # (block & scalar masks trip the interpreter: broadcast the slot test explicitly)
    m_r = (rows < R) & ((rows * 0 + slot) >= 0)
    return i_r, i_h, i_b, slot, rows, m_r


@triton.jit
def load_state(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, rmask, R, C,
               FMT: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, HW: tl.constexpr):
    """fp32 tile [BR, BC] of head h, rows ``rows`` [BR], columns 0..BC-1 of the pool slot ``slot``
    (int64). Rows outside ``rmask`` and columns >= C read as 0. HW (compiled GPU kernels only):
    E4M3 codes through the hardware E4M3 → f16 conversion instead of the integer codec."""
    return load_state_cols(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, rmask, R, C, 0, FMT, BR, BC, HW)


@triton.jit
def load_state_cols(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, rmask, R, C, COL0: tl.constexpr,
                    FMT: tl.constexpr, BR: tl.constexpr, BW: tl.constexpr, HW: tl.constexpr):
    """``load_state`` of the column block COL0..COL0+BW-1 (NVFP4: whole blocks of 16) as an fp32
    [BR, BW] tile. A kernel that keeps its state as column blocks loads each block in the layout
    its loads give, as an fp32 pool's plain loads would, instead of splitting a decoded [BR, BC]
    tile (which moves the data through shared memory and leaves the blocks in another layout)."""
    row64 = (h * R + rows).to(tl.int64)
    cols = tl.arange(0, BW) + COL0
    mask = rmask[:, None] & (cols < C)[None, :]
    if FMT == C_NVFP4:
        tl.static_assert((BW // 16) * 16 == BW and (COL0 // 16) * 16 == COL0, "NVFP4 loads whole blocks of 16")
        cb = tl.arange(0, BW // 2) + COL0 // 2
        cs = tl.arange(0, BW // 16) + COL0 // 16
        mb = rmask[:, None] & (cb[None, :] < C // 2)
        packed = tl.load(d_ptr + slot * s_d + row64[:, None] * (C // 2) + cb[None, :], mask=mb, other=0)
        ms = rmask[:, None] & (cs[None, :] < C // 16)
        scb = tl.load(sc_ptr + slot * s_sc + row64[:, None] * (C // 16) + cs[None, :], mask=ms, other=0)
        s_dec = tl.load(gs_ptr + slot * s_gs + h)
        nb: tl.constexpr = BR * (BW // 16)
        vals = qc.nvfp4_dequantize_blocks(tl.reshape(packed.to(tl.int32), (nb, 8)),
                                          tl.reshape(scb.to(tl.int32), (nb,)), s_dec)
        return tl.where(mask, tl.reshape(vals, (BR, BW)), 0.0)
    else:
        v = tl.load(d_ptr + slot * s_d + row64[:, None] * C + cols[None, :], mask=mask, other=0)
        if FMT == C_FP32:
            return v
        elif FMT == C_BF16:
            return qc.decode_bf16(v.to(tl.int32) & 0xFFFF)
        elif FMT == C_FP16:
            return qc.decode_fp16(v.to(tl.int32) & 0xFFFF)
        elif HW and (FMT == C_E4M3 or FMT == C_E5M2):
            # the hardware FP8 → f16 conversion: the integer codec's values (every FP8 value is an
            # f16; masked codes load as 0 = +0.0) in about one instruction per element instead of
            # ~16. An FP8 checkpoint's flush spent ~1000 of its ~6000 PTX instructions per thread
            # decoding (sm_90 compile). Only a NaN code may come back with another sign or payload.
            if FMT == C_E4M3:
                return v.to(tl.float8e4nv, bitcast=True).to(tl.float32)
            else:
                return v.to(tl.float8e5, bitcast=True).to(tl.float32)
        elif FMT == C_E4M3:
            return tl.where(mask, qc.decode_e4m3(v.to(tl.int32)), 0.0)
        else:
            tl.static_assert(FMT == C_E5M2, "unknown state format code")
            return tl.where(mask, qc.decode_e5m2(v.to(tl.int32)), 0.0)


@triton.jit
def _e2m1_pairs_hw(packed):
    """GPU only (inline PTX; the interpreter cannot run it): NVFP4 bytes → (even, odd) element values
    × 2^-6 as fp32. Each nibble (sign s, exponent e, mantissa m) becomes the E4M3 byte
    ``s<<7 | (nibble & 7)<<2``: exponent field e, mantissa m00, so its value is the E2M1 value ·
    2^-6 exactly (E2M1's subnormal 0.5 lands on E4M3's subnormal 2^-7). The hardware then converts
    E4M3 pairs to f16 pairs (cvt.rn.f16x2.e4m3x2, sm_89+). Bytes go 4 per call (pack=4). In sm_90
    SASS that is about 19 instructions per 8 elements (7 integer, 4 FP8 pair conversions, 8 f16→f32)
    against 24 for the fp16-pattern decode of ``_nvfp4_dot_words`` (16 integer, 8 f16→f32), but the
    two-launch GDN non-flush step compiled with it holds 243 registers per thread against 168
    (``scripts/kernel_resources.py --hw --fp4-decode ptx``); it is kept as the ``fp4_decode="ptx"``
    alternative until GPU timings decide."""
    return tl.inline_asm_elementwise(
        asm="""
        {
        .reg .b32 t, lo, hi, f0, f1, f2, f3;
        .reg .b16 l0, l1, h0, h1, a0, a1, a2, a3, b0, b1, b2, b3;
        shl.b32 t, $8, 4;
        and.b32 t, t, 0x80808080;
        shl.b32 lo, $8, 2;
        and.b32 lo, lo, 0x1C1C1C1C;
        or.b32 lo, lo, t;
        shr.b32 t, $8, 2;
        and.b32 t, t, 0x1C1C1C1C;
        and.b32 hi, $8, 0x80808080;
        or.b32 hi, hi, t;
        mov.b32 {l0, l1}, lo;
        mov.b32 {h0, h1}, hi;
        cvt.rn.f16x2.e4m3x2 f0, l0;
        cvt.rn.f16x2.e4m3x2 f1, l1;
        cvt.rn.f16x2.e4m3x2 f2, h0;
        cvt.rn.f16x2.e4m3x2 f3, h1;
        mov.b32 {a0, a1}, f0;
        mov.b32 {a2, a3}, f1;
        mov.b32 {b0, b1}, f2;
        mov.b32 {b2, b3}, f3;
        cvt.f32.f16 $0, a0;
        cvt.f32.f16 $1, a1;
        cvt.f32.f16 $2, a2;
        cvt.f32.f16 $3, a3;
        cvt.f32.f16 $4, b0;
        cvt.f32.f16 $5, b1;
        cvt.f32.f16 $6, b2;
        cvt.f32.f16 $7, b3;
        }
        """,
        constraints="=r,=r,=r,=r,=r,=r,=r,=r,r",
        args=[packed], dtype=(tl.float32, tl.float32), is_pure=True, pack=4)


@triton.jit
def _block_scales(scb, HW: tl.constexpr):
    """E4M3 block-scale bytes → fp32 (the hardware conversion in compiled GPU kernels)."""
    if HW:
        return scb.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    else:
        return qc.decode_e4m3(scb.to(tl.int32))


@triton.jit
def _nvfp4_dot_words(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, row64, rmask, C, v_ptr, w_ptr,
                     BR: tl.constexpr, BC: tl.constexpr, HW: tl.constexpr, TWO: tl.constexpr):
    """``read_state_dot`` of an NVFP4 tile with the fp16-pattern E2M1 decode. The codes are read as
    [BR, BC/8] 32-bit words (a row's C/2 bytes are whole words, C % 16 == 0; ``kernel_args`` checks
    that pools start 4-byte aligned) and ``codecs.nvfp4_word_pairs_scaled`` turns word c into elements
    8c+k and 8c+k+4 for k = 0..3, so the vector entries are loaded in that order.
    Each k's entries are loaded beside its products, which leaves them in several memory round trips
    of an sm_90 compile (Mamba-2's output-only step: rounds 2-9 of 12, scripts/kernel_resources.py
    --hw --ops mamba2 --loads). Every entry loaded first, in one contiguous load split in registers,
    cut that to 6 rounds (GDN 8 → 5) with the same bits, but ran slower on an H100 at batch 256
    (Mamba-2 88.5 µs against 87.1-87.7, GDN 68.9 against 64.4; reports/diagnostics/
    nvfp4-vector-first-ce4f78c.jsonl): the entries are cache hits, and the split adds layout changes."""
    cw = tl.arange(0, BC // 8)
    m_w = cw < C // 8
    m2 = rmask[:, None] & m_w[None, :]
    row_ptr = (d_ptr + slot * s_d + row64[:, None] * (C // 2)).to(tl.pointer_type(tl.uint32))
    words = tl.load(row_ptr + cw[None, :], mask=m2, other=0)
    # one block scale per two words, gathered (both words' loads share an address)
    block_scale = _block_scales(tl.load(sc_ptr + slot * s_sc + row64[:, None] * (C // 16) + (cw // 2)[None, :],
                                        mask=m2, other=0), HW)
    acc_v = tl.zeros((BR, BC // 8), tl.float32)
    acc_w = tl.zeros((BR, BC // 8), tl.float32)
    for k in tl.static_range(4):
        lo, hi = qc.nvfp4_word_pairs_scaled(words, k)  # E2M1 values · 2^-14
        # the 2^14 rides on the vector entries, once per column instead of once per element:
        # (e · 2^-14) · (v · 2^14) is the real number e · v, so the products are those of the plain
        # values (while |v| < 2^114, far beyond any activation: q, k and C are bf16 inputs or their
        # unit-normalised copies)
        v_lo = tl.load(v_ptr + 8 * cw + k, mask=m_w, other=0).to(tl.float32) * qc.E2M1_UNIT
        v_hi = tl.load(v_ptr + 8 * cw + k + 4, mask=m_w, other=0).to(tl.float32) * qc.E2M1_UNIT
        # explicit FMAs: two per element and vector (written as a*b + c*d + acc, the compiler
        # kept a multiply and an add beside each FMA, sm_90 SASS)
        acc_v = tl.fma(hi, v_hi[None, :], tl.fma(lo, v_lo[None, :], acc_v))
        if TWO:
            w_lo = tl.load(w_ptr + 8 * cw + k, mask=m_w, other=0).to(tl.float32) * qc.E2M1_UNIT
            w_hi = tl.load(w_ptr + 8 * cw + k + 4, mask=m_w, other=0).to(tl.float32) * qc.E2M1_UNIT
            acc_w = tl.fma(hi, w_hi[None, :], tl.fma(lo, w_lo[None, :], acc_w))
    s_dec = tl.load(gs_ptr + slot * s_gs + h)
    sv = tl.sum(acc_v * block_scale, 1) * s_dec
    if TWO:
        sw = tl.sum(acc_w * block_scale, 1) * s_dec
    else:
        sw = 0.0
    return sv, sw


@triton.jit
def _nvfp4_dot_ptx(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, row64, rmask, C, v_ptr, w_ptr,
                   BC: tl.constexpr, TWO: tl.constexpr):
    """``read_state_dot`` of an NVFP4 tile with ``_e2m1_pairs_hw`` (compiled GPU kernels only):
    [BR, BC/2] byte tiles, each byte's block scale gathered (8 bytes share an address, which the
    compiler loads once) and applied per byte (measured faster on the H200 than a [BR, BC/16, 8]
    block tile that scales each block's partial sum once: 163 vs 199 µs)."""
    cb = tl.arange(0, BC // 2)
    m_b = cb < C // 2
    m2 = rmask[:, None] & m_b[None, :]
    packed = tl.load(d_ptr + slot * s_d + row64[:, None] * (C // 2) + cb[None, :], mask=m2, other=0)
    scb = tl.load(sc_ptr + slot * s_sc + row64[:, None] * (C // 16) + (cb // 8)[None, :], mask=m2, other=0)
    e_even, e_odd = _e2m1_pairs_hw(packed)  # E2M1 values · 2^-6: the 64 goes into s_dec
    block_scale = _block_scales(scb, True)
    s_dec = tl.load(gs_ptr + slot * s_gs + h) * 64.0
    v_even = tl.load(v_ptr + 2 * cb, mask=m_b, other=0).to(tl.float32)
    v_odd = tl.load(v_ptr + 2 * cb + 1, mask=m_b, other=0).to(tl.float32)
    sv = tl.sum((e_even * v_even[None, :] + e_odd * v_odd[None, :]) * block_scale, 1) * s_dec
    if TWO:
        w_even = tl.load(w_ptr + 2 * cb, mask=m_b, other=0).to(tl.float32)
        w_odd = tl.load(w_ptr + 2 * cb + 1, mask=m_b, other=0).to(tl.float32)
        sw = tl.sum((e_even * w_even[None, :] + e_odd * w_odd[None, :]) * block_scale, 1) * s_dec
    else:
        sw = 0.0
    return sv, sw


@triton.jit
def _e2m1_pair_bits(words, K: tl.constexpr):
    """uint32 NVFP4 words → uint32 words holding the fp16 patterns of elements 8c+K (low half) and
    8c+K+4 (high half), values · 2^-14: the word that ``codecs.nvfp4_word_pairs_scaled`` converts."""
    s = words >> (4 * K)
    return ((s << 9) & 0x0E000E00) | ((s << 12) & 0x80008000)


@triton.jit
def _scaled_f16_pair(words, K: tl.constexpr, scale16):
    """Elements 8c+K and 8c+K+4 of the words as fp16 E2M1 value · 2^-14 · block scale (exact)."""
    pair = _e2m1_pair_bits(words, K)
    lo = (pair & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True)
    hi = (pair >> 16).to(tl.uint16).to(tl.float16, bitcast=True)
    return lo * scale16, hi * scale16


@triton.jit
def _mma_order(j):
    """The element (column of the state row) that column j of the tensor-core operand holds: word
    c's elements in the order 8c+K, 8c+K+4 for K = 0..3 (``_nvfp4_dot_mma``)."""
    return (j & ~7) + ((j >> 1) & 3) + ((j & 1) << 2)


@triton.jit
def _pow2(e):
    """2^e as fp32 for integer e in [-126, 127] (its exponent bits)."""
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _mma_vector(v_ptr, elem, m_e, SPLIT: tl.constexpr):
    """The vector entries ``elem`` (masked by ``m_e``) as fp16 operands: (hi, lo, back) with
    hi + lo ≈ v · 2^(14-E) and back = 2^E, E = floor(log2 amax) of the finite entries (clamped to
    [-100, 127]; 0 for a zero vector), so the largest finite entry lies in [2^14, 2^15).
    Without SPLIT (bf16 and fp16 vectors) hi holds every entry exactly down to 2^-17 after scaling
    (entries within 2^31 of the amax) and lo is 0; smaller entries round on fp16's subnormal grid,
    an error of at most 2^-25 · 2^(E-14) = 2^-39 · 2^E each. With SPLIT (fp32 vectors) hi = fp16(v'),
    lo = fp16(v' - hi) keep 22 bits: error at most 2^-22 |v_j| + 2^-39 · 2^E each. NaN and ±inf
    entries pass through hi unchanged (lo 0)."""
    v = tl.load(v_ptr + elem, mask=m_e, other=0).to(tl.float32)
    bits = qc.abs_bits(v)
    to, back = _mma_scales(bits)
    vs = v * to
    hi = vs.to(tl.float16)
    if SPLIT:
        lo = tl.where(bits < 0x7F800000, vs - hi.to(tl.float32), 0.0).to(tl.float16)
    else:
        lo = tl.zeros_like(hi)
    return hi, lo, back


@triton.jit
def _mma_scales(bits):
    """(2^(14-E), 2^E) for a vector given as the absolute bit patterns of its entries [n]: E =
    floor(log2 amax) of the finite entries, clamped to [-100, 127], 0 for a zero vector
    (``_mma_vector``)."""
    amax = tl.max(tl.where(bits < 0x7F800000, bits, 0), 0)
    e = tl.minimum(tl.maximum((amax >> 23) - 127, -100), 127)
    e = tl.where(amax == 0, 0, e)
    return _pow2(14 - e), _pow2(e)


@triton.jit
def _pad_cols(x, BC: tl.constexpr, N: tl.constexpr):
    """[BC, N] → [BC, 2N]: x in columns 0..N-1, zeros after."""
    y = tl.permute(tl.join(x, tl.zeros_like(x)), (0, 2, 1))
    return tl.reshape(y, (BC, 2 * N))


# A lane's share of one m16 row tile: four registers (its row's words 4t..4t+3) per call, and the
# eight m16n8k16 products of its two rows on one accumulator. The text is generated from
# ``_mma_sync_lines`` below; ``_mma_sync_decode`` writes the code-word decode.
def _mma_sync_decode(word: str, dst: str) -> list[str]:
    """PTX turning one NVFP4 code word (elements 8c..8c+7, nibble i = element 8c+i) into the four
    f16x2 registers {dst}0..{dst}3, register K holding elements 8c+K (low half) and 8c+K+4 (high
    half) as the fp16 patterns of E2M1 value · 2^-14 (those of ``_e2m1_pair_bits``).

    Such a pattern has a zero low byte and a high byte s000_emm0 (sign s, magnitude emm). First
    two spreads: ``o`` holds the high bytes of the odd nibbles 1, 3, 5, 7 in bytes 0..3 (magnitude
    shifted down 3, the sign already at bit 7), ``e`` those of the even nibbles 0, 2, 4, 6
    (magnitude up 1, sign up 4). Then each register is one byte permute: nibbles K and K + 4 are
    bytes K // 2 and K // 2 + 2 of the same spread, placed above zero bytes (selector 4 is a byte of
    the zero operand). Seven integer operations per word and one permute per register, against
    four operations per register for shifting and masking the word once per pair."""
    out = [f"shr.b32 t, {word}, 3;", "and.b32 t, t, 0x0E0E0E0E;", f"and.b32 u, {word}, 0x80808080;",
           "or.b32 o, t, u;",
           f"shl.b32 t, {word}, 1;", "and.b32 t, t, 0x0E0E0E0E;", f"shl.b32 u, {word}, 4;",
           "and.b32 u, u, 0x80808080;", "or.b32 e, t, u;"]
    for K in range(4):
        k = K // 2
        out.append(f"prmt.b32 {dst}{K}, {'e' if K % 2 == 0 else 'o'}, 0, 0x{k + 2:x}4{k:x}4;")
    return out


def _mma_sync_lines() -> str:
    """Operands: $0..$3 the accumulator (out); four registers each (q = 0..3): we $4-$7, wo $8-$11,
    se $12-$15, so $16-$19, then the B pairs K = 0..3: $20-$23, $24-$27, $28-$31, $32-$35."""
    lines = ["{", ".reg .b32 t, u, e, o, s2, p0, p1, p2, p3, r0, r1, r2, r3;", ".reg .b16 l16, h16;"]
    lines += [f"mov.f32 ${i}, 0f00000000;" for i in range(4)]
    for q in range(4):
        for word, scale, dst in ((f"${4 + q}", f"${12 + q}", "p"), (f"${8 + q}", f"${16 + q}", "r")):
            b = q // 2  # words 4t, 4t+1 share the block scale in byte 0 of the pair; 4t+2, 4t+3 byte 1
            lines += [f"prmt.b32 t, {scale}, 0, 0x{b}{b}{b}{b};", "mov.b32 {l16, h16}, t;",
                      "cvt.rn.f16x2.e4m3x2 s2, l16;"]
            lines += _mma_sync_decode(word, dst)
            lines += [f"mul.rn.f16x2 {dst}{K}, {dst}{K}, s2;" for K in range(4)]  # the block scale, exact
        b = [f"${20 + 4 * K + q}" for K in range(4)]
        for half in (0, 1):  # k-tiles 2q (pairs 0, 1) and 2q + 1 (pairs 2, 3)
            lines.append("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {$0, $1, $2, $3}, "
                         f"{{p{2 * half}, r{2 * half}, p{2 * half + 1}, r{2 * half + 1}}}, "
                         f"{{{b[2 * half]}, {b[2 * half + 1]}}}, {{$0, $1, $2, $3}};")
    return "\n".join(lines + ["}"])


_MMA_SYNC_ASM = tl.constexpr(_mma_sync_lines())


@triton.jit
def _mma_sync_words(we, wo, se, so, b0, b1, b2, b3):
    """GPU only (inline PTX): a lane's share of one m16 row tile times the vectors' B fragment
    (``_nvfp4_dot_mma_sync``). Per call (pack=4: registers q = 0..3 of each operand): we / wo the code
    words 4t+q of the lane's rows g (even) and g + 8 (odd), se / so the two block-scale bytes (E4M3)
    of the lane's words in those rows (bytes 2t, 2t + 1 of the row's scales, the same in all four
    registers), b0..b3 the B pairs K = 0..3 of word 4t+q (fp16 x[8c+K] low, x[8c+K+4] high, column g
    of B).
    Word 4t+q's pair K is k-rows 2t, 2t+1 (+8 for odd K) of k-tile 2q + K // 2. Returns the
    accumulator registers in the four packed places: rows g (d0, d1) and g + 8 (d2, d3), columns 2t
    (d0, d2) and 2t + 1 (d1, d3)."""
    return tl.inline_asm_elementwise(
        asm=_MMA_SYNC_ASM, constraints="=f,=f,=f,=f," + "r," * 31 + "r",
        args=[we, wo, se, so, b0, b1, b2, b3], dtype=tl.float32, is_pure=True, pack=4)


@triton.jit
def _f16_pair(lo, hi):
    """Two fp32 tensors → uint32 words holding fp16(lo) in the low and fp16(hi) in the high half."""
    return tl.inline_asm_elementwise(asm="cvt.rn.f16x2.f32 $0, $2, $1;", constraints="=r,f,f", args=[lo, hi],
                                     dtype=tl.uint32, is_pure=True, pack=1)


@triton.jit
def _gather_u16(addr, m):
    """The 16-bit word at each (2-byte aligned) int64 address where m, else 0 (an inline-PTX load:
    unlike ``tl.load`` it is given no layout of its own, so it takes that of the tensors it is
    combined with)."""
    return tl.inline_asm_elementwise(
        asm="{ .reg .pred p; setp.ne.u32 p, $2, 0; mov.u32 $0, 0; @p ld.global.nc.u16 $0, [$1]; }",
        constraints="=r,l,r", args=[addr, m.to(tl.uint32)], dtype=tl.uint32, is_pure=True, pack=1)


@triton.jit
def _gather_f32(addr, m, DT: tl.constexpr):
    """The vector entry (dtype DT: fp32, bf16 or fp16) at each int64 address as fp32 where m, else 0
    (inline PTX, as ``_gather_u16``)."""
    if DT == tl.float32:
        asm: tl.constexpr = "{ .reg .pred p; setp.ne.u32 p, $2, 0; mov.b32 $0, 0; @p ld.global.nc.f32 $0, [$1]; }"
    elif DT == tl.bfloat16:
        asm: tl.constexpr = ("{ .reg .pred p; .reg .b32 r; setp.ne.u32 p, $2, 0; mov.b32 r, 0; "
                             "@p ld.global.nc.u16 r, [$1]; shl.b32 $0, r, 16; }")
    else:
        asm: tl.constexpr = ("{ .reg .pred p; .reg .b16 h; setp.ne.u32 p, $2, 0; mov.b16 h, 0; "
                             "@p ld.global.nc.b16 h, [$1]; cvt.f32.f16 $0, h; }")
    return tl.inline_asm_elementwise(asm=asm, constraints="=f,l,r", args=[addr, m.to(tl.uint32)],
                                     dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _mma_vector_scale(v_ptr, C, BC: tl.constexpr):
    """(2^(14-E), 2^E) for the vector's C entries (``_mma_scales``)."""
    cc = tl.arange(0, BC)
    return _mma_scales(qc.abs_bits(tl.load(v_ptr + cc, mask=cc < C, other=0).to(tl.float32)))


@triton.jit
def _mma_sync_b(v_ptr, w_ptr, elem, m_e, part, use_w, to_v, to_w, SPLIT_V: tl.constexpr, SPLIT_W: tl.constexpr):
    """The lane's B-column entries at ``elem``: part 0 (hi) or 1 (lo) of v, or (``use_w``) of w, scaled
    as ``_mma_vector`` does (hi + lo ≈ x · 2^(14-E), lo 0 for a 16-bit vector), as fp32 (the hi part
    unrounded: ``_f16_pair`` rounds it); 0 where ``m_e`` is off."""
    if v_ptr.dtype.element_ty == w_ptr.dtype.element_ty:
        x = _gather_f32(tl.where(use_w, w_ptr + elem, v_ptr + elem).to(tl.int64, bitcast=True), m_e,
                        v_ptr.dtype.element_ty)
    else:
        xv = _gather_f32((v_ptr + elem).to(tl.int64, bitcast=True), m_e & (use_w == 0), v_ptr.dtype.element_ty)
        xw = _gather_f32((w_ptr + elem).to(tl.int64, bitcast=True), m_e & use_w, w_ptr.dtype.element_ty)
        x = xv + xw  # one of the two is the masked 0
    xs = x * tl.where(use_w, to_w, to_v)
    if SPLIT_V or SPLIT_W:
        hi = xs.to(tl.float16).to(tl.float32)
        lo = tl.where(qc.abs_bits(x) < 0x7F800000, xs - hi, 0.0)
        if not SPLIT_V:
            lo = tl.where(use_w, lo, 0.0)
        elif not SPLIT_W:
            lo = tl.where(use_w, 0.0, lo)
        return tl.where(part == 0, xs, lo)
    else:
        return tl.where(part == 0, xs, 0.0)


@triton.jit
def _mma_sync_pair(v_ptr, w_ptr, cw, K: tl.constexpr, C, m_col, part, use_w, to_v, to_w, SPLIT_V: tl.constexpr,
                   SPLIT_W: tl.constexpr):
    """B fragment register of pair K at word columns ``cw``: entries 8c+K (low half), 8c+K+4 (high)."""
    e0 = 8 * cw + K
    x0 = _mma_sync_b(v_ptr, w_ptr, e0, m_col & (e0 < C), part, use_w, to_v, to_w, SPLIT_V, SPLIT_W)
    x1 = _mma_sync_b(v_ptr, w_ptr, e0 + 4, m_col & (e0 + 4 < C), part, use_w, to_v, to_w, SPLIT_V, SPLIT_W)
    return _f16_pair(x0, x1)


@triton.jit
def _nvfp4_dot_mma_sync(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, rmask, R, C, v_ptr, w_ptr,
                        BR: tl.constexpr, BC: tl.constexpr, TWO: tl.constexpr):
    """``read_state_dot`` of an NVFP4 tile as tensor-core products issued from registers by inline PTX
    (``_mma_sync_words``; compiled GPU kernels only, BC = 128, BR % 16 == 0): the tensor-core form of
    ``_nvfp4_dot_mma`` without its operand's layout change through shared memory, and no per-element
    fp32 conversion or FMA.

    Rows are taken as two [BR/2, 16] word tiles, row 16j + g (even) and 16j + g + 8 (odd) at tile row
    8j + g. The compiler's layout for such a load (four words per thread, four threads along a row,
    eight rows per warp) puts tile row 8j + g, words 4t..4t+3 on lane 4g + t: the lane of the
    m16n8k16 fragments for rows g and g + 8 of m-tile j, with each thread's registers running over
    (j, q), word c = 4t + q. Every other operand is computed from indices or loaded by inline PTX
    (``_gather_u16``, ``_gather_f32``), so that no load of another layout competes with the code
    words' (a ``tl.load`` of the block scales or vector entries made the compiler move the words
    instead). The k order is ours to choose (the vectors' entries follow it): word c's pair K
    (elements 8c+K, 8c+K+4) is k-rows 2t, 2t+1 (+8 for odd K) of k-tile 2q + K // 2, so every lane
    decodes only the words it loaded. B: column 0 v hi, 1 v lo, 2 w hi, 3 w lo (``_mma_vector``'s
    parts; lo is 0 for 16-bit vectors), each lane building its own column's entries. Then
    S v = (D[:, 0] + D[:, 1]) · 2^E_v · s_dec, held by lanes t = 0, and S w from columns 2, 3 (t = 1).
    Error as ``_nvfp4_dot_mma``: exact products, the tensor cores' accumulation."""
    SPLIT_V: tl.constexpr = v_ptr.dtype.element_ty != tl.bfloat16 and v_ptr.dtype.element_ty != tl.float16
    if TWO:
        SPLIT_W: tl.constexpr = w_ptr.dtype.element_ty != tl.bfloat16 and w_ptr.dtype.element_ty != tl.float16
    else:
        SPLIT_W: tl.constexpr = False
    tl.static_assert(BC == 128, "mma-ptx reads rows of 128 elements")
    HB: tl.constexpr = BR // 2
    tr = tl.arange(0, HB)[:, None]   # tile row 8j + g
    cw = tl.arange(0, 16)[None, :]   # word column 4t + q
    r_even = tl.min(rows, 0) + 16 * (tr // 8) + tr % 8  # the caller's rows are one contiguous block
    r_odd = r_even + 8
    live = tl.max(rmask.to(tl.int32), 0) > 0  # a skipped entry masks every row
    # no column mask: rows are exactly BC = C = 128 elements here (``resolve_fp4_decode``); the
    # always-true (cw >= 0) only gives the row masks the word tile's shape
    m_even = (r_even < R) & live & (cw >= 0)
    m_odd = (r_odd < R) & live & (cw >= 0)
    row_e = (h * R + r_even).to(tl.int64)
    row_o = (h * R + r_odd).to(tl.int64)
    base = d_ptr + slot * s_d
    # rows of 64 bytes as a constant: the compiler sees them 16-byte aligned and loads four words per
    # thread, the layout this relies on (C = 128 and a 16-byte aligned pool: ``resolve_fp4_decode``)
    we = tl.load((base + row_e * (BC // 2)).to(tl.pointer_type(tl.uint32)) + cw, mask=m_even, other=0)
    wo = tl.load((base + row_o * (BC // 2)).to(tl.pointer_type(tl.uint32)) + cw, mask=m_odd, other=0)
    sc = sc_ptr + slot * s_sc
    # the block scales of words 4t..4t+3 are the row's scale bytes 2t, 2t + 1: one 16-bit load per row
    # (the four registers share it; a 2-byte aligned scale pool and slot stride: ``resolve_fp4_decode``)
    se = _gather_u16((sc + row_e * (BC // 16) + 2 * (cw // 4)).to(tl.int64, bitcast=True), m_even)
    so = _gather_u16((sc + row_o * (BC // 16) + 2 * (cw // 4)).to(tl.int64, bitcast=True), m_odd)
    # B: lane column g = tile row % 8 (0 v hi, 1 v lo, 2 w hi, 3 w lo, the rest 0)
    to_v, back_v = _mma_vector_scale(v_ptr, C, BC)
    if TWO:
        to_w, back_w = _mma_vector_scale(w_ptr, C, BC)
    else:
        to_w = 0.0
        back_w = 0.0
    g = tr % 8 + cw * 0
    part = g % 2
    use_w = g >= 2
    m_col = g < (4 if TWO else 2)
    b0 = _mma_sync_pair(v_ptr, w_ptr, cw, 0, C, m_col, part, use_w, to_v, to_w, SPLIT_V, SPLIT_W)
    b1 = _mma_sync_pair(v_ptr, w_ptr, cw, 1, C, m_col, part, use_w, to_v, to_w, SPLIT_V, SPLIT_W)
    b2 = _mma_sync_pair(v_ptr, w_ptr, cw, 2, C, m_col, part, use_w, to_v, to_w, SPLIT_V, SPLIT_W)
    b3 = _mma_sync_pair(v_ptr, w_ptr, cw, 3, C, m_col, part, use_w, to_v, to_w, SPLIT_V, SPLIT_W)
    d = _mma_sync_words(we, wo, se, so, b0, b1, b2, b3)  # at (tile row, 4t + q): d_q
    # S v: columns 0 + 1 (v hi + lo) of lane t = 0, rows g (d0 + d1) and g + 8 (d2 + d3); S w: t = 1
    t = cw // 4
    q = cw % 4
    s_dec = tl.load(gs_ptr + slot * s_gs + h)
    e_v = tl.sum(tl.where((t == 0) & (q < 2), d, 0.0), 1)
    o_v = tl.sum(tl.where((t == 0) & (q >= 2), d, 0.0), 1)
    sv = _interleave_rows(e_v, o_v, BR) * back_v * s_dec
    if TWO:
        e_w = tl.sum(tl.where((t == 1) & (q < 2), d, 0.0), 1)
        o_w = tl.sum(tl.where((t == 1) & (q >= 2), d, 0.0), 1)
        sw = _interleave_rows(e_w, o_w, BR) * back_w * s_dec
    else:
        sw = 0.0
    return sv, sw


@triton.jit
def _interleave_rows(even, odd, BR: tl.constexpr):
    """[BR/2] values of tile rows 8j + g for rows 16j + g (even) and 16j + g + 8 (odd) → [BR] by row."""
    x = tl.reshape(tl.join(even, odd), (BR // 16, 8, 2))
    return tl.reshape(tl.permute(x, (0, 2, 1)), (BR,))


@triton.jit
def _nvfp4_dot_mma(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, row64, rmask, C, v_ptr, w_ptr,
                   BR: tl.constexpr, BC: tl.constexpr, HW: tl.constexpr, TWO: tl.constexpr):
    """``read_state_dot`` of an NVFP4 tile as one tensor-core product D = A · B (fp16 operands, fp32
    accumulation): no per-element fp16 → fp32 conversion and no per-element FMA.

    A [BR, BC]: the elements as fp16 E2M1 value · 2^-14 · E4M3 block scale, which is exact. The E2M1
    value · 2^-14 is an fp16 pattern built from the 32-bit code words with the integer operations
    of the fp16-pattern decode (``_e2m1_pair_bits``: one word's elements 8c+K and 8c+K+4 land in
    the two fp16 halves of one register); times the block scale (as fp16: one multiply per element,
    f16x2 pairs on the GPU) it is an integer multiple of 2^-24 with at most 6 significant bits and
    below 2688 · 2^-14, which fp16 holds exactly (subnormals included). The codes are loaded as
    [BR, BC/16, 2] words (block, word of the block) beside the [BR, BC/16] block scales, and A's
    columns hold the row's elements in the order ``_mma_order`` (word c: 8c+K, 8c+K+4 for K = 0..3).
    B [BC, 16]: the vectors in the same order as fp16 parts (``_mma_vector``: each vector scaled by
    the power of two 2^(14-E) that puts its largest finite entry in [2^14, 2^15); a bf16 or fp16
    vector fits one part exactly for every entry within 2^31 of the largest, an fp32 vector takes
    two, hi and lo, 22 bits): column 0 v hi, 1 v lo, 2 w hi, 3 w lo, the rest 0 (padding to the 16
    columns a tensor-core product takes). Then S v = (D[:, 0] + D[:, 1]) · 2^E_v · s_dec, and S w likewise from columns 2, 3.

    Error against the exact sum of the stored values' products: every product e·s·v' is exact on
    the tensor cores; what remains is the vector parts (per entry at most 2^-39 · 2^E for a 16-bit
    vector, 2^-22 |v_j| + 2^-39 · 2^E for an fp32 one), the tensor cores' fp32 accumulation (not
    IEEE-rounded: the tests hold it to 2^-18 of Σ|e·v| on the GPU) and two fp32 roundings (hi + lo
    parts, the scalings). A NaN block scale makes its row NaN; a NaN or ±inf vector entry reaches
    every row through its product, as in fp32 arithmetic (±inf where the element is nonzero, NaN
    where it is 0 or where infinities of both signs meet)."""
    SPLIT_V: tl.constexpr = v_ptr.dtype.element_ty != tl.bfloat16 and v_ptr.dtype.element_ty != tl.float16
    SPLIT_W: tl.constexpr = TWO and w_ptr.dtype.element_ty != tl.bfloat16 and w_ptr.dtype.element_ty != tl.float16
    # the codes as [BR, BC/16, 2] words (block, word of the block), the scales as [BR, BC/16]
    cb = tl.arange(0, BC // 16)
    m_b = rmask[:, None] & (cb < C // 16)[None, :]
    row_ptr = (d_ptr + slot * s_d + row64[:, None, None] * (C // 2)).to(tl.pointer_type(tl.uint32))
    words = tl.load(row_ptr + (2 * cb[None, :, None] + tl.arange(0, 2)[None, None, :]), mask=m_b[:, :, None],
                    other=0)
    scb = tl.load(sc_ptr + slot * s_sc + row64[:, None] * (C // 16) + cb[None, :], mask=m_b, other=0)
    if HW:
        sc16 = scb.to(tl.float8e4nv, bitcast=True).to(tl.float16)[:, :, None]
    else:
        sc16 = qc.decode_e4m3(scb.to(tl.int32)).to(tl.float16)[:, :, None]
    l0, h0 = _scaled_f16_pair(words, 0, sc16)
    l1, h1 = _scaled_f16_pair(words, 1, sc16)
    l2, h2 = _scaled_f16_pair(words, 2, sc16)
    l3, h3 = _scaled_f16_pair(words, 3, sc16)
    # [BR, BC/16, 2, h, K1, K0] (K = K0 + 2 K1), then h innermost: column 8c + 2K + h of word c
    y = tl.join(tl.join(tl.join(l0, h0), tl.join(l2, h2)), tl.join(tl.join(l1, h1), tl.join(l3, h3)))
    a = tl.reshape(tl.permute(y, (0, 1, 2, 4, 5, 3)), (BR, BC))

    jj = tl.arange(0, BC)
    elem = _mma_order(jj)
    m_e = elem < C
    v_hi, v_lo, v_back = _mma_vector(v_ptr, elem, m_e, SPLIT_V)
    if TWO:
        w_hi, w_lo, w_back = _mma_vector(w_ptr, elem, m_e, SPLIT_W)
    else:
        w_hi = tl.zeros_like(v_hi)
        w_lo = w_hi
        w_back = 0.0
    # [BC, 4]: columns v hi, v lo, w hi, w lo; then zeros up to the 16 columns of the product
    b4 = tl.reshape(tl.permute(tl.join(tl.join(v_hi, v_lo), tl.join(w_hi, w_lo)), (0, 2, 1)), (BC, 4))
    b = _pad_cols(_pad_cols(b4, BC, 4), BC, 8)
    acc = tl.dot(a, b, out_dtype=tl.float32)  # [BR, 16]

    nn = tl.arange(0, 16)
    s_dec = tl.load(gs_ptr + slot * s_gs + h)
    sv = (tl.sum(tl.where((nn < 2)[None, :], acc, 0.0), 1) * v_back) * s_dec
    if TWO:
        sw = (tl.sum(tl.where(((nn >= 2) & (nn < 4))[None, :], acc, 0.0), 1) * w_back) * s_dec
    else:
        sw = 0.0
    return sv, sw


@triton.jit
def read_state_dot(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, rmask, R, C, v_ptr, w_ptr,
                   FMT: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, HW: tl.constexpr, TWO: tl.constexpr,
                   FP4: tl.constexpr):
    """``(S v, S w)`` for the tile's rows (fp32 [BR] each; S w only with TWO, else 0), v and w = C
    values at ``v_ptr`` / ``w_ptr`` (any float dtype), read straight from the stored codes: a
    read-only step needs only these products (Mamba-2: S C; GDN: S q̃ and S k from one read), so
    NVFP4 never builds the fp32 tile of scaled values — it multiplies the E2M1 values with the
    matching vector entries and scales that by the block scale (E4M3; the per-head s_dec once per
    row). Arguments as ``load_state``. HW (compiled GPU kernels only) decodes E4M3 (FP8 elements,
    NVFP4 block scales) with the hardware E4M3→f16 conversion instead of the integer codec (same
    values). NVFP4 elements, by FP4 (the wrappers' ``fp4_decode``; which is fastest is a GPU
    measurement):

    * "fp16": the fp16-pattern decode on 32-bit words, fp32 products (``_nvfp4_dot_words``);
    * "ptx": with HW the inline-PTX conversion of ``_e2m1_pairs_hw`` (``_nvfp4_dot_ptx``; fewer
      instructions, more registers); the interpreter runs "fp16" instead;
    * "mma": the products on tensor cores (``_nvfp4_dot_mma``): the E2M1 values as an fp16 operand
      with no per-element conversion or FMA, the vectors scaled by a power of two into fp16 (fp32
      vectors in two fp16 parts), one block-diagonal product per part, the block scales once per
      16 elements; compiled and interpreted alike. Needs BR >= 16 (the tensor-core product's rows);
      a smaller row block takes "fp16".
    * "mma-ptx": with HW the same products issued from the registers the codes were loaded into
      (``_nvfp4_dot_mma_sync``; no shared-memory layout change). Needs BC = 128, whole m-tiles of
      16 rows and at least 16 rows per warp, which the wrappers check (``resolve_fp4_decode``, which
      gives "mma" elsewhere); the interpreter runs "mma".

    The sums run in another order than ``load_state`` + ``tl.sum`` (same value up to fp32 rounding;
    "mma" accumulates each block on tensor cores, see ``_nvfp4_dot_mma`` for its error)."""
    tl.static_assert(FP4 == "fp16" or FP4 == "ptx" or FP4 == "mma" or FP4 == "mma-ptx",
                     "FP4 must be 'fp16', 'ptx', 'mma' or 'mma-ptx'")
    row64 = (h * R + rows).to(tl.int64)
    if FMT == C_NVFP4:
        if HW and FP4 == "mma-ptx" and (BR // 16) * 16 == BR and BC == 128:
            sv, sw = _nvfp4_dot_mma_sync(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, rmask, R, C, v_ptr,
                                         w_ptr, BR, BC, TWO)
        elif HW and FP4 == "ptx":
            sv, sw = _nvfp4_dot_ptx(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, row64, rmask, C, v_ptr, w_ptr,
                                    BC, TWO)
        elif (FP4 == "mma" or FP4 == "mma-ptx") and BR >= 16:
            sv, sw = _nvfp4_dot_mma(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, row64, rmask, C, v_ptr, w_ptr,
                                    BR, BC, HW, TWO)
        else:
            sv, sw = _nvfp4_dot_words(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, row64, rmask, C, v_ptr,
                                      w_ptr, BR, BC, HW, TWO)
        return sv, sw
    else:
        cols = tl.arange(0, BC)
        if HW and FMT == C_E4M3:
            m = rmask[:, None] & (cols < C)[None, :]
            codes = tl.load(d_ptr + slot * s_d + row64[:, None] * C + cols[None, :], mask=m, other=0)
            tile = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        else:
            tile = load_state(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, rmask, R, C, FMT, BR, BC, HW)
        sv = tl.sum(tile * tl.load(v_ptr + cols, mask=cols < C, other=0).to(tl.float32)[None, :], 1)
        if TWO:
            sw = tl.sum(tile * tl.load(w_ptr + cols, mask=cols < C, other=0).to(tl.float32)[None, :], 1)
        else:
            sw = 0.0
        return sv, sw


@triton.jit
def store_state(x, d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, rmask, R, C,
                seed, seq, event, COPY: tl.constexpr, FMT: tl.constexpr, SR: tl.constexpr,
                BR: tl.constexpr, BC: tl.constexpr, HW: tl.constexpr = False):
    """Round the fp32 tile x [BR, BC] to FMT (SR values from the counters of (seq, h, event, group))
    and store its codes. NVFP4 needs the whole head in the tile (BR >= R): its global scale is the
    amax of the matrix. Rows outside ``rmask`` and columns >= C are not stored. HW (compiled GPU
    kernels only): NVFP4 block scales through the GPU's E4M3 conversions (``qc.nvfp4_block_scales``;
    the same bytes)."""
    if FMT == C_NVFP4:
        s_enc, s_dec = qc.nvfp4_global_scales(state_amax(x, rmask, C, 0, BC))
        store_state_cols(x, d_ptr, sc_ptr, slot, s_d, s_sc, h, rows, rmask, R, C, seed, seq, event, s_enc, s_dec,
                         0, COPY, FMT, SR, BR, BC, HW)
        store_global_scale(gs_ptr, slot, s_gs, h, s_dec, rmask)
    else:
        store_state_cols(x, d_ptr, sc_ptr, slot, s_d, s_sc, h, rows, rmask, R, C, seed, seq, event, 1.0, 1.0,
                         0, COPY, FMT, SR, BR, BC)


@triton.jit
def column_quarters(x, BR: tl.constexpr, BC: tl.constexpr):
    """[BR, BC] → its four column quarters [BR, BC/4] (quarter c: columns c·BC/4 ..)."""
    y = tl.reshape(tl.permute(tl.reshape(x, (BR, 4, BC // 4)), (0, 2, 1)), (BR, BC // 4, 2, 2))
    e, o = tl.split(y)
    x0, x2 = tl.split(e)
    x1, x3 = tl.split(o)
    return x0, x1, x2, x3


@triton.jit
def store_state4(x0, x1, x2, x3, d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, rmask, R, C,
                 seed, seq, event, COPY: tl.constexpr, FMT: tl.constexpr, SR: tl.constexpr,
                 BR: tl.constexpr, QW: tl.constexpr, HW: tl.constexpr = False):
    """``store_state`` of a tile held as four column quarters x_c [BR, QW] (columns c·QW ..; QW whole
    SR groups of 8, for NVFP4 whole blocks of 16), quarter by quarter: each draws
    its own SR values just before it is rounded, so only one quarter's SR values and rounding
    temporaries are live at a time (rounding a whole [BR, BC] tile at once holds one SR word per
    element beside the tile). Same values, groups and codes as ``store_state`` of the whole tile:
    SR groups and NVFP4 blocks never straddle a quarter, and NVFP4's global scale comes from the
    amax over all four quarters, taken first. HW: as in ``store_state``."""
    if FMT == C_NVFP4:
        amax = tl.maximum(tl.maximum(state_amax(x0, rmask, C, 0, QW), state_amax(x1, rmask, C, QW, QW)),
                          tl.maximum(state_amax(x2, rmask, C, 2 * QW, QW), state_amax(x3, rmask, C, 3 * QW, QW)))
        s_enc, s_dec = qc.nvfp4_global_scales(amax)
        store_global_scale(gs_ptr, slot, s_gs, h, s_dec, rmask)
    else:
        s_enc, s_dec = 1.0, 1.0
    store_state_cols(x0, d_ptr, sc_ptr, slot, s_d, s_sc, h, rows, rmask, R, C, seed, seq, event, s_enc, s_dec,
                     0, COPY, FMT, SR, BR, QW, HW)
    store_state_cols(x1, d_ptr, sc_ptr, slot, s_d, s_sc, h, rows, rmask, R, C, seed, seq, event, s_enc, s_dec,
                     QW, COPY, FMT, SR, BR, QW, HW)
    store_state_cols(x2, d_ptr, sc_ptr, slot, s_d, s_sc, h, rows, rmask, R, C, seed, seq, event, s_enc, s_dec,
                     2 * QW, COPY, FMT, SR, BR, QW, HW)
    store_state_cols(x3, d_ptr, sc_ptr, slot, s_d, s_sc, h, rows, rmask, R, C, seed, seq, event, s_enc, s_dec,
                     3 * QW, COPY, FMT, SR, BR, QW, HW)


@triton.jit
def state_amax(x, rmask, C, COL0: tl.constexpr, BW: tl.constexpr):
    """amax (as ``abs_bits``, int32) of the tile x [BR, BW] holding columns COL0..COL0+BW-1 of the
    rows in ``rmask``; an integer max, so a NaN state stays visible. The amax of a matrix held in
    column blocks is the maximum of its blocks' (an exact operation in any order)."""
    cols = tl.arange(0, BW) + COL0
    x = tl.where(rmask[:, None] & (cols < C)[None, :], x, 0.0)
    return tl.max(tl.max(qc.abs_bits(x), 1), 0)


@triton.jit
def store_global_scale(gs_ptr, slot, s_gs, h, s_dec, rmask):
    """NVFP4: the head's global scale s_dec, by a program that holds live rows."""
    tl.store(gs_ptr + slot * s_gs + h, s_dec, mask=tl.max(rmask.to(tl.int32), 0) > 0)


@triton.jit
def store_state_cols(x, d_ptr, sc_ptr, slot, s_d, s_sc, h, rows, rmask, R, C, seed, seq, event, s_enc, s_dec,
                     COL0: tl.constexpr, COPY: tl.constexpr, FMT: tl.constexpr, SR: tl.constexpr,
                     BR: tl.constexpr, BW: tl.constexpr, HW: tl.constexpr = False):
    """``store_state`` of the column block COL0..COL0+BW-1 of the tile (x [BR, BW]; COL0 and BW whole
    SR groups of 8, and for NVFP4 whole blocks of 16), with the SR values of exactly those columns.
    NVFP4 rounds with the matrix's global scales (s_enc, s_dec) given: the caller takes the amax over
    all blocks (``state_amax``) and stores s_dec (``store_global_scale``); other formats ignore them.
    A kernel that holds its state in column blocks stores it block by block, which keeps the SR
    values and rounding temporaries of one block live at a time instead of the whole tile's. HW: as in
    ``store_state``."""
    row64 = (h * R + rows).to(tl.int64)
    cols = tl.arange(0, BW) + COL0
    mask = rmask[:, None] & (cols < C)[None, :]
    if SR:
        r = sr_bits_cols(seed, seq, h, event, rows, C, COL0, COPY, BW)
    else:
        r = 0
    if FMT == C_NVFP4:
        tl.static_assert((BW // 16) * 16 == BW and (COL0 // 16) * 16 == COL0, "NVFP4 stores whole blocks of 16")
        x = tl.where(mask, x, 0.0)
        nb: tl.constexpr = BR * (BW // 16)
        if SR:
            rb = tl.reshape(r, (nb, 16))
        else:
            rb = 0
        codes, scale_codes = qc.nvfp4_quantize_blocks(tl.reshape(x, (nb, 16)), s_enc, s_dec, rb, SR, HW)
        packed = tl.reshape(qc.nvfp4_pack(codes), (BR, BW // 2))
        cb = tl.arange(0, BW // 2) + COL0 // 2
        cs = tl.arange(0, BW // 16) + COL0 // 16
        tl.store(d_ptr + slot * s_d + row64[:, None] * (C // 2) + cb[None, :], packed.to(tl.uint8),
                 mask=rmask[:, None] & (cb[None, :] < C // 2))
        tl.store(sc_ptr + slot * s_sc + row64[:, None] * (C // 16) + cs[None, :],
                 tl.reshape(scale_codes, (BR, BW // 16)).to(tl.uint8),
                 mask=rmask[:, None] & (cs[None, :] < C // 16))
    else:
        p = d_ptr + slot * s_d + row64[:, None] * C + cols[None, :]
        if FMT == C_FP32:
            tl.store(p, x, mask=mask)
        elif FMT == C_BF16:
            tl.store(p, qc.encode_bf16(x, r, SR).to(tl.int16), mask=mask)
        elif FMT == C_FP16:
            tl.store(p, qc.encode_fp16(x, r, SR).to(tl.int16), mask=mask)
        elif FMT == C_E4M3:
            tl.store(p, qc.encode_e4m3(x, r, SR).to(tl.uint8), mask=mask)
        else:
            tl.static_assert(FMT == C_E5M2, "unknown state format code")
            tl.store(p, qc.encode_e5m2(x, r, SR).to(tl.uint8), mask=mask)


@triton.jit
def softplus(v):
    """softplus as the decode kernels compute it (the references write the same expression)."""
    return tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(v)))
