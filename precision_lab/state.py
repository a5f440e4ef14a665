"""The ReplaySSM state of one SSM layer: one model for every engine (docs/design.md §4).

What a layer carries between tokens, whatever computes them:

    update checkpoint  U [B, H, R, C]   feeds the recurrence; values representable in the update format
    read copy          R [B, H, R, C]   produces outputs between flushes (split mode; U itself otherwise)
    window records     the last W < L token records, oldest first (ReplaySSM modes only)
    counters           step (decode tokens so far), writes (state write events so far; the next
                       write draws its SR bits under event ``writes + 1``), prefill tokens

Two storages of that one state:

* ``LayerState`` — tensors in the compute dtype, records in logical order. The torch engines
  (``decode``, ``scan``) and the teacher-forced Triton scans read and write it.
* ``DeviceState`` — the packed device layout of the decode-step kernels: each stored copy as its
  format's codes (``PackedState``: fp32/bf16/fp16 words, FP8 bytes, NVFP4 nibbles + E4M3 block
  scales + per-matrix scale), the records in a ring of ``next_pow2(L)`` slots addressed by device
  window pointers, and the SR event counter on the device, so a decode step needs no host sync.

The conversion is lossless both ways (``DeviceState.from_layer_state`` / ``to_layer_state``): codes
decode to exactly the stored values, and a ``LayerState`` written by ``StateWriter`` keeps the codes
of its lossy copies beside the values (``update_codes`` / ``read_codes``). That matters for NVFP4,
whose encoding of already-rounded values is not idempotent (the per-matrix scale follows the
amax of the state *before* rounding): re-encoding the values would change them. Elementwise formats
re-encode exactly, so a state without codes converts when its formats are elementwise, and
``from_layer_state`` checks that the codes reproduce the values bit for bit either way.

The schedule (the same for every engine and written once here):

* autoregressive step with W records in the window: a flush iff ``W == L - 1``
  (``is_flush``); the flush folds the window and its own token, writes both copies from the same
  fp32 result, and empties the window; any other step appends one record;
* speculative round of T tokens: a flush iff ``W + 2T > L`` (``is_spec_flush``); committing ``a``
  accepted tokens gives ``W + a`` (no flush) or ``a`` (after a flush) records (``commit_window``);
* every state write (prefill, flush, conventional step, snapshot) is one SR event.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from .policy import StatePolicy
from .recurrences import _core


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


# ---------------------------------------------------------------------------------------------
# The schedule
# ---------------------------------------------------------------------------------------------
def is_flush(window: int, L: int) -> bool:
    """An autoregressive ReplaySSM step with ``window`` buffered records flushes."""
    return window == L - 1


def is_spec_flush(window: int, T: int, L: int) -> bool:
    """A speculative round verifying T tokens with ``window`` committed records flushes first."""
    return window + 2 * T > L


def commit_window(window: int, accepted: int, flushed: bool) -> int:
    """Records in the window after a round that kept ``accepted`` tokens."""
    return accepted if flushed else window + accepted


def spec_rounds(accept, T: int, start: int, end: int):
    """The rounds of a speculative schedule over tokens start..end-1: yields (round r, first token,
    tokens kept a), each round keeping ``accept[r]`` (in 1..T) tokens, the last one cut at ``end``.
    A schedule that ends before the stream, or a count outside 1..T, is an error naming the round."""
    accept = [int(a) for a in (accept.tolist() if isinstance(accept, torch.Tensor) else accept)]
    pos, r = start, 0
    while pos < end:
        if r >= len(accept):
            raise ValueError(f"the acceptance schedule ({len(accept)} rounds) ends at token {pos - start} of "
                             f"{end - start}")
        if not 1 <= accept[r] <= T:
            raise ValueError(f"round {r}: accepted tokens must be in 1..T = 1..{T}, got {accept[r]}")
        a = min(accept[r], end - pos)
        yield r, pos, a
        pos += a
        r += 1


def record_fields(kind: str) -> tuple[str, ...]:
    """The fields of a window record: a (log decay), k (key), u (Mamba-2: dt·x; delta rule: d),
    and for the delta rule also v and beta (the recompute fold re-solves the d's from U with them;
    under ``gdn_fold="buffered"`` no engine reads the buffered v and beta)."""
    return ("a", "k", "u", "v", "beta") if kind in ("gdn", "kda") else ("a", "k", "u")


# ---------------------------------------------------------------------------------------------
# The tensor storage
# ---------------------------------------------------------------------------------------------
@dataclass
class LayerState:
    """Everything a segment boundary must carry, as tensors (the same object for every engine).

    kind:        "mamba2" | "gdn" | "kda"
    policy:      the StatePolicy that produced it (continuing under another policy is an error)
    update:      [B, H, R, C] update checkpoint in the compute dtype; values exactly representable
                 in the update format (for fp32/conventional/shared: the single stored copy)
    read:        [B, H, R, C] read copy (values representable in the read format). For every mode
                 but ``split`` this is the same tensor object as ``update``.
    records:     the partial window buffer in logical order (position 0 = oldest), W records per
                 sequence, per (value) head (``record_fields``):
                   "a"    [B, W, H, 1] log decay (Mamba-2: A·dt; GDN: g) or [B, W, H, C] (KDA)
                   "k"    [B, W, H, C] key (Mamba-2: B of the head's group; GDN/KDA: normalised k)
                   "u"    [B, W, H, R] what is outer-multiplied with k (Mamba-2: dt·x; GDN/KDA: d,
                          computed from the read copy, see ``precision_lab.engines.torch_decode``)
                   "v"    [B, W, H, R] value (GDN/KDA; read by the recompute fold only)
                   "beta" [B, W, H]    (likewise)
                 Empty (W = 0) for fp32/conventional modes.
    window:      W, records in the current window
    step:        decode tokens processed so far (prefill excluded)
    writes:      state writes made so far, the initial cast excluded; the next write's SR event is
                 ``writes + 1`` (docs/design.md §4, counter layout)
    seq_ids:     [B] int64 global sequence ids (SR counters)
    layer_index: SR key
    prefill_tokens: tokens processed as prefill at the start of the stream
    update_codes, read_codes: the stored copies' codes (``PackedState``) where a writer produced
                 them (None: values only; see the module docstring)
    """

    kind: str
    policy: StatePolicy
    update: torch.Tensor
    read: torch.Tensor
    records: dict[str, torch.Tensor]
    window: int
    step: int
    writes: int
    seq_ids: torch.Tensor
    layer_index: int
    prefill_tokens: int = 0
    update_codes: Any = field(default=None, repr=False)
    read_codes: Any = field(default=None, repr=False)

    @property
    def dtype(self) -> torch.dtype:
        return self.update.dtype

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (tensors, ints, strings) for ``torch.save``; ``from_dict`` restores it."""
        p = self.policy
        return {"format": "precision-lab.LayerState/1", "kind": self.kind, "policy": p.short_str(),
                "seed": p.seed, "update": self.update, "read": None if self.read is self.update else self.read,
                "records": dict(self.records), "window": self.window, "step": self.step, "writes": self.writes,
                "seq_ids": self.seq_ids, "layer_index": self.layer_index, "prefill_tokens": self.prefill_tokens,
                "update_codes": _codes_dict(self.update_codes), "read_codes": _codes_dict(self.read_codes)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LayerState:
        """Inverse of ``to_dict``; a file that is not one (or is damaged) raises ValueError."""
        if not isinstance(d, dict) or d.get("format") != "precision-lab.LayerState/1":
            raise ValueError("not a saved precision-lab LayerState (missing format tag 'precision-lab.LayerState/1')")
        try:
            policy = StatePolicy.parse(d["policy"], seed=int(d["seed"]))
            upd = d["update"]
            rd = upd if d["read"] is None else d["read"]
            recs = dict(d["records"])
            st = cls(d["kind"], policy, upd, rd, recs, int(d["window"]), int(d["step"]), int(d["writes"]),
                     d["seq_ids"], int(d["layer_index"]), int(d["prefill_tokens"]),
                     _codes_from_dict(d.get("update_codes")), _codes_from_dict(d.get("read_codes")))
        except (KeyError, TypeError) as e:
            raise ValueError(f"corrupted LayerState: {e!r}") from e
        if not isinstance(upd, torch.Tensor) or upd.dim() != 4 or rd.shape != upd.shape:
            raise ValueError("corrupted LayerState: update/read must be [B, H, R, C] tensors of one shape")
        if (policy.mode == "split") != (rd is not upd):
            raise ValueError("corrupted LayerState: split mode keeps two copies, other modes one")
        for name, t in recs.items():
            if not isinstance(t, torch.Tensor) or t.shape[:2] != (upd.shape[0], st.window):
                raise ValueError(f"corrupted LayerState: record {name!r} does not hold [B, W={st.window}, ...]")
        if not torch.isfinite(upd).all() or not torch.isfinite(rd).all():
            raise ValueError("corrupted LayerState: non-finite checkpoint values")
        return st

    def clone(self) -> LayerState:
        """A deep copy (tensors cloned; ``read is update`` preserved for single-copy modes)."""
        upd = self.update.clone()
        rd = upd if self.read is self.update else self.read.clone()
        cc = (lambda c: None if c is None else c.clone())
        return LayerState(self.kind, self.policy, upd, rd, {k: v.clone() for k, v in self.records.items()},
                          self.window, self.step, self.writes, self.seq_ids.clone(), self.layer_index,
                          self.prefill_tokens, cc(self.update_codes), cc(self.read_codes))

    def with_values(self, update: torch.Tensor, read: torch.Tensor, **changes) -> LayerState:
        """A copy with new stored values whose codes are unknown (a writer that returns values
        only, such as the teacher-forced Triton scans)."""
        return replace(self, update=update, read=read, update_codes=None, read_codes=None, **changes)


def _codes_dict(codes) -> dict | None:
    if codes is None:
        return None
    return {"fmt": codes.fmt, "data": codes.data, "scale": codes.scale, "gscale": codes.gscale,
            "R": codes.R, "C": codes.C}


def _codes_from_dict(d: dict | None):
    if d is None:
        return None
    from precision_lab.kernels.decode_state import PackedState

    return PackedState(d["fmt"], d["data"], d["scale"], d["gscale"], int(d["R"]), int(d["C"]))


# ---------------------------------------------------------------------------------------------
# Storage casts
# ---------------------------------------------------------------------------------------------
_PROBED: set = set()


def _probe(policy: StatePolicy, spec: str, q) -> None:
    """Run a format once on a probe tensor (with SR bits if it is stochastic) so that a custom
    quantizer that fails its own ``fake`` is reported with the policy's name, not mid-run."""
    from precision_lab.quant import fake_quantize

    key = (spec, type(q))
    if key in _PROBED:
        return
    probe = torch.linspace(-3.0, 3.0, 2 * 16 * 32, dtype=torch.float32).reshape(2, 16, 32)
    rbits = torch.full(probe.shape, 0x5A5A, dtype=torch.int64) if getattr(q, "stochastic", False) else None
    try:
        y = fake_quantize(q, probe, rbits)
    except Exception as e:  # noqa: BLE001 - re-raised with the policy's context
        raise ValueError(f"policy {policy.short_str()!r}: format {spec!r} failed on a probe tensor: {e}") from e
    if not torch.isfinite(y).all():
        raise ValueError(f"policy {policy.short_str()!r}: format {spec!r} returned non-finite values for finite input")
    _PROBED.add(key)


def packed_format(spec) -> bool:
    """Whether a format has a packed device layout (the decode-step kernels' formats)."""
    from precision_lab.kernels.common.formats import KERNEL_FORMATS

    return isinstance(spec, str) and spec in KERNEL_FORMATS


class StateWriter:
    """Casts a computed state into the policy's stored copies, with SR bits from the documented
    counter layout (docs/design.md §4). Every engine that writes state through torch uses it, so
    every path stores the same bits.

    ``write(S, event, where)`` → (U, R) values, with the codes of lossy packed formats in
    ``last_codes`` (update, read). ``copies`` is 2 in split mode.

    The format named "fp32" is the identity in every compute dtype: in float32 that is exact fp32
    storage; in float64 it keeps float64, so float64 runs of ``fp32`` / ``shared:fp32`` /
    ``split:fp32/fp32`` test the state machine's algebra without fp32 rounding. A lossy format
    receives the fp32 value of S and its float32 output is stored in the compute dtype. A
    non-finite stored state raises ``FloatingPointError`` naming layer, step, event and policy.
    """

    def __init__(self, policy: StatePolicy, layer_index: int, seq_ids: torch.Tensor):
        from precision_lab.quant import get_quantizer

        self.policy = policy
        self.layer_index = layer_index
        self.seq_ids = seq_ids
        self._q = {spec: (None if spec == "fp32" else get_quantizer(spec))
                   for spec in {policy.update, policy.read}}
        self._packed = {spec: spec != "fp32" and packed_format(spec) for spec in self._q}
        self.copies = 2 if policy.mode == "split" else 1
        self.last_codes: tuple = (None, None)
        for spec, q in self._q.items():
            if q is not None:
                _probe(policy, spec, q)

    def rbits(self, S: torch.Tensor, spec: str, copy: int, event: int) -> torch.Tensor | None:
        """SR values [B, H, R, C] of one write of ``spec`` (None for a format that rounds to nearest)."""
        from precision_lab.quant.philox import state_rbits

        if not getattr(self._q[spec], "stochastic", False):
            return None
        B, H, R, C = S.shape
        return state_rbits(self.policy.seed, self.layer_index, self.seq_ids.view(B, 1).to(S.device),
                           torch.arange(H, device=S.device).view(1, H), event, (R, C), copy, device=S.device)

    def cast(self, S: torch.Tensor, spec: str, copy: int, event: int, where: str):
        """(round_spec(S) in S's dtype, its codes or None) for S [B,H,R,C]."""
        from precision_lab.quant import fake_quantize

        q = self._q[spec]
        codes = None
        if q is None:
            out = S.clone()
        elif self._packed[spec]:
            from precision_lab.kernels.decode_state import PackedState

            codes = PackedState.quantize(S.to(torch.float32), spec, self.rbits(S, spec, copy, event))
            out = codes.dequantize().to(S.dtype)
        else:
            out = fake_quantize(q, S.to(torch.float32), self.rbits(S, spec, copy, event)).to(S.dtype)
        if not torch.isfinite(out).all():
            pre = "finite" if torch.isfinite(S).all() else "already non-finite (the recurrence overflowed)"
            raise FloatingPointError(
                f"non-finite state after a write: layer {self.layer_index}, {where}, SR event {event}, "
                f"copy {'read' if copy else 'update'} in format {spec!r}, policy "
                f"{self.policy.short_str()!r}; the computed state before the cast was {pre}")
        return out, codes

    def write(self, S: torch.Tensor, event: int, where: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Both stored copies from one computed state S (their codes land in ``last_codes``)."""
        U, uc = self.cast(S, self.policy.update, 0, event, where)
        if self.policy.mode == "split":
            R, rc = self.cast(S, self.policy.read, 1, event, where)
        else:
            R, rc = U, uc
        self.last_codes = (uc, rc)
        return U, R


# ---------------------------------------------------------------------------------------------
# Stream start and validation (shared by every engine)
# ---------------------------------------------------------------------------------------------
def resolve_seq_ids(seq_ids: torch.Tensor | None, B: int) -> torch.Tensor:
    if seq_ids is None:
        return torch.arange(B, dtype=torch.int64)
    seq_ids = torch.as_tensor(seq_ids)
    if seq_ids.dtype.is_floating_point or tuple(seq_ids.shape) != (B,):
        raise ValueError(f"seq_ids must be an integer tensor of shape [B] = [{B}], got "
                         f"{seq_ids.dtype} {list(seq_ids.shape)}")
    return seq_ids.to(torch.int64).cpu()


def empty_records(kind: str, policy: StatePolicy, like: torch.Tensor, B: int, H: int, R: int, C: int
                  ) -> dict[str, torch.Tensor]:
    """The record dict of an empty window (W = 0) with the right trailing shapes."""
    if not policy.is_replay:
        return {}
    Ca = C if kind == "kda" else 1
    shapes = {"a": (Ca,), "k": (C,), "u": (R,), "v": (R,), "beta": ()}
    return {f: like.new_zeros(B, 0, H, *shapes[f]) for f in record_fields(kind)}


def start_state(p: _core.Prepared, policy: StatePolicy, *, initial_state: torch.Tensor | None,
                state: LayerState | DeviceState | None, layer_index: int,
                seq_ids: torch.Tensor | None) -> LayerState:
    """The LayerState a call starts from: ``state`` validated against the inputs, or a new stream
    (initial state — given or zeros — cast into the policy's formats with SR event 0)."""
    B, _, H, R, C = p.shape
    if not isinstance(layer_index, int) or layer_index < 0:
        raise ValueError(f"layer_index must be an integer >= 0, got {layer_index!r}")
    if isinstance(state, DeviceState):
        state = state.to_layer_state(p.dtype)
    if state is not None:
        if not isinstance(state, LayerState):
            raise TypeError(f"state must be a LayerState, got {type(state).__name__}")
        if state.kind != p.kind:
            raise ValueError(f"state is from a {state.kind} layer, inputs are {p.kind}")
        if state.policy != policy:
            raise ValueError(f"state was produced under policy {state.policy.short_str()!r} "
                             f"(seed {state.policy.seed}), not {policy.short_str()!r} (seed {policy.seed})")
        if tuple(state.update.shape) != (B, H, R, C):
            raise ValueError(f"state has shape {list(state.update.shape)}, inputs need [B,H,R,C] = {[B, H, R, C]}")
        if state.update.dtype != p.dtype:
            raise ValueError(f"state is {state.update.dtype}, inputs compute in {p.dtype}; keep one compute dtype "
                             "across segments")
        if layer_index != state.layer_index:
            raise ValueError(f"layer_index {layer_index} differs from the state's {state.layer_index}")
        if seq_ids is not None and not torch.equal(resolve_seq_ids(seq_ids, B), state.seq_ids):
            raise ValueError("seq_ids differ from the ones the state was produced with")
        if policy.is_replay and state.window >= policy.buffer_len:
            raise ValueError(f"state holds {state.window} window records, more than L - 1 = {policy.buffer_len - 1}")
        return state.clone()
    ids = resolve_seq_ids(seq_ids, B)
    S0 = _core.zeros_state(p) if initial_state is None else _core.check_state(initial_state, p)
    writer = StateWriter(policy, layer_index, ids)
    U, Rd = writer.write(S0, 0, "initial state cast")
    uc, rc = writer.last_codes
    return LayerState(p.kind, policy, U, Rd, empty_records(p.kind, policy, S0, B, H, R, C), 0, 0, 0, ids,
                      layer_index, 0, uc, rc)


# ---------------------------------------------------------------------------------------------
# The packed device storage
# ---------------------------------------------------------------------------------------------
def device_unsupported_reason(kind: str, policy: StatePolicy, R: int, C: int) -> str | None:
    """Why the decode-step kernels cannot hold this layer's state (None if they can)."""
    from precision_lab.kernels.common.formats import FMT_NVFP4, KERNEL_FORMATS

    if kind not in ("mamba2", "gdn"):
        return f"no Triton decode kernel for {kind}"
    for role, spec in (("update", policy.update), ("read", policy.read)):
        if not packed_format(spec):
            return f"{role} format {spec!r} has no Triton codec"
    if policy.is_replay and policy.buffer_len > 64:
        return f"L = {policy.buffer_len} > 64"
    if R * C > 128 * 128:
        return f"state {R}x{C} larger than 128x128"
    if C % 16 and FMT_NVFP4 in (KERNEL_FORMATS[policy.update][0], KERNEL_FORMATS[policy.read][0]):
        return f"NVFP4 needs the last state axis to be a multiple of 16, got {C}"
    return None


def codes_missing_reason(state) -> str | None:
    """Why a ``LayerState`` cannot move to the packed device layout because an NVFP4 copy of it was
    written without codes (by the teacher-forced Triton scan, which returns values only); None if it
    can. Such a stream continues on the torch engines (NVFP4 values do not re-encode to their codes)."""
    if not isinstance(state, LayerState):
        return None
    pol = state.policy
    copies = [("update", pol.update, state.update_codes)]
    if pol.mode == "split":
        copies.append(("read", pol.read, state.read_codes))
    for role, spec, codes in copies:
        if spec.startswith("nvfp4") and codes is None:
            return (f"the {role} copy was written as NVFP4 values without codes (the Triton scan); it "
                    "continues on the torch decode engine")
    return None


def _pack_copy(values: torch.Tensor, codes, spec: str, what: str):
    """The PackedState of one stored copy: its codes (checked against the values) or, for an
    elementwise format, the values re-encoded (exact: they are representable)."""
    from precision_lab.kernels.decode_state import PackedState

    v32 = values.to(torch.float32)
    if codes is None:
        if spec.startswith("nvfp4"):
            raise ValueError(f"the {what} holds NVFP4 values without their codes (written by an engine that "
                             "returns values only, e.g. the teacher-forced Triton scan); NVFP4 cannot be re-encoded "
                             "losslessly, so this state cannot move to the decode-step kernels. Continue it on the "
                             "'decode' or 'scan' engine, or start the stream on a torch engine")
        codes = PackedState.quantize(v32, spec.removesuffix("-sr") if spec.endswith("-sr") else spec)
        codes.fmt = spec
    else:
        codes = codes.clone()
    back = codes.dequantize()
    if not torch.equal(back.to(values.device), v32):
        raise ValueError(f"the {what}'s codes ({spec}) do not reproduce its values; the state was modified "
                         "after it was written")
    return codes


def records_read_the_state(kind: str) -> bool:
    """Whether a ReplaySSM record of this operator is computed from the state (GDN: d = β(v − α S k));
    Mamba-2's records (u, B, a) are inputs only, so its window always counts as computed from the
    update checkpoint (``DeviceState.window_from_update``)."""
    return kind in ("gdn", "kda")


@dataclass
class DeviceState:
    """A layer's state in the packed layout of the decode-step kernels (see the module docstring).

    update:  PackedState [B, H, R, C] (one pool slot per row: ``slots`` = 0..B-1)
    read:    PackedState or None (split mode only)
    records: ``Mamba2Records`` / ``GDNRecords`` ring of next_pow2(L) slots (ReplaySSM modes)
    start, wlen: [B] int32 window pointers (ring position of the oldest record, records in window)
    events:  [B] int64 SR event of the next state write (= writes + 1)
    seq_ids: [B] int64 on the device; slots [B] int32
    window, step, writes, flushes, record_writes: host mirrors (the batch moves in lockstep, so the
             host knows the schedule without reading the device)
    groups:  Mamba-2 B/C groups or GDN key heads (the records keep keys per group / key head)
    window_from_update: every GDN d in the window was computed from the stored update checkpoint
             (and the window's earlier d's). False after a speculative flush round, whose committed
             tokens' d's come from the unrounded fold, and for a window packed from a LayerState
             (its history is not known): a shared-mode recompute flush then re-solves the d's from U
             instead of folding the stored ones (``gdn_replay_step``). Always True for Mamba-2, whose
             records do not depend on the state
    """

    kind: str
    policy: StatePolicy
    update: Any
    read: Any
    records: Any
    start: torch.Tensor
    wlen: torch.Tensor
    events: torch.Tensor
    seq_ids: torch.Tensor
    slots: torch.Tensor
    window: int
    step: int
    writes: int
    layer_index: int
    prefill_tokens: int
    groups: int
    flushes: int = 0
    record_writes: int = 0
    window_from_update: bool = True

    @property
    def ring(self) -> int:
        return self.records.ring

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.slots.numel(), *self.update.data.shape[1:3], self.update.C)

    @classmethod
    def from_layer_state(cls, st: LayerState, groups: int, device: torch.device | str | None = None) -> DeviceState:
        """Pack a LayerState (lossless; see the module docstring). ``groups``: Mamba-2 B/C groups
        or GDN key heads (the records' keys are stored once per group)."""
        from precision_lab.kernels.gdn.decode import GDNRecords
        from precision_lab.kernels.mamba2.decode import Mamba2Records

        pol = st.policy
        B, H, R, C = st.update.shape
        reason = device_unsupported_reason(st.kind, pol, R, C)
        if reason is not None:
            raise ValueError(f"this state cannot use the decode-step kernels: {reason}")
        if H % groups:
            raise ValueError(f"heads {H} must be a multiple of groups {groups}")
        dev = torch.device(device) if device is not None else st.update.device
        upd = _pack_copy(st.update, st.update_codes, pol.update, "update checkpoint")
        rd = _pack_copy(st.read, st.read_codes, pol.read, "read copy") if pol.mode == "split" else None
        upd = _to_device(upd, dev)
        rd = None if rd is None else _to_device(rd, dev)
        W = st.window if pol.is_replay else 0
        records = None
        if pol.is_replay:
            ring = next_pow2(pol.buffer_len)
            rep = H // groups
            recs = st.records
            if st.kind == "mamba2":
                records = Mamba2Records(B, ring, H, groups, R, C, device=dev)
                if W:
                    records.u[:, :W] = recs["u"].to(dev, torch.float32)
                    records.b[:, :W] = recs["k"][:, :, ::rep].to(dev, torch.float32)
                    records.a[:, :W] = recs["a"][..., 0].to(dev, torch.float32)
            else:
                records = GDNRecords(B, ring, groups, H, R, C, device=dev)
                if W:
                    records.k[:, :W] = recs["k"][:, :, ::rep].to(dev, torch.float32)
                    records.d[:, :W] = recs["u"].to(dev, torch.float32)
                    records.a[:, :W] = recs["a"][..., 0].to(dev, torch.float32)
                    records.v[:, :W] = recs["v"].to(dev, torch.float32)
                    records.beta[:, :W] = recs["beta"].to(dev, torch.float32)
        return cls(st.kind, pol, upd, rd, records,
                   start=torch.zeros(B, dtype=torch.int32, device=dev),
                   wlen=torch.full((B,), W, dtype=torch.int32, device=dev),
                   events=torch.full((B,), st.writes + 1, dtype=torch.int64, device=dev),
                   seq_ids=st.seq_ids.to(dev, torch.int64), slots=torch.arange(B, dtype=torch.int32, device=dev),
                   window=W, step=st.step, writes=st.writes, layer_index=st.layer_index,
                   prefill_tokens=st.prefill_tokens, groups=groups,
                   window_from_update=W == 0 or not records_read_the_state(st.kind))

    def to_layer_state(self, dtype: torch.dtype = torch.float32) -> LayerState:
        """The same state as tensors in the compute dtype (lossless; codes kept)."""
        pol = self.policy
        B = self.slots.numel()
        upd_codes = self.update.clone()
        U = upd_codes.dequantize().to(dtype)
        if pol.mode == "split":
            rd_codes = self.read.clone()
            Rd = rd_codes.dequantize().to(dtype)
        else:
            rd_codes, Rd = upd_codes, U
        H, R, C = U.shape[1:]
        recs = empty_records(self.kind, pol, U, B, H, R, C)
        W = self.window
        if pol.is_replay and W:
            rep = H // self.groups
            pos = ((self.start.long().view(B, 1) + torch.arange(W, device=self.start.device)) % self.ring)
            take = (lambda t: torch.stack([t[b, pos[b]] for b in range(B)]).to(dtype))
            r = self.records
            if self.kind == "mamba2":
                recs = {"a": take(r.a).unsqueeze(-1), "k": take(r.b).repeat_interleave(rep, dim=2), "u": take(r.u)}
            else:
                recs = {"a": take(r.a).unsqueeze(-1), "k": take(r.k).repeat_interleave(rep, dim=2), "u": take(r.d)}
                recs.update(v=take(r.v), beta=take(r.beta))
        return LayerState(self.kind, pol, U, Rd, recs, W, self.step, self.writes, self.seq_ids.cpu(),
                          self.layer_index, self.prefill_tokens, upd_codes,
                          rd_codes if pol.mode == "split" else upd_codes)

    def clone(self) -> DeviceState:
        c = (lambda t: None if t is None else t.clone())
        recs = None
        if self.records is not None:
            recs = type(self.records).__new__(type(self.records))
            recs.__dict__.update({k: (v.clone() if isinstance(v, torch.Tensor) else v)
                                  for k, v in self.records.__dict__.items()})
        return replace(self, update=self.update.clone(), read=c(self.read), records=recs, start=self.start.clone(),
                       wlen=self.wlen.clone(), events=self.events.clone(), seq_ids=self.seq_ids.clone(),
                       slots=self.slots.clone())


def _to_device(packed, dev):
    from precision_lab.kernels.decode_state import PackedState

    mv = (lambda t: None if t is None else t.to(dev).contiguous())
    return PackedState(packed.fmt, mv(packed.data), mv(packed.scale), mv(packed.gscale), packed.R, packed.C)


__all__ = ["DeviceState", "LayerState", "StateWriter", "commit_window", "device_unsupported_reason", "select_rows",
           "empty_records", "is_flush", "is_spec_flush", "next_pow2", "record_fields", "resolve_seq_ids", "spec_rounds",
           "start_state"]


# ---------------------------------------------------------------------------------------------
# Branching a stream: rows selected (and repeated) along the batch
# ---------------------------------------------------------------------------------------------
def _select_packed(p, index: torch.Tensor):
    from precision_lab.kernels.decode_state import PackedState

    sel = (lambda t: None if t is None else t.index_select(0, index.to(t.device)).contiguous())
    return PackedState(p.fmt, sel(p.data), sel(p.scale), sel(p.gscale), p.R, p.C)


def select_rows(state: LayerState | DeviceState, index: torch.Tensor) -> LayerState | DeviceState:
    """The state of rows ``index`` [N] (repeats allowed): N independent continuations of the
    selected streams, e.g. one per answer choice after a shared context. Sequence ids (and so SR
    bits) follow their rows."""
    index = torch.as_tensor(index, dtype=torch.long)
    if isinstance(state, DeviceState):
        dev = state.start.device
        idx = index.to(dev)
        recs = None
        if state.records is not None:
            recs = type(state.records).__new__(type(state.records))
            recs.__dict__.update({k: (v.index_select(0, idx).contiguous() if isinstance(v, torch.Tensor) else v)
                                  for k, v in state.records.__dict__.items()})
        return replace(state, update=_select_packed(state.update, idx),
                       read=None if state.read is None else _select_packed(state.read, idx), records=recs,
                       start=state.start.index_select(0, idx), wlen=state.wlen.index_select(0, idx),
                       events=state.events.index_select(0, idx), seq_ids=state.seq_ids.index_select(0, idx),
                       slots=torch.arange(idx.numel(), dtype=torch.int32, device=dev))
    sel = (lambda t: t.index_select(0, index.to(t.device)))
    upd = sel(state.update)
    rd = upd if state.read is state.update else sel(state.read)
    uc = None if state.update_codes is None else _select_packed(state.update_codes, index)
    rc = uc if state.read_codes is state.update_codes else (
        None if state.read_codes is None else _select_packed(state.read_codes, index))
    return replace(state, update=upd, read=rd, records={k: sel(v) for k, v in state.records.items()},
                   seq_ids=sel(state.seq_ids), update_codes=uc, read_codes=rc)
