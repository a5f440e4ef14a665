"""The recurrence all three SSMs share, per (sequence, head), written once.

State S is [R, C] (batched: [B, H, R, C]); the last axis C is contiguous and reduced by S·q.
Every token t brings a log decay ``a_t`` ([Ca] with Ca = 1 for a scalar decay per head, Ca = C for
KDA's per-channel decay along C), a key ``k_t`` [C], a query ``q_t`` [C] and a vector ``u_t`` [R]:

    S_t = S_{t-1} diag(e^{a_t}) + u_t k_tᵀ,        y_t = S_t q_t

Mamba-2 gives ``u_t`` directly (dt·x). The delta rule (GDN, KDA) makes it depend on the state:

    u_t = d_t = β_t (v_t − S_{t-1} diag(e^{a_t}) k_t)

Window closed form. With a checkpoint S₀ and n records (a_j, k_j, u_j), j = 1..n, and the cumulative
log decay c_j = a_1 + … + a_j (c₀ = 0):

    S_n = S₀ diag(e^{c_n}) + Σ_j u_j (e^{c_n − c_j} ⊙ k_j)ᵀ                        (the fold)

and the output at any reference position m (records 1..m, cumulative decay c_m), for a vector x:

    S_m x = S₀ (e^{c_m} ⊙ x) + Σ_{j≤m} u_j ((e^{c_m − c_j} ⊙ k_j)·x)                (output-only)

which never forms S_m. The delta rule's d_j is the same readout with x = k_j over records i < j:

    d_j = β_j (v_j − [S₀ (e^{c_j} ⊙ k_j) + Σ_{i<j} d_i ((e^{c_j − c_i} ⊙ k_i)·k_j)])

In matrix form over a chunk this is a unit lower-triangular solve (I + A) d = β ⊙ (V − …), which is
what ``chunk_forward`` (the chunked prefill) does. Decays are applied as ``exp`` of differences of
cumulative sums (never as ratios), so strongly decaying heads cannot overflow. Cumulative sums are
taken left to right in the compute dtype (``cumulative``).

Tensor layout of a batch of tokens (``Prepared``): a [B,T,H,Ca], k/q [B,T,H,C], u/v [B,T,H,R],
beta [B,T,H]. Single tokens drop the T axis.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch


@dataclass
class Prepared:
    """A layer's inputs in the common per-head form (see the module docstring).

    kind:  "mamba2" | "gdn" | "kda"
    a:     [B, T, H, Ca] log decay (Ca = 1 or C)
    k, q:  [B, T, H, C] keys and queries, expanded to the state's heads (groups / GVA resolved)
    u:     [B, T, H, R] (Mamba-2) or None
    v:     [B, T, H, R] (GDN/KDA) or None
    beta:  [B, T, H]    (GDN/KDA) or None
    skip:  [B, T, H, R] or None, added to S·q (Mamba-2's D·x)
    gate:  [B, T, H, R] or None, multiplies the result (Mamba-2's silu(z))
    out_dtype: dtype of the returned y (the inputs' dtype)
    """

    kind: str
    a: torch.Tensor
    k: torch.Tensor
    q: torch.Tensor
    u: torch.Tensor | None
    v: torch.Tensor | None
    beta: torch.Tensor | None
    skip: torch.Tensor | None
    gate: torch.Tensor | None
    out_dtype: torch.dtype

    @property
    def delta(self) -> bool:
        """True for the delta rule (u depends on the state)."""
        return self.v is not None

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """(B, T, H, R, C)."""
        B, T, H, C = self.k.shape
        R = (self.v if self.delta else self.u).shape[-1]
        return B, T, H, R, C

    @property
    def dtype(self) -> torch.dtype:
        return self.k.dtype

    def slice(self, t0: int, t1: int) -> Prepared:
        """Tokens t0..t1-1."""
        cut = lambda x: None if x is None else x[:, t0:t1]
        return replace(self, a=cut(self.a), k=cut(self.k), q=cut(self.q), u=cut(self.u), v=cut(self.v),
                       beta=cut(self.beta), skip=cut(self.skip), gate=cut(self.gate))

    def token(self, t: int) -> dict[str, torch.Tensor]:
        """Token t as a dict of tensors without the T axis (keys a, k, q and u or v, beta)."""
        out = {"a": self.a[:, t], "k": self.k[:, t], "q": self.q[:, t]}
        if self.delta:
            out["v"] = self.v[:, t]
            out["beta"] = self.beta[:, t]
        else:
            out["u"] = self.u[:, t]
        return out

    def finish(self, y_state: torch.Tensor) -> torch.Tensor:
        """y = (S·q + skip) * gate, in the inputs' dtype. y_state: [B, T, H, R]."""
        y = y_state if self.skip is None else y_state + self.skip
        if self.gate is not None:
            y = y * self.gate
        return y.to(self.out_dtype)


def cumulative(a: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """Cumulative log decay ``c_j = fl(c_{j-1} + a_j)``, summed left to right in a's dtype.

    Written as an explicit sequential sum (not ``torch.cumsum``, whose accumulation order and
    precision differ between CPU and GPU and with the length) so that the prefix c_j of a window is
    the same bits however many records follow it: every engine can reproduce it exactly.
    """
    if a.shape[dim] == 0:
        return a.clone()
    parts = a.unbind(dim)
    out = [parts[0]]
    for x in parts[1:]:
        out.append(out[-1] + x)
    return torch.stack(out, dim)


def per_token(fn, x: torch.Tensor) -> torch.Tensor:
    """Apply an elementwise transcendental ``fn`` (softplus, silu, rsqrt...) token by token.

    Why: torch's CPU kernels evaluate the vectorised body and the scalar tail of a flat buffer with
    different code (e.g. Sleef vs libm), which can differ in the last bit; on a [B, T, ...] tensor
    the tail position depends on T, so a stream cut into segments would not reproduce one run bit
    for bit. Per-token calls see shapes independent of T. x: [B, T, ...].
    """
    return torch.stack([fn(x[:, t]) for t in range(x.shape[1])], 1) if x.shape[1] else fn(x)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; everything else computes in float32 (docs/design.md §4: updates in fp32)."""
    if not dtype.is_floating_point:
        raise TypeError(f"layer inputs must be floating point, got {dtype}")
    return torch.float64 if dtype == torch.float64 else torch.float32


def _matvec(S: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """S [..., R, C] · x [..., C] → [..., R].

    Multiply-and-sum rather than a (batched) matmul: the decode path's products are tiny, and BLAS
    calls on them cost ~10 µs alone but tens of ms when the OpenMP threads contend for the CPU.
    """
    return (S * x.unsqueeze(-2)).sum(-1)


def step(S: torch.Tensor, tok: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One conventional decode step in the compute dtype.

    S: [B, H, R, C]; tok: a [B,H,Ca], k/q [B,H,C], u or (v [B,H,R], beta [B,H]).
    Returns (S_t [B,H,R,C], y_t = S_t q_t [B,H,R], u_t [B,H,R]).
    """
    Sd = S * tok["a"].exp().unsqueeze(-2)
    if "v" in tok:
        u = tok["beta"].unsqueeze(-1) * (tok["v"] - _matvec(Sd, tok["k"]))
    else:
        u = tok["u"]
    S_new = Sd + u.unsqueeze(-1) * tok["k"].unsqueeze(-2)
    return S_new, _matvec(S_new, tok["q"]), u


def readout(S0: torch.Tensor, k: torch.Tensor, u: torch.Tensor, c: torch.Tensor, c_ref: torch.Tensor,
            x: torch.Tensor) -> torch.Tensor:
    """Output-only form ``S₀ (e^{c_ref} ⊙ x) + Σ_j u_j ((e^{c_ref − c_j} ⊙ k_j)·x)``.

    S0: [B,H,R,C]; k: [B,n,H,C]; u: [B,n,H,R]; c: [B,n,H,Ca] cumulative log decay of the n records;
    c_ref: [B,H,Ca] cumulative log decay at the reference position; x: [B,H,C]. Returns [B,H,R].
    n may be 0.
    """
    y = _matvec(S0, c_ref.exp() * x)
    if k.shape[1]:
        w = ((c_ref.unsqueeze(1) - c).exp() * k * x.unsqueeze(1)).sum(-1)  # [B, n, H]
        y = y + (w.unsqueeze(-1) * u).sum(1)
    return y


def delta(S0: torch.Tensor, k: torch.Tensor, u: torch.Tensor, c: torch.Tensor, tok: dict[str, torch.Tensor],
          c_tok: torch.Tensor) -> torch.Tensor:
    """The delta rule's ``d = β (v − S_{prev} diag(e^{a}) k)`` for a token after n window records.

    S0, k [B,n,H,C], u [B,n,H,R], c [B,n,H,Ca]: the checkpoint and the records before the token;
    tok: the token (k, v, beta); c_tok: [B,H,Ca] cumulative log decay including the token's own a.
    Returns d [B,H,R].
    """
    return tok["beta"].unsqueeze(-1) * (tok["v"] - readout(S0, k, u, c, c_tok, tok["k"]))


def fold(S0: torch.Tensor, k: torch.Tensor, u: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """The fold ``S_n = S₀ diag(e^{c_n}) + Σ_j u_j (e^{c_n − c_j} ⊙ k_j)ᵀ`` (returns S0 itself if n = 0).

    S0: [B,H,R,C]; k: [B,n,H,C]; u: [B,n,H,R]; c: [B,n,H,Ca]. Returns [B,H,R,C].
    """
    if not k.shape[1]:
        return S0
    c_n = c[:, -1]
    kd = (c_n.unsqueeze(1) - c).exp() * k
    return S0 * c_n.exp().unsqueeze(-2) + (u.unsqueeze(-1) * kd.unsqueeze(-2)).sum(1)


def window_deltas(S0: torch.Tensor, a: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  beta: torch.Tensor) -> torch.Tensor:
    """The d's of a window recomputed one by one from checkpoint S0 with ``delta`` (the arithmetic a
    decode step uses, so a shared-mode recompute equals the buffered d's bit for bit).

    a [B,n,H,Ca], k [B,n,H,C], v [B,n,H,R], beta [B,n,H]. Returns d [B,n,H,R].
    """
    c = cumulative(a)
    ds: list[torch.Tensor] = []
    for j in range(k.shape[1]):
        u_prev = torch.stack(ds, 1) if ds else v[:, :0]
        tok = {"k": k[:, j], "v": v[:, j], "beta": beta[:, j]}
        ds.append(delta(S0, k[:, :j], u_prev, c[:, :j], tok, c[:, j]))
    return torch.stack(ds, 1) if ds else v[:, :0]


def _decay_matrix(c: torch.Tensor) -> torch.Tensor:
    """E[b, j, i, h, :] = e^{c_j − c_i} for i ≤ j, 0 above the diagonal. c: [B,n,H,Ca]."""
    n = c.shape[1]
    causal = torch.ones(n, n, dtype=torch.bool, device=c.device).tril()
    diff = c.unsqueeze(2) - c.unsqueeze(1)
    return diff.masked_fill(~causal[None, :, :, None, None], float("-inf")).exp()


def window_outputs(S0: torch.Tensor, k: torch.Tensor, u: torch.Tensor, c: torch.Tensor,
                   q: torch.Tensor) -> torch.Tensor:
    """The output-only form at every position of a window at once (speculative verify of T drafts):
    ``O = S₀ (e^{c} ⊙ Q) + M U`` with ``M[j, i] = (e^{c_j − c_i} ⊙ k_i)·q_j`` for i ≤ j (docs/design.md §3's
    ``S₀ Q D + U (W ⊙ KᵀQ)``).

    S0 [B,H,R,C]; k, q [B,n,H,C]; u [B,n,H,R]; c [B,n,H,Ca]. Returns [B,n,H,R]; equals ``readout`` at
    each position to rounding.
    """
    kq = (_decay_matrix(c) * k.unsqueeze(1) * q.unsqueeze(2)).sum(-1)     # [B,j,i,H]
    return torch.einsum("bhrc,bjhc->bjhr", S0, c.exp() * q) + torch.einsum("bjih,bihr->bjhr", kq, u)


def chunk_forward(S0: torch.Tensor, p: Prepared) -> tuple[torch.Tensor, torch.Tensor]:
    """Parallel form over one chunk of n tokens (all of ``p``): returns (y_state [B,n,H,R], S_n).

    The delta rule's d's come from the unit lower-triangular solve (I + A) d = β ⊙ (v − S₀(e^{c} ⊙ k))
    with A[j, i] = β_j (e^{c_j − c_i} ⊙ k_i)·k_j for i < j; outputs from ``window_outputs``.
    """
    n = p.k.shape[1]
    c = cumulative(p.a)                                              # [B,n,H,Ca]
    if p.delta:
        kk = (_decay_matrix(c) * p.k.unsqueeze(1) * p.k.unsqueeze(2)).sum(-1)   # [B,j,i,H]
        A = kk.permute(0, 3, 1, 2) * p.beta.permute(0, 2, 1).unsqueeze(-1)     # [B,H,j,i]
        A = A * torch.ones(n, n, dtype=torch.bool, device=c.device).tril(-1)   # strictly lower
        s0k = torch.einsum("bhrc,bjhc->bjhr", S0, c.exp() * p.k)
        rhs = (p.beta.unsqueeze(-1) * (p.v - s0k)).permute(0, 2, 1, 3)        # [B,H,n,R]
        eye = torch.eye(n, dtype=A.dtype, device=A.device)
        u = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True).permute(0, 2, 1, 3)
    else:
        u = p.u
    return window_outputs(S0, p.k, u, c, p.q), fold(S0, p.k, u, c)


def recurrent(p: Prepared, S0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Conventional token-by-token recurrence without any quantization: (y_state [B,T,H,R], S_T)."""
    ys = []
    S = S0
    for t in range(p.k.shape[1]):
        S, y, _ = step(S, p.token(t))
        ys.append(y)
    B, T, H, R, _ = p.shape
    return (torch.stack(ys, 1) if ys else S0.new_zeros(B, 0, H, R)), S


def chunked(p: Prepared, S0: torch.Tensor, chunk_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked (prefill) form: ``chunk_forward`` over consecutive chunks. (y_state [B,T,H,R], S_T)."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    ys = []
    S = S0
    T = p.k.shape[1]
    for t0 in range(0, T, chunk_size):
        y, S = chunk_forward(S, p.slice(t0, min(T, t0 + chunk_size)))
        ys.append(y)
    B, _, H, R, _ = p.shape
    return (torch.cat(ys, 1) if ys else S0.new_zeros(B, 0, H, R)), S


def zeros_state(p: Prepared) -> torch.Tensor:
    B, _, H, R, C = p.shape
    return torch.zeros(B, H, R, C, dtype=p.dtype, device=p.k.device)


def check_state(S: torch.Tensor, p: Prepared, name: str = "initial_state") -> torch.Tensor:
    """Validate a [B, H, R, C] state against the inputs and cast it to the compute dtype."""
    B, _, H, R, C = p.shape
    if not isinstance(S, torch.Tensor) or tuple(S.shape) != (B, H, R, C):
        raise ValueError(f"{name} must have shape [B, H, R, C] = {[B, H, R, C]} for these {p.kind} inputs, "
                         f"got {list(getattr(S, 'shape', []))}")
    if not S.dtype.is_floating_point:
        raise TypeError(f"{name} must be floating point, got {S.dtype}")
    return S.to(dtype=p.dtype, device=p.k.device)
