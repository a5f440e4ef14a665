"""Torch references of the recurrences (precision_lab.recurrences): the step, chunked and window
closed forms agree in float64, and the grouped / GVA head mapping matches a naive per-head loop."""
import pytest
import torch

from precision_lab.layer import GDNInputs, KDAInputs, Mamba2Inputs, random_inputs
from precision_lab.recurrences import _core, gdn, kda, mamba2, prepare

MODULES = {"mamba2": mamba2, "gdn": gdn, "kda": kda}
KINDS = list(MODULES)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


# ---------------------------------------------------------------------------------------------
# Naive references written from docs/design.md §3 directly (per sequence and head, plain matrices), so the
# batched/grouped code is checked against something that shares none of its indexing.
# ---------------------------------------------------------------------------------------------
def naive_mamba2(inp: Mamba2Inputs, S0=None):
    Bsz, T, H, P = inp.x.shape
    G, N = inp.B.shape[2:]
    y = torch.zeros(Bsz, T, H, P, dtype=torch.float64)
    S_out = torch.zeros(Bsz, H, P, N, dtype=torch.float64)
    for b in range(Bsz):
        for h in range(H):
            g = h // (H // G)
            S = torch.zeros(P, N, dtype=torch.float64) if S0 is None else S0[b, h].clone()
            for t in range(T):
                dt = torch.nn.functional.softplus(inp.dt[b, t, h] + inp.dt_bias[h])
                S = torch.exp(inp.A[h] * dt) * S + dt * torch.outer(inp.x[b, t, h], inp.B[b, t, g])
                out = S @ inp.C[b, t, g] + inp.D[h] * inp.x[b, t, h]
                y[b, t, h] = out * torch.nn.functional.silu(inp.z[b, t, h])
            S_out[b, h] = S
    return y, S_out


def naive_delta(inp, kda_decay: bool):
    """GDN/KDA in the (I − β k kᵀ) form of docs/design.md §3 (not the d-form the library uses)."""
    Bsz, T, Hk, K = inp.q.shape
    Hv, V = inp.v.shape[2:]
    y = torch.zeros(Bsz, T, Hv, V, dtype=torch.float64)
    S_out = torch.zeros(Bsz, Hv, V, K, dtype=torch.float64)
    eye = torch.eye(K, dtype=torch.float64)
    for b in range(Bsz):
        for h in range(Hv):
            hk = h // (Hv // Hk)
            S = torch.zeros(V, K, dtype=torch.float64)
            for t in range(T):
                q = inp.q[b, t, hk] / inp.q[b, t, hk].norm()
                k = inp.k[b, t, hk] / inp.k[b, t, hk].norm()
                beta = inp.beta[b, t, h]
                decay = torch.diag(torch.exp(inp.g[b, t, h])) if kda_decay else torch.exp(inp.g[b, t, h]) * eye
                S = S @ decay @ (eye - beta * torch.outer(k, k)) + beta * torch.outer(inp.v[b, t, h], k)
                y[b, t, h] = S @ (q * K ** -0.5)
            S_out[b, h] = S
    return y, S_out


def test_mamba2_matches_naive_grouped_reference():
    inp = random_inputs("mamba2", batch=2, tokens=9, heads=6, groups=3, rows=4, cols=8, seed=11)
    inp.dt_bias = torch.randn(6, dtype=torch.float64) * 0.1
    y, S = mamba2.decode(inp)
    y_ref, S_ref = naive_mamba2(inp)
    assert rel(y, y_ref) < 1e-13 and rel(S, S_ref) < 1e-13


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_delta_rule_matches_naive_gva_reference(kind):
    inp = random_inputs(kind, batch=2, tokens=9, heads=4, groups=2, rows=4, cols=8, seed=12)
    # qk_l2norm uses rsqrt(Σx² + 1e-6) like HF/fla; the naive form divides by the exact norm
    y, S = MODULES[kind].decode(inp)
    y_ref, S_ref = naive_delta(inp, kind == "kda")
    assert rel(y, y_ref) < 1e-6 and rel(S, S_ref) < 1e-6
    inp.qk_l2norm = False
    inp.q = inp.q / inp.q.norm(dim=-1, keepdim=True)
    inp.k = inp.k / inp.k.norm(dim=-1, keepdim=True)
    y, S = MODULES[kind].decode(inp)
    assert rel(y, y_ref) < 1e-13 and rel(S, S_ref) < 1e-13


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_chunked_prefill_equals_recurrent(kind, chunk):
    inp = random_inputs(kind, batch=2, tokens=75, seed=3)
    S0 = torch.randn(2, 4, 8, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    y1, S1 = MODULES[kind].decode(inp, initial_state=S0)
    y2, S2 = MODULES[kind].chunked_prefill(inp, initial_state=S0, chunk_size=chunk)
    assert rel(y2, y1) < 1e-13 and rel(S2, S1) < 1e-13


@pytest.mark.parametrize("kind", KINDS)
def test_window_closed_form_fold_and_output_only(kind):
    """fold / readout / window_deltas over a window equal the step-by-step states and outputs."""
    p = prepare(random_inputs(kind, batch=2, tokens=16, seed=4))
    S0 = torch.randn(2, 4, 8, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    S, us, states, ys = S0, [], [], []
    for t in range(16):
        S, y, u = _core.step(S, p.token(t))
        us.append(u)
        states.append(S)
        ys.append(y)
    u = torch.stack(us, 1)
    c = _core.cumulative(p.a)
    for m in (1, 5, 16):   # output-only evaluation at several window positions
        y_m = _core.readout(S0, p.k[:, :m], u[:, :m], c[:, :m], c[:, m - 1], p.q[:, m - 1])
        assert rel(y_m, ys[m - 1]) < 1e-13
        assert rel(_core.fold(S0, p.k[:, :m], u[:, :m], c[:, :m]), states[m - 1]) < 1e-13
    y_all = _core.window_outputs(S0, p.k, u, c, p.q)       # all positions at once (speculative verify)
    assert rel(y_all, torch.stack(ys, 1)) < 1e-13
    if p.delta:
        assert rel(_core.window_deltas(S0, p.a, p.k, p.v, p.beta), u) < 1e-13


def test_cumulative_is_left_to_right_and_length_independent():
    a = torch.randn(3, 20, 2, 1)
    c = _core.cumulative(a)
    acc = a[:, 0]
    for j in range(1, 20):
        acc = acc + a[:, j]
    assert torch.equal(c[:, -1], acc)
    assert torch.equal(_core.cumulative(a[:, :7]), c[:, :7])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_output_dtype_and_compute_precision(dtype):
    """y comes back in the inputs' dtype; half inputs compute in float32 (close to the float64 run)."""
    inp64 = random_inputs("gdn", batch=1, tokens=20, seed=7)
    inp = random_inputs("gdn", batch=1, tokens=20, seed=7, dtype=dtype)
    y, S = gdn.decode(inp)
    assert y.dtype == dtype and S.dtype == torch.float32
    y64, _ = gdn.decode(GDNInputs(**{k: (v.to(dtype).double() if isinstance(v, torch.Tensor) else v)
                                    for k, v in vars(inp64).items()}))
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert rel(y.double(), y64) < tol


def test_shape_errors_are_clear():
    m = random_inputs("mamba2", batch=1, tokens=4, heads=4, groups=2)
    bad = Mamba2Inputs(m.x, m.dt, m.A, m.B[:, :, :1].expand(1, 4, 3, 16), m.C[:, :, :1].expand(1, 4, 3, 16))
    with pytest.raises(ValueError, match="multiple of the groups"):
        mamba2.prepare(bad)
    with pytest.raises(ValueError, match="dt must be"):
        mamba2.prepare(Mamba2Inputs(m.x, m.dt[:, :3], m.A, m.B, m.C))
    k = random_inputs("kda", batch=1, tokens=4)
    with pytest.raises(ValueError, match="g must be"):
        kda.prepare(KDAInputs(k.q, k.k, k.v, k.g[..., 0], k.beta))
    g = random_inputs("gdn", batch=1, tokens=4, heads=4, groups=2)
    g.v = g.v[:, :, :3]
    g.g, g.beta = g.g[:, :, :3], g.beta[:, :, :3]
    with pytest.raises(ValueError, match="multiple of key heads"):
        gdn.prepare(g)
    with pytest.raises(ValueError, match="initial_state must have shape"):
        mamba2.decode(m, initial_state=torch.zeros(1, 4, 8, 8))
