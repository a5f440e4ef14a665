"""The teacher-forced engine (docs/design.md §8).

Under teacher forcing the token stream is fixed, so each layer's outputs depend only on its own
inputs: the model runs layer by layer over a whole *segment* of the stream (one transformers forward
of S tokens), and each SSM layer applies the exact decode semantics of docs/design.md §4 window by window
through ``run_layer`` (engine ``scan`` in torch, ``triton`` on a GPU). Between segments everything a
decode loop would carry is carried: every SSM layer's ``LayerState`` (update checkpoint, read copy,
partial window buffer, step and write counters), the conv states and the attention KV caches (both
in the transformers cache). Splitting the stream into segments therefore changes nothing, and the
result equals token-by-token decode through the same adapters (``token_by_token``), SR included, up
to one caveat that ``compare_engines`` encodes: both paths compute in fp32 but feed each layer
inputs that differ in the last bits (transformers runs its projections on [B, S, D] in one path and
[B, 1, D] in the other), and where such a difference moves a lossy rounding decision of a state
element the runs differ by that element's rounding. ``tests/test_engine.py`` checks every
architecture and mode: the fp32 reference to fp32 tolerance, lossy policies to within 5% of their
own KL at every position (a wrong seed or window fails by far).

Stream layout: the first ``prefill_len`` tokens are one prefill forward (one checkpoint write per
layer, as a serving engine would do for the prompt); the remaining tokens are decode steps, served
``segment_len`` at a time. Rows: a model adapted with G policies takes ``G*B`` rows; ``run`` repeats
the B token rows G times so every policy sees the same tokens.

Two layouts for G row groups. ``run`` serves them *in lockstep*: one forward of ``G*B`` rows per
segment. ``run_grouped`` serves them *grouped*: per segment one forward per group, each of the B
token rows with its own stream, every SSM mixer switched to that group's policy (which may differ
from layer to layer) before the forward. Grouped, every group's forward sees tensors of the same
shapes in the same places, so two groups that run the same computation give the same bits on any
backend. In lockstep that holds only where every kernel treats all rows alike; on CPU it does not
(vectorised elementwise loops finish the last elements of a tensor in scalar code, and the
attention kernel splits rows over threads), so identical policies in two row groups can differ in
the last bit there. Grouped also records which implementation served each group.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from precision_lab.models import cache_kwarg, new_stream, policy_mixers


@dataclass
class Segment:
    """One served piece of the stream.

    start, end: token positions [start, end) of the stream
    hidden:     [G*B, end-start, D] final hidden states (after the model's final norm); logits are
                ``lm_head(hidden)`` (``logits()``), left to the caller so huge vocabularies can be
                projected in chunks
    prefill:    True for the prefill forward
    seconds:    wall time of the forward
    served:     (``run_grouped`` only) per group, the ``engine:implementation`` names that served its
                SSM layers in this segment, with call counts
    """

    start: int
    end: int
    hidden: torch.Tensor
    prefill: bool
    seconds: float
    served: list[Counter] | None = None


def resolve_engine(engine: str, device: torch.device | str) -> str:
    """The engine of a teacher-forced run (``precision_lab.engines.resolve``: ``auto`` is ``triton``
    on CUDA and ``scan`` elsewhere)."""
    from precision_lab.engines import resolve

    return resolve(engine, tokens=None, device=device)


def _body(model: nn.Module) -> nn.Module:
    """The decoder stack without the LM head (Qwen3.5/Nemotron-H/Kimi: .model; Mamba-2: .backbone)."""
    return model.base_model


def lm_logits(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """fp32 logits from final hidden states, as the model's own forward computes them."""
    head = model.get_output_embeddings()
    return head(hidden.to(head.weight.dtype)).float()


def _oom_hint(e: BaseException, segment_len: int, rows: int) -> RuntimeError:
    return RuntimeError(f"out of memory serving a segment of {segment_len} tokens x {rows} rows ({e}). "
                        "Try a smaller --segment, a smaller --batch-size, or fewer policies per run.")


def run(model: nn.Module, tokens: torch.Tensor, *, prefill_len: int = 0, segment_len: int = 2048,
        engine: str = "auto", seq_ids: torch.Tensor | None = None, progress=None) -> Iterator[Segment]:
    """Teacher-force ``tokens`` through an adapted model, segment by segment.

    model:       adapted with ``apply_policy`` (G policies -> each mixer serves G row groups)
    tokens:      [B, N] int64 token ids (the same stream for every policy)
    prefill_len: first tokens served as one prefill forward (0: every token is a decode step)
    segment_len: decode tokens per forward (memory ~ segment_len x rows x hidden; results do not
                 depend on it)
    engine:      "auto" | "scan" | "triton" | "decode" (decode: the ground-truth state machine over
                 a whole segment, slow)
    seq_ids:     [B] global sequence ids for SR counters (default arange(B)); give each document its
                 own id so results do not depend on how documents are batched
    progress:    optional callable(tokens_done) called after each segment
    Yields ``Segment``s in stream order.
    """
    mixers = policy_mixers(model)
    if not mixers:
        raise ValueError("model has no policy mixers: call precision_lab.models.apply_policy(model, policies) first")
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [B, N], got shape {tuple(tokens.shape)}")
    B, N = tokens.shape
    if not 0 <= prefill_len < N:
        raise ValueError(f"prefill_len must be in [0, {N}) for a stream of {N} tokens, got {prefill_len}")
    if segment_len < 1:
        raise ValueError(f"segment_len must be >= 1, got {segment_len}")
    G = len(mixers[0].policies)
    device = next(model.parameters()).device
    eng = resolve_engine(engine, device)
    cache = new_stream(model, seq_ids=seq_ids if seq_ids is not None else torch.arange(B),
                       first_is_prefill=prefill_len > 0, engine=eng)
    body = _body(model)
    kw = cache_kwarg(body)
    rows = tokens.to(device).repeat(G, 1)
    bounds = ([(0, prefill_len)] if prefill_len else []) + [
        (s, min(s + segment_len, N)) for s in range(prefill_len, N, segment_len)]
    for s, e in bounds:
        t0 = time.perf_counter()
        try:
            with torch.inference_mode():  # not held across the yield: the caller keeps its own grad mode
                out = body(input_ids=rows[:, s:e], use_cache=True, **{kw: cache})
        except torch.OutOfMemoryError as err:
            raise _oom_hint(err, e - s, rows.shape[0]) from err
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        yield Segment(s, e, out.last_hidden_state, s == 0 and prefill_len > 0, time.perf_counter() - t0)
        if progress is not None:
            progress(e - s)


def run_grouped(model: nn.Module, tokens: torch.Tensor, groups: Sequence[Sequence], *, prefill_len: int = 0,
                segment_len: int = 2048, engine: str = "auto", seq_ids: torch.Tensor | None = None,
                progress=None) -> Iterator[Segment]:
    """Teacher-force ``tokens`` through an adapted model, one forward per row group (module docstring).

    model:  adapted with ``apply_policy`` (any policies: they are replaced per forward)
    groups: G lists, one per row group, of one StatePolicy (or policy string) per SSM mixer in
            ``policy_mixers(model)`` order: group g runs policy ``groups[g][j]`` in SSM layer j
    Other arguments as ``run``. Yields ``Segment``s whose ``hidden`` is [G*B, S, D] (group-major,
    as ``run``) and whose ``served`` names the implementations per group. On return the mixers hold
    the last group's policies.
    """
    from precision_lab.policy import StatePolicy

    mixers = policy_mixers(model)
    if not mixers:
        raise ValueError("model has no policy mixers: call precision_lab.models.apply_policy(model, policies) first")
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [B, N], got shape {tuple(tokens.shape)}")
    groups = [[StatePolicy.parse(p) for p in g] for g in groups]
    if not groups:
        raise ValueError("no row groups to run")
    bad = [g for g, pols in enumerate(groups) if len(pols) != len(mixers)]
    if bad:
        raise ValueError(f"row group {bad[0]} names {len(groups[bad[0]])} policies for a model with {len(mixers)} "
                         "SSM layers; give one policy per SSM layer")
    B, N = tokens.shape
    if not 0 <= prefill_len < N:
        raise ValueError(f"prefill_len must be in [0, {N}) for a stream of {N} tokens, got {prefill_len}")
    if segment_len < 1:
        raise ValueError(f"segment_len must be >= 1, got {segment_len}")
    device = next(model.parameters()).device
    eng = resolve_engine(engine, device)
    ids = seq_ids if seq_ids is not None else torch.arange(B)
    caches = [new_stream(model, seq_ids=ids, first_is_prefill=prefill_len > 0, engine=eng) for _ in groups]
    body = _body(model)
    kw = cache_kwarg(body)
    rows = tokens.to(device)
    bounds = ([(0, prefill_len)] if prefill_len else []) + [
        (s, min(s + segment_len, N)) for s in range(prefill_len, N, segment_len)]
    for s, e in bounds:
        t0 = time.perf_counter()
        hidden, served = [], []
        for pols, cache in zip(groups, caches):
            for m, p in zip(mixers, pols):
                m.set_policies([p])
            before = [Counter(m.served) for m in mixers]
            try:
                with torch.inference_mode():
                    out = body(input_ids=rows[:, s:e], use_cache=True, **{kw: cache})
            except torch.OutOfMemoryError as err:
                raise _oom_hint(err, e - s, B) from err
            calls: Counter = Counter()
            for m, b in zip(mixers, before):
                calls.update({f"{eng_}:{impl}": n for (eng_, impl), n in (m.served - b).items()})
            served.append(calls)
            hidden.append(out.last_hidden_state)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        yield Segment(s, e, torch.cat(hidden, 0), s == 0 and prefill_len > 0, time.perf_counter() - t0, served)
        if progress is not None:
            progress(e - s)


def teacher_forced_logits(model: nn.Module, tokens: torch.Tensor, **kw) -> torch.Tensor:
    """All logits [G*B, N, V] (fp32) of ``run`` — for tests and short streams."""
    return torch.cat([lm_logits(model, seg.hidden) for seg in run(model, tokens, **kw)], dim=1)


def compare_engines(engine_logits: torch.Tensor, decode_logits: torch.Tensor, policies: list[str],
                    *, rel_tol: float = 2e-5, effect_frac: float = 0.05) -> dict[str, dict]:
    """Verdict of "teacher-forced == token-by-token" per policy group (rows ``[g*B, (g+1)*B)``).

    engine_logits, decode_logits: [G*B, N, V]. The fp32 group must agree to ``rel_tol`` (max |diff|
    over max |logit|). A lossy policy must agree to within ``effect_frac`` of its own effect at every
    position: max_t KL(decode || engine) <= effect_frac x mean_t KL(fp32 || policy). The second form is
    needed because the two paths feed each layer inputs that differ in the last fp32 bits, which can
    move a lossy rounding decision of single state elements (see tests/test_engine.py).
    Returns {policy: {"ok", "disagreement", "effect", "criterion"}}.
    """
    G = len(policies)
    e = engine_logits.reshape(G, -1, *engine_logits.shape[1:])
    d = decode_logits.reshape(G, -1, *decode_logits.shape[1:])

    def kl(a, b):
        la, lb = torch.log_softmax(a.double(), -1), torch.log_softmax(b.double(), -1)
        return (la.exp() * (la - lb)).sum(-1)

    ref = policies.index("fp32") if "fp32" in policies else None
    out = {}
    for g, pol in enumerate(policies):
        if pol == "fp32":
            rel = ((e[g] - d[g]).abs().max() / d[g].abs().max()).item()
            out[pol] = {"ok": rel < rel_tol, "disagreement": rel, "effect": 0.0,
                        "criterion": f"max|diff|/max|logit| < {rel_tol:g}"}
        elif ref is None:
            raise ValueError("compare_engines needs the fp32 group to measure each policy's effect")
        else:
            dis = kl(d[g], e[g]).max().item()
            eff = kl(d[ref], d[g]).mean().item()
            out[pol] = {"ok": bool(eff > 0 and dis <= effect_frac * eff), "disagreement": dis, "effect": eff,
                        "criterion": f"max KL(decode||engine) <= {effect_frac:g} x mean KL(fp32||policy)"}
    return out


def token_by_token(model: nn.Module, tokens: torch.Tensor, *, prefill_len: int = 0, engine: str = "decode",
                   seq_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Cached autoregressive decoding with teacher forcing, one token per forward: the reference the
    teacher-forced engine must equal. Returns fp32 logits [G*B, N, V]."""
    return teacher_forced_logits(model, tokens, prefill_len=prefill_len, segment_len=1, engine=engine,
                                 seq_ids=seq_ids)
