"""CPU port of Philox 4x32-10, bit-identical to Triton's ``tl.randint`` / ``tl.randint4x``.

Why a port: stochastic rounding (SR) in the torch references and in the Triton kernels must consume
the *same* random bits, so that an SR run is reproducible and equal across paths (docs/design.md §4).

Triton's ``tl.randint(seed, offset)`` runs Philox4x32 with
    key     = (seed & 0xffffffff, seed >> 32)        (seed taken as a 64-bit integer)
    counter = (offset & 0xffffffff, offset >> 32, 0, 0)
and returns the first output word. Known answer (tests/test_philox.py): seed 1234, offsets 0..3 →
546353992, 2666454581, 1070188760, 3055983166.

All arithmetic runs on int64 tensors holding unsigned 32-bit values: int64 products wrap modulo
2**64 like unsigned ones, so masking recovers both the low and the high word of a 32×32 product.

Counter layout for state writes (the documented contract every path follows; see ``sr_offsets``):
    key   : seed_lo = run seed (32 bits), seed_hi = layer index (32 bits)
    offset: bit 63      copy    (0 = update checkpoint, 1 = read copy)
            bits 44..62 event   (write event of this sequence's state: 0 = the cast of the initial
                                 state, then 1, 2, ... one per write — prefill, flush, conventional
                                 step; 19 bits)
            bits 28..43 seq     (sequence index, 16 bits)
            bits 16..27 head    (head index, 12 bits)
            bits  0..15 element (row-major index inside the [R, C] state matrix, 16 bits)
Each element draws one 32-bit word; quantizers use its low 16 bits (docs/design.md §5).
"""
from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF
PHILOX_KEY_A = 0x9E3779B9
PHILOX_KEY_B = 0xBB67AE85
PHILOX_ROUND_A = 0xD2511F53
PHILOX_ROUND_B = 0xCD9E8D57
N_ROUNDS = 10

# Field widths of the state-write counter layout documented above.
ELEMENT_BITS, HEAD_BITS, SEQ_BITS, EVENT_BITS = 16, 12, 16, 19
HEAD_SHIFT = ELEMENT_BITS
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


def randint(seed: int, offset: torch.Tensor | int) -> torch.Tensor:
    """``tl.randint(seed, offset)`` on the CPU: one uint32 (as int64) per offset.

    ``offset`` holds 64-bit counters (int64; values ≥ 2**63 are given as their two's-complement
    negative int64, which is what a Triton int64 tensor holds).
    """
    offset = torch.as_tensor(offset, dtype=torch.int64)
    lo = offset & _M32
    hi = (offset >> 32) & _M32
    zero = torch.zeros_like(lo)
    return philox4x32(seed, lo, hi, zero, zero)[0]


def layer_seed(seed: int, layer: int) -> int:
    """The 64-bit Philox key for a run seed and a layer index (the ``seed`` passed to tl.randint)."""
    if not 0 <= seed <= _M32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    if not 0 <= layer <= _M32:
        raise ValueError(f"layer index must be in [0, 2**32), got {layer}")
    return (layer << 32) | seed


def sr_offsets(seq: torch.Tensor | int, head: torch.Tensor | int, event: torch.Tensor | int,
               n_elements: int, copy: int = COPY_UPDATE) -> torch.Tensor:
    """Counters for every element of the state matrices addressed by broadcastable seq/head/event.

    Returns int64 offsets of shape ``broadcast(seq, head, event).shape + (n_elements,)``.
    """
    if n_elements > (1 << ELEMENT_BITS):
        raise ValueError(f"state matrix has {n_elements} elements; the SR counter layout allows {1 << ELEMENT_BITS}")
    seq, head, event = (torch.as_tensor(v, dtype=torch.int64) for v in (seq, head, event))
    for name, v, bits in (("sequence", seq, SEQ_BITS), ("head", head, HEAD_BITS), ("write event", event, EVENT_BITS)):
        if v.numel() and (int(v.min()) < 0 or int(v.max()) >= (1 << bits)):
            raise ValueError(f"{name} index out of the SR counter layout's {bits}-bit range")
    base = (event << EVENT_SHIFT) | (seq << SEQ_SHIFT) | (head << HEAD_SHIFT)
    if copy:
        base = base | torch.tensor(-(1 << 63), dtype=torch.int64)  # bit 63 set
    elem = torch.arange(n_elements, dtype=torch.int64)
    return base.unsqueeze(-1) | elem


def state_rbits(seed: int, layer: int, seq, head, event, shape: tuple[int, int], copy: int = COPY_UPDATE) -> torch.Tensor:
    """Random words (int64 holding uint32) for state matrices of ``shape`` = (R, C).

    Output shape: ``broadcast(seq, head, event).shape + (R, C)``.
    """
    r, c = shape
    offs = sr_offsets(seq, head, event, r * c, copy)
    bits = randint(layer_seed(seed, layer), offs)
    return bits.reshape(*offs.shape[:-1], r, c)
