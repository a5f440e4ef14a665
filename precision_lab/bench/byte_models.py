"""Explicit bytes models: what each timed call must move at the least, from which GB/s and
"% of copy" are computed. Every benchmark counts state at its storage size, inputs and outputs in
their dtypes, and nothing it does not have to read or write.
"""
from __future__ import annotations

from precision_lab.kernels.common.formats import KERNEL_FORMATS, matrix_bytes

from .problems import state_dims

IN_BYTES = 2  # bf16 activations of the decode-step benchmark


# ---------------------------------------------------------------------------------------------
# decode steps (one token per sequence; state at storage size, records fp32, inputs/outputs bf16)
# ---------------------------------------------------------------------------------------------
def state_bytes(fmt: str, R: int, C: int) -> float:
    """Storage bytes of one [R, C] state matrix in fmt (NVFP4: codes + E4M3 scales + global scale)."""
    return matrix_bytes(KERNEL_FORMATS[fmt][0], R, C)


def token_bytes(op) -> float:
    """Per-token inputs + output of one sequence (bf16)."""
    d = state_dims(op)
    if op == "mamba2":   # x, y [H, P]; dt [H]; B, C [G, N]
        return IN_BYTES * (2 * d["H"] * d["R"] + d["H"] + 2 * d["Gk"] * d["C"])
    return IN_BYTES * (2 * d["H"] * d["R"] + 2 * d["Gk"] * d["C"] + 2 * d["H"])  # v, o; q, k; g, beta


def record_fields(op) -> dict[str, float]:
    """fp32 bytes per token of each record field, all heads of one sequence (the ring buffers of
    ``Mamba2Records`` / ``GDNRecords``): Mamba-2 u [H, P], B [G, N], a [H]; GDN k [Hk, K] (per key
    head), d and v [Hv, V], a and beta [Hv]."""
    d = state_dims(op)
    if op == "mamba2":
        return {"u": 4 * d["H"] * d["R"], "b": 4 * d["Gk"] * d["C"], "a": 4 * d["H"]}
    return {"k": 4 * d["Gk"] * d["C"], "d": 4 * d["H"] * d["R"], "a": 4 * d["H"], "v": 4 * d["H"] * d["R"],
            "beta": 4 * d["H"]}


# The record fields a step reads at each window position. GDN's output-only step, verify and a flush
# that folds the stored d's read k, d and a; a flush that re-solves the d's from the update checkpoint
# (the recompute fold in split mode: the kernel's RESOLVE) reads k, v, a and beta instead of d. Which
# fields each kernel reads is tested (tests/test_byte_models.py: a field the step reads turns its
# output NaN when poisoned, one it does not leaves it finite).
WINDOW_READS = {
    ("mamba2", False): ("u", "b", "a"),
    ("mamba2", True): ("u", "b", "a"),
    ("gdn", False): ("k", "d", "a"),
    ("gdn", True): ("k", "v", "a", "beta"),
}


def window_read_bytes(op, resolve=False) -> float:
    """fp32 bytes a step reads per window position (all heads of one sequence); ``resolve``: a GDN
    flush that re-solves the window's d's (``WINDOW_READS``)."""
    f = record_fields(op)
    return sum(f[name] for name in WINDOW_READS[op, bool(resolve)])


def record_bytes(op, recompute=True) -> float:
    """fp32 bytes of one token's record written for one sequence (all heads; GDN: v and beta only
    where the policy's fold is the recompute fold)."""
    f = record_fields(op)
    if op == "gdn" and not recompute:
        return f["k"] + f["d"] + f["a"]
    return sum(f.values())


def bytes_conventional(op, B, fmt):
    """A conventional step: the state read and written in ``fmt``, the token's inputs and output."""
    d = state_dims(op)
    return B * (2 * d["H"] * state_bytes(fmt, d["R"], d["C"]) + token_bytes(op))


def bytes_nonflush(op, B, read_fmt, W, T=1):
    """A non-flush ReplaySSM step (T tokens): the read copy, W window records read (``WINDOW_READS``),
    T records written."""
    d = state_dims(op)
    return B * (d["H"] * state_bytes(read_fmt, d["R"], d["C"]) + W * window_read_bytes(op)
                + T * record_bytes(op) + T * token_bytes(op))


def bytes_flush(op, B, upd_fmt, read_fmt, W, T=1, split=True, resolve=None):
    """A flush: the update checkpoint read and written, the read copy written (split), W window records
    read, and for a speculative flush (T > 1) its T drafts' records written. ``resolve``: whether a
    GDN flush re-solves the d's (default: in split mode, the wrappers' rule under the recompute fold;
    a shared flush folds the stored d's)."""
    d = state_dims(op)
    st = d["H"] * (2 * state_bytes(upd_fmt, d["R"], d["C"]) + (state_bytes(read_fmt, d["R"], d["C"]) if split else 0))
    resolve = split if resolve is None else resolve
    drafts = T * record_bytes(op) if T > 1 else 0
    return B * (st + W * window_read_bytes(op, resolve) + drafts + T * token_bytes(op))


def step_bytes(op, kind, B, update="fp32", read=None, W=0, T=1):
    """The bytes model's count for one timed step, from the fields its result row records: ``kind``
    "conventional" (a state stored in ``update``), "nonflush", "flush" or "fla"; ``read`` None is
    shared mode (a non-flush step reads the checkpoint itself, a flush writes no read copy). The one
    map from a step to its bytes: the benchmark's sweeps count what they time with it, and
    ``--recount-bytes`` recounts stored rows with it."""
    if kind == "conventional":
        return bytes_conventional(op, B, update)
    if kind == "nonflush":
        return bytes_nonflush(op, B, read or update, W, T)
    if kind == "flush":
        return bytes_flush(op, B, update, read or update, W, T, split=read is not None)
    if kind == "fla":
        return bytes_fla_step(op, B)
    raise ValueError(f"no bytes model for a {kind!r} step")


def bytes_fla_step(op, B):
    """flash-linear-attention's fused recurrent step: fp32 state read and written, the token's I/O."""
    d = state_dims(op)
    return B * (2 * d["H"] * d["R"] * d["C"] * 4 + token_bytes(op))


# ---------------------------------------------------------------------------------------------
# quantize / dequantize kernels (N elements, M matrices, fp32 source)
# ---------------------------------------------------------------------------------------------
QUANT_BYTES_MODEL = {
    "copy": "read 4N + write 4N",
    "nvfp4 quantize": "read 4N + write N/2 codes + N/16 scales + 4M global scales",
    "nvfp4 dequantize": "read N/2 + N/16 + 4M + write 4N",
    "fp8 quantize/dequantize": "4N + N (fp8 SR quantize too; random bits drawn in-kernel)",
    "fp16/bf16-sr quantize": "read 4N + write 2N (random bits drawn in-kernel)",
}


def quant_bytes(name: str, N: int, M: int) -> int:
    """Bytes one call of the quantizer kernel ``name`` moves (see ``QUANT_BYTES_MODEL``)."""
    if name.startswith("nvfp4"):
        return 4 * N + N // 2 + N // 16 + 4 * M
    if name.startswith("fp8"):
        return 5 * N
    if name.startswith(("fp16", "bf16")):
        return 6 * N
    raise ValueError(f"no bytes model for quantizer kernel {name!r}")


# ---------------------------------------------------------------------------------------------
# teacher-forced scans (each input read once, the output written once, state read + written)
# ---------------------------------------------------------------------------------------------
SCAN_BYTES_MODEL = (
    "GDN:     q, k 2·B·T·Hk·K·2 + v B·T·Hv·V·2 + g, beta 2·B·T·Hv·4 + o B·T·Hv·V·2\n"
    "Mamba-2: x, z 2·B·T·H·P·2 + dt B·T·H·2 + B, C 2·B·T·G·N·2 + y B·T·H·P·2\n"
    "plus the state: read and written once per copy, B·H·R·C·4 each."
)


def scan_bytes(inp, copies: int) -> int:
    """Bytes a scan over ``inp`` (Mamba2Inputs / GDNInputs) moves with ``copies`` fp32 state copies."""
    el = lambda t: t.numel() * t.element_size()
    if inp.kind == "gdn":
        Bsz, _, HV, V = inp.v.shape
        K = inp.q.shape[-1]
        io = el(inp.q) + el(inp.k) + el(inp.v) + el(inp.g) + el(inp.beta) + el(inp.v)
        state = Bsz * HV * V * K * 4
    else:
        Bsz, _, H, P = inp.x.shape
        N = inp.B.shape[-1]
        io = el(inp.x) + el(inp.z) + el(inp.dt) + el(inp.B) + el(inp.C) + el(inp.x)
        state = Bsz * H * P * N * 4
    return io + 2 * copies * state
