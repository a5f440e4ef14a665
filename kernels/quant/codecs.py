"""Triton device helpers that encode/decode the low-precision formats with integer bit operations.

Why integer arithmetic: Triton's CPU interpreter rounds fp32→fp8 wrongly at binade carries, H200
has no FP4 conversion and no stochastic-rounding instruction, and Triton only offers rtne/rtz
casts. Every helper here therefore works on the fp32 bit pattern, so CPU tests (interpreter) and
the GPU run the same arithmetic and agree with the torch reference (``precision_lab.quant``) bit
for bit. Import them into your own ``@triton.jit`` kernels::

    from precision_lab.kernels.quant import codecs as qc
    code = qc.encode_e4m3(x, r, SR=True)            # inside a @triton.jit function

Conventions (all helpers are ``@triton.jit``; shapes are whatever block the caller has):

* ``x``: fp32 block. ``r``: int32/int64/uint32 block of random words of x's shape (only the low
  16 bits are used; ``kernels/common/philox.py`` draws them, one Philox call per 8 elements); pass
  ``0`` when ``SR=False`` (it is then never read).
* Codes are returned as int32 holding the raw bit pattern in their low bits (16 for fp16/bf16,
  8 for FP8, 4 for E2M1 with the sign in bit 3). Store them with ``.to(tl.uint8)`` /
  ``.to(tl.int16)``, or turn them into a float block with ``decode_*``.
* ``SR`` (constexpr): False = round to nearest, ties to even (RNE). True = stochastic rounding with
  the project convention (docs/design.md §5): with ``frac`` = position of |x| between its two grid
  neighbours, round away from zero iff ``floor(frac·2^16) + (r & 0xFFFF) >= 2^16``.
* Signed zeros keep their sign (-tiny → -0). NaN encodes to the format's canonical NaN with x's sign
  (E2M1 has no NaN: see ``encode_e2m1``). These are the codes of ``precision_lab.quant.rounding``.

Element codecs
--------------
``encode_bf16(x, r, SR)``  → int32 bf16 bits. Overflow → ±inf (IEEE); NaN → 0x7FC0|sign.
``encode_fp16(x, r, SR)``  → int32 fp16 bits. Overflow → ±inf (IEEE), subnormals kept; NaN → 0x7E00|sign.
                             Both have a fast path in each rounding mode (comments in the code), equal
                             to the generic rounding ``_encode`` (tested on every bf16 and fp16 pattern
                             with SR words at the carry boundaries, and on random fp32): bf16 adds
                             ``r & 0xFFFF`` (SR) or ``0x7FFF`` plus the kept lsb (RNE) to the fp32
                             pattern and keeps its top half; fp16 SR forms |x| in 16.16 fixed point in
                             units of the fp16 step (normals from the clamped pattern, subnormals as
                             ``int(|x| · 2^40)``) and keeps ``(T + r16) >> 16``; fp16 RNE rounds the
                             clamped pattern (normals) or lets the fp32 adder round ``|x| + 0.5``
                             (subnormals).
``encode_e4m3(x, r, SR)``  → int32 float8_e4m3fn bits, *satfinite*: |x| beyond 448 and ±inf give
                             ±448 (0x7E); NaN → 0x7F|sign. Subnormals (2^-9 steps) kept.
``encode_e5m2(x, r, SR)``  → int32 float8_e5m2 bits, *satfinite*: beyond 57344 and ±inf give
                             ±57344 (0x7B); NaN → 0x7E|sign.
                             Both have fast paths in each rounding mode, equal to the generic
                             ``_encode`` (tested like the fp16 ones): SR forms T as fp16 SR does
                             (normals from the clamped pattern, subnormals as ``int(|x| · 2^k)``) and
                             keeps ``min((T + r16) >> 16, max code)``; RNE rounds the pattern
                             (normals) or lets the fp32 adder round ``|x| + 1.5·2^k`` (subnormals).
``encode_e2m1(x, r, SR)``  → int32 FP4 E2M1 nibble (sign in bit 3, magnitude codes 0..7 =
                             0, .5, 1, 1.5, 2, 3, 4, 6), *satfinite* (beyond 6 and ±inf → ±6);
                             NaN → 0x7 | sign (E2M1 has no NaN; NVFP4 records NaN in the block scale).
                             RNE and SR each have a fast path of their own (comments in the code),
                             equal to the generic rounding (tested on every bf16 and on random fp32).
``decode_bf16(code)``, ``decode_fp16(code)``, ``decode_e4m3(code)``, ``decode_e5m2(code)``,
``decode_e2m1(code)``      → fp32 values (exact; codes as int32, only the format's low bits read;
                             FP8 NaN codes decode to the canonical quiet NaN with the code's sign).
``decode_e2m1_scaled(code)`` → fp32 E2M1 value · 2^-14 (exact): the nibble's bits placed into an fp16
                             pattern and converted, no table and no select (derivation above
                             ``_e2m1_f16_bits``). Kernels fold the 2^14 (``E2M1_UNIT``) into a factor
                             they multiply by anyway; ``decode_e2m1`` is this times 2^14.
``round_bf16(x, r, SR)``, ``round_fp16(x, r, SR)``, ``round_e4m3(x, r, SR)``, ``round_e5m2(x, r, SR)``
                           → fp32 value of the rounded number (encode then decode), for kernels
                             that keep fp32 registers holding values representable in the format.
``abs_bits(x)``            → int32 |x| bit pattern. The integer order of these equals the order
                             of |x|, and every NaN is above +inf, so ``tl.max(abs_bits(x), axis)``
                             is an amax that PROPAGATES NaN (``tl.max`` on floats drops it).

NVFP4 (docs/design.md §5: NVIDIA's chain; one global scale per matrix, E4M3 scale per 16 elements)
------------------------------------------------------------------------------------------
``nvfp4_global_scales(amax_bits)`` → ``(s_enc, s_dec)`` fp32 scalars from the matrix amax given as
    ``abs_bits`` (int32): ``s_enc = min(2688 / amax, FLT_MAX)`` (1 if amax is 0 or inf; NaN if
    amax is NaN), ``s_dec = 1 / s_enc``, both divisions correctly rounded (``tl.div_rn``).
``nvfp4_quantize_blocks(x, s_enc, s_dec, r, SR)`` with x fp32 ``[NB, 16]`` (one row per 16-element
    block of the last axis) → ``(codes, scale_codes)``: ``codes`` int32 ``[NB, 16]`` E2M1 nibbles,
    ``scale_codes`` int32 ``[NB]`` E4M3 bytes. Per block:
    ``s = e4m3_satfinite_rne(block_amax · (s_enc · fp32(1/6)))``,
    ``enc = min(1 / (f32(s) · s_dec), FLT_MAX)``, ``code = e2m1(x · enc)`` (RNE, or SR with r;
    scales are always RNE). A block containing NaN gets scale byte 0x7F (NaN) and codes from
    ``encode_e2m1`` (NaN elements → 0x7|sign), so it dequantizes to NaN.
``nvfp4_block_scales(block_amax_bits, s_enc, s_dec)`` → ``(scale_codes, enc)``: the scale chain above
    for block amaxes given as ``abs_bits`` (any shape), for kernels that reduce the blocks themselves
    (``nvfp4_quantize_blocks`` is this plus the E2M1 encode of ``x · enc``).
``nvfp4_pack(codes)``   int32 ``[NB, 16]`` → int32 bytes ``[NB, 8]``; element 2i in the low nibble.
``nvfp4_unpack(bytes)`` int32 ``[NB, 8]`` → int32 nibbles ``[NB, 16]``.
``nvfp4_pairs_scaled(bytes)`` NVFP4 bytes (any integer block, low 8 bits read) → ``(even, odd)`` fp32
    element values · 2^-14 of the low and high nibbles, both fp16 patterns built in one 32-bit word.
``nvfp4_word_pairs_scaled(words, K)`` uint32 words of 4 bytes (elements 8c .. 8c+7) → fp32 values
    · 2^-14 of elements ``8c+K`` and ``8c+K+4`` (K constexpr 0..3): nibbles 16 bits apart share shifts.
``nvfp4_dequantize_blocks(packed, scale_codes, s_dec)``: packed bytes int32 ``[NB, 8]``, E4M3
    scale bytes int32 ``[NB]``, fp32 scalar ``s_dec`` → fp32 ``[NB, 16]`` = ``e2m1(code) · (f32(s) · s_dec)``
    bit for bit: ``(e2m1(code) · 2^-14) · ((f32(s) · s_dec) · 2^14)``, the 2^14 folded into the block
    scale while ``|s_dec| < 2^105`` (``NVFP4_FOLD_LIMIT``; the product then cannot overflow), else
    applied to the elements.
``nvfp4_dequantize_codes(codes, scale_codes, s_dec)``: the same from unpacked nibbles int32 ``[NB, 16]``.

Kernels that use these in scale chains should be launched with ``enable_fp_fusion=False`` when
they contain ``a*b+c`` patterns that the reference rounds twice (the helpers here only multiply).
"""
from __future__ import annotations

import triton
import triton.language as tl

# Globals read inside @triton.jit code must be constexpr.
FLT_MAX = tl.constexpr(3.4028234663852886e38)
ONE_SIXTH_F32_BITS = tl.constexpr(0x3E2AAAAB)  # fp32(1/6), the constant of NVIDIA's scale chain
NVFP4_GLOBAL_NUMERATOR = tl.constexpr(2688.0)  # 448 (E4M3 max) · 6 (E2M1 max)
F32_NAN_BITS = tl.constexpr(0x7FC00000)
E2M1_UNIT = tl.constexpr(16384.0)  # 2^14: the *_scaled E2M1 decoders return value / E2M1_UNIT
NVFP4_FOLD_LIMIT = tl.constexpr(2.0**105)  # |s_dec| below it: f32(s) · s_dec · 2^14 stays finite (see
                                           # _nvfp4_apply_block_scales)


# ---------------------------------------------------------------------------------------------
# Generic rounding of an fp32 magnitude onto a small binary floating-point grid.
# ---------------------------------------------------------------------------------------------
@triton.jit
def _round_magnitude(a, r, MAN: tl.constexpr, EMIN_B: tl.constexpr, SR: tl.constexpr):
    """Round |x| (finite, given by its int32 bits ``a``) to a grid with MAN mantissa bits whose
    smallest normal exponent is EMIN_B (as a biased fp32 exponent, i.e. 128 - bias).

    Returns the target magnitude code ``(E << MAN) + mantissa`` as int32. A round-up carries into
    the exponent on its own, so the result may exceed the format's largest finite code: callers
    saturate or map to inf. Works in units of the target quantum:
    ``|x| = m · 2^(ee - 150)`` and the quantum is ``2^(shift)`` of those units, where
    ``shift = 23 - MAN + max(0, EMIN_B - ee)`` (the extra term covers target subnormals).
    """
    e = a >> 23
    m = (a & 0x7FFFFF) | tl.where(e != 0, 0x800000, 0)
    ee = tl.maximum(e, 1)
    shift = (23 - MAN) + tl.maximum(EMIN_B - ee, 0)
    # m < 2^24, so any shift >= 25 leaves q = 0 and rem = m below half a quantum; 31 keeps the
    # int32 shifts defined.
    s1 = tl.minimum(shift, 31)
    q = m >> s1
    rem = m - (q << s1)
    if SR:
        # floor(rem / 2^shift · 2^16); exact for every shift (shift >= 13 for all formats here,
        # and for shift > 31 the true value m >> (shift - 16) is what the clamped shift gives).
        rs = tl.maximum(tl.minimum(shift - 16, 31), 0)
        ls = tl.maximum(16 - shift, 0)
        frac16 = (rem << ls) >> rs
        up = (frac16 + (r & 0xFFFF).to(tl.int32)) >= 65536
    else:
        half = 1 << (s1 - 1)
        up = (rem > half) | ((rem == half) & ((q & 1) == 1))
    return (tl.maximum(ee - EMIN_B, 0) << MAN) + q + up.to(tl.int32)


@triton.jit
def _encode(x, r, EXP: tl.constexpr, MAN: tl.constexpr, BIAS: tl.constexpr, MAX_CODE: tl.constexpr,
            SATURATE: tl.constexpr, NAN_CODE: tl.constexpr, SR: tl.constexpr):
    """fp32 → sign | magnitude code of a format with EXP exponent and MAN mantissa bits.

    SATURATE: overflow (and ±inf) gives ±MAX_CODE; otherwise the code above MAX_CODE (= inf of an
    IEEE format). NaN gives NAN_CODE with x's sign.
    """
    bits = x.to(tl.int32, bitcast=True)
    sign = (bits >> 31) & 1
    a = bits & 0x7FFFFFFF
    is_nan = a > 0x7F800000
    # inf's bits read as 2^128, which rounds (RNE or SR alike) above MAX_CODE and is then
    # saturated or made inf; NaN's garbage is replaced below.
    mag = _round_magnitude(a, r, MAN, 128 - BIAS, SR)
    if SATURATE:
        mag = tl.minimum(mag, MAX_CODE)
    else:
        mag = tl.minimum(mag, MAX_CODE + 1)
    mag = tl.where(is_nan, NAN_CODE, mag)
    return (sign << (EXP + MAN)) | mag


@triton.jit
def _decode_normal(code, EXP: tl.constexpr, MAN: tl.constexpr, BIAS: tl.constexpr):
    """Sign/exponent/mantissa code → fp32 for formats whose normals are all finite (no inf/NaN
    handling; callers add it). Subnormals are m · 2^(1 - BIAS - MAN), computed exactly."""
    sign = (code >> (EXP + MAN)) & 1
    e = (code >> MAN) & ((1 << EXP) - 1)
    m = code & ((1 << MAN) - 1)
    normal_bits = ((e - BIAS + 127) << 23) | (m << (23 - MAN))
    # 2^(1 - BIAS - MAN) built from its bits (an exact power of two)
    sub_quantum = tl.full([], (128 - BIAS - MAN) << 23, tl.int32).to(tl.float32, bitcast=True)
    sub = m.to(tl.float32) * sub_quantum
    mag_bits = tl.where(e == 0, sub.to(tl.int32, bitcast=True), normal_bits)
    # the sign goes in as a bit: compiled Triton negates floats as 0 - x, which loses -0
    return ((sign << 31) | mag_bits).to(tl.float32, bitcast=True)


# ---------------------------------------------------------------------------------------------
# Public element codecs.
# ---------------------------------------------------------------------------------------------
@triton.jit
def abs_bits(x):
    """int32 bit pattern of |x|; integer max over it is a NaN-propagating amax."""
    return x.to(tl.int32, bitcast=True) & 0x7FFFFFFF


@triton.jit
def encode_bf16(x, r, SR: tl.constexpr):
    # Fast path, both modes (equal to _encode(x, r, 8, 7, 127, 0x7F7F, False, 0x7FC0, SR)). bf16 is the
    # top half of fp32 (same exponent field), so rounding is adding to the pattern and keeping the top
    # 16 bits: SR adds r16 (the carry out of the low half is floor(frac · 2^16) + r16 >= 2^16), RNE
    # adds 0x7FFF plus the kept lsb. A carry walks into the exponent by itself (fp32 subnormals →
    # bf16 subnormals or the smallest normal, max → inf 0x7F80; inf's low half is 0, so it stays inf),
    # and for a finite or infinite x it never reaches the sign bit (|bits| <= 0x7F800000, plus at most
    # 0xFFFF), so the sign rides along and a logical shift gives sign << 15 | magnitude.
    # NaN is replaced by its canonical pattern (sign | 0x7FC00000) before the add: its low half is 0.
    bits = x.to(tl.int32, bitcast=True)
    a = bits & 0x7FFFFFFF
    b = tl.where(a > 0x7F800000, (bits ^ a) | 0x7FC00000, bits)  # bits ^ a: the sign bit alone
    if SR:
        b = b + (r & 0xFFFF).to(tl.int32)
    else:
        b = b + (0x7FFF + ((b >> 16) & 1))
    return (b.to(tl.uint32, bitcast=True) >> 16).to(tl.int32, bitcast=True)


@triton.jit
def encode_fp16(x, r, SR: tl.constexpr):
    # Fast path, both modes (equal to _encode(x, r, 5, 10, 15, 0x7BFF, False, 0x7E00, SR)). fp16's
    # exponent is fp32's minus 112, so for fp16 normals (|x| >= 2^-14, |bits| >= 0x38800000) the fp32
    # pattern minus 112·2^23 is the fp16 magnitude code followed by 13 more fraction bits. Clamping
    # the pattern at 0x47800000 (2^16: fp16 code 0x7C00 = inf with nothing below it to round up)
    # maps every overflow and inf to inf (IEEE: 65504 <= |x| < 2^16 may still round up to inf) and
    # keeps the shifts below in int32 range. fp16 subnormals (|x| < 2^-14) are steps of 2^-24.
    # * SR: the rule of the generic path is code = (T + r16) >> 16 with
    #   T = code_trunc · 2^16 + floor(frac · 2^16): |x| in 16.16 fixed point in units of the fp16 step.
    #   Normals: T = (clamped pattern - 112·2^23) << 3 (the 13 fraction bits, zero-filled to 16).
    #   Subnormals: T = floor(|x| · 2^40) < 2^26: the product is exact (a power of two; an fp32
    #   subnormal gives T = 0 whether or not the multiply flushes it) and the float → int conversion
    #   truncates. |x| is clamped at 2^-14 before the product so that lanes taking the normal branch
    #   convert an in-range value; the normal-branch T of small patterns (negative, or wrapped) is
    #   never selected. NaN takes the clamp bound 0x47C00000 instead (98304: T = 0x7E00·2^16, the
    #   canonical NaN, no fraction). The sign bit is ORed into T's bit 31: T + r16 stays below 2^31,
    #   so nothing carries into it, and the logical shift puts it at bit 15 (-0 kept).
    # * RNE: normals add half an ulp minus 1 plus the kept lsb to the clamped pattern and shift;
    #   subnormals add 0.5 in the fp32 adder, whose ulp there is 2^-24, so it rounds |x| to a multiple
    #   k of the fp16 step with ties to even k, and k = bits(|x| + 0.5) - bits(0.5) (1024 = the
    #   smallest normal, also right; nothing multiplies into the add, so no FMA can absorb it). The
    #   add reads the clamped pattern (the same |x| where it is selected), so NaN never enters it.
    #   NaN → 0x7E00, then the sign is ORed in.
    bits = x.to(tl.int32, bitcast=True)
    a = bits & 0x7FFFFFFF
    if SR:
        ac = tl.minimum(a, tl.where(a > 0x7F800000, 0x47C00000, 0x47800000))
        t_small = (tl.minimum(a, 0x38800000).to(tl.float32, bitcast=True) * 1099511627776.0).to(tl.int32)
        t = tl.where(a < 0x38800000, t_small, (ac - 0x38000000) << 3) | (bits ^ a)
        return ((t + (r & 0xFFFF).to(tl.int32)).to(tl.uint32, bitcast=True) >> 16).to(tl.int32, bitcast=True)
    else:
        ac = tl.minimum(a, 0x47800000)
        normal = (ac + (0xFFF - 0x38000000) + ((ac >> 13) & 1)) >> 13
        small = (ac.to(tl.float32, bitcast=True) + 0.5).to(tl.int32, bitcast=True) - 0x3F000000
        mag = tl.where(a < 0x38800000, small, normal)
        mag = tl.where(a > 0x7F800000, 0x7E00, mag)
        return ((bits >> 16) & 0x8000) | mag


@triton.jit
def encode_e4m3(x, r, SR: tl.constexpr):
    # Fast paths in both modes (equal to _encode(x, r, 4, 3, 7, 0x7E, True, 0x7F, SR)). E4M3's exponent
    # is fp32's minus 120, so for E4M3 normals (|x| >= 2^-6, |bits| >= 0x3C800000) the fp32 pattern
    # minus 120·2^23, shifted right by 20, is the E4M3 magnitude code, and its low 20 bits are the
    # fraction below the E4M3 step. Subnormals (|x| < 2^-6) are steps of 2^-9.
    bits = x.to(tl.int32, bitcast=True)
    a = bits & 0x7FFFFFFF
    if SR:
        # The rule of the generic path is code = (T + r16) >> 16 with
        # T = code_trunc · 2^16 + floor(frac · 2^16): |x| in 16.16 fixed point in units of the step.
        # Normals: T = (pattern - 120·2^23) >> 4 (the top 16 of the 20 fraction bits), the pattern
        # clamped at 0x43F00000 (480: code 0x7F, fraction 0), so every overflow, inf and NaN gives a
        # code <= 0x7F that the satfinite clamp turns into 0x7E (NaN is replaced below). Subnormals:
        # T = floor(|x| · 2^25) < 2^19: the product is exact (a power of two; an fp32 subnormal
        # gives 0 whether or not the multiply flushes it) and the float → int conversion truncates;
        # |x| is clamped at 2^-6 first so that lanes taking the normal branch convert an in-range
        # value.
        t_small = (tl.minimum(a, 0x3C800000).to(tl.float32, bitcast=True) * 33554432.0).to(tl.int32)
        t = tl.where(a < 0x3C800000, t_small, (tl.minimum(a, 0x43F00000) >> 4) - (960 << 16))
        mag = tl.minimum((t + (r & 0xFFFF).to(tl.int32)) >> 16, 0x7E)
    else:
        # RNE (NVFP4 block scales). Normals: round the fp32 pattern to 3 mantissa bits by adding half
        # an ulp minus 1 plus the kept lsb (ties to even), then rebias (code = bits >> 20 minus
        # 120·8). Subnormals: |x| + 1.5·2^14 rounds to a multiple of 2^-9 in the fp32 adder (its ulp
        # there), and the multiple is the code (8 = the smallest normal, also right). NaN patterns
        # may wrap in the add; they are replaced below.
        normal = ((a + (0x7FFFF + ((a >> 20) & 1))) >> 20) - 960
        sub = (tl.abs(x) + 24576.0).to(tl.int32, bitcast=True) - 0x46C00000
        mag = tl.minimum(tl.where(a < 0x3C800000, sub, normal), 0x7E)
    mag = tl.where(a > 0x7F800000, 0x7F, mag)
    return ((bits >> 24) & 0x80) | mag


@triton.jit
def encode_e5m2(x, r, SR: tl.constexpr):
    # Fast paths in both modes (equal to _encode(x, r, 5, 2, 15, 0x7B, True, 0x7E, SR)), the E4M3 ones
    # with E5M2's constants: normals (|x| >= 2^-14, |bits| >= 0x38800000) have code = (pattern -
    # 112·2^23) >> 21 and 21 fraction bits; subnormals are steps of 2^-16.
    bits = x.to(tl.int32, bitcast=True)
    a = bits & 0x7FFFFFFF
    if SR:
        # T as in encode_e4m3: normals (pattern - 112·2^23) >> 5, the pattern clamped at 0x47800000
        # (2^16: code 0x7C, fraction 0, which the satfinite clamp makes 0x7B); subnormals
        # floor(|x| · 2^32) < 2^18, |x| clamped at 2^-14 first.
        t_small = (tl.minimum(a, 0x38800000).to(tl.float32, bitcast=True) * 4294967296.0).to(tl.int32)
        t = tl.where(a < 0x38800000, t_small, (tl.minimum(a, 0x47800000) >> 5) - (448 << 16))
        mag = tl.minimum((t + (r & 0xFFFF).to(tl.int32)) >> 16, 0x7B)
    else:
        # RNE: normals add half an ulp minus 1 plus the kept lsb and shift by 21; subnormals let the
        # fp32 adder round |x| + 1.5·2^7 (its ulp there is 2^-16, the step) to a multiple of the step.
        normal = ((a + (0xFFFFF + ((a >> 21) & 1))) >> 21) - 448
        sub = (tl.abs(x) + 192.0).to(tl.int32, bitcast=True) - 0x43400000
        mag = tl.minimum(tl.where(a < 0x38800000, sub, normal), 0x7B)
    mag = tl.where(a > 0x7F800000, 0x7E, mag)
    return ((bits >> 24) & 0x80) | mag


@triton.jit
def encode_e2m1(x, r, SR: tl.constexpr):
    if SR:
        # SR fast path (NVFP4-SR quantize and the NVFP4-SR state writes; the generic
        # _round_magnitude costs about twice the instructions). The rule of the generic path is
        # code = (T + r16) >> 16 with T = code_trunc · 2^16 + floor(frac · 2^16): |x| as a fixed-point
        # number whose integer part is the truncated code. Clamping |x|'s bits at 6.0 first is the
        # satfinite clamp of the reference (inf and NaN clamp to 6.0 as well: code 7, frac 0, so no
        # round-up). T takes a few operations on either side of 1:
        # * |x| >= 1 (E2M1 exponent >= 1, 1 mantissa bit): the fp32 field e·2 + top mantissa bit,
        #   i.e. bits >> 22, is the code plus 252 in every binade (a carry into the exponent is the
        #   next code), and bits 6..21 are the 16 fraction bits: T = (bits >> 6) - 252·2^16.
        # * |x| < 1 (E2M1 subnormals, step 0.5): T = floor(|x| · 2^17). The product is exact (a power
        #   of two, below 2^17 after the clamp) and the float → int conversion truncates, so one
        #   multiply and one conversion replace an integer shift by a per-element amount (exponent,
        #   significand with its implicit bit, clamped shift: six operations).
        bits = x.to(tl.int32, bitcast=True)
        a = tl.minimum(bits & 0x7FFFFFFF, 0x40C00000)
        t_small = (a.to(tl.float32, bitcast=True) * 131072.0).to(tl.int32)
        t = tl.where(a < 0x3F800000, t_small, (a >> 6) - (252 << 16))
        mag = (t + (r & 0xFFFF).to(tl.int32)) >> 16
        return ((bits >> 28) & 0x8) | mag
    else:
        # RNE fast path (the hot loop of NVFP4 quantize). Adding C = 1.5·2^23·q to |x| makes the
        # fp32 adder round |x| to a multiple k·q of the E2M1 step q (0.5 below 2, 1 below 4, else 2)
        # with ties to even k, and k can be read off the sum's low mantissa bits: it is
        # bits(|x| + C) - bits(C). Even k is the even E2M1 code in every binade, so this is RNE;
        # the code is k (q = 0.5), k + 2 (q = 1) or k + 4 (q = 2), saturated at 7 (values above
        # 5, inf and NaN give 7, like the generic path). Needs the add unfused (no FMA), which
        # |x| guarantees (fma cannot take |a·b|).
        ax = tl.abs(x)
        small = ax < 2.0
        mid = ax < 4.0
        c = tl.where(small, 6291456.0, tl.where(mid, 12582912.0, 25165824.0))
        k_base = tl.where(small, 0x4AC00000, tl.where(mid, 0x4B400000 - 2, 0x4BC00000 - 4))
        mag = tl.minimum((ax + c).to(tl.int32, bitcast=True) - k_base, 7)
        return ((x.to(tl.int32, bitcast=True) >> 28) & 0x8) | mag


@triton.jit
def decode_bf16(code):
    return (code << 16).to(tl.float32, bitcast=True)


@triton.jit
def decode_fp16(code):
    return code.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def decode_e4m3(code):
    # normals: the fp32 pattern is the code shifted into place plus the exponent rebias 120·2^23;
    # subnormals: bits(1.5·2^14) + code is 1.5·2^14 + code·2^-9, so subtracting 1.5·2^14 leaves
    # code·2^-9 exactly. NaN (S.1111.111) → canonical quiet NaN; the sign is ORed in last (-0 kept).
    mag = code & 0x7F
    normal = (mag << 20) + 0x3C000000
    sub = ((mag + 0x46C00000).to(tl.float32, bitcast=True) - 24576.0).to(tl.int32, bitcast=True)
    mag_bits = tl.where(mag == 0x7F, 0x7FC00000, tl.where(mag < 8, sub, normal))
    return (((code & 0x80) << 24) | mag_bits).to(tl.float32, bitcast=True)


@triton.jit
def decode_e5m2(code):
    val = _decode_normal(code, 5, 2, 15)
    # exponent all ones: inf (mantissa 0) or canonical NaN, sign from bit 7
    special_bits = ((code & 0x80) << 24) | tl.where((code & 0x3) == 0, 0x7F800000, 0x7FC00000)
    return tl.where((code & 0x7C) == 0x7C, special_bits.to(tl.float32, bitcast=True), val)


# E2M1 is decoded through an fp16 bit pattern. A nibble s|e1 e0|m placed as the fp16 bits
# s<<15 | (e1 e0 m)<<9 puts e into the two low bits of fp16's exponent field and m into the top
# mantissa bit, so the fp16 number is 2^(e-15)·(1 + m/2) for e > 0 and m·2^-15 for e = 0 (an fp16
# subnormal): the E2M1 value (2^(e-1)·(1 + m/2), resp. m/2) times 2^-14, with ±0 and the subnormal
# 0.5 included. fp16 → fp32 is exact, so a nibble costs a few integer operations and one conversion,
# with no table and no select. Callers fold the 2^14 into a factor they multiply by anyway (a block
# scale, a vector entry); ``decode_e2m1`` multiplies it back for the plain value (exact: a power of
# two on numbers of at most 2 significant bits, far from overflow).
@triton.jit
def _e2m1_f16_bits(code):
    """E2M1 nibble (sign in bit 3; higher bits ignored) → int32 holding its fp16 pattern (value·2^-14)."""
    return ((code << 12) & 0x8000) | ((code << 9) & 0x0E00)


@triton.jit
def _f16_bits_to_f32(bits):
    """Low 16 bits of an integer block, read as fp16, converted to fp32 (exact)."""
    return bits.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def decode_e2m1_scaled(code):
    return _f16_bits_to_f32(_e2m1_f16_bits(code))


@triton.jit
def decode_e2m1(code):
    return decode_e2m1_scaled(code) * E2M1_UNIT


@triton.jit
def nvfp4_pairs_scaled(packed):
    """NVFP4 bytes (low 8 bits of an integer block) → (even, odd) fp32 element values · 2^-14: the
    low nibble is element 2i, the high nibble 2i+1. Both fp16 patterns are built in one 32-bit word:
    ``b | b << 12`` puts a copy of the byte 12 bits up, so the high nibble sits 16 bits above the low
    one and the same two shifts place both (mask 0x0E00 per half: magnitude; 0x8000: sign)."""
    b = packed.to(tl.uint32) & 0xFF
    dup = b | (b << 12)
    word = ((dup << 9) & 0x0E000E00) | ((dup << 12) & 0x80008000)
    return _f16_bits_to_f32(word), _f16_bits_to_f32(word >> 16)


@triton.jit
def nvfp4_word_pairs_scaled(words, K: tl.constexpr):
    """uint32 words of 4 NVFP4 bytes (elements 8c .. 8c+7 of a row, little-endian) → fp32 values
    · 2^-14 of elements 8c+K and 8c+K+4 (K = 0..3). Nibbles K and K+4 of a word lie 16 bits apart,
    so shifting the word once places both magnitudes (0x0E000E00) and once more both signs
    (0x80008000): four integer operations per two elements, on data as loaded."""
    s = words >> (4 * K)
    word = ((s << 9) & 0x0E000E00) | ((s << 12) & 0x80008000)
    return _f16_bits_to_f32(word), _f16_bits_to_f32(word >> 16)


@triton.jit
def round_bf16(x, r, SR: tl.constexpr):
    return decode_bf16(encode_bf16(x, r, SR))


@triton.jit
def round_fp16(x, r, SR: tl.constexpr):
    return decode_fp16(encode_fp16(x, r, SR))


@triton.jit
def round_e4m3(x, r, SR: tl.constexpr):
    return decode_e4m3(encode_e4m3(x, r, SR))


@triton.jit
def round_e5m2(x, r, SR: tl.constexpr):
    return decode_e5m2(encode_e5m2(x, r, SR))


# ---------------------------------------------------------------------------------------------
# NVFP4.
# ---------------------------------------------------------------------------------------------
@triton.jit
def nvfp4_global_scales(amax_bits):
    """(s_enc, s_dec) from the matrix amax given as abs_bits (int32 scalar or block)."""
    amax = amax_bits.to(tl.float32, bitcast=True)
    s_enc = tl.div_rn(tl.full(amax.shape, NVFP4_GLOBAL_NUMERATOR, tl.float32), amax)
    s_enc = tl.where(s_enc > FLT_MAX, FLT_MAX, s_enc)  # keeps NaN
    s_enc = tl.where((amax_bits == 0) | (amax_bits == 0x7F800000), 1.0, s_enc)
    s_dec = tl.div_rn(tl.full(amax.shape, 1.0, tl.float32), s_enc)
    return s_enc, s_dec


@triton.jit
def nvfp4_block_scales(block_amax_bits, s_enc, s_dec, HW: tl.constexpr = False):
    """Block amaxes as abs_bits (int32, any shape) → (E4M3 scale bytes int32, fp32 factor ``enc`` that
    the block's elements are multiplied by before the E2M1 encode), both of that shape.

    HW (compiled GPU kernels only): the scale is rounded and decoded by the GPU's own conversions
    (``cvt.rn.satfinite`` to E4M3 and back) instead of the integer encode/decode. They give the same
    bytes here: the scale y = amax · s_enc/6 is never negative, RNE is the rounding of both, both
    saturate at 448 and both keep NaN as 0x7F (tests/test_kernels_quant.py sweeps every E4M3 binade,
    the ties, subnormals, 448, overflow, inf and NaN through both paths on the GPU). The interpreter
    rounds fp32 → fp8 wrongly, so CPU runs keep the integer path."""
    one_sixth = tl.full([], ONE_SIXTH_F32_BITS, tl.int32).to(tl.float32, bitcast=True)
    block_amax = block_amax_bits.to(tl.float32, bitcast=True)
    y = block_amax * (s_enc * one_sixth)
    if HW:
        s8 = y.to(tl.float8e4nv)
        scale_codes = s8.to(tl.uint8, bitcast=True).to(tl.int32)
        scale = s8.to(tl.float32)
    else:
        scale_codes = encode_e4m3(y, 0, False)
        scale = decode_e4m3(scale_codes)
    enc = tl.div_rn(tl.full(block_amax.shape, 1.0, tl.float32), scale * s_dec)
    enc = tl.where(enc > FLT_MAX, FLT_MAX, enc)  # a zero scale gives 1/0 = inf; keeps NaN
    return scale_codes, enc


@triton.jit
def nvfp4_quantize_blocks(x, s_enc, s_dec, r, SR: tl.constexpr, HW: tl.constexpr = False):
    """x fp32 [NB, 16] → (E2M1 codes int32 [NB, 16], E4M3 scale bytes int32 [NB]). HW: as in
    ``nvfp4_block_scales``."""
    scale_codes, enc = nvfp4_block_scales(tl.max(abs_bits(x), axis=1), s_enc, s_dec, HW)
    codes = encode_e2m1(x * enc[:, None], r, SR)
    return codes, scale_codes


@triton.jit
def nvfp4_pack(codes):
    """int32 nibbles [NB, 16] → int32 bytes [NB, 8], element 2i in the low nibble."""
    lo, hi = tl.split(tl.reshape(codes, (codes.shape[0], codes.shape[1] // 2, 2)))
    return lo | (hi << 4)


@triton.jit
def nvfp4_unpack(packed):
    """int32 bytes [NB, 8] → int32 nibbles [NB, 16]."""
    both = tl.join(packed & 0xF, (packed >> 4) & 0xF)
    return tl.reshape(both, (packed.shape[0], packed.shape[1] * 2))


@triton.jit
def _nvfp4_apply_block_scales(vals_scaled, scale_codes, s_dec):
    """E2M1 values · 2^-14 [NB, 16] (``decode_e2m1_scaled``) times their block scales → fp32 [NB, 16],
    bit for bit ``value(code) · (f32(s) · s_dec)``.

    The block scale y = f32(s) · s_dec is rounded exactly as the reference rounds it; multiplying y by
    2^14 is then exact unless it overflows, and (value · 2^-14) · (y · 2^14) is the same real number as
    value · y, rounded once, so the products agree in every bit (±0, subnormal y and NaN included).
    y · 2^14 overflows only for |y| >= 2^114; since |f32(s)| <= 448 < 2^9, no block can get there while
    |s_dec| < 2^105 (NVFP4_FOLD_LIMIT: every state whose amax is below about 1e35). Larger or NaN
    s_dec (a scalar, one per matrix) takes the unfolded product value · y instead: a uniform branch,
    one multiply per element more."""
    y = decode_e4m3(scale_codes) * s_dec
    if tl.abs(s_dec) < NVFP4_FOLD_LIMIT:
        out = vals_scaled * (y * E2M1_UNIT)[:, None]
    else:
        out = (vals_scaled * E2M1_UNIT) * y[:, None]
    return out


@triton.jit
def nvfp4_dequantize_blocks(packed, scale_codes, s_dec):
    """packed bytes int32 [NB, 8], E4M3 scale bytes int32 [NB], fp32 scalar s_dec → fp32 [NB, 16]."""
    even, odd = nvfp4_pairs_scaled(packed)
    vals = tl.reshape(tl.join(even, odd), (packed.shape[0], packed.shape[1] * 2))
    return _nvfp4_apply_block_scales(vals, scale_codes, s_dec)


@triton.jit
def nvfp4_dequantize_codes(codes, scale_codes, s_dec):
    """Unpacked E2M1 nibbles int32 [NB, 16], E4M3 scale bytes int32 [NB], fp32 scalar s_dec → fp32
    [NB, 16] (the same values as ``nvfp4_dequantize_blocks`` of the packed bytes)."""
    return _nvfp4_apply_block_scales(decode_e2m1_scaled(codes), scale_codes, s_dec)
