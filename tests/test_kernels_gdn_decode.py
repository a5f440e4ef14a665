"""GDN decode-step kernels (kernels/gdn/decode.py) against their torch references.

Exact (byte for byte) where the arithmetic is the same: with g = 0 (α = e^0 = 1), no q/k
normalisation and one-hot keys distinct within the window, S·k picks one column, k_i·k_j is 0 or 1
and each element of the (closed-form) fold receives one term, so both sides round identically, so stored codes (SR bits included) must agree bit for bit. Random inputs
are compared by per-tensor relative RMS error. GVA: 4 value heads over 2 key heads.
"""
import pytest
import torch
from precision_lab.kernels.decode_state import PackedState
from precision_lab.kernels.gdn.decode import (
    CONVENTIONAL_FORMAT_SHAPES,
    GDNRecords,
    gdn_conventional_step,
    gdn_replay_step,
)
from precision_lab.kernels.gdn.decode_reference import (
    gdn_conventional_step_ref,
    gdn_replay_step_ref,
    store,
)
from precision_lab.quant.philox import COPY_READ, COPY_UPDATE

from precision_lab.policy import StatePolicy
from tests._decode_kernel_checks import (
    LaunchRecorder,
    assert_same_codes,
    conventional_format_cases,
    gather,
    rel,
    seeded_randn,
    skip_without_pdl,
    stub_overlapped_launches,
    with_rule_both_ways,
)
from tests._decode_kernel_checks import state_cols as k_for

HK, HV, V = 2, 4, 12




def inputs(B, T, K, device, exact=False, seed=0, Hk=HK, Hv=HV):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    if exact:  # one-hot keys, distinct along the window: every fold sum has one nonzero term
        idx = torch.stack([torch.randperm(K, generator=g)[:T] for _ in range(B * Hk)]).view(B, Hk, T)
        k = torch.nn.functional.one_hot(idx.transpose(1, 2), K).float()
    else:
        k = r(B, T, Hk, K)
    d = dict(q=r(B, T, Hk, K), k=k, v=r(B, T, Hv, V),
             g=torch.zeros(B, T, Hv) if exact else -0.5 * torch.rand(B, T, Hv, generator=g),
             beta=torch.rand(B, T, Hv, generator=g))
    return {key: val.to(device) for key, val in d.items()}


def pool_of(S0, fmt, slots, n_slots, seed, layer, seq_ids, copy):
    """Pool with S0 [B, ...] at ``slots``, its slot axis a strided view of a bigger allocation."""
    Bsz = S0.shape[0]
    ref = store(S0.cpu(), fmt, seed=seed, layer=layer, seq_ids=seq_ids.cpu(),
                events=torch.zeros(Bsz, dtype=torch.int64), copy=copy)
    pool = PackedState.empty(fmt, n_slots, S0.shape[1], S0.shape[2], S0.shape[3], device=S0.device)
    live = slots >= 0
    for name in ("data", "scale", "gscale"):
        t = getattr(pool, name)
        if t is not None:
            big = torch.zeros((n_slots, 2) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
            t = big[:, 1]
            t[slots[live]] = getattr(ref, name).to(t.device)[live.cpu()]
            setattr(pool, name, t)
    return pool, ref.dequantize()





@pytest.mark.parametrize("fmt,shape", conventional_format_cases(
    ["fp32", "bf16", "fp16-sr", "bf16-sr", "fp8e4m3-sr", "nvfp4-sr"], CONVENTIONAL_FORMAT_SHAPES))
def test_conventional_step_exact_codes(fmt, shape, device):
    """Stored codes equal the reference bit for bit, also at the format's own large-batch launch
    shape (rows, warps) where it has one."""
    K = k_for([fmt])
    slots = torch.tensor([2, -1, 0], device=device)
    seq_ids = torch.tensor([4, 1, 8])
    inp = {key: val[:, 0] for key, val in inputs(3, 1, K, device, exact=True).items()}
    S0 = seeded_randn(3, HV, V, K, seed=41, device=device)
    pool, S0q = pool_of(S0, fmt, slots, 4, 9, 5, seq_ids, COPY_UPDATE)
    untouched = pool.data[[1, 3]].clone()
    out = torch.full((3, HV, V), float("nan"), device=device)
    o = gdn_conventional_step(pool, slots, inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], qk_l2norm=False,
                              seq_ids=seq_ids.to(device), events=3, seed=9, layer=5, out=out,
                              block_r=shape[0], num_warps=shape[1])
    o_ref, S_ref = gdn_conventional_step_ref(S0q, *(inp[k].cpu() for k in ("q", "k", "v", "g", "beta")),
                                             qk_l2norm=False)
    live = (slots >= 0).cpu()
    assert_same_codes(gather(pool, slots), store(S_ref[live], fmt, seed=9, layer=5, seq_ids=seq_ids[live],
                                                 events=torch.full((2,), 3), copy=COPY_UPDATE))
    assert not torch.isnan(o).any()
    assert rel(o.cpu()[live], o_ref[live]) < 1e-6
    assert torch.equal(o[1].cpu(), torch.zeros(HV, V))
    assert torch.equal(pool.data[[1, 3]], untouched)


def test_conventional_step_random(device):
    K = 20
    inp = {key: val[:, 0] for key, val in inputs(1, 1, K, device).items()}
    slots = torch.tensor([0], device=device)
    S0 = seeded_randn(1, HV, V, K, seed=42, device=device)
    pool, S0q = pool_of(S0, "fp32", slots, 1, 0, 0, torch.tensor([0]), COPY_UPDATE)
    o = gdn_conventional_step(pool, slots, *(inp[k] for k in ("q", "k", "v", "g", "beta")))
    o_ref, S_ref = gdn_conventional_step_ref(S0q, *(inp[k].cpu() for k in ("q", "k", "v", "g", "beta")))
    assert rel(o.cpu(), o_ref) < 1e-6
    assert rel(gather(pool, slots).dequantize(), S_ref) < 1e-6


def _replay_setup(device, upd_fmt, read_fmt, W, T, exact, recompute=True, start=6, K=None, g=None):
    """g: every record's and new token's log-decay, if given (else the inputs' own)."""
    K = K or k_for([upd_fmt, read_fmt])
    ring, Bsz = 16, 3
    slots = torch.tensor([1, 2, -1], device=device)
    seq_ids = torch.tensor([3, 2, 1])
    hist_in = inputs(Bsz, W, K, device, exact=exact, seed=1)
    new = inputs(Bsz, T, K, device, exact=exact, seed=2)
    if g is not None:
        hist_in["g"].fill_(g)
        new["g"].fill_(g)
    S0 = 0.5 * seeded_randn(Bsz, HV, V, K, seed=43, device=device)
    upd, updq = pool_of(S0, upd_fmt, slots, 3, 4, 2, seq_ids, COPY_UPDATE)
    rd, rdq = pool_of(S0, read_fmt, slots, 3, 4, 2, seq_ids, COPY_READ)
    # history: what earlier non-flush steps wrote (the reference's records, from the read copy)
    hin = {key: val.cpu() for key, val in hist_in.items()}
    empty = {"k": torch.zeros(Bsz, 0, HV, K), "d": torch.zeros(Bsz, 0, HV, V), "v": torch.zeros(Bsz, 0, HV, V),
             "a": torch.zeros(Bsz, 0, HV), "beta": torch.zeros(Bsz, 0, HV)}
    h = empty if W == 0 else gdn_replay_step_ref(updq, rdq, empty, hin["q"], hin["k"], hin["v"], hin["g"],
                                                 hin["beta"], qk_l2norm=not exact)[1]
    rec = GDNRecords(3, ring, HK, HV, V, K, device=device)
    for t in (rec.k, rec.d, rec.v, rec.a, rec.beta):
        t.fill_(float("nan"))
    for b in range(Bsz):
        s = int(slots[b])
        if s < 0:
            continue
        for j in range(W):
            q = (start + j) % ring
            rec.k[s, q] = h["k"][b, j, ::HV // HK].to(device)
            rec.d[s, q], rec.v[s, q] = h["d"][b, j].to(device), h["v"][b, j].to(device)
            rec.a[s, q], rec.beta[s, q] = h["a"][b, j].to(device), h["beta"][b, j].to(device)
    return dict(slots=slots, seq_ids=seq_ids, new=new, upd=upd, updq=updq, rd=rd, rdq=rdq, hist=h, rec=rec,
                start=torch.full((Bsz,), start, dtype=torch.int32, device=device),
                wlen=torch.full((Bsz,), W, dtype=torch.int32, device=device))


NEW = ("q", "k", "v", "g", "beta")


# fused: the one-launch form of a one-token step (True) or the scores kernel + step kernel (False);
# verify steps (T > 1) have only the two-launch form. fp4: the NVFP4 element decode (``fp4_decode``;
# "ptx" is compiled on a GPU only, the interpreter runs the fp16-pattern decode for both)
@pytest.mark.parametrize("read_fmt,T,fused,fp4", [
    ("fp32", 1, False, "fp16"), ("fp32", 1, True, "fp16"), ("bf16", 3, False, "fp16"), ("fp8e4m3", 2, False, "fp16"),
    ("nvfp4", 4, False, "fp16"), ("fp8e4m3", 1, False, "fp16"), ("fp8e4m3", 1, True, "fp16"),
    ("nvfp4", 1, False, "fp16"), ("nvfp4", 1, True, "fp16"), ("nvfp4", 1, False, "ptx"), ("nvfp4", 1, True, "ptx"),
    ("bf16", 1, True, "fp16")])
def test_replay_nonflush_and_verify(read_fmt, T, fused, fp4, device):
    """Output-only step and verify: reads S0·q and S0·k from the read copy, writes only o and records."""
    s = _replay_setup(device, "fp32", read_fmt, W=5, T=T, exact=False)
    n = s["new"]
    before = [t.clone() for t in (s["upd"].data, s["rd"].data)]
    out = torch.full((3, T, HV, V), float("nan"), device=device)
    o = gdn_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], *(n[k] for k in NEW),
                        seq_ids=s["seq_ids"].to(device), out=out, block_r=8,  # two row blocks per head
                        fused_scores=fused, fp4_decode=fp4)
    o_ref, new, _ = gdn_replay_step_ref(s["updq"], s["rdq"], s["hist"], *(n[k].cpu() for k in NEW))
    live = (s["slots"] >= 0).cpu()
    assert not torch.isnan(o).any()
    assert rel(o.cpu()[live], o_ref[live]) < 1e-5
    assert torch.equal(o[2].cpu(), torch.zeros(T, HV, V))
    assert torch.equal(s["upd"].data, before[0]) and torch.equal(s["rd"].data, before[1])
    for b in (0, 1):
        sl = int(s["slots"][b])
        for t in range(T):
            q = (6 + 5 + t) % 16
            assert rel(s["rec"].d[sl, q].cpu(), new["d"][b, t]) < 1e-5
            assert rel(s["rec"].k[sl, q].cpu(), new["k"][b, t, ::HV // HK]) < 1e-6
            assert torch.equal(s["rec"].v[sl, q].cpu(), new["v"][b, t])


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("qk_dtype", [torch.float32, torch.bfloat16])
def test_replay_nonflush_nvfp4_mma(fused, qk_dtype, device):
    """``fp4_decode="mma"`` (the NVFP4 products on tensor cores) in the T = 1 non-flush step, both launch
    forms, with the launch's own row block (16 rows for V = 12: 4 of them padding), against the
    reference and against ``fp4_decode="fp16"`` on the same inputs. S q̃ and S k come from one
    product: the two-launch form reads the normalised fp32 copies (two fp16 parts each), the
    one-launch form the raw q, k (bf16: one part)."""
    s = _replay_setup(device, "fp32", "nvfp4", W=5, T=1, exact=False)
    n = dict(s["new"], q=s["new"]["q"].to(qk_dtype), k=s["new"]["k"].to(qk_dtype))
    before = [t.clone() for t in (s["upd"].data, s["rd"].data)]
    outs = {}
    for fp4 in ("fp16", "mma"):  # (both write the same record: the window is not advanced)
        out = torch.full((3, 1, HV, V), float("nan"), device=device)
        outs[fp4] = gdn_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"],
                                    *(n[k] for k in NEW), seq_ids=s["seq_ids"].to(device), out=out,
                                    fused_scores=fused, fp4_decode=fp4).cpu()
    o_ref, _, _ = gdn_replay_step_ref(s["updq"], s["rdq"], s["hist"], *(n[k].cpu() for k in NEW))
    live = (s["slots"] >= 0).cpu()
    assert not torch.isnan(outs["mma"]).any()
    assert rel(outs["mma"][live], o_ref[live]) < 1e-5
    assert rel(outs["mma"][live], outs["fp16"][live]) < 1e-5
    assert torch.equal(outs["mma"][2], torch.zeros(1, HV, V))
    assert torch.equal(s["upd"].data, before[0]) and torch.equal(s["rd"].data, before[1])


# block_r: an explicit row block, which is never a small grid (``_small_grid``): the one-launch flush
# then takes its token's inputs after the fold, as at batches 2-8 of the real shapes
@pytest.mark.parametrize("upd_fmt,read_fmt,T,fold_new,recompute,fused,block_r", [
    ("fp32", "fp32", 1, True, True, False, None), ("fp32", "fp32", 1, True, True, True, None),
    ("fp32", "fp32", 1, True, True, True, 8),
    ("fp16-sr", "nvfp4", 1, True, False, False, None), ("fp16-sr", "nvfp4", 1, True, False, True, None),
    ("bf16-sr", "fp8e4m3", 3, False, True, False, None), ("fp8e4m3-sr", "nvfp4-sr", 2, False, False, False, None),
])
def test_replay_flush_exact_codes(upd_fmt, read_fmt, T, fold_new, recompute, fused, block_r, device):
    _flush_exact_codes(upd_fmt, read_fmt, T, fold_new, recompute, fused, device, block_r=block_r)


# 64 state columns: the flush stores its column quarters one by one (16 columns: whole SR groups and
# NVFP4 blocks, store_state4), which the 32 columns above give NVFP4 only through the joined tile; the
# buffered fold of the last case runs as products (``_fold_product``: quarters of 16 columns)
@pytest.mark.parametrize("upd_fmt,read_fmt,T,recompute", [
    ("fp16-sr", "nvfp4", 1, True), ("fp8e4m3-sr", "nvfp4-sr", 1, False), ("nvfp4-sr", "bf16-sr", 1, True),
    ("fp16-sr", "nvfp4", 2, True), ("fp32", "fp32", 1, False)])
def test_replay_flush_exact_codes_column_quarters(upd_fmt, read_fmt, T, recompute, device):
    _flush_exact_codes(upd_fmt, read_fmt, T, T == 1, recompute, False, device, K=64)


def _flush_exact_codes(upd_fmt, read_fmt, T, fold_new, recompute, fused, device, K=None, block_r=None):
    s = _replay_setup(device, upd_fmt, read_fmt, W=5, T=T, exact=True, K=K)
    n = s["new"]
    out = torch.full((3, T, HV, V), float("nan"), device=device)
    o = gdn_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], *(n[k] for k in NEW),
                        qk_l2norm=False, flush=True, fold_new=fold_new, recompute=recompute,
                        seq_ids=s["seq_ids"].to(device), events=2, seed=4, layer=2, out=out, fused_scores=fused,
                        block_r=block_r)
    o_ref, _, S = gdn_replay_step_ref(s["updq"], s["rdq"], s["hist"], *(n[k].cpu() for k in NEW), qk_l2norm=False,
                                      flush=True, fold_new=fold_new, recompute=recompute)
    live = (s["slots"] >= 0).cpu()
    kw = dict(seed=4, layer=2, seq_ids=s["seq_ids"][live], events=torch.full((2,), 2))
    assert_same_codes(gather(s["upd"], s["slots"]), store(S[live], upd_fmt, copy=COPY_UPDATE, **kw))
    assert_same_codes(gather(s["rd"], s["slots"]), store(S[live], read_fmt, copy=COPY_READ, **kw))
    assert not torch.isnan(o).any()
    assert rel(o.cpu()[live], o_ref[live]) < 1e-5


@pytest.mark.parametrize("upd_fmt,read_fmt,T,fold_new,recompute", [
    ("fp32", None, 1, True, False), ("fp16-sr", "nvfp4", 1, True, True), ("fp32", "fp32", 3, False, True)])
def test_fold_stages_change_no_bit(upd_fmt, read_fmt, T, fold_new, recompute, device):
    """The folds' software-pipeline depth (``fold_stages``: one record at a time, three ahead, the
    whole ring ahead) changes when records are requested, not what is computed: the same state codes,
    records and outputs bit for bit, for a flush and for a verify step (whose history is folded).
    Triton's interpreter runs the loop as written at every depth; the check has teeth on a GPU."""
    s = _replay_setup(device, upd_fmt, read_fmt or upd_fmt, W=5, T=T, exact=False, recompute=recompute)
    n = s["new"]
    runs = []
    for stages in (1, 4, 16):
        c = _clone_setup(s)
        o = gdn_replay_step(c["upd"], None if read_fmt is None else c["rd"], c["rec"], c["slots"], c["start"],
                            c["wlen"], *(n[k] for k in NEW), flush=T == 1, fold_new=fold_new, recompute=recompute,
                            seq_ids=s["seq_ids"].to(device), events=2, seed=4, layer=2, fold_stages=stages)
        runs.append((o, c))
    (o_ref, ref), *others = runs
    assert not torch.isnan(o_ref[:2]).any()
    for o, c in others:
        assert torch.equal(_bits(o), _bits(o_ref))
        assert_same_codes(c["upd"], ref["upd"])
        assert_same_codes(c["rd"], ref["rd"])
        for name in ("k", "d", "v", "a", "beta"):
            assert torch.equal(_bits(getattr(c["rec"], name)), _bits(getattr(ref["rec"], name))), name


def _clone_setup(s):
    """An independent copy of a replay setup's pools and records (a step updates them in place)."""
    rec = GDNRecords.__new__(GDNRecords)
    rec.ring = s["rec"].ring
    for name in ("k", "d", "v", "a", "beta"):
        setattr(rec, name, getattr(s["rec"], name).clone())
    return {**s, "upd": s["upd"].clone(), "rd": s["rd"].clone(), "rec": rec}


def _bits(t):
    return t.view(torch.int32)


def _fused_output_only_both_ways(s, switch, monkeypatch, device, **kw):
    """The one-launch output-only step of ``_replay_setup``'s state with the kernel rule ``switch`` on,
    then off, each on its own copy of the records: [(outputs, records)] in that order."""
    from precision_lab.kernels.gdn import decode as gdm
    n = s["new"]

    def run():
        rec = GDNRecords(3, 16, HK, HV, V, s["rec"].k.shape[-1], device=device)
        for name in ("k", "d", "v", "a", "beta"):
            getattr(rec, name).copy_(getattr(s["rec"], name))
        o = gdn_replay_step(s["upd"], s["rd"], rec, s["slots"], s["start"], s["wlen"], *(n[k] for k in NEW),
                            seq_ids=s["seq_ids"].to(device), fused_scores=True, **kw)
        return o, rec
    return with_rule_both_ways(monkeypatch, gdm, switch, run)


@pytest.mark.parametrize("W,start", [(7, 6), (0, 6), (12, 10)])
def test_early_token_inputs_change_no_bit(W, start, device, monkeypatch):
    """The one-launch output-only step from fp32 requesting its token's v, g, β with the state tile
    (``EARLY_TOKEN_INPUTS``, the rule) or after the scores (the order it replaced): the same values,
    so the outputs and records are the same bits."""
    s = _replay_setup(device, "fp32", "fp32", W=W, T=1, exact=False, start=start)
    (o1, r1), (o2, r2) = _fused_output_only_both_ways(s, "EARLY_TOKEN_INPUTS", monkeypatch, device)
    assert torch.equal(o1.view(torch.int32), o2.view(torch.int32))
    for name in ("k", "d", "v", "a", "beta"):
        assert torch.equal(getattr(r1, name).view(torch.int32), getattr(r2, name).view(torch.int32)), name


def _fused_output_only_forms_agree(switch, W, start, norm, close, atol, device, monkeypatch):
    """Both forms of a load-order or layout switch of the one-launch output-only step from fp32: outputs
    within fp32 rounding, the records in ``close`` within rtol 1e-6 (absolute ``atol``), the other
    records bit for bit, the skipped entry's outputs zero and the outputs the reference's."""
    s = _replay_setup(device, "fp32", "fp32", W=W, T=1, exact=False, start=start)
    n = s["new"]
    (o1, r1), (o2, r2) = _fused_output_only_both_ways(s, switch, monkeypatch, device, qk_l2norm=norm)
    assert rel(o1, o2) < 1e-6
    assert torch.equal(o1[2].cpu(), torch.zeros_like(o1[2].cpu()))  # the skipped entry
    for name in ("k", "d", "v", "a", "beta"):
        if name in close:
            assert torch.allclose(getattr(r1, name), getattr(r2, name), rtol=1e-6, atol=atol, equal_nan=True), name
        else:
            assert torch.equal(getattr(r1, name).view(torch.int32), getattr(r2, name).view(torch.int32)), name
    o_ref, _, _ = gdn_replay_step_ref(s["updq"], s["rdq"], s["hist"], *(n[k].cpu() for k in NEW), qk_l2norm=norm)
    live = (s["slots"] >= 0).cpu()
    assert rel(o1.cpu()[live], o_ref[live]) < 1e-5


@pytest.mark.parametrize("W,start,norm", [(7, 6, True), (0, 6, True), (12, 10, False)])
def test_early_qk_loads_agree(W, start, norm, device, monkeypatch):
    """The one-launch output-only step from fp32 reading q and k first as one [K, 2] tile
    (``EARLY_QK_LOADS``, the rule) or as two loads after the window's records: the same values
    normalised by the same helper, so outputs, d and k records agree within fp32 rounding (on a GPU
    the two layouts may sum Σk² in different orders), v, a, β records bit for bit, and the
    outputs are the reference's."""
    _fused_output_only_forms_agree("EARLY_QK_LOADS", W, start, norm, ("d", "k"), 0, device, monkeypatch)


@pytest.mark.parametrize("W,start,norm", [(7, 6, True), (0, 6, True), (12, 10, False), (15, 3, True)])
def test_window_scores_in_quarters_agree(W, start, norm, device, monkeypatch):
    """The one-launch output-only step from fp32 scoring its window from k records loaded as column
    quarters (``WINDOW_SCORES_IN_QUARTERS``, the rule: row products of the state tile's shape) or
    from one [window, K] tile: the same products summed in another order, so outputs and d records
    agree within fp32 rounding, the k, v, a, β records bit for bit, and the outputs are the
    reference's (windows that wrap the ring, an empty one and a full one)."""
    _fused_output_only_forms_agree("WINDOW_SCORES_IN_QUARTERS", W, start, norm, ("d",), 1e-7, device, monkeypatch)


# 64 state columns: quarters of 16, the smallest the products take (``_fold_product``)
@pytest.mark.parametrize("W,start,fused", [(5, 6, True), (15, 9, True), (15, 9, False), (0, 6, True)])
def test_fold_as_product_agrees(W, start, fused, device, monkeypatch):
    """A small grid's shared fp32 flush folding its window as products (``FOLD_WINDOW_AS_PRODUCT``, the
    rule at batch 1) or with the record loop: the same closed form summed in another order, so the
    stored states agree within fp32 rounding, and so do the outputs and the new d records; the new
    k, v, a, β records are copies, bit for bit; both are the reference's (a window that wraps the
    ring, a full one, an empty one; both launch forms)."""
    from precision_lab.kernels.gdn import decode as gdm
    s = _replay_setup(device, "fp32", "fp32", W=W, T=1, exact=False, start=start, K=64, recompute=False)
    n = s["new"]

    def run():
        c = _clone_setup(s)
        o = gdn_replay_step(c["upd"], None, c["rec"], c["slots"], c["start"], c["wlen"], *(n[k] for k in NEW),
                            flush=True, fold_new=True, recompute=False, seq_ids=s["seq_ids"].to(device),
                            fused_scores=fused)
        return o, c
    (o1, c1), (o2, c2) = with_rule_both_ways(monkeypatch, gdm, "FOLD_WINDOW_AS_PRODUCT", run)
    live = (s["slots"] >= 0).cpu()
    S1, S2 = gather(c1["upd"], s["slots"]).dequantize().cpu(), gather(c2["upd"], s["slots"]).dequantize().cpu()
    assert torch.isfinite(S1).all() and rel(S1, S2) < 1e-6
    assert rel(o1.cpu()[live], o2.cpu()[live]) < 1e-6
    assert torch.equal(o1[2].cpu(), torch.zeros_like(o1[2].cpu()))  # the skipped entry
    for name in ("k", "v", "a", "beta"):
        assert torch.equal(getattr(c1["rec"], name).view(torch.int32), getattr(c2["rec"], name).view(torch.int32)), name
    assert torch.allclose(c1["rec"].d, c2["rec"].d, rtol=1e-6, atol=1e-7, equal_nan=True)
    o_ref, _, S_ref = gdn_replay_step_ref(s["updq"], None, s["hist"], *(n[k].cpu() for k in NEW), flush=True,
                                          fold_new=True, recompute=False)
    assert rel(S1, S_ref[live]) < 1e-5
    assert rel(o1.cpu()[live], o_ref[live]) < 1e-5


@pytest.mark.parametrize("upd_fmt,read_fmt,flush,norm,start,W", [
    ("fp32", "nvfp4", False, True, 6, 5), ("fp32", "fp8e4m3", False, False, 12, 6), ("fp32", "bf16", False, True, 6, 0),
    ("fp32", "fp32", False, True, 13, 6), ("fp16-sr", "nvfp4-sr", True, True, 12, 6), ("bf16-sr", "fp32", True, False, 6, 0),
])
def test_fused_scores_matches_two_launches(upd_fmt, read_fmt, flush, norm, start, W, device):
    """The one-launch form of a one-token step against the two-launch form on the same random inputs
    (windows that wrap the ring and empty ones): the same state codes and k, v, a, β records bit for
    bit, d records and outputs within fp32 rounding (the one-launch form takes S_b q̃, S_b k from the
    raw q, k when it reads FP8/NVFP4 codes, then scales them). With q/k normalisation on a GPU the two
    kernels may sum Σk² in different orders (one ulp of the normalised k apart), so there the states
    and k records are compared within fp32 rounding; the interpreter sums identically."""
    s = _replay_setup(device, upd_fmt, read_fmt, W=W, T=1, exact=False, start=start)
    n = s["new"]
    runs = []
    for fused in (False, True):
        c = _clone_setup(s)
        o = gdn_replay_step(c["upd"], c["rd"], c["rec"], c["slots"], c["start"], c["wlen"], *(n[k] for k in NEW),
                            qk_l2norm=norm, flush=flush, fold_new=flush, seq_ids=s["seq_ids"].to(device), events=3,
                            seed=5, layer=2, fused_scores=fused, block_r=None if flush else 8)
        runs.append((o, c))
    (o2, two), (o1, one) = runs
    exact = device == "cpu" or not norm
    if exact:
        assert_same_codes(one["upd"], two["upd"])
        assert_same_codes(one["rd"], two["rd"])
    else:
        assert rel(one["upd"].dequantize(), two["upd"].dequantize()) < 1e-3
        assert rel(one["rd"].dequantize(), two["rd"].dequantize()) < 1e-3
    for name in ("k", "v", "a", "beta"):  # (unwritten ring slots hold NaN in both)
        a, b = getattr(one["rec"], name), getattr(two["rec"], name)
        if exact or name != "k":
            assert torch.equal(_bits(a), _bits(b)), name
        else:
            assert rel(a.nan_to_num(), b.nan_to_num()) < 1e-6
    assert rel(one["rec"].d.nan_to_num(), two["rec"].d.nan_to_num()) < 1e-6
    if not flush:  # the new token's k record landed at position W
        for b in (0, 1):
            k_new = one["rec"].k[int(s["slots"][b]), (start + W) % 16]
            assert not torch.isnan(k_new).any()
            if norm:
                assert (k_new.norm(dim=-1) - 1).abs().max() < 1e-5
    assert rel(o1, o2) < 1e-6
    assert torch.equal(o1[2].cpu(), torch.zeros(1, HV, V))


def test_recompute_differs_from_buffered_in_split_mode(device):
    """The two folds are different functions when the read copy is lossy (docs/design.md §4): the kernel's
    recompute flush must not silently fold the read-copy d's."""
    s = _replay_setup(device, "fp32", "nvfp4", W=5, T=1, exact=False)
    n = s["new"]
    outs = []
    for recompute in (True, False):
        upd = s["upd"].clone()
        gdn_replay_step(upd, s["rd"].clone(), s["rec"], s["slots"], s["start"], s["wlen"], *(n[k] for k in NEW),
                        flush=True, fold_new=True, recompute=recompute)
        outs.append(gather(upd, s["slots"]).dequantize())
    assert rel(outs[0], outs[1]) > 1e-4


@pytest.mark.parametrize("fmt,from_update,unread", [("fp32", True, ("v", "beta")), ("fp32", False, ("v", "beta")),
                                                     ("bf16", True, ("v", "beta")), ("bf16", False, ("d",))])
def test_shared_flush_folds_the_stored_deltas(fmt, from_update, unread, device):
    """Shared mode (R = U): the stored d's came from the checkpoint itself, so a recompute flush folds
    them (docs/design.md §4.5): the same codes as the reference's recompute fold, and the records' v
    and β, which only a recompute fold reads, are never read (NaN here). With a lossy checkpoint and
    ``window_from_update=False`` (records a speculative flush round committed from its unrounded S)
    the flush re-solves the d's from U instead and never reads the stored ones; an fp32 checkpoint
    stores that S unrounded, so it folds the stored d's either way."""
    s = _replay_setup(device, fmt, fmt, W=5, T=1, exact=True)  # RN formats: read and update copies equal
    for name in unread:
        getattr(s["rec"], name).fill_(float("nan"))
    n = s["new"]
    o = gdn_replay_step(s["upd"], None, s["rec"], s["slots"], s["start"], s["wlen"], *(n[k] for k in NEW),
                        qk_l2norm=False, flush=True, fold_new=True, recompute=True, window_from_update=from_update,
                        seq_ids=s["seq_ids"].to(device), events=2, seed=4, layer=2)
    o_ref, _, S = gdn_replay_step_ref(s["updq"], s["updq"], s["hist"], *(n[k].cpu() for k in NEW), qk_l2norm=False,
                                      flush=True, fold_new=True, recompute=True)
    live = (s["slots"] >= 0).cpu()
    kw = dict(seed=4, layer=2, seq_ids=s["seq_ids"][live], events=torch.full((2,), 2))
    assert_same_codes(gather(s["upd"], s["slots"]), store(S[live], fmt, copy=COPY_UPDATE, **kw))
    assert not torch.isnan(o).any()
    assert rel(o.cpu()[live], o_ref[live]) < 1e-5


# Extreme decays through a 12-record window, random keys (every record touches every element): the
# window's decay e^-144 is 0 in fp32, and g = +3 grows the state by e^36. A fold that rescales the
# state (S = c·S̃, with c = e^{Σa}: tried, reports/diagnostics/README.md) must fold c back before it
# leaves fp32's range; the plain recurrence must stay finite and agree with the reference.
@pytest.mark.parametrize("g", [-12.0, -0.7, 3.0])
def test_recompute_fold_with_extreme_decay(g, device):
    s = _replay_setup(device, "fp32", "fp32", W=12, T=1, exact=False, g=g)
    n = s["new"]
    o = gdn_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], *(n[k] for k in NEW),
                        flush=True, fold_new=True, recompute=True)
    o_ref, _, S = gdn_replay_step_ref(s["updq"], s["rdq"], s["hist"], *(n[k].cpu() for k in NEW),
                                      flush=True, fold_new=True, recompute=True)
    live = (s["slots"] >= 0).cpu()
    S_kernel = gather(s["upd"], s["slots"]).dequantize()
    assert torch.isfinite(S_kernel).all() and torch.isfinite(o).all()
    assert rel(S_kernel, S[live]) < 1e-5
    assert rel(o.cpu()[live], o_ref[live]) < 1e-5


# The drafts of a verify step and of a speculative flush under the same kind of decays: over the 8
# drafts the product of their α's reaches e^-84 (g = -12) or e^28 (g = +4). A draft loop that kept
# that product in a scalar (kernels/gdn/README.md: the scaled-state forms) would have to rescale in
# both directions; the outputs and d records must be the reference's.
@pytest.mark.parametrize("flush", [False, True])
@pytest.mark.parametrize("g", [-12.0, 4.0])
def test_drafts_with_extreme_decay(g, flush, device):
    T = 8
    s = _replay_setup(device, "fp32", "fp32", W=5, T=T, exact=False, g=g)
    n = s["new"]
    o = gdn_replay_step(s["upd"], None, s["rec"], s["slots"], s["start"], s["wlen"], *(n[k] for k in NEW),
                        flush=flush, recompute=True)
    o_ref, new, _ = gdn_replay_step_ref(s["updq"], s["updq"], s["hist"], *(n[k].cpu() for k in NEW),
                                        flush=flush, recompute=True)
    live = (s["slots"] >= 0).cpu()
    assert torch.isfinite(o).all()
    assert rel(o.cpu()[live], o_ref[live]) < 1e-5
    for b in (0, 1):
        sl = int(s["slots"][b])
        d = torch.stack([s["rec"].d[sl, (6 + 5 + t) % 16].cpu() for t in range(T)])
        assert rel(d, new["d"][b]) < 1e-5


POLICIES = ["fp32", "conventional:fp16-sr", "shared:nvfp4-sr@L8", "split:fp16-sr/nvfp4@L8",
            "split:fp32/nvfp4@L8@fold=buffered", "split:fp8e4m3-sr/fp8e4m3@L8", "split:bf16-sr/bf16@L8"]


@pytest.mark.parametrize("policy", POLICIES)
def test_trajectory(policy, device):
    """64 steps (8 flushes), 2 value heads over 1 key head: the kernels driven by the triton-decode
    engine against the torch decode engine."""
    from precision_lab.layer import GDNInputs, run_layer

    pol = StatePolicy.parse(policy, seed=21)
    K = k_for([pol.update, pol.read])
    T, Hk, Hv = 64, 1, 2
    inp = inputs(1, T, K, device, Hk=Hk, Hv=Hv)
    S0 = 0.3 * seeded_randn(1, Hv, V, K, seed=44, device=device)
    args = [inp[k] for k in NEW]
    kw = dict(initial_state=S0, layer_index=6, seq_ids=torch.tensor([5]))
    o, st = run_layer(GDNInputs(*args), pol, engine="triton-decode", **kw)
    assert "triton:gdn_" in st.implementation and "fallback" not in st.implementation
    o_dec, ref = run_layer(GDNInputs(*(a.cpu() for a in args)), pol, engine="decode",
                           **{**kw, "initial_state": S0.cpu()})
    assert st.state_writes == ref.state_writes == (T if not pol.is_replay else T // pol.buffer_len)
    assert st.record_writes == ref.record_writes and st.state.window == ref.state.window
    tol = 1e-5 if pol.update == "fp32" and pol.read == "fp32" else 3e-3
    assert rel(o.cpu(), o_dec) < tol
    assert rel(st.state.update.cpu(), ref.state.update) < tol
    assert rel(st.state.read.cpu(), ref.state.read) < tol


def test_launch_shapes_follow_the_batch(monkeypatch):
    """The launch-shape rules: the conventional step at 4 rows x 1 warp at every batch, a replay
    launch with fewer programs than about one per SM in 16-row blocks (not when it stores NVFP4: that
    owns whole heads), 64 rows x 2 warps for the output-only step otherwise (1 warp from a stored read
    copy)."""
    from precision_lab.kernels.decode_state import FMT_NVFP4
    from precision_lab.kernels.gdn import decode as gd

    assert gd._replay_launch(128, 128, (), None, True, 1 * 32) == (16, 1)      # batch 1 of 32 heads: fp32 flush
    assert gd._replay_launch(128, 128, (), None, False, 256 * 32) == (64, 2)   # batch 256: output-only step
    from precision_lab.kernels.decode_state import FMT_E4M3
    for stored_read in (FMT_NVFP4, FMT_E4M3):                                  # ... from a stored read copy
        assert gd._replay_launch(128, 128, (), None, False, 256 * 32, stored_read) == (64, 1)
    assert gd._replay_launch(128, 128, (), None, True, 256 * 32, FMT_NVFP4) == (64, 2)  # drafts keep 2 warps
    assert gd._replay_launch(128, 128, (FMT_NVFP4,), None, True, 32)[0] == 128  # NVFP4 stored: the whole head
    assert gd._replay_launch(128, 128, (), 32, True, 32)[0] == 32             # an explicit block_r wins
    # the one-launch one-token steps of a small grid (batch 1): SMALL_GRID_WARPS; the output-only step
    # only up to a ring of 32 (it spilled at 2 warps at ring 64)
    sgw = gd._small_grid_warps                                                 # (T, flush, fused, R, br, bj, B·H, block_r)
    assert sgw(1, False, True, 128, 16, 16, 32, None) == sgw(1, True, True, 128, 16, 16, 32, None) == gd.SMALL_GRID_WARPS
    assert sgw(1, False, True, 128, 16, 32, 32, None) == gd.SMALL_GRID_WARPS
    assert sgw(1, False, True, 128, gd.SMALL_GRID_OUTPUT_ROWS, 16, 32, None) == gd.SMALL_GRID_WARPS
    assert sgw(1, False, True, 128, 16, 64, 32, None) is None                  # ring 64: fused_nonflush_warps
    assert sgw(1, True, True, 128, 16, 64, 32, None) == gd.SMALL_GRID_WARPS
    assert sgw(1, False, True, 128, 64, 16, 64, None) is None                  # batch 2: not a small grid
    assert sgw(1, False, False, 128, 16, 16, 32, None) is None                 # two launches: the output-only step
    assert sgw(1, True, False, 128, 16, 16, 32, None) == gd.SMALL_GRID_WARPS   # ... the flush as in one launch
    assert sgw(8, False, True, 128, 16, 16, 32, None) is None                  # drafts
    assert sgw(1, True, True, 128, 128, 16, 32, None) is None                  # a flush storing NVFP4 (whole head)
    assert sgw(1, True, True, 128, 16, 16, 32, 16) is None                     # an explicit block_r
    from precision_lab.kernels.common.formats import FMT_BF16, FMT_FP32
    cap = gd._nonflush_max_registers                                           # (T, flush, fused, block_r, warps, read)
    assert cap(1, False, False, None, None, FMT_FP32) == 208 and cap(1, False, False, None, None, FMT_NVFP4) == 168
    assert cap(1, False, False, None, None, FMT_E4M3) == 128
    assert cap(1, False, False, None, None, FMT_NVFP4, "ptx") == cap(1, False, False, None, None, FMT_NVFP4, "mma") == 0
    assert cap(1, False, False, None, None, FMT_BF16) == 0                     # no cap
    assert cap(1, True, False, None, None, FMT_FP32) == cap(2, False, False, None, None, FMT_FP32) == 0  # flush, verify
    assert cap(1, False, True, None, None, FMT_FP32) == cap(1, False, False, 32, None, FMT_FP32) == 0  # one launch; shape given
    launches = []
    monkeypatch.setattr(gd, "gdn_conventional_step_kernel", LaunchRecorder("conventional", launches))

    def conventional_launches(fmt, batches):
        launches.clear()
        for B in batches:
            pool = PackedState.empty(fmt, B, 32, 128, 128)
            q = torch.zeros(B, 16, 128)
            gd.gdn_conventional_step(pool, torch.arange(B), q, q, torch.zeros(B, 32, 128), torch.zeros(B, 32),
                                     torch.zeros(B, 32))
        return [(kw["_grid"], kw["BR"], kw["num_warps"]) for _, kw in launches]

    seen = conventional_launches("fp32", (1, 16, 17))
    assert [(br, nw) for _, br, nw in seen] == [(4, 1), (4, 1), (4, 1)]
    assert [grid for grid, _, _ in seen] == [(32, 32, 1), (32, 32, 16), (32, 32, 17)]
    # an NVFP4 state: the whole head in one program, with the warps of its tile (1 warp spilled)
    assert gd._conventional_launch(128, 128, FMT_NVFP4, None, None) == (128, 8)
    assert gd._conventional_launch(128, 128, FMT_NVFP4, None, 2) == (128, 2)   # explicit warps win
    # a 16-bit or FP8 state from CONVENTIONAL_FORMAT_MIN_HEAD_MATRICES on: the format's own shape
    from precision_lab.kernels.common.formats import KERNEL_FORMATS
    big, small = gd.CONVENTIONAL_FORMAT_MIN_HEAD_MATRICES, gd.CONVENTIONAL_FORMAT_MIN_HEAD_MATRICES - 1
    for fmt, shape in CONVENTIONAL_FORMAT_SHAPES.items():
        code = KERNEL_FORMATS[fmt][0]
        assert gd._conventional_launch(128, 128, code, None, None, big, fmt) == shape
        assert gd._conventional_launch(128, 128, code, None, None, small, fmt) == (4, 1)
    assert gd._conventional_launch(128, 128, FMT_FP32, None, None, big, "fp32") == (4, 1)
    assert CONVENTIONAL_FORMAT_SHAPES["fp16-sr"] == (16, 1)
    # batch 64 of 32 value heads reaches the rule: the wrapper passes batch × heads and the format
    assert [(br, nw) for _, br, nw in conventional_launches("fp16-sr", (64,))] == [(16, 1)]


@pytest.mark.parametrize("upd_fmt,read_fmt,flush,start,W", [
    ("fp32", "fp32", False, 13, 6), ("fp32", "nvfp4", False, 6, 5), ("fp32", "fp8e4m3", False, 12, 0),
    ("fp16-sr", "nvfp4-sr", True, 12, 6), ("fp32", None, True, 6, 7),
])
def test_overlapped_scores_launch_matches_plain(upd_fmt, read_fmt, flush, start, W, device):
    """A two-launch one-token step with its step kernel launched as a programmatic dependent launch of
    the scores kernel (``overlap_scores=True``) against plain launches. A flush, and the output-only
    step from an fp32 read copy, run the same arithmetic and must agree bit for bit; the output-only
    step from FP8/NVFP4 codes takes its state products with the raw q, k then (as the one-launch form
    does), so its outputs and d records agree within fp32 rounding and everything else bit for bit.
    Then at batch 64 of the real head counts, where step programs start while scores programs run: a
    step that read its scores, q̃ or k before the scores kernel wrote them would read garbage."""
    skip_without_pdl(device)
    s = _replay_setup(device, upd_fmt, read_fmt or upd_fmt, W=W, T=1, exact=False, start=start)
    n = s["new"]
    runs = []
    for overlap in (False, True):
        c = _clone_setup(s)
        rd = c["rd"] if read_fmt is not None else None  # None: shared mode
        o = gdn_replay_step(c["upd"], rd, c["rec"], c["slots"], c["start"], c["wlen"], *(n[k] for k in NEW),
                            flush=flush, fold_new=flush, seq_ids=s["seq_ids"].to(device), events=3, seed=5,
                            layer=2, fused_scores=False, overlap_scores=overlap)
        runs.append((o, c))
    (o0, plain), (o1, over) = runs
    exact = flush or read_fmt == "fp32"
    assert_same_codes(plain["upd"], over["upd"])
    if read_fmt is not None:
        assert_same_codes(plain["rd"], over["rd"])
    for name in ("k", "v", "a", "beta") + (("d",) if exact else ()):
        assert torch.equal(_bits(getattr(plain["rec"], name)), _bits(getattr(over["rec"], name))), name
    if exact:
        assert torch.equal(_bits(o0), _bits(o1))
    else:
        assert rel(plain["rec"].d.nan_to_num(), over["rec"].d.nan_to_num()) < 1e-6
        assert rel(o0, o1) < 1e-6
    from precision_lab.bench.problems import PROBLEMS

    prob = PROBLEMS["gdn"](64, torch.device(device), upd=upd_fmt, read=read_fmt, ring=16, W=W)
    if flush:  # the state is folded in place: every run starts from a copy of the same pools
        upd0, rd0 = prob.upd.clone(), prob.read.clone() if prob.read is not None else None
    ys = []
    for overlap in (False, True, True):
        if flush:
            prob.upd = upd0.clone()
            prob.read = rd0.clone() if rd0 is not None else None
        ys.append(prob.replay(flush, flush, fused_scores=False, overlap_scores=overlap).clone())
    tol = 0 if exact else 1e-4  # bf16 outputs: an fp32 rounding apart can move an element by one bf16 ulp
    assert rel(ys[0], ys[1]) <= tol and rel(ys[0], ys[2]) <= tol
    if exact:
        assert torch.equal(ys[0].view(torch.int16), ys[1].view(torch.int16))


def test_overlap_scores_launch_rule(monkeypatch):
    """What ``gdn_replay_step`` hands its kernels, with the kernels stubbed out and the device taken to
    have programmatic dependent launch. By default only the two-launch output-only step from an NVFP4
    read copy overlaps (PDL in both kernels, ``launch_pdl`` on the step's launch): the one format it
    measured faster for. ``overlap_scores=True`` overlaps any two-launch one-token step (output-only,
    autoregressive flush); the one-launch form, verify and ``overlap_scores=False`` launch plainly.
    Without the feature (this CPU), asking for it is an error."""
    from precision_lab.kernels.gdn import decode as gd

    launches = []

    B, Hk, Hv, V, K = 2, 2, 4, 16, 32
    recs = GDNRecords(B, 16, Hk, Hv, V, K)
    ptr = (torch.arange(B), torch.zeros(B, dtype=torch.int32), torch.full((B,), 5, dtype=torch.int32))
    st = PackedState.empty("fp32", B, Hv, V, K)
    nv = PackedState.empty("nvfp4", B, Hv, V, K)

    def launch(T=1, read=None, **kw):
        launches.clear()
        q, v, g = torch.zeros(B, T, Hk, K), torch.zeros(B, T, Hv, V), torch.zeros(B, T, Hv)
        gd.gdn_replay_step(st, read, recs, *ptr, q, q, v, g, g, **kw)
        return dict(launches)

    def overlapped(k):
        return k["scores"]["PDL"] and k["step"]["PDL"] and k["step"]["launch_pdl"]

    def plain(k):
        return not k.get("scores", {}).get("PDL") and not k["step"]["PDL"] and "launch_pdl" not in k["step"]

    with pytest.raises(ValueError, match="overlap_scores=True needs"):
        launch(fused_scores=False, overlap_scores=True)
    stub_overlapped_launches(monkeypatch, gd, "gdn_replay_scores_kernel", "gdn_replay_step_kernel", launches)
    assert overlapped(launch(read=nv, fused_scores=False))                 # the rule: NVFP4 reads
    assert plain(launch(fused_scores=False))                               # fp32 reads measured slower
    assert plain(launch(read=nv, fused_scores=False, flush=True, fold_new=True))
    for kw in ({}, {"flush": True, "fold_new": True}):
        assert overlapped(launch(fused_scores=False, overlap_scores=True, **kw)), kw
        assert plain(launch(read=nv, fused_scores=False, overlap_scores=False, **kw)), kw
        k = launch(read=nv, fused_scores=True, **kw)
        assert list(k) == ["step"] and plain(k), kw
    assert plain(launch(T=3, read=nv))                                     # verify


def test_replay_wrapper_passes_its_rules_to_the_launch():
    """What ``gdn_replay_step`` hands the kernel, with the kernels stubbed out: the output-only
    step's register cap as ``maxnreg`` (0 = none), RESOLVE — a flush re-solves the window's d's
    from U — for a recompute flush except in shared mode where the stored d's are those d's (an fp32
    checkpoint, or a window that came from the checkpoint: docs/design.md §4.5), and the scores
    kernel's warps (SCORES_NUM_WARPS, 2 from H200 timings: reports/diagnostics/scores-warps.jsonl)."""
    from precision_lab.kernels.gdn import decode as gd

    launches, scores_launches = [], []

    class Grab:
        def __getitem__(self, grid):
            return lambda *a, **kw: (launches if "RESOLVE" in kw else scores_launches).append(kw)

    B, Hk, Hv, V, K = 2, 16, 32, 128, 128
    q = torch.zeros(B, 1, Hk, K)
    v, g = torch.zeros(B, 1, Hv, V), torch.zeros(B, 1, Hv)
    recs = GDNRecords(B, 16, Hk, Hv, V, K)
    ptr = (torch.arange(B), torch.zeros(B, dtype=torch.int32), torch.full((B,), 5, dtype=torch.int32))

    def launch(upd, read, b=B, **kw):
        gd.gdn_replay_step(PackedState.empty(upd, b, Hv, V, K), read and PackedState.empty(read, b, Hv, V, K),
                           recs, *(t[:b] for t in ptr), q[:b], q[:b], v[:b], g[:b], g[:b], **kw)
        return launches[-1]

    keep = gd.gdn_replay_step_kernel, gd.gdn_replay_scores_kernel
    gd.gdn_replay_step_kernel = gd.gdn_replay_scores_kernel = Grab()
    try:
        assert launch("fp16-sr", "fp32", fused_scores=False)["maxnreg"] == 208        # the output-only step
        assert launch("fp16-sr", "nvfp4", fused_scores=False)["maxnreg"] == 168
        assert "maxnreg" not in launch("fp16-sr", "fp32", fused_scores=False, max_registers=0)
        assert "maxnreg" not in launch("fp16-sr", "fp32", fused_scores=True)            # one launch: no cap
        assert launch("fp32", "fp32", fused_scores=True)["num_warps"] == 4             # batch 2: fused_nonflush_warps
        assert launch("fp32", "fp32", b=1)["num_warps"] == gd.SMALL_GRID_WARPS         # batch 1: the small grid's
        assert launch("fp32", "fp32", b=1)["BR"] == gd.SMALL_GRID_OUTPUT_ROWS == 16     # ... rows: the output-only
        assert launch("fp32", "nvfp4", b=1, fused_scores=True)["BR"] == gd.SMALL_GRID_ROWS  # step from fp32 only
        assert launch("fp32", None, b=1, flush=True, fold_new=True)["BR"] == gd.SMALL_GRID_ROWS == 16
        assert launch("fp32", "fp32", b=1, block_r=8)["BR"] == 8                       # an explicit block_r wins
        assert launch("fp32", None, b=1, flush=True, fold_new=True)["num_warps"] == gd.SMALL_GRID_WARPS
        assert launch("fp32", "fp32", b=1, num_warps=4)["num_warps"] == 4              # explicit warps win
        assert launch("fp32", None, b=1)["FUSED"] and launch("fp32", "nvfp4", b=2)["FUSED"]  # the formats' rule
        assert not launch("fp32", "nvfp4", b=1)["FUSED"]                               # (ONE_LAUNCH_BATCHES)
        assert not launch("fp16-sr", "nvfp4", b=1, flush=True, fold_new=True)["FUSED"]
        flush = dict(flush=True, fold_new=True)
        assert launch("fp32", "nvfp4", **flush)["RESOLVE"]                             # split: the policy's fold
        assert not launch("fp32", "nvfp4", **flush, recompute=False)["RESOLVE"]
        assert not launch("bf16", None, **flush)["RESOLVE"]                             # shared: stored d's
        assert launch("bf16", None, **flush, window_from_update=False)["RESOLVE"]      # ... after a spec flush round
        assert not launch("fp32", None, **flush, window_from_update=False)["RESOLVE"]  # fp32 stores S unrounded
        assert not launch("bf16", None, window_from_update=False)["RESOLVE"]           # no flush, nothing folded
        assert scores_launches and {kw["num_warps"] for kw in scores_launches} == {gd.SCORES_NUM_WARPS} == {2}
        # the folds' pipeline depth: FOLD_STAGES at a large grid, FOLD_STAGES_SMALL_GRID in a small one
        # (batch 1)
        assert launch("fp32", None, **flush)["FOLD_STAGES"] == gd.FOLD_STAGES == 8
        assert launch("fp32", None, b=1, **flush)["FOLD_STAGES"] == gd.FOLD_STAGES_SMALL_GRID == 4
        assert launch("fp32", None, b=1, **flush, fold_stages=2)["FOLD_STAGES"] == 2   # explicit depth wins
        # a small grid's one-launch autoregressive flush requests its token's inputs before the fold
        # (TOKEN_FIRST); a large grid's, a two-launch one and a flush without the new token do not
        assert launch("fp32", None, b=1, **flush, fused_scores=True)["TOKEN_FIRST"]
        assert not launch("fp32", None, **flush, fused_scores=True)["TOKEN_FIRST"]
        assert not launch("fp32", None, b=1, **flush, fused_scores=False)["TOKEN_FIRST"]
        assert not launch("fp32", None, b=1, flush=True)["TOKEN_FIRST"]
        # a small grid's one-launch output-only step scores its window in column quarters
        # (WINDOW_SCORES_IN_QUARTERS); batch 2's does not (batch 4 timed 2.5 % slower with them)
        assert launch("fp32", None, b=1)["QUARTER_SCORES"]
        assert not launch("fp32", None, fused_scores=True)["QUARTER_SCORES"]
        # a small grid's flush folds a buffered window as products (FOLD_WINDOW_AS_PRODUCT), in both
        # launch forms; a large grid's, an explicit fold_stages and the output-only step keep the loop,
        # and so do rings outside 8-32 records, row blocks other than SMALL_GRID_ROWS and quarters below 16 columns
        assert launch("fp32", None, b=1, **flush)["FOLD_PRODUCT"]
        assert launch("fp32", None, b=1, **flush, fused_scores=False)["FOLD_PRODUCT"]
        assert not launch("fp32", None, **flush)["FOLD_PRODUCT"]
        assert not launch("fp32", None, b=1, **flush, fold_stages=4)["FOLD_PRODUCT"]
        assert not launch("fp32", None, b=1)["FOLD_PRODUCT"]
        fp = gd._fold_product  # (small grid, flush, T, rows, ring, padded columns, fold_stages)
        assert fp(True, True, 1, 16, 8, 64, None) and fp(True, True, 1, 16, 32, 128, None)
        assert not fp(True, True, 1, 16, 4, 128, None) and not fp(True, True, 1, 16, 64, 128, None)
        assert not fp(True, True, 1, 16, 16, 32, None) and not fp(True, True, 1, 128, 16, 128, None)
        assert not fp(True, True, 2, 16, 16, 128, None) and not fp(False, True, 1, 16, 16, 128, None)
        with pytest.raises(ValueError, match="fold_stages"):
            launch("fp32", None, b=1, **flush, fold_stages=0)
    finally:
        gd.gdn_replay_step_kernel, gd.gdn_replay_scores_kernel = keep


def test_one_launch_rule_by_formats():
    """The launch form of a one-token step (``fused_scores_launch``): the batches of
    ``ONE_LAUNCH_BATCHES`` where the step and its formats have an entry (set from both forms timed in
    one run: reports/diagnostics/one-launch-read-formats.jsonl, one-launch-flush.jsonl), the
    score-row rule elsewhere, two launches for verify steps, and an override or FORCED_LAUNCH_FORM
    above both."""
    from precision_lab.kernels.common import launch

    def one(op, B, flush=False, update="fp32", read=None, T=1, override=None):
        return launch.fused_scores_launch(op, B, 8 if op == "mamba2" else 16, T, flush, flush, override, update, read)

    # output-only steps: Mamba-2 one launch up to batch 4 whatever it reads (the score-row rule said 16)
    for read in (None, "bf16", "fp8e4m3", "nvfp4"):
        assert [one("mamba2", b, read=read) for b in (1, 4, 8, 16)] == [True, True, False, False], read
    # GDN: fp32 up to 4; NVFP4 at 2-4 only (batch 1: the overlapped two-launch form); FP8 and BF16 up to 8
    assert [one("gdn", b) for b in (1, 4, 8)] == [True, True, False]
    assert [one("gdn", b, read="nvfp4") for b in (1, 2, 4, 8)] == [False, True, True, False]
    for read in ("fp8e4m3", "bf16"):
        assert [one("gdn", b, read=read) for b in (1, 8, 16)] == [True, True, False], read
    # GDN's autoregressive flush: shared fp32 up to 32, fp32/NVFP4 up to 4, fp16-SR/NVFP4 never
    assert [one("gdn", b, flush=True) for b in (1, 16, 32, 64)] == [True, True, True, False]
    assert [one("gdn", b, flush=True, read="nvfp4") for b in (4, 8)] == [True, False]
    assert not any(one("gdn", b, flush=True, update="fp16-sr", read="nvfp4") for b in (1, 2, 4, 8, 16))
    # no entry: the score-row rule (Mamba-2's flushes, whose forms tie; formats never timed in both forms)
    rows = launch.FUSED_SCORES_MAX_SCORE_ROWS
    assert one("mamba2", rows // 8, flush=True) and not one("mamba2", rows // 8 + 1, flush=True)
    assert one("gdn", rows // 16, flush=True, update="bf16-sr", read="fp32")
    assert not one("gdn", rows // 16 + 1, flush=True, update="bf16-sr", read="fp32")
    # verify steps always two launches; an override or the forced form wins over the rules
    assert not one("gdn", 1, T=4) and not one("mamba2", 1, T=4)
    assert one("gdn", 64, override=True) and not one("gdn", 1, override=False)
    keep = launch.FORCED_LAUNCH_FORM
    try:
        launch.FORCED_LAUNCH_FORM = True
        assert one("gdn", 64, read="nvfp4") and not one("gdn", 1, T=4)
        launch.FORCED_LAUNCH_FORM = False
        assert not one("gdn", 1) and one("gdn", 64, override=True)
    finally:
        launch.FORCED_LAUNCH_FORM = keep
    with pytest.raises(ValueError, match="one-token"):
        one("gdn", 1, T=4, override=True)


def test_shape_arguments_are_compile_time_constants():
    """Shape arguments of every GDN decode kernel are constexpr (why: ``assert_shape_constants``)."""
    from precision_lab.kernels.gdn import decode as gd

    from tests._decode_kernel_checks import assert_shape_constants

    assert_shape_constants(gd.gdn_conventional_step_kernel, ("Hk", "Hv", "R", "C"))
    assert_shape_constants(gd.gdn_replay_scores_kernel, ("Hk", "C", "RING"))
    assert_shape_constants(gd.gdn_replay_step_kernel, ("Hk", "Hv", "R", "C", "RING"))
