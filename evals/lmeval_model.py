"""lm-eval model ``replayssm``: a Hugging Face model whose SSM state is decoded under a state policy.

    lm_eval --model replayssm \\
        --model_args pretrained=Qwen/Qwen3.5-4B,policy=split:fp16-sr/nvfp4,seed=0 --tasks ...

model_args (besides every HFLM argument: dtype, batch_size, max_length, device, ...):
    pretrained  hub id, local path, or a precision-lab preset (``tiny-qwen3.5``, ...: offline, with
                the local byte tokenizer)
    policy      state policy string (``fp32``, ``shared:nvfp4-sr``, ``split:fp16-sr/nvfp4@L16`` ...)
    seed        stochastic-rounding seed (default 0)
    engine      ``auto`` (default: on CUDA the Triton decode-step kernels for decode tokens and the
                Triton scans for prefills; the torch engines elsewhere), ``decode``, ``scan``,
                ``triton`` or ``triton-decode`` (see precision_lab.models.apply_policy)
    scoring     ``stock`` (default) or ``decode`` for loglikelihood requests, see below
    prompt      ``prefill`` (default) or ``decode``: how the prompt (the context) enters the state, see
                below
    fast_decode ``auto`` (default: on when the model is on CUDA), ``true`` or ``false``: generate and
                decode-score through ``precision_lab.generation`` (static caches, decode steps as
                CUDA graphs) instead of ``model.generate``; same tokens, same scores
    graphs      ``true`` (default) or ``false``: capture decode steps in CUDA graphs on the fast path

Generation (``generate_until``): HFLM's batching, stop sequences and post-processing are kept; the
model's SSM mixers are the policy mixers of ``precision_lab.models``, and every generation runs as
one stream: the prompt is a prefill written once into the checkpoint, then each new token is a
decode step of the policy (ReplaySSM windows of L with a flush every L steps for shared/split).
With the ``fp32`` policy this reproduces stock HFLM token for token.

Scoring (``loglikelihood``): stock HFLM scores a continuation with one full forward, which is a
prefill: a quantized *decode* state never enters the score. ``scoring=decode`` instead prefills the
context and feeds the continuation one token at a time through the decode path, reading each
token's log-probability from the step that predicts it. On the fast path each distinct context is
prefilled once and its stream branched per continuation (``precision_lab.models.branch_stream``):
the answer choices of a question share one prefill, and each choice starts from exactly the state it
would have alone (its SR sequence id is the context's); the scores then agree with separate streams
to fp32 rounding (a batch of another size sums the projections in another order).

Prompt (``prompt=prefill|decode``). By default a prompt is a prefill: its state is computed in
one pass and written once into the checkpoint, so a lossy policy touches only what is decoded after
it (the generated tokens, or a scored continuation). ``prompt=decode`` runs the prompt's tokens as
decode steps instead (one forward with the decode path's semantics: ReplaySSM windows of L, flushes,
SR, the same as ``precision_lab.teacher_forced``, served by the scan engines), so the continuation
reads the state the lossy decode path built over the whole context, as if the context had been
generated. The prompt must then be unpadded: decode scoring prefills one context per batch (its
choices are the rows), and generation refuses a padded batch (use ``batch_size=1``). Stock scoring
runs no stream, so ``prompt=decode`` needs ``scoring=decode`` for loglikelihood requests.

SR sequence ids. Each request's stream draws its stochastic-rounding bits under a sequence id
derived from its prompt tokens (CRC-32 of the token ids, 16 bits: the width of the Philox counter
field), so a request's result does not depend on batch composition, order or data-parallel rank.
"""
from __future__ import annotations

import logging
import zlib
from collections.abc import Sequence

import torch
import torch.nn.functional as F
import transformers
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM
from precision_lab.quant.philox import SEQ_BITS
from tqdm import tqdm

from precision_lab.policy import StatePolicy

log = logging.getLogger(__name__)

SCORING_MODES = ("stock", "decode")
PROMPT_MODES = ("prefill", "decode")


def _flag(value, name: str) -> bool | None:
    """A model_args switch: true/false (None for "auto")."""
    text = str(value).strip().lower()
    if text == "auto":
        return None
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be true, false or auto, got {value!r}")


def _cache_kwarg() -> str:
    """Name of generate()'s cache keyword: ``cache`` in transformers >= 5.2x, ``past_key_values`` before."""
    from transformers.generation import utils as gen_utils

    return "cache" if "cache" in getattr(gen_utils, "ALL_CACHE_NAMES", ()) else "past_key_values"


def prompt_seq_id(tokens: Sequence[int]) -> int:
    """SR sequence id of a stream: CRC-32 of its prompt token ids, cut to the counter's 16 bits."""
    data = b"".join(int(t).to_bytes(4, "little", signed=False) for t in tokens)
    return zlib.crc32(data) & ((1 << SEQ_BITS) - 1)


class _LengthTap:
    """Stands in for HFLM's cache hook during generate_until to learn each request's generation
    length: HFLM calls ``add_partial("generate_until", (context, gen_kwargs), text)`` once per row,
    in row order, right after ``_model_generate`` returned that batch (whose lengths we queued)."""

    def __init__(self, hook, lm: ReplaySSMLM):
        self.hook, self.lm = hook, lm

    def add_partial(self, attr, req, res):
        if attr == "generate_until" and self.lm._pending_lengths:
            self.lm.generation_lengths[req[0]] = self.lm._pending_lengths.pop(0)
        return self.hook.add_partial(attr, req, res)

    def __getattr__(self, name):
        return getattr(self.hook, name)


class _ForceTokens(transformers.LogitsProcessor):
    """Makes generate() emit given tokens: step s of row b emits ``forced[b, s]``.

    Used by decode scoring so the continuation is fed back token by token through the decode path;
    the scores are read from the raw logits, before this processor runs."""

    def __init__(self, forced: torch.Tensor, prompt_len: int):
        self.forced = forced          # [B, T] token ids (pad beyond a row's continuation)
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.prompt_len
        out = torch.full_like(scores, float("-inf"))
        out.scatter_(1, self.forced[:, step : step + 1], 0.0)
        return out


@register_model("replayssm")
class ReplaySSMLM(HFLM):
    """HFLM whose SSM mixers run a precision-lab state policy (see the module docstring)."""

    def __init__(self, pretrained: str | transformers.PreTrainedModel = "tiny-qwen3.5", policy: str = "fp32",
                 seed: int | str = 0, engine: str = "auto", scoring: str = "stock", fast_decode: str | bool = "auto",
                 graphs: str | bool = True, prompt: str = "prefill", **kwargs) -> None:
        from precision_lab.models import PRESETS, apply_policy, load_model

        if scoring not in SCORING_MODES:
            raise ValueError(f"scoring must be one of {SCORING_MODES}, got {scoring!r}")
        if prompt not in PROMPT_MODES:
            raise ValueError(f"prompt must be one of {PROMPT_MODES}, got {prompt!r}")
        self.state_policy = StatePolicy.parse(str(policy), seed=int(seed)).validate()
        self.scoring = scoring
        self.prompt = prompt
        self.engine = engine
        self._fast = _flag(fast_decode, "fast_decode")
        self.graphs = bool(_flag(graphs, "graphs") if str(graphs).lower() != "auto" else True)
        if isinstance(pretrained, str) and pretrained in PRESETS:
            # Presets build offline with their own byte tokenizer; HFLM then wraps the instance.
            device = kwargs.pop("device", None) or ("cuda" if torch.cuda.is_available() else "cpu")
            dtype = kwargs.pop("dtype", None)
            model, tok = load_model(pretrained, device=device,
                                    dtype=None if dtype in (None, "auto") else dtype)
            model.precision_lab_source = {"preset": pretrained}
            kwargs.setdefault("tokenizer", tok)
            self.preset = pretrained
            pretrained = model
        else:
            self.preset = None
        super().__init__(pretrained=pretrained, **kwargs)
        if self.backend != "causal":
            raise ValueError("replayssm supports decoder-only (causal) models only")
        apply_policy(self._model, self.state_policy, engine=engine, seed=self.state_policy.seed)
        self.fast_decode = (self.device.type == "cuda") if self._fast is None else self._fast
        self.streams = 0  # generation / scoring streams run (each = prefill + decode steps)
        # context string -> generated tokens until the row finished (EOS / stop sequence / limit)
        self.generation_lengths: dict[str, int] = {}
        self._pending_lengths: list[int] = []

    def set_policy(self, policy: str | StatePolicy, seed: int | None = None) -> None:
        """Switch the state policy in place (the runner reuses one loaded model for every policy)."""
        from precision_lab.models import apply_policy

        seed = self.state_policy.seed if seed is None else int(seed)
        self.state_policy = StatePolicy.parse(policy, seed=seed).validate()
        apply_policy(self._model, self.state_policy, engine=self.engine, seed=seed)

    # -- streams ---------------------------------------------------------------------------------
    def _new_stream(self, context: torch.Tensor, attention_mask: torch.Tensor | None):
        """A fresh cache whose SR sequence ids are the prompts' CRCs (pad positions excluded)."""
        from precision_lab.models import new_stream

        self._check_unpadded(attention_mask)
        self.streams += 1
        return new_stream(self.model, seq_ids=self._seq_ids(context, attention_mask),
                          first_is_prefill=self.prompt == "prefill")

    def _check_unpadded(self, attention_mask: torch.Tensor | None) -> None:
        if self.prompt == "decode" and attention_mask is not None and not bool(attention_mask.bool().all()):
            raise ValueError("replayssm: prompt=decode runs each prompt token as a decode step, so prompts must be "
                             "unpadded (a pad position would be a step too); use batch_size=1")

    def _model_generate(self, context: torch.Tensor, max_length: int, stop: list[str],
                        **generation_kwargs) -> torch.Tensor:
        """HFLM's generation with the policy stream attached: prefill, then one decode step per token."""
        if generation_kwargs.get("num_beams", 1) not in (1, None):
            raise ValueError("replayssm: beam search is not supported (the policy state does not follow "
                             "beam reordering); use greedy or sampled decoding")
        if self.fast_decode:
            out = self._fast_generate(context, max_length, stop, **generation_kwargs)
        else:
            generation_kwargs[_cache_kwarg()] = self._new_stream(context, generation_kwargs.get("attention_mask"))
            out = super()._model_generate(context, max_length, stop, **generation_kwargs)
        self._pending_lengths.extend(self._finished_lengths(out[:, context.shape[1]:], stop))
        return out

    def _seq_ids(self, context: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        ids = []
        for b in range(context.shape[0]):
            row = context[b] if attention_mask is None else context[b][attention_mask[b].bool()]
            ids.append(prompt_seq_id(row.tolist()))
        return torch.tensor(ids, dtype=torch.int64)

    def _fast_generate(self, context: torch.Tensor, max_length: int, stop: list[str],
                       **generation_kwargs) -> torch.Tensor:
        """``_model_generate`` through ``precision_lab.generation.generate``: the same greedy (or
        sampled) tokens as ``model.generate``, rows padded after EOS; stop strings end the batch early."""
        from precision_lab.generation import generate

        mask = generation_kwargs.get("attention_mask")
        self._check_unpadded(mask)
        n_new = max_length - context.shape[1]
        if n_new < 1:
            return context
        stops = [s for s in stop if s]
        P = context.shape[1]

        def stopped(tokens: torch.Tensor) -> torch.Tensor:
            texts = self.tokenizer.batch_decode(tokens[:, P:].tolist(), skip_special_tokens=False)
            return torch.tensor([any(s in t for s in stops) for t in texts], dtype=torch.bool)

        eos = {self.eot_token_id}
        cfg_eos = getattr(self.model.generation_config, "eos_token_id", None)
        eos |= set(cfg_eos if isinstance(cfg_eos, list) else [cfg_eos] if cfg_eos is not None else [])
        temp = float(generation_kwargs.get("temperature", 0.0) or 0.0)
        do_sample = bool(generation_kwargs.get("do_sample", False)) and temp > 0
        self.streams += 1
        with torch.autocast(device_type=self.device.type, dtype=self.mixed_precision_dtype,
                            enabled=self.mixed_precision_dtype is not None):
            res = generate(self.model, context, mask, max_new_tokens=n_new, graphs=self.graphs,
                           eos_token_id=sorted(e for e in eos if e is not None), pad_token_id=self._pad_id(),
                           stop=stopped if stops else None, do_sample=do_sample, temperature=temp or 1.0,
                           top_k=int(generation_kwargs.get("top_k", 0) or 0),
                           top_p=float(generation_kwargs.get("top_p", 1.0) or 1.0),
                           seq_ids=self._seq_ids(context, mask), first_is_prefill=self.prompt == "prefill")
        self.last_generation = {"prefill_seconds": res.prefill_seconds, "steps": res.new_tokens,
                                "step_seconds_median": (sorted(res.step_seconds)[len(res.step_seconds) // 2]
                                                        if res.step_seconds else None), "graphs": res.graphs}
        return res.tokens

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        hook = self.cache_hook
        self.cache_hook, self._pending_lengths = _LengthTap(hook, self), []
        try:
            return super().generate_until(requests, disable_tqdm=disable_tqdm)
        finally:
            self.cache_hook = hook

    def _finished_lengths(self, gen: torch.Tensor, stop: list[str]) -> list[int]:
        """Tokens each row generated until it finished: through its first EOS token or the token that
        completes a stop sequence (the smallest k whose decoded prefix contains one), else all.
        gen: [B, N] generated ids (rows that finished early are padded by generate)."""
        eos = {self.eot_token_id, self._pad_id()}
        cfg_eos = getattr(self.model.generation_config, "eos_token_id", None)
        eos |= set(cfg_eos if isinstance(cfg_eos, list) else [cfg_eos] if cfg_eos is not None else [])
        stops = [s for s in stop if s]
        lengths = []
        for row in gen.tolist():
            n = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))

            def has_stop(k: int, row=row) -> bool:
                text = self.tokenizer.decode(row[:k], skip_special_tokens=False)
                return any(s in text for s in stops)

            if stops and has_stop(n):
                lo, hi = 1, n  # has_stop is monotone in k: once a stop string appears it stays
                while lo < hi:
                    mid = (lo + hi) // 2
                    lo, hi = (lo, mid) if has_stop(mid) else (mid + 1, hi)
                n = lo
            lengths.append(n)
        return lengths

    # -- loglikelihood -----------------------------------------------------------------------------
    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs: int | None = None):
        if self.scoring == "stock":
            if self.prompt == "decode":
                raise ValueError("replayssm: prompt=decode needs scoring=decode for loglikelihood requests (stock "
                                 "scoring is one full forward and runs no decode stream)")
            return super()._loglikelihood_tokens(requests, disable_tqdm=disable_tqdm, override_bs=override_bs)
        return self._decode_loglikelihood(requests, disable_tqdm=disable_tqdm, override_bs=override_bs)

    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.eot_token_id)

    def _score_batch_size(self, override_bs: int | None) -> int:
        if override_bs:
            return int(override_bs)
        bs = self.batch_size
        return int(bs) if str(bs).isdigit() else int(self.max_batch_size or 1)

    def _decode_loglikelihood(self, requests, disable_tqdm: bool = False, override_bs: int | None = None
                              ) -> list[tuple[float, bool]]:
        """Score each (context, continuation) as a stream: the context is the prefill, each
        continuation token is fed by a decode step. Returns (sum log p, greedy) per request, in order.

        requests: [((context str, continuation str) | None, context tokens, continuation tokens)]
        """
        n = len(requests)
        # choices of one context next to each other, so a batch prefills each context once
        order = sorted(range(n), key=lambda i: (-len(requests[i][1]), tuple(requests[i][1]), -len(requests[i][2])))
        bs = self._score_batch_size(override_bs)
        pad = self._pad_id()
        results: list[tuple[float, bool] | None] = [None] * n
        pbar = tqdm(total=n, disable=disable_tqdm or self.rank != 0, desc="Scoring through the decode path")
        for idx in self._score_batches(requests, order, bs):
            ctxs, conts = [], []
            for i in idx:
                _, ctx, cont = requests[i]
                if not cont:
                    raise ValueError("empty continuation in a loglikelihood request")
                if len(cont) > self.max_length:
                    raise ValueError(f"continuation of {len(cont)} tokens exceeds max_length {self.max_length}")
                # Same left truncation as stock HFLM: keep the last max_length + 1 tokens of ctx+cont
                # (the last continuation token is predicted, never fed).
                full = (list(ctx) + list(cont))[-(self.max_length + 1):]
                ctx_part = full[: len(full) - len(cont)]
                if not ctx_part:
                    raise ValueError("loglikelihood request with an empty context")
                ctxs.append(ctx_part)
                conts.append(list(cont))
            T = max(map(len, conts))
            forced = torch.full((len(idx), T), pad, dtype=torch.long)
            for r, k in enumerate(conts):
                forced[r, : len(k)] = torch.tensor(k)
            forced = forced.to(self.device)
            if self.fast_decode:
                logits = self._branched_decode(ctxs, forced)  # [B, T, V]
            else:
                inp, mask = self._left_pad(ctxs)
                logits = self._forced_decode(inp, mask, forced)
            logp = F.log_softmax(logits.float(), dim=-1)
            for r, i in enumerate(idx):
                k = forced[r, : len(conts[r])]
                lp = logp[r, : len(k)].gather(-1, k.unsqueeze(-1)).squeeze(-1)
                greedy = bool((logits[r, : len(k)].argmax(-1) == k).all())
                results[i] = (float(lp.double().sum()), greedy)
                req = requests[i][0]
                if req is not None:
                    self.cache_hook.add_partial("loglikelihood", req, results[i])
                pbar.update(1)
        pbar.close()
        return results  # type: ignore[return-value]

    def _score_batches(self, requests, order: list[int], bs: int) -> list[list[int]]:
        """Request indices per scoring batch: ``bs`` at a time in ``order``; with ``prompt=decode``
        one context per batch (its continuations, ``bs`` at a time), so no prompt is padded."""
        if self.prompt != "decode":
            return [order[s : s + bs] for s in range(0, len(order), bs)]
        batches: list[list[int]] = []
        for i in order:
            if batches and len(batches[-1]) < bs and tuple(requests[batches[-1][0]][1]) == tuple(requests[i][1]):
                batches[-1].append(i)
            else:
                batches.append([i])
        return batches

    def _left_pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token rows left-padded to one length: (ids [B, P], mask [B, P]) on the model's device."""
        P = max(map(len, rows))
        inp = torch.full((len(rows), P), self._pad_id(), dtype=torch.long)
        mask = torch.zeros((len(rows), P), dtype=torch.long)
        for r, c in enumerate(rows):
            inp[r, P - len(c):] = torch.tensor(c)
            mask[r, P - len(c):] = 1
        return inp.to(self.device), mask.to(self.device)

    @torch.no_grad()
    def _branched_decode(self, ctxs: list[list[int]], forced: torch.Tensor) -> torch.Tensor:
        """Decode scoring with one prefill per distinct context: each context's stream is branched
        per continuation (``precision_lab.generation.score_branches``). Returns logits [B, T, V]."""
        from precision_lab.generation import score_branches

        uniq: dict[tuple, int] = {}
        branch_of = [uniq.setdefault(tuple(c), len(uniq)) for c in ctxs]
        contexts = [list(c) for c in uniq]
        inp, mask = self._left_pad(contexts)
        self.streams += len(contexts)
        self.prefills_saved = getattr(self, "prefills_saved", 0) + len(ctxs) - len(contexts)
        with torch.autocast(device_type=self.device.type, dtype=self.mixed_precision_dtype,
                            enabled=self.mixed_precision_dtype is not None):
            return score_branches(self.model, inp, mask, torch.tensor(branch_of), forced, graphs=self.graphs,
                                  seq_ids=self._seq_ids(inp, mask), first_is_prefill=self.prompt == "prefill")

    @torch.no_grad()
    def _forced_decode(self, inp: torch.Tensor, mask: torch.Tensor, forced: torch.Tensor) -> torch.Tensor:
        """Prefill ``inp`` [B, P] (left-padded), then feed ``forced`` [B, T] one token per decode step.
        Returns the raw logits [B, T, V] of the T steps (step s predicts forced[:, s])."""
        T = forced.shape[1]
        gen_cfg = transformers.GenerationConfig(
            max_new_tokens=T, min_new_tokens=T, do_sample=False, num_beams=1,
            pad_token_id=self._pad_id(),
            output_logits=True, return_dict_in_generate=True)
        with torch.autocast(device_type=self.device.type, dtype=self.mixed_precision_dtype,
                            enabled=self.mixed_precision_dtype is not None):
            out = self.model.generate(input_ids=inp, attention_mask=mask, generation_config=gen_cfg,
                                      logits_processor=transformers.LogitsProcessorList([_ForceTokens(forced, inp.shape[1])]),
                                      # no EOS: a continuation holding the EOS token must not end the stream
                                      # (a kwarg, since None in generation_config is filled from the model's)
                                      eos_token_id=None,
                                      **{_cache_kwarg(): self._new_stream(inp, mask)})
        if len(out.logits) != T:
            raise RuntimeError(f"decode scoring produced {len(out.logits)} steps for {T} continuation tokens")
        return torch.stack(out.logits, dim=1)

    # -- provenance ----------------------------------------------------------------------------
    def get_model_info(self) -> dict:
        info = super().get_model_info() if self.preset is None else {}
        report = self.model.precision_lab_report() if hasattr(self.model, "precision_lab_report") else {}
        info.update({"replayssm_policy": self.state_policy.short_str(), "replayssm_seed": self.state_policy.seed,
                     "replayssm_engine": self.engine, "replayssm_scoring": self.scoring,
                     "replayssm_prompt": self.prompt,
                     "replayssm_fast_decode": self.fast_decode, "replayssm_graphs": self.graphs,
                     "replayssm_preset": self.preset, "replayssm_served": report.get("layers")})
        return info
