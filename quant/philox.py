"""CPU port of Philox 4x32-10, bit-identical to Triton's ``tl.randint4x`` / ``tl.randint``, and the
counter layouts that stochastic rounding (SR) draws its bits with.

Why a port: SR in the torch references and in the Triton kernels must consume the *same* random
bits, so that an SR run is reproducible and equal across paths (docs/design.md §4.8). The Triton
side of the layouts is ``kernels/common/philox.py``; both follow this docstring.

Triton's ``tl.randint4x(seed, offset)`` runs Philox4x32-10 with
    key     = (seed & 0xffffffff, seed >> 32)        (seed taken as a 64-bit integer)
    counter = (offset & 0xffffffff, offset >> 32, 0, 0)
and returns all four output words; ``tl.randint(seed, offset)`` is the first of them. Known answer
(tests/test_philox.py): seed 1234, offset 0 → 546353992, 3665621163, 1140953199, 3419031310.

All arithmetic runs on int64 tensors holding unsigned 32-bit values: int64 products wrap modulo
2**64 like unsigned ones, so masking recovers both the low and the high word of a 32×32 product.

Eight elements per Philox call. SR consumes 16 random bits per element (docs/design.md §5.3), and
one call yields 128, so one call serves a GROUP of 8 consecutive elements along the last axis
(``group_bits``). Lane l = 0..7 of a group takes half ``l % 2`` (0 = low 16 bits, 1 = high) of word
``l // 2``: the 128 output bits read as eight little-endian 16-bit values, word 0 first. That is the
order the Triton tile helper's ``tl.join`` / ``tl.reshape`` produce. Each element's SR value is the
16-bit number in the low bits of its word (the upper bits are 0).

State writes (``sr_offsets`` / ``state_rbits``; the documented contract every path follows):
    key    : layer_seed(seed, layer) = layer << 32 | seed
    counter: bit 63      copy    (0 = update checkpoint, 1 = read copy)
             bits 44..62 event   (write event of this sequence's state: 0 = the cast of the initial
                                  state, then 1, 2, ... one per write — prefill, flush, conventional
                                  step; 19 bits)
             bits 28..43 seq     (sequence index, 16 bits)
             bits 16..27 head    (head index, 12 bits)
             bits  0..15 group   (16 bits; element (row, col) of the [R, C] state matrix is lane
                                  col % 8 of group row · ceil(C / 8) + col // 8)
Each row starts a new group, so a matrix with C not a multiple of 8 leaves the last lanes of each
row's last group unused (bits are drawn and dropped).

Ad-hoc bits (``flat_rbits``: a quantizer's ``seed=``, the Triton quantize kernels' in-kernel Philox):
key = seed; flat (row-major) element index i of the whole tensor is lane i % 8 of counter i // 8.
"""
from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF
PHILOX_KEY_A = 0x9E3779B9
PHILOX_KEY_B = 0xBB67AE85
PHILOX_ROUND_A = 0xD2511F53
PHILOX_ROUND_B = 0xCD9E8D57
N_ROUNDS = 10

#: elements served by one Philox call: 4 words × 32 bits / 16 SR bits per element
GROUP = 8
LANE_BITS = 16

# Field widths of the state-write counter layout documented above.
GROUP_BITS, HEAD_BITS, SEQ_BITS, EVENT_BITS = 16, 12, 16, 19
HEAD_SHIFT = GROUP_BITS
SEQ_SHIFT = HEAD_SHIFT + HEAD_BITS
EVENT_SHIFT = SEQ_SHIFT + SEQ_BITS
COPY_SHIFT = EVENT_SHIFT + EVENT_BITS  # = 63
COPY_UPDATE, COPY_READ = 0, 1


def _umulhi(a: torch.Tensor, b: int) -> torch.Tensor:
    return ((a * b) >> 32) & _M32


def philox4x32(seed: int, c0: torch.Tensor, c1: torch.Tensor, c2: torch.Tensor, c3: torch.Tensor,
               n_rounds: int = N_ROUNDS) -> tuple[torch.Tensor, ...]:
    """Philox4x32 with the 64-bit ``seed`` as key; counters are int64 tensors of uint32 values."""
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    k0, k1 = seed & _M32, (seed >> 32) & _M32
    for _ in range(n_rounds):
        _c0, _c2 = c0, c2
        c0 = _umulhi(_c2, PHILOX_ROUND_B) ^ c1 ^ k0
        c2 = _umulhi(_c0, PHILOX_ROUND_A) ^ c3 ^ k1
        c1 = (_c2 * PHILOX_ROUND_B) & _M32
        c3 = (_c0 * PHILOX_ROUND_A) & _M32
        k0 = (k0 + PHILOX_KEY_A) & _M32
        k1 = (k1 + PHILOX_KEY_B) & _M32
    return c0, c1, c2, c3


def randint4x(seed: int, offset: torch.Tensor | int) -> tuple[torch.Tensor, ...]:
    """``tl.randint4x(seed, offset)`` on the CPU: four uint32 words (as int64) per offset.

    ``offset`` holds 64-bit counters (int64; values ≥ 2**63 are given as their two's-complement
    negative int64, which is what a Triton int64 tensor holds).
    """
    offset = torch.as_tensor(offset, dtype=torch.int64)
    lo = offset & _M32
    hi = (offset >> 32) & _M32
    zero = torch.zeros_like(lo)
    return philox4x32(seed, lo, hi, zero, zero)


def randint(seed: int, offset: torch.Tensor | int) -> torch.Tensor:
    """``tl.randint(seed, offset)`` on the CPU: the first word of ``randint4x``."""
    return randint4x(seed, offset)[0]


def group_bits(seed: int, counters: torch.Tensor) -> torch.Tensor:
    """SR values of the groups at ``counters`` [..., G]: one Philox call per counter, spread over its 8
    lanes (lane l = half l % 2 of word l // 2). Returns int64 in [0, 2**16) of shape [..., 8·G]."""
    words = torch.stack(randint4x(seed, counters), dim=-1)                             # [..., G, 4]
    halves = torch.stack((words & 0xFFFF, words >> LANE_BITS), dim=-1)                 # [..., G, 4, 2]
    return halves.reshape(*counters.shape[:-1], counters.shape[-1] * GROUP)


def layer_seed(seed: int, layer: int) -> int:
    """The 64-bit Philox key for a run seed and a layer index (the ``seed`` passed to tl.randint4x)."""
    if not 0 <= seed <= _M32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    if not 0 <= layer <= _M32:
        raise ValueError(f"layer index must be in [0, 2**32), got {layer}")
    return (layer << 32) | seed


def groups_per_row(C: int) -> int:
    """Groups a state row of C elements spans: rows start new groups, so a partial one rounds up."""
    return -(-C // GROUP)


def sr_offsets(seq: torch.Tensor | int, head: torch.Tensor | int, event: torch.Tensor | int,
               shape: tuple[int, int], copy: int = COPY_UPDATE, device=None) -> torch.Tensor:
    """Counters of every group of the [R, C] state matrices addressed by broadcastable seq/head/event.

    Returns int64 counters of shape ``broadcast(seq, head, event).shape + (R, ceil(C / 8))``; group
    (row, g) holds the elements (row, 8g .. 8g+7). ``device``: where the counters (and the Philox
    arithmetic on them) live; a GPU state's bits are drawn on the GPU, since a whole batch's state
    write is millions of counters (on the CPU that took ~1 s per layer for a 4B model at batch 8).
    """
    r, c = shape
    n_groups = r * groups_per_row(c)
    if n_groups > (1 << GROUP_BITS):
        raise ValueError(f"a state matrix [{r}, {c}] spans {n_groups} groups of {GROUP} elements; the SR counter "
                         f"layout allows {1 << GROUP_BITS} (rows × ceil(columns / {GROUP}))")
    seq, head, event = (torch.as_tensor(v, dtype=torch.int64, device=device) for v in (seq, head, event))
    for name, v, bits in (("sequence", seq, SEQ_BITS), ("head", head, HEAD_BITS), ("write event", event, EVENT_BITS)):
        if v.numel() and (int(v.min()) < 0 or int(v.max()) >= (1 << bits)):
            raise ValueError(f"{name} index out of the SR counter layout's {bits}-bit range")
    base = (event << EVENT_SHIFT) | (seq << SEQ_SHIFT) | (head << HEAD_SHIFT)
    if copy:
        base = base | torch.tensor(-(1 << 63), dtype=torch.int64, device=base.device)  # bit 63 set
    group = torch.arange(n_groups, dtype=torch.int64, device=base.device).reshape(r, groups_per_row(c))
    return base[..., None, None] | group


def state_rbits(seed: int, layer: int, seq, head, event, shape: tuple[int, int], copy: int = COPY_UPDATE,
                device=None) -> torch.Tensor:
    """SR values (int64 in [0, 2**16)) for state matrices of ``shape`` = (R, C), computed on ``device``.

    Output shape: ``broadcast(seq, head, event).shape + (R, C)``.
    """
    offs = sr_offsets(seq, head, event, shape, copy, device=device)
    return group_bits(layer_seed(seed, layer), offs)[..., : shape[1]]


def flat_rbits(seed: int, n: int, start: int = 0, device=None) -> torch.Tensor:
    """Ad-hoc SR values (int64 in [0, 2**16)) of the flat elements ``start .. start + n - 1``: element i
    is lane i % 8 of Philox(seed, counter i // 8). Returns shape [n]."""
    first, end = start // GROUP, -(-(start + n) // GROUP)
    counters = torch.arange(first, end, dtype=torch.int64, device=device)
    bits = group_bits(seed, counters)
    skip = start - first * GROUP
    return bits[skip: skip + n]
