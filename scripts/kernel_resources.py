"""Compile the Triton kernels for the H200 (sm_90) on any machine and print what each launch
costs in registers, spills and shared memory — no GPU and no device time needed.

    python scripts/kernel_resources.py            # Mamba-2 and GDN decode kernels at their real shapes
    python scripts/kernel_resources.py --hw       # the GPU code path (hardware E4M3 decode)
    python scripts/kernel_resources.py --hw --fp4-decode ptx   # NVFP4 reads through the inline-PTX decode
    python scripts/kernel_resources.py --hw --fp4-decode mma   # NVFP4 reads as tensor-core products
    python scripts/kernel_resources.py --ops mamba2-scan gdn-scan quant   # scans, quantizer kernels
    python scripts/kernel_resources.py --hw --ops flush   # autoregressive flushes per split policy
    python scripts/kernel_resources.py --hw --ops flush --policies fp16-sr/nvfp4 fp32/fp32
    python scripts/kernel_resources.py --hw --ops gdn --batch 1 --loads   # batch 1's rules, load by load
    python scripts/kernel_resources.py --hw --ops gdn --overlap-scores   # two-launch steps as overlapped
    python scripts/kernel_resources.py --hw --overlap-scores --issue-floor 256   # + each launch's issue floor

For every launch the wrappers would make, the kernel launch is replaced by ``triton.compile`` for
``cuda:90`` with the same arguments (pointer alignment and divisibility-by-16 of integer arguments
specialised as the runtime would), and the cubin is read with the ``cuobjdump`` that ships with
Triton. Columns: REG registers per thread, STACK bytes of spill stack per thread, smem bytes,
convert_layout ops in the TTGIR, SASS instructions, a digest of the SASS text, and ``rounds``: the
global loads a thread issues in each memory round trip (``memory_rounds``; a sketch of the critical
path at small batch, not a timing: docs/pitfalls.md §17); with ``--issue-floor B``, the least time
the launch's warps need to issue their instructions at batch B on 132 SMs at 1980 MHz (straight-line
kernels only: ``loop`` where the code branches back; docs/design.md §7). Equal digests
before and after a change mean the same machine code (a refactor that keeps them needs no GPU
re-check; one that changes them, even by reordering independent operations, needs the kernel tests
on a GPU). Use it before spending device time: a flush at 255 registers with a
stack had spilled on the GPU too.

The counts are those of the Triton that runs the script (its version heads the output), and they
move between versions: compile under the GPU machine's before deciding anything from them
(docs/pitfalls.md §18), e.g. for Triton 3.6:

    python -m pip install --target /tmp/triton-3.6 --no-deps triton==3.6.0
    PYTHONPATH=/tmp/triton-3.6 python scripts/kernel_resources.py --hw
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import subprocess
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

_BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
_PTR = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.uint8: "*u8",
        torch.int16: "*i16", torch.int32: "*i32", torch.int64: "*i64"}


def _signature(fn, args, kwargs):
    """(signature, constexprs, attrs) for ASTSource from example launch arguments."""
    vals = dict(zip(fn.arg_names, args))
    vals.update(kwargs)
    sig, const, attrs = {}, {}, {}
    for i, (name, p) in enumerate(zip(fn.arg_names, fn.params)):
        v = vals[name]
        if p.is_constexpr:
            sig[name], const[(i,)] = "constexpr", v
        elif isinstance(v, torch.Tensor):
            sig[name], attrs[(i,)] = _PTR[v.dtype], [["tt.divisibility", 16]]
        elif isinstance(v, bool):
            sig[name] = "i1"
        elif isinstance(v, int):
            sig[name] = "i64" if abs(v) >= 2 ** 31 else "i32"
            if p.do_not_specialize:
                pass
            elif v == 1:  # the runtime specialises 1 to a constant
                sig[name], const[(i,)] = "constexpr", 1
            elif v % 16 == 0 and v:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, float):
            sig[name] = "fp32"
        else:
            raise TypeError(f"{name}: {type(v)}")
    return sig, const, attrs


def _compile(fn, args, kwargs, options: dict):
    """One launch compiled for sm_90 (``triton.compile``), arguments specialised as the runtime would."""
    sig, const, attrs = _signature(fn, args, kwargs)
    return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs),
                          target=GPUTarget("cuda", 90, 32), options=options)


def _cubin_texts(cubin: bytes, *commands: list[str]) -> list[str]:
    """The output of each command (a tool of Triton's bin folder and its flags) run on the cubin."""
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        return [subprocess.run([os.path.join(_BIN, tool), *flags, f.name], capture_output=True, text=True).stdout
                for tool, *flags in commands]
    finally:
        os.unlink(f.name)


def compiled_text(fn, args, kwargs, num_warps: int) -> tuple[str, str]:
    """(TTGIR, SASS) of one launch compiled for sm_90, arguments as ``resources``."""
    k = _compile(fn, args, kwargs, dict(num_warps=num_warps))
    (sass,) = _cubin_texts(k.asm["cubin"], ["cuobjdump", "-sass"])
    return k.asm["ttgir"], sass


def resources(fn, args, kwargs, num_warps: int, enable_fp_fusion: bool = False, maxnreg: int | None = None,
              loads: bool = False) -> dict:
    """Compile one launch for sm_90 and read what it costs; ``loads``: also every global load's memory
    round and source line (``load_rounds`` of nvdisasm's text with line information), under "loads"."""
    options = dict(num_warps=num_warps, enable_fp_fusion=enable_fp_fusion, **({"maxnreg": maxnreg} if maxnreg else {}))
    k = _compile(fn, args, kwargs, options)
    usage, sass, *lined = _cubin_texts(k.asm["cubin"], ["cuobjdump", "--dump-resource-usage"],
                                       ["cuobjdump", "-sass"], *([["nvdisasm", "-g", "-c"]] if loads else []))
    lined = lined[0] if loads else ""
    if os.environ.get("KERNEL_RESOURCES_DUMP"):  # keep the compiled text (ttgir, ptx, sass) for reading
        d = os.environ["KERNEL_RESOURCES_DUMP"]
        os.makedirs(d, exist_ok=True)
        stem = os.path.join(d, hashlib.sha256(sass.encode()).hexdigest()[:12])
        for ext in ("ttgir", "ptx"):
            with open(f"{stem}.{ext}", "w") as out:
                out.write(k.asm[ext])
        with open(f"{stem}.sass", "w") as out:
            out.write(sass)
    grab = (lambda pat: int(m.group(1)) if (m := re.search(pat, usage)) else None)  # noqa: E731
    code = [line.strip() for line in sass.splitlines() if re.search(r"/\*[0-9a-f]{4,5}\*/", line)]
    return {"regs": grab(r"REG:(\d+)"), "stack": grab(r"STACK:(\d+)"), "smem": k.metadata.shared,
            "convert_layout": k.asm["ttgir"].count("convert_layout"), "sass": len(code),
            "digest": hashlib.sha256("\n".join(code).encode()).hexdigest()[:12], "rounds": memory_rounds(sass),
            "straight_line": straight_line(sass),
            **({"loads": load_rounds(lined)} if loads else {})}


_INSTR = re.compile(r"/\*([0-9a-f]{4,5})\*/\s+(.*?)\s*;")
_REG = re.compile(r"\bR(\d+)(\.64)?\b")


def _regs(text: str) -> set[int]:
    """General registers named in an operand list (R4.64: R4 and R5)."""
    out = set()
    for n, wide in _REG.findall(text):
        out.update((int(n), int(n) + 1) if wide else (int(n),))
    return out


def memory_rounds(sass: str) -> list[int]:
    """How many global loads (LDG) a thread issues in each memory round trip, in program order: a load
    is in round k + 1 when the last wait before it was for a load of round k (a wait: an instruction
    reading a register that a load still in flight writes). A load that could have gone out with the
    state tile but is written after something that waits lands one round later; at small batch each
    round can add a memory latency to a kernel bound by them, not to one bound by its instructions
    (docs/pitfalls.md §17). Read from the SASS text alone (register names, no control codes): a sketch
    of the thread's critical path, not a timing."""
    rounds: list[int] = []
    for k, _, _ in load_rounds(sass):
        rounds.extend([0] * (k - len(rounds)))
        rounds[k - 1] += 1
    return rounds


_LINE = re.compile(r'## File "([^"]+)", line (\d+)')


def load_rounds(sass: str) -> list[tuple[int, str, str]]:
    """``memory_rounds`` load by load: (round, opcode, source line) of every global load in program
    order. The source line ("file:line") is read from nvdisasm's line-information comments (``## File
    "...", line N``) where the text has them, else "?"."""
    out: list[tuple[int, str, str]] = []
    pending: dict[int, int] = {}  # register -> round of the load writing it
    copies: list[int] = []  # rounds of asynchronous copies to shared memory (LDGSTS) not yet waited for
    waited = 0
    where = "?"
    for line in sass.splitlines():
        if m := _LINE.search(line):
            where = f"{os.path.basename(m.group(1))}:{m.group(2)}"
            continue
        if not (m := _INSTR.search(line)):
            continue
        text = re.sub(r"^@!?U?P\w+\s+", "", m.group(2))  # the predicate guard
        op, _, operands = text.partition(" ")
        parts = operands.split(",")
        load = op == "LDG" or op.startswith("LDG.")
        store = op.startswith(("ST", "RED", "ATOM", "LDGSTS"))
        # what the instruction reads: a store all its operands, anything else all but its destination
        # (a load's address: a wait where an earlier load computed it)
        srcs = _regs(operands if store else ",".join(parts[1:]))
        hit = [pending[r] for r in srcs if r in pending]
        if op.startswith("DEPBAR") and copies:  # waits for the copies committed before it
            hit.append(max(copies))
            copies.clear()
        if hit:
            waited = max(waited, max(hit))
        if op.startswith("LDGSTS"):
            copies.append(waited + 1)
            out.append((waited + 1, op, where))
        elif load and _regs(parts[0]):
            base = min(_regs(parts[0]))
            width = 4 if ".128" in op else 2 if ".64" in op else 1
            for r in range(base, base + width):
                pending[r] = waited + 1
            out.append((waited + 1, op, where))
        elif not store and parts[0].strip():
            for r in _regs(parts[0]):  # overwritten: no longer the load's value
                pending.pop(r, None)
    return out


def straight_line(sass: str) -> bool:
    """Whether the code has no backward branch (no loop), so that every warp issues each instruction
    once and the SASS count is the count a warp issues (predicated-off instructions issue too). The
    self-branch after the last EXIT is padding, not a loop."""
    for addr, text in _INSTR.findall(sass):
        words = text.split()
        opcode = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        to = re.findall(r"0x([0-9a-f]+)", text)
        if opcode.split(".")[0] == "BRA" and to and int(to[-1], 16) < int(addr, 16):
            return False
    return True


def issue_floor_us(programs: int, warps: int, instructions: int, sms: int, clock_mhz: float) -> float:
    """The least time in µs a launch of ``programs`` programs of ``warps`` warps, each warp issuing
    ``instructions`` instructions, can take on ``sms`` SMs of four schedulers that each issue at most
    one warp instruction per cycle at ``clock_mhz``: a floor, reached only if nothing ever stalls."""
    return programs * warps * instructions / (sms * 4 * clock_mhz)


def grid_programs(grid, meta: dict) -> int:
    """Programs of a launch grid (a tuple, or a callable of the launch's keyword arguments)."""
    dims = grid(meta) if callable(grid) else grid
    n = 1
    for d in (dims if isinstance(dims, tuple) else (dims,)):
        n *= int(d)
    return n


class _Compile:
    """Stands in for ``kernel[grid]``: compiles instead of launching and prints the resources (with
    ``LOADS`` set, every global load's round and source line below each launch; with ``ISSUE`` set to
    (batch, compiled batch, SMs, clock in MHz), the issue floor of the launch at that batch, its grid
    scaled from the compiled batch: the wrappers' grids are batch-major)."""
    LOADS = False
    ISSUE = None

    def __init__(self, fn, label):
        self.fn, self.label = fn, label

    def __getitem__(self, grid):
        def call(*args, num_warps=4, enable_fp_fusion=True, maxnreg=None, **kw):  # Triton's defaults when not given
            r = resources(self.fn, args, kw, num_warps, enable_fp_fusion, maxnreg, loads=self.LOADS)
            keys = ("T", "FLUSH", "FOLD_NEW", "FUSED", "UFMT", "USR", "RFMT", "RSR", "FMT", "BR", "BJ", "BW", "RECOMPUTE",
                    "UPD_FMT", "UPD_SR",
                    "READ_FMT", "READ_SR", "SPLIT", "SR", "BLOCK", "ONE_TILE", "RB", "BLOCK_R", "TILES")
            shape = " ".join(f"{k}={kw[k]}" for k in keys if k in kw)
            shape += f" maxnreg={maxnreg}" if maxnreg else ""
            print(f"{self.label:16s} warps={num_warps:<2d} {shape:60s} REG={r['regs']:<4} STACK={r['stack']:<5} "
                  f"smem={r['smem']:<6} convert_layout={r['convert_layout']:<3} sass={r['sass']:<5} "
                  f"digest={r['digest']} rounds={'/'.join(map(str, r['rounds']))}" + self._issue(grid, kw, num_warps, r))
            for (k, op, where), n in _runs(r.get("loads", [])):
                print(f"    round {k:<3d} {op:14s} {where}" + (f"  x{n}" if n > 1 else ""))
        return call

    def _issue(self, grid, kw, num_warps, r) -> str:
        if self.ISSUE is None:
            return ""
        batch, compiled, sms, clock_mhz = self.ISSUE
        if not r["straight_line"]:
            return f" issue@B{batch}=loop"  # a loop's trip count is not in the SASS count
        programs = grid_programs(grid, kw) * batch // compiled
        return f" issue@B{batch}>={issue_floor_us(programs, num_warps, r['sass'], sms, clock_mhz):.1f}us"


def _runs(items):
    """Consecutive equal items as (item, count)."""
    out = []
    for it in items:
        if out and out[-1][0] == it:
            out[-1][1] += 1
        else:
            out.append([it, 1])
    return [tuple(x) for x in out]


class _Skip:
    def __getitem__(self, grid):
        return lambda *a, **k: None


def _patched(module, names_labels, skip=()):
    saved = {n: getattr(module, n) for n, _ in names_labels}
    saved.update({n: getattr(module, n) for n in skip})
    for n, label in names_labels:
        setattr(module, n, _Compile(saved[n], label))
    for n in skip:
        setattr(module, n, _Skip())
    return saved


def mamba2_configs(B=2, flush_kw=None, fp4_decode="fp16", nonflush_kw=None):
    import precision_lab.kernels.mamba2.decode as m2
    from precision_lab.kernels.decode_state import PackedState

    H, G, P, N = 128, 8, 64, 128
    saved = _patched(m2, [("mamba2_replay_step_kernel", "mamba2 replay"), ("mamba2_flush_kernel", "mamba2 flush"),
                          ("mamba2_conventional_step_kernel", "mamba2 conv")], skip=["mamba2_replay_scores_kernel"])
    z = (lambda *s: torch.zeros(*s, dtype=torch.bfloat16))  # noqa: E731
    try:
        m2.mamba2_conventional_step(PackedState.empty("fp32", B, H, P, N), torch.arange(B), z(B, H, P), z(B, H),
                                    torch.zeros(H), z(B, G, N), z(B, G, N), torch.zeros(H), torch.zeros(H), z(B, H, P))
        # (fused: the one-launch form of the one-token steps, and the two-launch form, whose scores
        # kernel is not compiled here; wb: the T > 1 steps' window_bound, the benchmark's windows)
        for T, flush, read, L, fused, wb in [(1, False, "fp32", 16, False, None), (1, False, "nvfp4", 16, False, None),
                                             (1, False, "fp32", 16, True, None), (1, False, "nvfp4", 16, True, None),
                                             (1, False, "fp32", 64, True, None), (1, True, "fp32", 16, False, None),
                                             (1, True, "nvfp4", 16, False, None), (1, True, "fp32", 16, True, None),
                                             (8, False, "fp32", 24, False, None), (8, True, "fp32", 24, False, None),
                                             (8, False, "fp32", 24, False, 8), (8, True, "fp32", 24, False, 16)]:
            rec = m2.Mamba2Records(B, triton.next_power_of_2(L), H, G, P, N)
            ints = [torch.arange(B), torch.zeros(B, dtype=torch.int32), torch.zeros(B, dtype=torch.int32)]
            m2.mamba2_replay_step(PackedState.empty("fp32", B, H, P, N), PackedState.empty(read, B, H, P, N), rec,
                                  *ints, z(B, T, H, P), z(B, T, H), torch.zeros(H), z(B, T, G, N), z(B, T, G, N),
                                  torch.zeros(H), torch.zeros(H), z(B, T, H, P), flush=flush, fold_new=flush and T == 1,
                                  fused_scores=fused, fp4_decode=fp4_decode, window_bound=wb,
                                  **((flush_kw or {}) if flush else (nonflush_kw or {}) if T == 1 else {}))
    finally:
        for n, f in saved.items():
            setattr(m2, n, f)


@contextlib.contextmanager
def large_batch_shapes(*modules):
    """The wrappers pick other launch shapes at small batch (Mamba-2's ``SMALL_BATCH_HEAD_MATRICES``,
    GDN's ``SMALL_GRID_PROGRAMS``); the configs here compile at B = 2 the shapes of a large batch."""
    names = ("SMALL_BATCH_HEAD_MATRICES", "SMALL_GRID_PROGRAMS")
    keep = [(m, n, getattr(m, n)) for m in modules for n in names if hasattr(m, n)]
    for m, n, _ in keep:
        setattr(m, n, 0)
    try:
        yield
    finally:
        for m, n, v in keep:
            setattr(m, n, v)


def gdn_configs(B=2, fp4_decode="fp16", nonflush_kw=None):
    import precision_lab.kernels.gdn.decode as gd
    from precision_lab.kernels.decode_state import PackedState

    Hk, Hv, V, K = 16, 32, 128, 128
    saved = _patched(gd, [("gdn_replay_step_kernel", "gdn replay"), ("gdn_conventional_step_kernel", "gdn conv")],
                     skip=["gdn_replay_scores_kernel"])
    z = (lambda *s: torch.zeros(*s, dtype=torch.bfloat16))  # noqa: E731
    try:
        gd.gdn_conventional_step(PackedState.empty("fp32", B, Hv, V, K), torch.arange(B), z(B, Hk, K), z(B, Hk, K),
                                 z(B, Hv, V), z(B, Hv), z(B, Hv))
        for T, flush, read, L, rc, fused in [(1, False, "fp32", 16, True, False), (1, False, "nvfp4", 16, True, False),
                                             (1, False, "fp32", 16, True, True), (1, False, "nvfp4", 16, True, True),
                                             (1, False, "fp32", 64, True, True), (1, True, "fp32", 16, True, False),
                                             (1, True, "fp32", 16, False, False), (1, True, "fp32", 16, True, True),
                                             (1, True, None, 16, False, True),
                                             (8, False, "fp32", 24, True, False), (8, True, "fp32", 24, True, False)]:
            rec = gd.GDNRecords(B, triton.next_power_of_2(L), Hk, Hv, V, K)
            ints = [torch.arange(B), torch.zeros(B, dtype=torch.int32), torch.zeros(B, dtype=torch.int32)]
            read_copy = None if read is None else PackedState.empty(read, B, Hv, V, K)  # None: shared mode
            gd.gdn_replay_step(PackedState.empty("fp32", B, Hv, V, K), read_copy, rec,
                               *ints, z(B, T, Hk, K), z(B, T, Hk, K), z(B, T, Hv, V), z(B, T, Hv), z(B, T, Hv),
                               flush=flush, fold_new=flush and T == 1, recompute=rc, fused_scores=fused,
                               fp4_decode=fp4_decode, **((nonflush_kw or {}) if T == 1 and not flush else {}))
    finally:
        for n, f in saved.items():
            setattr(gd, n, f)


#: split policies (update/read) of ``--ops flush``: the SR checkpoints with an NVFP4 read copy, and
#: the same flush with an fp32 checkpoint for comparison
FLUSH_POLICIES = ("fp32/nvfp4", "fp16-sr/nvfp4", "fp8e4m3-sr/nvfp4", "bf16-sr/nvfp4", "fp16-sr/fp8e4m3")


def flush_configs(policies=FLUSH_POLICIES, B=2, L=16, flush_kw=None):
    """The autoregressive flush (T = 1, fold_new) of both operators at their real shapes for each
    ``update/read`` split policy, in the two-launch form (what batch 256 runs; the scores kernel is
    not compiled), GDN with its default recompute fold; then the conventional step of each SR
    update format (the cost a flush is compared with). ``flush_kw``: extra keywords of both
    operators' flush launches (e.g. num_warps)."""
    flush_kw = flush_kw or {}
    import precision_lab.kernels.gdn.decode as gd
    import precision_lab.kernels.mamba2.decode as m2
    from precision_lab.kernels.decode_state import PackedState

    z = (lambda *s: torch.zeros(*s, dtype=torch.bfloat16))  # noqa: E731
    ints = [torch.arange(B), torch.zeros(B, dtype=torch.int32), torch.zeros(B, dtype=torch.int32)]
    pairs = [p.split("/") for p in policies]
    H, G, P, N = 128, 8, 64, 128
    # (one tile per program runs in the replay step kernel, several in the multi-tile flush kernel)
    saved = _patched(m2, [("mamba2_replay_step_kernel", "mamba2 flush"), ("mamba2_flush_kernel", "mamba2 flush"),
                          ("mamba2_conventional_step_kernel", "mamba2 conv")], skip=["mamba2_replay_scores_kernel"])
    try:
        for upd, read in pairs:
            print(f"# mamba2 split:{upd}/{read}")
            rec = m2.Mamba2Records(B, triton.next_power_of_2(L), H, G, P, N)
            m2.mamba2_replay_step(PackedState.empty(upd, B, H, P, N), PackedState.empty(read, B, H, P, N), rec,
                                  *ints, z(B, 1, H, P), z(B, 1, H), torch.zeros(H), z(B, 1, G, N), z(B, 1, G, N),
                                  torch.zeros(H), torch.zeros(H), z(B, 1, H, P), flush=True, fold_new=True,
                                  fused_scores=False, **flush_kw)
        for fmt in dict.fromkeys(u for u, _ in pairs):
            print(f"# mamba2 conventional {fmt}")
            m2.mamba2_conventional_step(PackedState.empty(fmt, B, H, P, N), torch.arange(B), z(B, H, P), z(B, H),
                                        torch.zeros(H), z(B, G, N), z(B, G, N), torch.zeros(H), torch.zeros(H),
                                        z(B, H, P))
    finally:
        for n, f in saved.items():
            setattr(m2, n, f)
    Hk, Hv, V, K = 16, 32, 128, 128
    saved = _patched(gd, [("gdn_replay_step_kernel", "gdn flush"), ("gdn_conventional_step_kernel", "gdn conv")],
                     skip=["gdn_replay_scores_kernel"])
    try:
        for upd, read in pairs:
            print(f"# gdn split:{upd}/{read}")
            rec = gd.GDNRecords(B, triton.next_power_of_2(L), Hk, Hv, V, K)
            gd.gdn_replay_step(PackedState.empty(upd, B, Hv, V, K), PackedState.empty(read, B, Hv, V, K), rec,
                               *ints, z(B, 1, Hk, K), z(B, 1, Hk, K), z(B, 1, Hv, V), z(B, 1, Hv), z(B, 1, Hv),
                               flush=True, fold_new=True, fused_scores=False, **flush_kw)
        for fmt in dict.fromkeys(u for u, _ in pairs):
            print(f"# gdn conventional {fmt}")
            gd.gdn_conventional_step(PackedState.empty(fmt, B, Hv, V, K), torch.arange(B), z(B, Hk, K),
                                     z(B, Hk, K), z(B, Hv, V), z(B, Hv), z(B, Hv))
    finally:
        for n, f in saved.items():
            setattr(gd, n, f)


def scan_configs(op: str, B=1, T=64):
    """The teacher-forced scans of one operator at its real shape: the replay scan (shared NVFP4,
    split fp16-SR/NVFP4, fp32) and the recurrent scan (bf16, NVFP4-SR)."""
    from precision_lab.kernels.common.formats import KERNEL_FORMATS

    if op == "mamba2":
        import precision_lab.kernels.mamba2.scan as mod

        H, G, P, N = 128, 8, 64, 128
        names = [("mamba2_replay_scan_fwd_kernel", "mamba2 scan"), ("mamba2_recurrent_scan_fwd_kernel", "mamba2 rec")]
        z = (lambda *s: torch.zeros(*s, dtype=torch.bfloat16))  # noqa: E731
        inputs = (z(B, T, H, P), z(B, T, H), torch.zeros(H), z(B, T, G, N), z(B, T, G, N), torch.zeros(H),
                  torch.zeros(H), z(B, T, H, P))
        state = torch.zeros(B, H, P, N)
        extra = {}
    else:
        import precision_lab.kernels.gdn.scan as mod

        Hk, Hv, K, V = 16, 32, 128, 128
        names = [("gdn_replay_scan_fwd_kernel", "gdn scan"), ("gdn_recurrent_scan_fwd_kernel", "gdn rec")]
        z = (lambda *s: torch.zeros(*s, dtype=torch.bfloat16))  # noqa: E731
        inputs = (z(B, T, Hk, K), z(B, T, Hk, K), z(B, T, Hv, V), torch.zeros(B, T, Hv), torch.zeros(B, T, Hv))
        state = torch.zeros(B, Hv, V, K)
        extra = dict(scale=None, qk_l2norm=True)
    replay = getattr(mod, f"{op}_replay_scan")
    recurrent = getattr(mod, f"{op}_recurrent_scan")
    saved = _patched(mod, names)
    common = dict(seq_ids=torch.arange(B), seed=0, layer=0, event0=1)
    try:
        for upd, read, split in (("nvfp4", "nvfp4", False), ("fp16-sr", "nvfp4", True), ("fp32", "fp32", False)):
            (uf, us), (rf, rs) = KERNEL_FORMATS[upd], KERNEL_FORMATS[read]
            kw = dict(L=16, upd_fmt=uf, upd_sr=us, read_fmt=rf, read_sr=rs, split=split, **extra, **common)
            if op == "gdn":
                kw["recompute"] = True
            replay(*inputs, state, state, **kw)
        for fmt in ("bf16", "nvfp4-sr"):
            f, sr = KERNEL_FORMATS[fmt]
            recurrent(*inputs, state, fmt=f, sr=sr, **extra, **common)
    finally:
        for n, f in saved.items():
            setattr(mod, n, f)


def quant_configs():
    """The quantizer kernels on a [4, 64, 128] fp32 state: NVFP4 (one tile, RNE and SR, both layouts)
    quantize and dequantize, and the element casts (bf16 and fp16 in both rounding modes, fp8 e4m3/e5m2)
    both ways."""
    import precision_lab.kernels.quant.triton_quant as tq

    names = [("nvfp4_quantize_kernel", "nvfp4 quant"), ("nvfp4_quantize_rows_kernel", "nvfp4 quant blk"),
             ("nvfp4_dequantize_kernel", "nvfp4 dequant"),
             ("cast_quantize_kernel", "cast quant"), ("cast_dequantize_kernel", "cast dequant")]
    saved = _patched(tq, names)
    saved_require = tq.require_triton
    # the wrappers read their outputs back (finite checks, views): stand-ins that compile need none
    tq.require_triton = lambda *a, **k: None
    x = torch.zeros(4, 64, 128)
    try:
        # the defaults (RNE: a block over 4 threads; SR: a thread per block), then the other layout
        tq.nvfp4_quantize(x, check_finite=False)
        tq.nvfp4_quantize(x, sr=True, seed=1, check_finite=False)
        tq.nvfp4_quantize(x, check_finite=False, layout="block")
        tq.nvfp4_quantize(x, sr=True, seed=1, check_finite=False, layout="tile")
        tq.nvfp4_quantize(x, sr=True, seed=1, check_finite=False, num_warps=8)
        tq.nvfp4_dequantize(tq.QTensor(torch.zeros(4, 64, 64, dtype=torch.uint8),
                                       torch.zeros(4, 64, 8, dtype=torch.float8_e4m3fn), torch.ones(4), (4, 64, 128),
                                       "nvfp4"))
        for fmt, sr in (("bf16", False), ("bf16", True), ("fp16", False), ("fp16", True), ("e4m3", False),
                        ("e5m2", True)):
            tq.cast_quantize(x, fmt, sr=sr, seed=1 if sr else None)
        for dtype in (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2):
            tq.cast_dequantize(torch.zeros(4, 64, 128, dtype=dtype))
    finally:
        for n, f in saved.items():
            setattr(tq, n, f)
        tq.require_triton = saved_require


def _keywords(items) -> dict:
    kw = {}
    for item in items:
        k, v = item.split("=", 1)
        kw[k] = int(v) if v.isdigit() else v
    return kw


def main(argv=None) -> int:
    from precision_lab.kernels.common.launch import FP4_DECODES

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hw", action="store_true", help="compile the GPU code path (the wrappers pick it for CUDA tensors)")
    ap.add_argument("--ops", nargs="+", default=["mamba2", "gdn"],
                    choices=["mamba2", "gdn", "mamba2-scan", "gdn-scan", "quant", "flush"],
                    help="kernel families to compile (default: the decode kernels of both operators)")
    ap.add_argument("--m2-flush", nargs="*", default=[], metavar="KEY=VALUE",
                    help="extra mamba2_replay_step keywords for the flush launches, e.g. block_r=64 num_warps=8")
    ap.add_argument("--policies", nargs="+", default=list(FLUSH_POLICIES), metavar="UPDATE/READ",
                    help="split policies of --ops flush (default: %(default)s)")
    ap.add_argument("--flush-kw", nargs="*", default=[], metavar="KEY=VALUE",
                    help="extra keywords of the --ops flush launches (both operators), e.g. num_warps=8")
    ap.add_argument("--nonflush-kw", nargs="*", default=[], metavar="KEY=VALUE",
                    help="extra keywords of both operators' one-token output-only launches (--ops mamba2 gdn), "
                         "e.g. block_r=128 num_warps=1")
    ap.add_argument("--fp4-decode", choices=list(FP4_DECODES), default="fp16",
                    help="NVFP4 element decode of the non-flush steps (the wrappers' fp4_decode; 'ptx' needs --hw)")
    ap.add_argument("--batch", type=int, default=None, metavar="B",
                    help="compile the decode kernels (--ops mamba2 gdn) at batch B under the wrappers' own "
                         "rules, small-batch ones included (default: batch 2 at the large-batch shapes)")
    ap.add_argument("--loads", action="store_true",
                    help="below each launch, every global load's memory round and source line")
    ap.add_argument("--overlap-scores", action="store_true",
                    help="two-launch steps as on a Hopper GPU, overlapped with their scores kernel (the "
                         "wrappers' rule where the read copy is NVFP4: the step reads the raw q, k)")
    ap.add_argument("--issue-floor", type=int, metavar="BATCH",
                    help="after each launch, the least time its instructions take to issue at batch BATCH "
                         "(straight-line kernels; one warp instruction per scheduler and cycle, four "
                         "schedulers per SM: a floor, not a prediction)")
    ap.add_argument("--sms", type=int, default=132, help="SMs for --issue-floor (default: %(default)s, H100/H200 SXM)")
    ap.add_argument("--clock-mhz", type=float, default=1980.0,
                    help="SM clock for --issue-floor (default: %(default)s, what the H100 and H200 ran the benchmarks at)")
    args = ap.parse_args(argv)
    print(f"# Triton {triton.__version__} ({os.path.dirname(triton.__file__)}), sm_90", flush=True)
    _Compile.LOADS = args.loads
    if args.issue_floor and args.batch is not None and args.issue_floor != args.batch:
        ap.error("--issue-floor needs the batch of --batch: the wrappers' small-batch launch shapes do not scale")
    if args.issue_floor:
        _Compile.ISSUE = (args.issue_floor, 2 if args.batch is None else args.batch, args.sms, args.clock_mhz)
    if args.hw:  # the wrappers choose the hardware decode path from x.is_cuda
        torch.Tensor.is_cuda = property(lambda self: True)
    import precision_lab.kernels.gdn.decode as gd
    import precision_lab.kernels.mamba2.decode as m2

    if args.overlap_scores:  # the launch keyword itself is not a compile argument
        for mod in (gd, m2):
            if hasattr(mod, "overlap_scores_launch"):
                mod.overlap_scores_launch = lambda device, override, measured_faster=True: measured_faster
                mod.pdl_kwargs = lambda pdl: {}
    with large_batch_shapes(m2, gd) if args.batch is None else contextlib.nullcontext():
        B = 2 if args.batch is None else args.batch
        if "mamba2" in args.ops:
            mamba2_configs(B=B, flush_kw=_keywords(args.m2_flush), fp4_decode=args.fp4_decode,
                           nonflush_kw=_keywords(args.nonflush_kw))
        if "gdn" in args.ops:
            gdn_configs(B=B, fp4_decode=args.fp4_decode, nonflush_kw=_keywords(args.nonflush_kw))
        for op in ("mamba2", "gdn"):
            if f"{op}-scan" in args.ops:
                scan_configs(op)
        if "quant" in args.ops:
            quant_configs()
        if "flush" in args.ops:
            flush_configs(args.policies, flush_kw=_keywords(args.flush_kw))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
