"""Policy mixers: drop-in replacements for the SSM mixers of transformers models.

Each mixer adopts the original module's parameters and submodules (the state_dict keys do not
change), recomputes the module's projections, causal conv and gating exactly as transformers does,
and hands the recurrence to ``precision_lab.layer.run_layer`` under a state policy. With the
``fp32`` policy the mixer reproduces the unmodified transformers forward (prefill and cached decode)
to fp32 tolerance.

Streams and caches. A forward with a transformers cache continues the stream kept beside that
cache (``StreamContext``, attached to the cache object): the first call is the prefill (one
checkpoint write, docs/design.md §4) unless the context says otherwise, and every later token is a decode
step. The conv state lives in the transformers cache (``cache.update_conv_state``, the same call in
transformers 5.17 and 5.24, updated in place); the recurrent state (update checkpoint, read copy,
partial window buffer, counters) is kept in the context, as a ``LayerState`` (torch engines) or,
once decode steps run on the GPU kernels, as a ``DeviceState`` (``precision_lab.state``) that
stays on the device: a decode step then launches the decode-step kernels with no host sync and no
conversion, which is what lets ``precision_lab.generation`` capture whole decode steps in CUDA
graphs. A forward without a cache is one stateless prefill.

Engines (``precision_lab.engines``): ``auto`` serves a prefill with the Triton scans on CUDA (the
torch scan elsewhere) and every decode token with ``triton-decode`` on CUDA (``decode``
elsewhere); a stream whose state is on the device keeps its decode steps there, one kernel step
per token also for multi-token forwards. Layers the decode-step kernels cannot serve (KDA, custom
and MX formats) run the torch ``decode`` engine, and ``served`` records the reason.

Several policies in one batch. A mixer can hold G policies: rows ``[g*B, (g+1)*B)`` of a batch of
``G*B`` rows run under ``policies[g]``, each group with its own ``run_layer`` call and state. The KL
driver uses this to run the fp32 reference and every policy in lockstep on shared weights.

Limitations: beam search (``cache.reorder_cache``) and speculative cache cropping are not carried
into the context; use greedy/sampled generation or the layer API's ``drafts=``.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from precision_lab.engines import check_engine, resolve
from precision_lab.layer import GDNInputs, KDAInputs, Mamba2Inputs, run_layer
from precision_lab.policy import StatePolicy
from precision_lab.state import DeviceState, LayerState


@dataclass
class StreamContext:
    """Per-stream bookkeeping kept beside a transformers cache.

    states:      layer_idx -> [LayerState | DeviceState] per policy group
    seq_ids:     [B] global sequence ids for the SR counters of every group (default arange(B))
    first_is_prefill: the first forward of the stream is a prefill (False: every token is a decode step)
    engine:      engine override for every mixer of this stream (None: the mixer's own setting)
    tokens:      layer_idx -> tokens processed so far
    """

    states: dict[int, list[LayerState | DeviceState]] = field(default_factory=dict)
    seq_ids: torch.Tensor | None = None
    first_is_prefill: bool = True
    engine: str | None = None
    tokens: dict[int, int] = field(default_factory=dict)


_CTX_ATTR = "_precision_lab_stream"


def stream_context(cache, create: bool = True) -> StreamContext | None:
    """The StreamContext attached to a transformers cache (created on first use)."""
    if cache is None:
        return None
    ctx = getattr(cache, _CTX_ATTR, None)
    if ctx is None and create:
        ctx = StreamContext()
        setattr(cache, _CTX_ATTR, ctx)
    return ctx


_CACHE_TENSORS = ("keys", "values", "conv_states", "recurrent_states")


def branch_stream(cache, index: torch.Tensor):
    """A new cache whose rows are rows ``index`` [N] of ``cache`` (repeats allowed), with the
    stream's policy states branched alike: N independent continuations of a shared prefix, e.g. one
    per answer choice after a context prefilled once. Works for transformers' Dynamic and Static
    caches (the per-layer ``keys``/``values``/``conv_states``/``recurrent_states`` tensors)."""
    import copy

    from precision_lab.state import select_rows

    index = torch.as_tensor(index, dtype=torch.long)
    new = copy.copy(cache)
    new.layers = []
    for layer in cache.layers:
        lay = copy.copy(layer)
        for name in _CACHE_TENSORS:
            val = getattr(layer, name, None)
            if isinstance(val, torch.Tensor) and val.dim() > 0:
                setattr(lay, name, val.index_select(0, index.to(val.device)))
            elif isinstance(val, (list, tuple)):
                setattr(lay, name, type(val)(v.index_select(0, index.to(v.device)) if isinstance(v, torch.Tensor)
                                             and v.dim() > 0 else v for v in val))
            elif isinstance(val, dict):
                setattr(lay, name, {k: (v.index_select(0, index.to(v.device)) if isinstance(v, torch.Tensor)
                                        and v.dim() > 0 else v) for k, v in val.items()})
        if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor):
            lay.cumulative_length = layer.cumulative_length.clone()
        for name in ("has_previous_state", "is_conv_states_initialized", "is_recurrent_states_initialized",
                     "conv_kernel_size"):
            if isinstance(getattr(layer, name, None), (list, dict)):
                setattr(lay, name, copy.copy(getattr(layer, name)))
        if hasattr(layer, "batch_size"):
            lay.batch_size = int(index.numel())
        new.layers.append(lay)
    ctx = stream_context(cache, create=False)
    if ctx is not None:
        n_ctx = StreamContext(states={k: [select_rows(s, index) for s in v] for k, v in ctx.states.items()},
                              seq_ids=None if ctx.seq_ids is None else ctx.seq_ids.index_select(
                                  0, index.to(ctx.seq_ids.device)),
                              first_is_prefill=ctx.first_is_prefill, engine=ctx.engine, tokens=dict(ctx.tokens))
        setattr(new, _CTX_ATTR, n_ctx)
    return new


class PolicyMixer(nn.Module):
    """Base class. Subclasses implement ``_mix(hidden_states, cache, attention_mask) -> output``."""

    kind = ""

    def __init__(self, original: nn.Module, policies, engine: str = "auto"):
        super().__init__()
        # Adopt the original's parameters, buffers and children under the same names, so the
        # state_dict (and weight tying, device moves, dtype casts) are exactly the original's.
        for name, p in original._parameters.items():
            self._parameters[name] = p
        for name, b in original._buffers.items():
            self._buffers[name] = b
        for name, m in original._modules.items():
            self._modules[name] = m
        # Plain attributes (sizes, layer_idx, activation, time_step_limit...) are read by _mix.
        for name, v in vars(original).items():
            if not name.startswith("_") and name != "training" and not isinstance(v, (nn.Module, torch.Tensor)):
                self.__dict__[name] = v
        self.training = original.training
        self.original_class = type(original).__name__
        self.served: Counter = Counter()
        self.set_policies(policies, engine=engine)

    # -- configuration -----------------------------------------------------------------------
    def set_policies(self, policies, engine: str | None = None) -> None:
        if isinstance(policies, (str, StatePolicy)):
            policies = [policies]
        self.policies = tuple(StatePolicy.parse(p) for p in policies)
        if not self.policies:
            raise ValueError("at least one policy is needed")
        if engine is not None:
            self.engine = check_engine(engine)

    def extra_repr(self) -> str:
        return f"{self.original_class}, policies={[p.short_str() for p in self.policies]}, engine={self.engine}"

    # -- the recurrence ----------------------------------------------------------------------
    def _recur(self, inputs_for_rows, batch: int, cache, device: torch.device, T: int) -> torch.Tensor:
        """Run each policy group's rows; ``inputs_for_rows(sl)`` builds the inputs of rows sl."""
        from precision_lab.engines.triton_decode import decode_tokens, device_unsupported, to_device_state
        from precision_lab.state import codes_missing_reason

        G = len(self.policies)
        if batch % G:
            raise ValueError(f"batch of {batch} rows is not a multiple of the {G} policies this mixer holds")
        per = batch // G
        ctx = stream_context(cache)
        prev = ctx.states.get(self.layer_idx) if ctx is not None else None
        on_device = prev is not None and isinstance(prev[0], DeviceState)
        asked = (ctx.engine if ctx is not None and ctx.engine else None) or self.engine
        engine = "triton-decode" if (asked == "auto" and on_device) else resolve(asked, tokens=T, device=device)
        seq_ids = ctx.seq_ids if ctx is not None and ctx.seq_ids is not None else None
        if seq_ids is not None and seq_ids.numel() != per:
            raise ValueError(f"stream has {seq_ids.numel()} sequence ids but {per} rows per policy")
        first = prev is None
        prefill = T if (first and (ctx is None or ctx.first_is_prefill)) else 0
        outs, new_states = [], []
        for g, policy in enumerate(self.policies):
            sl = slice(g * per, (g + 1) * per)
            inputs = inputs_for_rows(sl)
            st = None if first else prev[g]
            if engine == "triton-decode" and not first:
                reason = device_unsupported(self.kind, policy, *_state_dims(inputs), device) or codes_missing_reason(st)
                if reason is None:
                    ds = to_device_state(st, _groups(inputs), device)
                    outs.append(decode_tokens(ds, inputs))
                    self.served[("triton-decode", f"triton:{self.kind}_"
                                 f"{'replay' if policy.is_replay else 'conventional'}_step")] += 1
                    new_states.append(ds)
                    continue
            if isinstance(st, DeviceState):
                st = st.to_layer_state(torch.float32)
            kw = dict(layer_index=self.layer_idx, seq_ids=None if seq_ids is None else seq_ids.to(device))
            if first:
                y, stats = run_layer(inputs, policy, engine=engine, prefill_len=prefill, **kw)
            else:
                y, stats = run_layer(inputs, policy, engine=engine, state=st, **kw)
            self.served[(stats.engine, stats.implementation)] += 1
            outs.append(y)
            new_states.append(stats.extra.get("device_state", stats.state))
        if ctx is not None:
            ctx.states[self.layer_idx] = new_states
            ctx.tokens[self.layer_idx] = ctx.tokens.get(self.layer_idx, 0) + T
        return outs[0] if G == 1 else torch.cat(outs, dim=0)

    def _conv(self, x: torch.Tensor, cache, act: bool = True) -> torch.Tensor:
        """Depthwise causal conv over x [B, C, T] continuing the conv state in the transformers cache."""
        T = x.shape[-1]
        if cache is not None:
            # Prefill: pads to the kernel width and stores the tail; later calls: returns
            # cat(stored state, x) and stores the new tail (transformers 5.17 and 5.24 alike).
            x = cache.update_conv_state(x, self.layer_idx, conv_kernel_size=self.conv_kernel_size)
        w = self.conv1d.weight.squeeze(1)
        out = F.conv1d(x.to(w.dtype), w.unsqueeze(1), self.conv1d.bias, padding=w.shape[-1] - 1,
                       groups=w.shape[0])[:, :, : x.shape[-1]]
        out = out[:, :, -T:]
        if act:
            out = F.silu(out) if self.activation in ("silu", "swish") else _act(self.activation)(out)
        return out.to(x.dtype)

    def forward(self, hidden_states: torch.Tensor, cache=None, attention_mask=None, cache_params=None,
                **kwargs) -> torch.Tensor:
        # transformers 5.17 passes the cache as cache_params=, 5.24 as cache=
        cache = cache if cache is not None else cache_params
        if cache is not None and not hasattr(cache, "update_conv_state"):
            raise TypeError(f"{type(cache).__name__} holds no conv states; policy mixers need a transformers "
                            "cache with linear-attention layers (DynamicCache(config=model.config) or new_stream())")
        return self._mix(hidden_states, cache, attention_mask)


def _state_dims(inputs) -> tuple[int, int]:
    """(R, C) of a layer's state matrix."""
    if inputs.kind == "mamba2":
        return inputs.x.shape[-1], inputs.B.shape[-1]
    return inputs.v.shape[-1], inputs.q.shape[-1]


def _groups(inputs) -> int:
    return inputs.B.shape[2] if inputs.kind == "mamba2" else inputs.q.shape[2]


def _act(name: str):
    from transformers.activations import ACT2FN

    return ACT2FN[name]


def _mask_padding(h: torch.Tensor, attention_mask) -> torch.Tensor:
    """transformers' apply_mask_to_padding_states: zero the padded positions of a 2-D mask."""
    if attention_mask is not None and attention_mask.ndim == 2 and attention_mask.shape[1] == h.shape[1]:
        return (h * attention_mask[:, :, None]).to(h.dtype)
    return h


def _l2norm_rsqrt(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Qwen3.5's l2norm (x * rsqrt(sum x^2 + eps)), in fp32."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def _l2norm_div(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Kimi-Linear's l2norm (x / sqrt(sum x^2 + eps)), in fp32."""
    return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True) + eps)


# ---------------------------------------------------------------------------------------------
class GDNPolicyMixer(PolicyMixer):
    """Qwen3.5 (and Qwen3.5-MoE) Gated DeltaNet."""

    kind = "gdn"

    def _mix(self, hidden_states, cache, attention_mask):
        hidden_states = _mask_padding(hidden_states, attention_mask)
        Bt, T, _ = hidden_states.shape
        mixed = self._conv(self.in_proj_qkv(hidden_states).transpose(1, 2), cache).transpose(1, 2)
        z = self.in_proj_z(hidden_states).reshape(Bt, T, -1, self.head_v_dim)
        b = self.in_proj_b(hidden_states)
        a = self.in_proj_a(hidden_states)
        q, k, v = torch.split(mixed, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = _l2norm_rsqrt(q.reshape(Bt, T, -1, self.head_k_dim).float())
        k = _l2norm_rsqrt(k.reshape(Bt, T, -1, self.head_k_dim).float())
        v = v.reshape(Bt, T, -1, self.head_v_dim).float()
        beta = b.sigmoid().float()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)

        def rows(sl):
            return GDNInputs(q[sl], k[sl], v[sl], g[sl], beta[sl], scale=None, qk_l2norm=False)

        y = self._recur(rows, Bt, cache, hidden_states.device, T).to(mixed.dtype)
        y = self.norm(y.reshape(-1, self.head_v_dim), z.reshape(-1, self.head_v_dim))
        return self.out_proj(y.reshape(Bt, T, -1))


class Mamba2PolicyMixer(PolicyMixer):
    """Mamba-2 mixers of Nemotron-H and of Mamba-2 models (same parameterisation)."""

    kind = "mamba2"

    def _mix(self, hidden_states, cache, attention_mask):
        Bt, T, _ = hidden_states.shape
        dtype = hidden_states.dtype
        hidden_states = _mask_padding(hidden_states, attention_mask)
        proj = self.in_proj(hidden_states)
        A = -torch.exp(self.A_log.float())
        gate, xBC, dt = proj.split([self.intermediate_size, self.conv_dim, self.num_heads], dim=-1)
        xBC = self._conv(xBC.transpose(1, 2), cache).transpose(1, 2)
        xBC = _mask_padding(xBC, attention_mask)
        x, Bm, Cm = torch.split(xBC, [self.intermediate_size, self.n_groups * self.ssm_state_size,
                                      self.n_groups * self.ssm_state_size], dim=-1)
        x = x.reshape(Bt, T, self.num_heads, self.head_dim).float()
        Bm = Bm.reshape(Bt, T, self.n_groups, self.ssm_state_size).float()
        Cm = Cm.reshape(Bt, T, self.n_groups, self.ssm_state_size).float()
        dt = dt.float()
        ctx = stream_context(cache)
        is_prefill = (ctx is None or (self.layer_idx not in ctx.states and ctx.first_is_prefill))
        lo, hi = self.time_step_limit if hasattr(self, "time_step_limit") else (0.0, float("inf"))
        if is_prefill and (lo > 0.0 or hi != float("inf")):
            # transformers clamps softplus(dt + dt_bias) in its chunked prefill (not in decode steps).
            # run_layer takes the raw dt, so where the clamp bites we substitute the raw value whose
            # softplus is the clamp bound.
            sp = F.softplus(dt + self.dt_bias.float())
            cl = sp.clamp(min=lo, max=hi)
            inv = torch.where(cl > 20, cl, torch.log(torch.expm1(cl))) - self.dt_bias.float()
            dt = torch.where(cl != sp, inv, dt)
        D = self.D.float()
        dt_bias = self.dt_bias.float()

        def rows(sl):
            return Mamba2Inputs(x[sl], dt[sl], A, Bm[sl], Cm[sl], D=D, dt_bias=dt_bias, z=None)

        y = self._recur(rows, Bt, cache, hidden_states.device, T).float()
        y = self.norm(y.reshape(Bt, T, -1), gate)
        return self.out_proj(y.to(dtype))


class KDAPolicyMixer(PolicyMixer):
    """Kimi-Linear's Kimi Delta Attention (per-channel decay)."""

    kind = "kda"

    def _mix(self, hidden_states, cache, attention_mask):
        hidden_states = _mask_padding(hidden_states, attention_mask)
        Bt, T = hidden_states.shape[:2]
        shape = (Bt, T, -1, self.head_dim)
        mixed = torch.cat([self.q_proj(hidden_states), self.k_proj(hidden_states), self.v_proj(hidden_states)],
                          dim=-1).transpose(1, 2)
        mixed = self._conv(mixed, cache).transpose(1, 2)
        q, k, v = torch.split(mixed, [self.qkv_dim] * 3, dim=-1)
        q = _l2norm_div(q.reshape(shape).float())
        k = _l2norm_div(k.reshape(shape).float())
        v = v.reshape(shape).float()
        g = self.forget_gate(hidden_states).float()
        beta = torch.sigmoid(self.b_proj(hidden_states)).float()

        def rows(sl):
            return KDAInputs(q[sl], k[sl], v[sl], g[sl], beta[sl], scale=None, qk_l2norm=False)

        y = self._recur(rows, Bt, cache, hidden_states.device, T).to(mixed.dtype)
        gate = self.g_b_proj(self.g_a_proj(hidden_states)).view(shape)
        out = self.o_norm(y, gate).reshape(Bt, T, -1)
        return self.o_proj(out)


# transformers class name -> policy mixer
MIXERS: dict[str, type[PolicyMixer]] = {
    "Qwen3_5GatedDeltaNet": GDNPolicyMixer,
    "Qwen3_5MoeGatedDeltaNet": GDNPolicyMixer,
    "NemotronHMamba2Mixer": Mamba2PolicyMixer,
    "Mamba2Mixer": Mamba2PolicyMixer,
    "KimiLinearDeltaAttention": KDAPolicyMixer,
}
