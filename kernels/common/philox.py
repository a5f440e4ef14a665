"""Stochastic-rounding bits inside Triton kernels: the device side of ``quant/philox.py``, whose
docstring (and docs/design.md §4.8) documents the layouts followed here.

One ``tl.randint4x`` call yields four 32-bit words, i.e. eight 16-bit SR values, so every helper
computes Philox on a block of GROUP counters (one per 8 consecutive elements of the last axis) and
spreads the result over the elements (``philox_lanes``): a tile [BR, BC] costs BR·BC/8 Philox
calls, not BR·BC. Lane l of a group takes half l % 2 of word l // 2, which is what joining the
words and their halves and flattening them yields.

* ``philox_lanes(seed, counters)``   [M, G] group counters → [M, 8·G] SR values (the one Philox step)
* ``sr_bits(...)``                   a state tile's values (state-write layout; quant/philox.py
                                     ``state_rbits``); ``sr_bits_cols`` those of one column block
* ``flat_sr_bits(seed, start, ...)`` a block of flat elements (ad-hoc layout of a quantizer's
                                     ``seed=``; quant/philox.py ``flat_rbits``)

Values come back as uint32 holding 16 bits (the codecs read ``r & 0xFFFF``).
"""
from __future__ import annotations

import triton
import triton.language as tl
from precision_lab.quant import philox as _cpu

# the field positions of the state-write counter, from the CPU port that documents them
EVENT_SHIFT = tl.constexpr(_cpu.EVENT_SHIFT)
SEQ_SHIFT = tl.constexpr(_cpu.SEQ_SHIFT)
HEAD_SHIFT = tl.constexpr(_cpu.HEAD_SHIFT)
GROUP = tl.constexpr(_cpu.GROUP)


@triton.jit
def philox_lanes(seed, counters):
    """One Philox4x32-10 call per group counter (int64 [M, G]) → SR values [M, 8·G] (uint32 in
    [0, 2^16)): element 8g + l of a row is lane l of group g, i.e. half l % 2 of word l // 2."""
    M: tl.constexpr = counters.shape[0]
    G: tl.constexpr = counters.shape[1]
    w0, w1, w2, w3 = tl.randint4x(seed, counters)
    # join appends an axis of 2: [M, G, 2, 2] with [.., i, j] = word 2i + j, then the halves as the
    # innermost axis, so the row-major flattening runs word 0 low, word 0 high, word 1 low, ...
    words = tl.join(tl.join(w0, w2), tl.join(w1, w3))
    halves = tl.join(words & 0xFFFF, words >> 16)
    return tl.reshape(halves, (M, G * GROUP))


@triton.jit
def sr_bits(seed, seq, head, event, rows, C, COPY: tl.constexpr, BC: tl.constexpr):
    """SR values [BR, BC] of the state tile with rows ``rows`` [BR] and columns 0..BC-1 of a [R, C]
    matrix, at one write (``seed`` = layer_seed; counter fields as in quant/philox.py). Columns at
    or beyond C get values too, which the caller drops with its mask."""
    return sr_bits_cols(seed, seq, head, event, rows, C, 0, COPY, BC)


@triton.jit
def sr_bits_cols(seed, seq, head, event, rows, C, COL0: tl.constexpr, COPY: tl.constexpr, BW: tl.constexpr):
    """``sr_bits`` of the column block COL0..COL0+BW-1 (COL0 and BW multiples of 8): the same values
    as columns COL0.. of the whole tile, one Philox call per group as there. A kernel that stores a
    tile block by block draws each block's values just before it rounds that block, so the values of
    the whole tile are never live at once."""
    # (written without %: the interpreter's constexpr has no reflected modulo for ``int % GROUP``)
    tl.static_assert((BW // GROUP) * GROUP == BW, "a state tile spans whole groups of 8 columns")
    tl.static_assert((COL0 // GROUP) * GROUP == COL0, "a column block starts a group of 8 columns")
    base = (event << EVENT_SHIFT) | (seq << SEQ_SHIFT) | (head.to(tl.int64) << HEAD_SHIFT)
    # each row starts a new group: group (row, g) covers columns 8g .. 8g+7 (the tensor first: the
    # interpreter cannot add a tensor to a constexpr on its left either)
    g = tl.arange(0, BW // GROUP) + COL0 // GROUP
    group = rows.to(tl.int64)[:, None] * ((C + GROUP - 1) // GROUP) + g[None, :]
    off = base | group
    if COPY:
        off = off.to(tl.uint64, bitcast=True) | 0x8000000000000000
    return philox_lanes(seed, off)


@triton.jit
def flat_sr_bits(seed, start, M: tl.constexpr, W: tl.constexpr):
    """SR values [M, W] of the flat elements ``start + m·W + j`` (row-major; ``start`` and W multiples
    of 8): element i is lane i % 8 of Philox(seed, i // 8)."""
    tl.static_assert((W // GROUP) * GROUP == W, "a block of flat elements spans whole groups of 8")
    counters = start // GROUP + tl.arange(0, M)[:, None] * (W // GROUP) + tl.arange(0, W // GROUP)[None, :]
    return philox_lanes(seed, counters.to(tl.int64))
