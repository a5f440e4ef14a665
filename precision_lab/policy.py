"""State precision policies (docs/design.md §4, §6).

Grammar of a policy string (``StatePolicy.parse``; ``short_str()`` writes the same form back):

    fp32                                  conventional decode, fp32 state (the reference)
    conventional:F                        conventional decode, state stored in F every step
    conventional:fp32                     conventional decode with an fp32 store every step, run by
                                          the same per-token step as every lossy conventional:F
    shared:F[@L<n>]                       ReplaySSM, one checkpoint in F for recurrence and reads
    split:H/F[@L<n>]                      ReplaySSM, update checkpoint in H, read copy in F
    ...@fold=buffered                     GDN/KDA split mode: fold the buffered d's (default recompute)

F and H are quantizer specs (built-in names such as ``nvfp4-sr`` or ``mypkg.mod:MyQ``). ``@L16``
and ``@fold=recompute`` are the defaults and are left out of ``short_str()``, so
``parse(p.short_str()) == p`` and the default policies read exactly as the papers name them.
The seed is a run-level setting, not part of the name.

Arithmetic, not only storage. ``fp32`` and ``conventional:fp32`` store the same values but are two
policy rows: ``fp32`` is the unquantized recurrence, which an engine may evaluate in any exact
order (the ``scan`` and ``triton`` engines run it in chunks), while ``conventional:F`` for every F,
fp32 included, is the token-by-token step with a store after every token. Likewise the ReplaySSM
rows evaluate windows (checkpoint + buffer, a flush every L steps), a third order of the same sums.
These orders agree only to the last bits of the compute dtype, and a model in bf16 can turn such
bits into visible differences. ``matched_reference()`` names, for each policy, the policy that runs
the *same* arithmetic with lossless (fp32) storage, so that comparing the two isolates the effect
of the storage format; a lossless policy gives exactly the logits of its matched reference.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

MODES = ("fp32", "conventional", "shared", "split")
FOLDS = ("recompute", "buffered")
DEFAULT_L = 16


@dataclass(frozen=True)
class StatePolicy:
    """How an SSM layer stores its recurrent state.

    mode:       fp32 | conventional | shared | split (docs/design.md §4)
    update:     format of the update checkpoint (the state that feeds the recurrence)
    read:       format of the read copy (the state outputs are computed from between flushes)
    buffer_len: L, the ReplaySSM window (flush every L decode steps); ignored by fp32/conventional
    seed:       seed of the stochastic-rounding bit stream (Philox; see precision_lab.quant.philox)
    gdn_fold:   "recompute" or "buffered" (only matters for GDN/KDA in split mode)
    """

    mode: str
    update: str = "fp32"
    read: str = "fp32"
    buffer_len: int = DEFAULT_L
    seed: int = 0
    gdn_fold: str = "recompute"

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown policy mode {self.mode!r}; expected one of {', '.join(MODES)}")
        if self.gdn_fold not in FOLDS:
            raise ValueError(f"gdn_fold must be one of {FOLDS}, got {self.gdn_fold!r}")
        if not isinstance(self.buffer_len, int) or self.buffer_len < 1:
            raise ValueError(f"buffer length L must be an integer >= 1, got {self.buffer_len!r}")
        if self.mode == "fp32" and (self.update != "fp32" or self.read != "fp32"):
            raise ValueError("mode 'fp32' stores the state in fp32; use 'conventional:F' for another format")
        if self.mode in ("conventional", "shared") and self.update != self.read:
            raise ValueError(f"mode {self.mode!r} keeps one copy of the state: update and read formats must match "
                             f"(got {self.update!r} / {self.read!r}); use 'split:H/F' for two")
        if not (0 <= self.seed < 2**32):
            raise ValueError(f"seed must be in [0, 2**32), got {self.seed}")

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str | StatePolicy, *, seed: int | None = None) -> StatePolicy:
        """Parse a policy string (see the module docstring). ``seed`` overrides the default 0."""
        if isinstance(text, StatePolicy):
            return text if seed is None else replace(text, seed=seed)
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"empty policy string {text!r}")
        try:
            return cls._parse(text, seed)
        except ValueError as e:
            if str(e).startswith(f"policy {text!r}"):
                raise
            raise ValueError(f"policy {text!r}: {e}") from None  # the field checks of __post_init__

    @classmethod
    def _parse(cls, text: str, seed: int | None) -> StatePolicy:
        body, *options = text.strip().split("@")
        kwargs: dict = {} if seed is None else {"seed": seed}
        for opt in options:
            if opt.startswith("L") and opt[1:].isdigit():
                kwargs["buffer_len"] = int(opt[1:])
            elif opt.startswith("fold="):
                kwargs["gdn_fold"] = opt[5:]
            elif opt.startswith("seed=") and opt[5:].isdigit():
                kwargs["seed"] = int(opt[5:])
            else:
                raise ValueError(f"policy {text!r}: unknown option '@{opt}' (expected @L<n>, @fold=buffered|recompute)")
        mode, sep, formats = body.partition(":")
        if mode not in MODES:
            raise ValueError(f"policy {text!r}: unknown mode {mode!r}; expected one of {', '.join(MODES)} "
                             "(e.g. fp32, conventional:fp16-sr, shared:nvfp4-sr, split:fp16-sr/nvfp4@L16)")
        if mode == "fp32":
            if sep and formats not in ("", "fp32"):
                raise ValueError(f"policy {text!r}: mode fp32 takes no format")
            return cls("fp32", **kwargs)
        if not formats:
            raise ValueError(f"policy {text!r}: mode {mode!r} needs a format, e.g. {mode}:nvfp4")
        if mode == "split":
            # A custom spec "pkg.mod:Cls" contains ':' but no '/', so '/' separates H from F.
            if "/" not in formats:
                raise ValueError(f"policy {text!r}: split mode needs 'split:UPDATE/READ', e.g. split:fp16-sr/nvfp4")
            update, read = formats.split("/", 1)
            return cls("split", update=update, read=read, **kwargs)
        return cls(mode, update=formats, read=formats, **kwargs)

    # -- naming ------------------------------------------------------------------------------------
    def short_str(self) -> str:
        """Canonical name used in file names, JSON and plot legends; round-trips through parse()."""
        if self.mode == "fp32":
            s = "fp32"
        elif self.mode == "split":
            s = f"split:{self.update}/{self.read}"
        else:
            s = f"{self.mode}:{self.update}"
        if self.is_replay and self.buffer_len != DEFAULT_L:
            s += f"@L{self.buffer_len}"
        if self.mode == "split" and self.gdn_fold != "recompute":
            s += f"@fold={self.gdn_fold}"
        return s

    def file_stem(self) -> str:
        """short_str() made safe for file names (':' and '/' replaced)."""
        return self.short_str().replace(":", "_").replace("/", "-").replace("@", "_").replace("=", "-")

    def __str__(self) -> str:
        return self.short_str()

    # -- semantics -----------------------------------------------------------------------------
    @property
    def is_lossless(self) -> bool:
        """True when every stored copy is fp32 (the identity format): no state rounding at all."""
        return self.update == "fp32" and self.read == "fp32"

    @property
    def is_stochastic(self) -> bool:
        """True when a stored copy uses a stochastic-rounding format (its results depend on the seed)."""
        from precision_lab.quant import get_quantizer

        return any(getattr(get_quantizer(spec), "stochastic", False) for spec in {self.update, self.read})

    def matched_reference(self) -> StatePolicy:
        """The lossless policy that runs this policy's arithmetic (see the module docstring).

        fp32 -> fp32; conventional:F -> conventional:fp32; shared:F@Ln -> shared:fp32@Ln;
        split:H/F@Ln@fold=X -> split:fp32/fp32@Ln@fold=X (the GDN fold changes which d's the flush
        folds, so it is part of the arithmetic). The seed is kept (fp32 storage draws no bits).
        """
        if self.mode == "fp32":
            return self
        if self.mode == "conventional":
            return StatePolicy("conventional", "fp32", "fp32", DEFAULT_L, self.seed)
        if self.mode == "shared":
            # shared mode keeps one copy, so the fold setting has no effect; canonical default
            return StatePolicy("shared", "fp32", "fp32", self.buffer_len, self.seed)
        return StatePolicy("split", "fp32", "fp32", self.buffer_len, self.seed, self.gdn_fold)

    @property
    def is_replay(self) -> bool:
        """True for the ReplaySSM modes (shared, split): checkpoint + buffer, flush every L steps."""
        return self.mode in ("shared", "split")

    def quantizers(self):
        """(update quantizer, read quantizer), resolved through the registry."""
        from precision_lab.quant import get_quantizer

        return get_quantizer(self.update), get_quantizer(self.read)

    def validate(self, drafts: int = 0) -> StatePolicy:
        """Check what construction cannot: formats resolve, custom quantizers pass their own fake(),
        and L leaves room for 1 + drafts tokens. Returns self so calls chain."""
        import torch

        from precision_lab.quant import fake_quantize, get_quantizer

        if drafts < 0:
            raise ValueError(f"drafts must be >= 0, got {drafts}")
        if self.is_replay and self.buffer_len < 1 + drafts:
            raise ValueError(f"buffer length L={self.buffer_len} is smaller than 1 + drafts = {1 + drafts}; "
                             f"speculative decoding needs L >= T = 1 + drafts")
        probe = torch.linspace(-3.0, 3.0, 2 * 16 * 32, dtype=torch.float32).reshape(2, 16, 32)
        for role, spec in (("update", self.update), ("read", self.read)):
            q = get_quantizer(spec)
            # stochastic formats need bits; a fixed mid-range pattern makes the probe deterministic
            rbits = torch.full(probe.shape, 0x5A5A, dtype=torch.int64) if getattr(q, "stochastic", False) else None
            try:
                y = fake_quantize(q, probe, rbits)
            except Exception as e:  # noqa: BLE001 - we re-raise with the policy's context
                raise ValueError(f"policy {self.short_str()!r}: {role} format {spec!r} failed on a probe tensor: {e}") from e
            if not torch.isfinite(y).all():
                raise ValueError(f"policy {self.short_str()!r}: {role} format {spec!r} returned non-finite values "
                                 "for finite input")
        return self
