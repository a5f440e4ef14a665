"""Fast generation through an adapted model: static caches, one prefill, decode steps as CUDA graphs.

    from precision_lab.models import load_model, apply_policy
    from precision_lab.generation import generate
    model, tok = load_model("tiny-qwen3.5", device="cuda")
    apply_policy(model, "split:fp16-sr/nvfp4")
    out = generate(model, input_ids, attention_mask, max_new_tokens=256)   # out.tokens [B, P + N]

Why. A decode step of a 4B-parameter model at small batch moves ~8 GB of weights (about 2 ms on an
H200) but costs tens of milliseconds through ``model.generate``: a thousand small launches and the
Python between them. Here a step is one CUDA graph replay:

* the attention layers keep their keys and values in a transformers ``StaticCache`` (fixed
  addresses, positions from a device counter), the SSM layers their conv states in the same cache
  (updated in place) and their recurrent state in the packed device layout of the decode-step
  kernels (``precision_lab.state.DeviceState``: window pointers and SR event counters on the
  device);
* the inputs of a step (token ids, position ids, the attention mask) live in static buffers;
* ReplaySSM layers take one of two kernel branches per step (flush or not), which the host knows
  from the window length it mirrors, so a step is one of a few fixed launch sequences. Each
  sequence (``step_key``) is run eagerly the first time it comes up (that also compiles the
  kernels), captured the second time, and replayed from then on. The host-side mirrors a captured
  step would have advanced (window lengths, counters) are advanced by hand on each replay.

Semantics are those of token-by-token decoding through the policy mixers (docs/design.md §4): the
prompt is one prefill, every new token one decode step; ``graphs=False`` runs the same steps
eagerly (what CPU runs and tests do), and ``tests/test_generation.py`` checks that both agree with
``model.generate``. Greedy decoding, temperature / top-k / top-p sampling (after the graph, on its
logits), forced tokens (decode scoring) and early stopping when every row has finished.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = ["GenerationResult", "StepRunner", "generate", "score_branches", "static_cache", "step_key"]


@dataclass
class GenerationResult:
    """tokens [B, P + N] (prompt as given, then the generated tokens; rows that stopped early are
    padded with ``pad_token_id``); logits [B, N, V] of every step when asked for; timings."""

    tokens: torch.Tensor
    logits: torch.Tensor | None
    prefill_seconds: float
    step_seconds: list[float] = field(default_factory=list)
    graphs: dict = field(default_factory=dict)
    finished: list[int] = field(default_factory=list)

    @property
    def new_tokens(self) -> int:
        return len(self.step_seconds)


def static_cache(model: nn.Module, batch: int, max_len: int, *, seq_ids: torch.Tensor | None = None,
                 first_is_prefill: bool = True):
    """A transformers ``StaticCache`` for ``max_len`` tokens with a precision-lab stream attached
    (``seq_ids``: SR sequence ids, default 0..B-1; ``first_is_prefill=False``: the first forward's
    tokens are decode steps too, see ``precision_lab.models.new_stream``)."""
    from transformers import StaticCache

    from precision_lab.models.mixers import stream_context

    try:
        cache = StaticCache(config=model.config, max_cache_len=max_len)
    except Exception as e:  # noqa: BLE001 - older transformers: no static cache for hybrid models
        raise RuntimeError(f"transformers {__import__('transformers').__version__} has no StaticCache for "
                           f"{type(model).__name__} ({type(e).__name__}: {e}); fast generation needs "
                           "transformers >= 5.24") from e
    ctx = stream_context(cache)
    ctx.seq_ids = None if seq_ids is None else torch.as_tensor(seq_ids, dtype=torch.int64)
    ctx.first_is_prefill = first_is_prefill
    return cache


def _device_states(model: nn.Module, cache) -> list:
    """Every DeviceState of the stream (the state the graphs update in place)."""
    from precision_lab.models.mixers import stream_context
    from precision_lab.state import DeviceState

    ctx = stream_context(cache, create=False)
    return [s for states in (ctx.states.values() if ctx else ()) for s in states if isinstance(s, DeviceState)]


def step_key(model: nn.Module, cache) -> tuple:
    """Which launch sequence the next decode step runs: per layer state, flush or not."""
    from precision_lab.models.mixers import stream_context
    from precision_lab.state import DeviceState, is_flush

    ctx = stream_context(cache, create=False)
    key = []
    for layer in sorted(ctx.states):
        for st in ctx.states[layer]:
            if not isinstance(st, DeviceState):
                return ("eager", layer)  # a layer on a torch engine: never captured
            flush = bool(st.policy.is_replay and is_flush(st.window, st.policy.buffer_len))
            if flush and not st.window_from_update:
                # a flush that re-solves a window it did not write (gdn_replay_step's
                # window_from_update) launches another kernel variant, at most once per stream: eager
                return ("eager", layer)
            key.append(flush)
    return tuple(key)


class StepRunner:
    """Runs decode steps of one model over one static cache, as CUDA graphs where it can.

    ``step(forward)`` runs ``forward()`` (which must read only the static input buffers and write
    its result into a static output) for the next token: eagerly the first time its step key
    comes up, captured the second time, replayed afterwards. ``graphs=False`` always runs eagerly.
    """

    def __init__(self, model: nn.Module, cache, *, graphs: bool):
        self.model, self.cache = model, cache
        self.graphs_on = graphs
        self.seen: Counter = Counter()
        self.graphs: dict[tuple, torch.cuda.CUDAGraph] = {}
        self.bookkeeping: dict[tuple, tuple] = {}   # key -> (served diff, tokens diff) of one step
        self.replays = 0
        self.disabled_reason: str | None = None
        self.pool = None

    def _host_snapshot(self):
        from precision_lab.models import policy_mixers
        from precision_lab.models.mixers import stream_context

        ctx = stream_context(self.cache, create=False)
        mixers = policy_mixers(self.model)
        dev = [(s, (s.window, s.step, s.writes, s.flushes, s.record_writes, s.window_from_update))
               for s in _device_states(self.model, self.cache)]
        return ([Counter(m.served) for m in mixers], dict(ctx.tokens), dev, mixers, ctx)

    def _restore(self, snap) -> tuple:
        served, tokens, dev, mixers, ctx = snap
        diffs = []
        for m, before in zip(mixers, served):
            diff = Counter(m.served)
            diff.subtract(before)
            diffs.append(+diff)
            m.served = before
        tok_diff = {k: v - tokens.get(k, 0) for k, v in ctx.tokens.items()}
        ctx.tokens = tokens
        for s, (w, st, wr, fl, rw, wu) in dev:
            s.window, s.step, s.writes, s.flushes, s.record_writes, s.window_from_update = w, st, wr, fl, rw, wu
        return diffs, tok_diff

    def _advance_host(self, key: tuple) -> None:
        """What an eager step does to the host mirrors, for a replayed one."""
        from precision_lab.engines.triton_decode import advance_host
        from precision_lab.models import policy_mixers
        from precision_lab.models.mixers import stream_context

        for s, flush in zip(_device_states(self.model, self.cache), key):
            advance_host(s, tokens=1, accepted=0 if flush else 1, flushed=flush)
        diffs, tok_diff = self.bookkeeping[key]
        for m, d in zip(policy_mixers(self.model), diffs):
            m.served.update(d)
        ctx = stream_context(self.cache, create=False)
        for k, v in tok_diff.items():
            ctx.tokens[k] = ctx.tokens.get(k, 0) + v

    def step(self, forward: Callable[[], None]) -> str:
        """Run the next decode step; returns how it ran: "eager", "capture" or "replay"."""
        key = step_key(self.model, self.cache)
        use = (self.graphs_on and self.disabled_reason is None and key[:1] != ("eager",)
               and torch.cuda.is_available())
        if use and key in self.graphs:
            self.graphs[key].replay()
            self._advance_host(key)
            self.replays += 1
            return "replay"
        self.seen[key] += 1
        if not use or self.seen[key] == 1:
            forward()
            return "eager"
        # capture (records without running), then replay once to run this step for real
        snap = self._host_snapshot()
        g = torch.cuda.CUDAGraph()
        try:
            torch.cuda.synchronize()
            with torch.cuda.graph(g, pool=self.pool):
                forward()
        except Exception as e:  # noqa: BLE001 - fall back to eager steps, and say why
            self._restore(snap)
            self.disabled_reason = f"{type(e).__name__}: {e}"[:300]
            torch.cuda.synchronize()
            forward()
            return "eager"
        self.pool = g.pool()
        self.bookkeeping[key] = self._restore(snap)
        self.graphs[key] = g
        g.replay()
        self._advance_host(key)
        self.replays += 1
        return "capture"


def _sample(logits: torch.Tensor, *, do_sample: bool, temperature: float, top_k: int, top_p: float,
            generator: torch.Generator | None) -> torch.Tensor:
    """Next tokens [B] from logits [B, V]."""
    if not do_sample or temperature == 0.0:
        return logits.argmax(-1)
    x = logits.float() / max(temperature, 1e-6)
    if top_k:
        kth = torch.topk(x, min(top_k, x.shape[-1]), dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        srt, idx = torch.sort(x, descending=True, dim=-1)
        probs = srt.softmax(-1)
        drop = probs.cumsum(-1) - probs > top_p
        x = x.scatter(-1, idx, srt.masked_fill(drop, float("-inf")))
    return torch.multinomial(x.softmax(-1), 1, generator=generator)[:, 0]


def _prefill(model: nn.Module, input_ids: torch.Tensor, mask: torch.Tensor, max_len: int,
             seq_ids: torch.Tensor | None, first_is_prefill: bool = True):
    """One prefill forward into a fresh static cache: (cache, last logits [B, V] fp32, positions
    [B, P], seconds). With ``first_is_prefill=False`` the forward runs the prompt's tokens as decode
    steps (the decode path's windows, flushes and SR, served by the scan engines; rows must then be
    unpadded, since a pad position would be a step too)."""
    from precision_lab.models import cache_kwarg

    B, P = input_ids.shape
    if not first_is_prefill and not bool(mask.bool().all()):
        raise ValueError("a prompt decoded as decode steps must be unpadded (a pad position would be a decode "
                         "step): one prompt length per batch")
    cache = static_cache(model, B, max_len, seq_ids=seq_ids, first_is_prefill=first_is_prefill)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    t0 = time.perf_counter()
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=pos, use_cache=True,
                **{cache_kwarg(model): cache})
    logits = out.logits[:, -1].float()
    if input_ids.device.type == "cuda":
        torch.cuda.synchronize()
    return cache, logits, pos, time.perf_counter() - t0


@torch.no_grad()
def generate(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
             max_new_tokens: int, graphs: bool | None = None, eos_token_id: int | list[int] | None = None,
             pad_token_id: int | None = None, stop: Callable[[torch.Tensor], torch.Tensor] | None = None,
             check_every: int = 16, forced: torch.Tensor | None = None, return_logits: bool = False,
             do_sample: bool = False, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
             generator: torch.Generator | None = None, seq_ids: torch.Tensor | None = None,
             on_step: Callable[[int, str, float], None] | None = None,
             first_is_prefill: bool = True) -> GenerationResult:
    """Generate up to ``max_new_tokens`` tokens after ``input_ids`` [B, P] (left-padded where
    ``attention_mask`` [B, P] has zeros) through a policy-adapted model (see the module docstring).

    graphs:        capture decode steps in CUDA graphs (default: on CUDA)
    eos_token_id:  a row that emits one of these has finished
    stop:          optional ``stop(tokens [B, P + n]) -> bool [B]`` for other stop rules (e.g. stop
                   strings), checked with EOS every ``check_every`` steps (a check reads the device)
    forced:        [B, N] tokens to feed instead of sampling (decode scoring: logits of every step)
    return_logits: keep the logits [B, N, V] of every step (fp32)
    seq_ids:       SR sequence ids of the rows (default 0..B-1)
    on_step:       called as ``on_step(i, how, seconds)`` after each step (how: eager/capture/replay)
    first_is_prefill: False runs the prompt as decode steps (one forward with the decode path's
                   semantics, see ``precision_lab.models.new_stream``); rows must then be unpadded
    Generation stops when every row has finished (EOS or ``stop``), after the step that finished
    the last one is seen by a check; finished rows keep running (their tokens are replaced by
    ``pad_token_id`` in the result), as rows of a static batch must.
    """
    dev = input_ids.device
    B, P = input_ids.shape
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if forced is not None and tuple(forced.shape) != (B, max_new_tokens):
        raise ValueError(f"forced must be [B, max_new_tokens] = {[B, max_new_tokens]}, got {list(forced.shape)}")
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.to(dev, torch.long)
    cache, logits, pos, prefill_s = _prefill(model, input_ids, mask, P + max_new_tokens, seq_ids, first_is_prefill)
    return _decode(model, cache, logits, input_ids, mask, pos[:, -1:], max_new_tokens=max_new_tokens,
                   graphs=graphs, eos_token_id=eos_token_id, pad_token_id=pad_token_id, stop=stop,
                   check_every=check_every, forced=forced, return_logits=return_logits, do_sample=do_sample,
                   temperature=temperature, top_k=top_k, top_p=top_p, generator=generator, on_step=on_step,
                   prefill_s=prefill_s)


@torch.no_grad()
def score_branches(model: nn.Module, context_ids: torch.Tensor, context_mask: torch.Tensor | None,
                   branch_of: torch.Tensor, forced: torch.Tensor, *, graphs: bool | None = None,
                   seq_ids: torch.Tensor | None = None, first_is_prefill: bool = True) -> torch.Tensor:
    """Logits [N, T, V] of feeding ``forced`` [N, T] after context ``branch_of[n]`` of
    ``context_ids`` [U, P]: each context is prefilled once and its stream branched per row
    (``precision_lab.models.branch_stream``) — e.g. the answer choices of one question. Each row
    starts from exactly the state its context's own stream would have (same SR bits: ``seq_ids``
    [U] follow the context); later steps agree with separate streams to fp32 rounding.
    ``first_is_prefill=False`` runs the contexts as decode steps (see ``generate``)."""
    from precision_lab.models import branch_stream

    dev = context_ids.device
    U, P = context_ids.shape
    N, T = forced.shape
    branch_of = torch.as_tensor(branch_of, dtype=torch.long, device=dev)
    mask = torch.ones_like(context_ids) if context_mask is None else context_mask.to(dev, torch.long)
    cache, logits, pos, prefill_s = _prefill(model, context_ids, mask, P + T, seq_ids, first_is_prefill)
    cache = branch_stream(cache, branch_of)
    res = _decode(model, cache, logits.index_select(0, branch_of), context_ids.index_select(0, branch_of),
                  mask.index_select(0, branch_of), pos[:, -1:].index_select(0, branch_of), max_new_tokens=T,
                  graphs=graphs, forced=forced, prefill_s=prefill_s)
    return res.logits


def _decode(model, cache, logits, input_ids, mask, last_pos, *, max_new_tokens: int, graphs: bool | None,
            eos_token_id=None, pad_token_id=None, stop=None, check_every: int = 16, forced=None,
            return_logits: bool = False, do_sample: bool = False, temperature: float = 1.0, top_k: int = 0,
            top_p: float = 1.0, generator=None, on_step=None, prefill_s: float = 0.0) -> GenerationResult:
    """The decode loop after a prefill (see ``generate``)."""
    from precision_lab.models import cache_kwarg

    dev = input_ids.device
    B, P = input_ids.shape
    graphs = dev.type == "cuda" if graphs is None else graphs
    eos = torch.tensor(sorted({eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id or ())),
                       dtype=torch.long, device=dev)
    pad = int(pad_token_id if pad_token_id is not None else (eos[0] if eos.numel() else 0))
    max_len = P + max_new_tokens
    ckw = cache_kwarg(model)
    # static inputs of a decode step
    tok_buf = torch.zeros(B, 1, dtype=torch.long, device=dev)
    pos_buf = last_pos.clone()
    full_mask = torch.ones(B, max_len, dtype=torch.long, device=dev)
    full_mask[:, :P] = mask
    out_buf: dict[str, torch.Tensor] = {}

    def forward():
        pos_buf.add_(1)
        out = model(input_ids=tok_buf, attention_mask=full_mask, position_ids=pos_buf, use_cache=True,
                    **{ckw: cache})
        step_logits = out.logits[:, -1]
        if "logits" not in out_buf:
            out_buf["logits"] = torch.empty(step_logits.shape, dtype=torch.float32, device=dev)
        out_buf["logits"].copy_(step_logits)

    runner = StepRunner(model, cache, graphs=graphs)
    new = torch.full((B, max_new_tokens), pad, dtype=torch.long, device=dev)
    all_logits = [] if (return_logits or forced is not None) else None
    finished = torch.zeros(B, dtype=torch.bool, device=dev)
    done_at = [max_new_tokens] * B
    steps: list[float] = []
    n = 0
    for i in range(max_new_tokens):
        if all_logits is not None:
            all_logits.append(logits.clone())
        nxt = forced[:, i] if forced is not None else _sample(logits, do_sample=do_sample, temperature=temperature,
                                                            top_k=top_k, top_p=top_p, generator=generator)
        new[:, i] = nxt
        n = i + 1
        if forced is None and eos.numel():
            finished |= torch.isin(nxt, eos)
        last = i == max_new_tokens - 1
        if forced is None and (last or (i + 1) % check_every == 0):
            if stop is not None:
                finished |= stop(torch.cat([input_ids, new[:, : i + 1]], 1)).to(dev)
            if bool(finished.all()):
                break
        if last:
            break
        tok_buf.copy_(nxt.view(B, 1))
        ts = time.perf_counter()
        how = runner.step(forward)
        logits = out_buf["logits"]
        if dev.type == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - ts
        steps.append(dt)
        if on_step is not None:
            on_step(i, how, dt)
    tokens = torch.cat([input_ids, new[:, :n]], 1)
    if forced is None and eos.numel():
        # rows that finished: pad after their EOS, as model.generate does
        hit = torch.isin(new[:, :n], eos)
        after = (hit.long().cumsum(1) - hit.long()) > 0
        tokens[:, P:] = torch.where(after, torch.full_like(new[:, :n], pad), new[:, :n])
        done_at = [int(r.nonzero()[0]) + 1 if r.any() else n for r in hit]
    info = {"enabled": graphs, "captured": len(runner.graphs), "replays": runner.replays,
            "disabled_reason": runner.disabled_reason}
    return GenerationResult(tokens=tokens, logits=None if all_logits is None else torch.stack(all_logits, 1),
                            prefill_seconds=prefill_s, step_seconds=steps, graphs=info, finished=done_at)

