"""KL-vs-length driver (docs/design.md §8): KL(p_ref ‖ p_policy) per position under teacher forcing.

The fp32-state reference and every policy run in lockstep on the same tokens: the model is adapted
with ``[fp32, *policies]`` and each SSM mixer serves row group g under policy g (shared weights, one
forward per segment). Per position t of the decode part of the stream (t >= prefill),

    KL_t = Σ_v p_ref(v) (log p_ref(v) − log p_pol(v))

from fp32 logits, with log-softmax and the sum in fp64; also top-1 agreement and each run's NLL of
the true next token. "Length" is the number of decode steps the state has taken when position t is
predicted: ``length = t − prefill + 1`` (1 for the first decode token).

Output directory (``--out``):
    run.json                  the run's settings and fingerprint (a rerun must match it)
    batches/batch_NNNNN.npz   per-position values of one batch of documents, written atomically
                              when the batch completes: kl, agree, nll [policies, docs, positions]
    summary.json              kind "kl": buckets (log2 and linear), stats, 95% bootstrap CIs over
                              documents (per-document mean KL resampled), provenance
    kl_vs_length.png          mean KL per log2 length bucket with 95% CIs over documents

Resuming: documents are processed in batches (by default as many as fit in
``DEFAULT_BATCH_TOKENS`` tokens, at least one), each written when complete. On a rerun, completed
batch files are verified (fingerprint, checksum, shapes), kept and listed in one log line; missing
batches are computed; a batch interrupted mid-way is recomputed from its start. A corrupted or
foreign file stops the run with a message naming it; nothing is overwritten. Data parallel:
``torchrun --nproc-per-node K`` gives batch k to rank k mod K; rank 0 merges. Batches have the same
composition in every layout, so the merged result equals the single-process one.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import sys
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

SCHEMA_VERSION = 1
# A batch of documents is the unit of checkpointing (and of data parallelism): by default as many
# documents as fit in this many tokens, at least one, so an interruption loses little work.
DEFAULT_BATCH_TOKENS = 2048
DEFAULT_POLICIES = ("conventional:bf16", "shared:nvfp4", "split:fp32/nvfp4", "split:fp16-sr/nvfp4")


@dataclass
class KLConfig:
    """Settings of a KL run (all of them but ``out``/``device``/``progress`` enter the fingerprint)."""

    model: str = "tiny-nemotron-h"
    data: str = "default"
    docs: int = 4
    tokens: int = 1024
    prefill: int = 32
    policies: tuple[str, ...] = DEFAULT_POLICIES
    seed: int = 0
    batch_size: int | None = None  # documents per batch (None: DEFAULT_BATCH_TOKENS' worth; 0: all in one)
    segment: int = 512             # decode tokens per forward
    engine: str = "auto"
    dtype: str | None = None       # model weights (default: preset's / bf16 for checkpoints)
    model_seed: int = 0            # weight seed of presets
    skip_short: bool = False
    out: str = "runs/kl"
    device: str = "auto"
    progress: bool = True
    plot: bool = True

    def normalized(self) -> KLConfig:
        from precision_lab.policy import StatePolicy

        pols = []
        for p in self.policies:
            s = StatePolicy.parse(p).short_str()
            if s != "fp32" and s not in pols:
                pols.append(s)
        if not pols:
            raise ValueError("no policy to compare with the fp32 reference (give e.g. --policies shared:nvfp4)")
        if self.prefill < 0 or self.prefill >= self.tokens:
            raise ValueError(f"--prefill must be in [0, tokens) = [0, {self.tokens}), got {self.prefill}")
        if self.batch_size is None:
            bs = max(1, DEFAULT_BATCH_TOKENS // self.tokens)
        elif self.batch_size < 0:
            raise ValueError(f"--batch-size must be >= 0 (0: all documents in one batch), got {self.batch_size}")
        else:
            bs = self.batch_size or self.docs
        return KLConfig(**{**asdict(self), "policies": tuple(pols), "batch_size": min(bs, self.docs)})


def _fingerprint_fields(cfg: KLConfig, engine: str) -> dict:
    return {"model": cfg.model, "model_seed": cfg.model_seed, "dtype": cfg.dtype, "data": cfg.data,
            "docs": cfg.docs, "tokens": cfg.tokens, "prefill": cfg.prefill, "policies": list(cfg.policies),
            "seed": cfg.seed, "batch_size": cfg.batch_size, "segment": cfg.segment, "engine": engine,
            "skip_short": cfg.skip_short}


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


class ResultFileError(ValueError):
    """A file in the output directory is corrupted or belongs to another run."""


# ------------------------------------------------------------------------------------------------
# per-position KL from logits
# ------------------------------------------------------------------------------------------------
def kl_from_logits(logits: torch.Tensor, targets: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Per-position statistics of G runs against run 0.

    logits:  [G, B, T, V] fp32 (group 0 = reference)
    targets: [B, T] next-token ids (for NLL) or None
    Returns kl [G-1, B, T] fp64, agree [G-1, B, T] bool, nll [G, B, T] fp64 (if targets).
    """
    logp = torch.log_softmax(logits.double(), dim=-1)
    ref = logp[0]
    kl = (ref.exp() * (ref - logp[1:])).sum(-1).clamp_min(0.0)  # tiny negative values are fp64 rounding
    top = logits.argmax(-1)
    out = {"kl": kl, "agree": top[1:] == top[0]}
    if targets is not None:
        # targets may be shorter than T (the stream's last position has no next token)
        n = targets.shape[1]
        idx = targets.unsqueeze(0).unsqueeze(-1).expand(logp.shape[0], *targets.shape, 1)
        out["nll"] = -logp[:, :, :n].gather(-1, idx).squeeze(-1)
    return out


def _chunk_tokens(rows: int, vocab: int, budget_bytes: float) -> int:
    # log_softmax in fp64 holds ~3 copies of [rows, chunk, vocab]
    return max(1, int(budget_bytes // (rows * vocab * 8 * 3)))


# ------------------------------------------------------------------------------------------------
# batch files
# ------------------------------------------------------------------------------------------------
def _write_npz_atomic(path: Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
    buf = io.BytesIO()
    digest = hashlib.sha256()
    for k in sorted(arrays):
        digest.update(k.encode())
        digest.update(np.ascontiguousarray(arrays[k]).tobytes())
    meta = {**meta, "sha256": digest.hexdigest()}
    np.savez(buf, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)


def read_batch(path: Path, fingerprint: str) -> dict:
    """Load and verify one batch file; raises ResultFileError if corrupted or foreign."""
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        meta = json.loads(bytes(data.pop("meta")).decode())
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError, EOFError) as e:
        raise ResultFileError(f"{path}: corrupted result file ({type(e).__name__}: {e}); it was not modified. "
                              "Delete it to recompute that batch.") from e
    if meta.get("fingerprint") != fingerprint:
        raise ResultFileError(f"{path}: belongs to another run (fingerprint {meta.get('fingerprint')} != "
                              f"{fingerprint}); it was not modified. Use another --out directory.")
    digest = hashlib.sha256()
    for k in sorted(data):
        digest.update(k.encode())
        digest.update(np.ascontiguousarray(data[k]).tobytes())
    if digest.hexdigest() != meta.get("sha256"):
        raise ResultFileError(f"{path}: checksum mismatch (corrupted); it was not modified. Delete it to recompute "
                              "that batch.")
    return {"meta": meta, **data}


# ------------------------------------------------------------------------------------------------
# statistics
# ------------------------------------------------------------------------------------------------
def log2_buckets(n: int) -> list[tuple[int, int]]:
    """[lo, hi) length ranges 1-1, 2-3, 4-7, ... covering lengths 1..n."""
    out, lo = [], 1
    while lo <= n:
        out.append((lo, min(2 * lo, n + 1)))
        lo *= 2
    return out


def linear_buckets(n: int, count: int = 8) -> list[tuple[int, int]]:
    """``count`` equal-width [lo, hi) length ranges covering 1..n (fewer if n < count)."""
    count = max(1, min(count, n))
    edges = [1 + (i * n) // count for i in range(count + 1)]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def _stats(x: np.ndarray) -> dict:
    if x.size == 0:
        return {}
    q = np.quantile(x, [0.5, 0.9, 0.95, 0.99])
    return {"mean": float(x.mean()), "median": float(q[0]), "q90": float(q[1]), "q95": float(q[2]),
            "q99": float(q[3]), "max": float(x.max())}


def _ci_over_docs(per_doc: np.ndarray, n_boot: int = 2000) -> dict:
    """Mean over documents with a 95% percentile-bootstrap interval (documents resampled with
    replacement, fixed seed, so reruns agree). Percentiles of means of non-negative KLs stay
    positive, which keeps the interval drawable on the log axis; None with fewer than 2 documents."""
    n = per_doc.size
    m = float(per_doc.mean())
    if n < 2:
        return {"mean_over_docs": m, "ci95": None, "n_docs": int(n)}
    rng = np.random.default_rng(0)
    means = per_doc[rng.integers(0, n, size=(n_boot, n))].mean(1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return {"mean_over_docs": m, "ci95": [float(lo), float(hi)], "n_docs": int(n), "ci_method": "bootstrap-percentile"}


def summarize(kl: np.ndarray, agree: np.ndarray, nll: np.ndarray, policies: list[str],
              linear_count: int = 8) -> dict:
    """Per-policy statistics. kl, agree: [P, D, T]; nll: [P+1, D, T] (row 0 = reference).
    Length of position j is j + 1."""
    P, D, T = kl.shape
    res = {}
    for i, pol in enumerate(policies):
        k, a = kl[i], agree[i]
        entry = {"overall": {**_stats(k.ravel()), "top1_agreement": float(a.mean()),
                             **{f"doc_{key}": v for key, v in _ci_over_docs(k.mean(1)).items()},
                             "nll": float(nll[i + 1].mean()), "nll_ref": float(nll[0].mean())},
                 "buckets": {}}
        for name, bks in (("log2", log2_buckets(T)), ("linear", linear_buckets(T, linear_count))):
            rows = []
            for lo, hi in bks:
                sl = slice(lo - 1, hi - 1)
                rows.append({"lo": lo, "hi": hi - 1, "n_positions": int(k[:, sl].size),
                             **_stats(k[:, sl].ravel()), "top1_agreement": float(a[:, sl].mean()),
                             **_ci_over_docs(k[:, sl].mean(1))})
            entry["buckets"][name] = rows
        res[pol] = entry
    return res


def format_table(summary: dict) -> str:
    """A plain-text table: mean KL per log2 length bucket, overall stats, top-1 agreement."""
    pols = summary["policies"]
    res = summary["results"]
    buckets = res[pols[0]]["buckets"]["log2"]
    heads = [f"{b['lo']}-{b['hi']}" if b['hi'] > b['lo'] else f"{b['lo']}" for b in buckets]
    w = max(len(p) for p in pols) + 2
    lines = [f"mean KL(fp32 || policy) by generated length ({summary['data']['docs']} docs x "
             f"{summary['data']['decode_tokens']} decode tokens, model {summary['model']['name']})",
             "policy".ljust(w) + "".join(h.rjust(10) for h in heads) + "      mean       q99    top1"]
    for p in pols:
        r = res[p]
        cells = "".join(f"{b['mean']:10.2e}" for b in r["buckets"]["log2"])
        o = r["overall"]
        lines.append(p.ljust(w) + cells + f"  {o['mean']:9.2e} {o['q99']:9.2e}  {o['top1_agreement']:6.4f}")
    return "\n".join(lines)


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-")]
    for i, p in enumerate(summary["policies"]):
        rows = summary["results"][p]["buckets"]["log2"]
        x = [math.sqrt(r["lo"] * r["hi"]) for r in rows]
        y = [max(r["mean"], 1e-12) for r in rows]
        marker, ls = styles[i % len(styles)]
        line, = ax.plot(x, y, marker=marker, linestyle=ls, label=p)  # distinct styles: curves may coincide
        lo = [max(r["ci95"][0], 1e-12) if r.get("ci95") else v for r, v in zip(rows, y)]
        hi = [r["ci95"][1] if r.get("ci95") else v for r, v in zip(rows, y)]
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("generated length (decode steps, log2 buckets)")
    ax.set_ylabel("mean KL(fp32 state || policy) [nats]")
    ax.set_title(f"{summary['model']['name']}: KL vs length ({summary['data']['docs']} docs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def kl_stream(model, toks: torch.Tensor, *, n_groups: int, prefill: int, segment: int, engine: str,
              seq_ids: torch.Tensor | None = None, budget_bytes: float = 2e9, progress=None,
              max_seconds: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Teacher-force one batch of documents through a model adapted with G = n_groups policies
    (group 0 = reference) and return per-position arrays over the decode part:
    kl, agree [G-1, B, N-prefill] and nll [G, B, N-prefill] (NaN where there is no next token, or
    past ``max_seconds``: the stream then stops early after the segment that crossed it)."""
    from precision_lab.engine import lm_logits
    from precision_lab.engine import run as tf_run

    B, N = toks.shape
    G = n_groups
    decode_n = N - prefill
    kl = np.full((G - 1, B, decode_n), np.nan, np.float64)
    agree = np.zeros((G - 1, B, decode_n), np.bool_)
    nll = np.full((G, B, decode_n), np.nan, np.float64)
    vocab = model.get_output_embeddings().weight.shape[0]
    device = next(model.parameters()).device
    targets = toks.to(device)
    step = _chunk_tokens(G * B, vocab, budget_bytes)
    t_start = time.perf_counter()
    for seg in tf_run(model, toks, prefill_len=prefill, segment_len=segment, engine=engine, seq_ids=seq_ids,
                      progress=progress):
        # logits at stream position t predict token t+1; the decode part starts at t = prefill
        lo = max(seg.start, prefill)
        if lo < seg.end:
            h = seg.hidden[:, lo - seg.start:]
            for c0 in range(0, h.shape[1], step):
                hc = h[:, c0:c0 + step]
                t0, t1 = lo + c0, lo + c0 + hc.shape[1]
                with torch.inference_mode():
                    logits = lm_logits(model, hc).view(G, B, hc.shape[1], vocab)
                    r = kl_from_logits(logits, targets[:, t0 + 1:min(t1 + 1, N)])
                j0, j1 = t0 - prefill, t1 - prefill
                kl[:, :, j0:j1] = r["kl"].cpu().numpy()
                agree[:, :, j0:j1] = r["agree"].cpu().numpy()
                nll[:, :, j0:j0 + r["nll"].shape[2]] = r["nll"].cpu().numpy()
        if max_seconds is not None and time.perf_counter() - t_start > max_seconds:
            break
    return kl, agree, nll


# ------------------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------------------
def _dist_info() -> tuple[int, int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    return rank, world, local


def _pick_device(spec: str, local_rank: int) -> torch.device:
    if spec == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(spec)


def _check_run_file(out: Path, run_meta: dict) -> None:
    path = out / "run.json"
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ResultFileError(f"{path}: corrupted run file ({e}); it was not modified. Use another --out "
                                  "directory or delete it.") from e
        if old.get("kind") != "kl-run" or old.get("fingerprint") != run_meta["fingerprint"]:
            diff = {k: (old.get("settings", {}).get(k), v) for k, v in run_meta["settings"].items()
                    if old.get("settings", {}).get(k) != v}
            raise ResultFileError(f"{out} holds a different run (settings that differ, old -> new: {diff}); nothing "
                                  "was overwritten. Use another --out directory.")
    else:
        out.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(run_meta, indent=1))
        os.replace(tmp, path)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _spans(ks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out, start = [], ks[0]
    for a, b in zip(ks, [*ks[1:], None]):
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(out)


def run_kl(cfg: KLConfig, *, rank: int | None = None, world: int | None = None,
           stop_after_batches: int | None = None, log=print) -> dict | None:
    """Run (or resume) a KL study; returns the summary dict on the merging rank, else None.

    rank/world: this process's share of the batches (default: torchrun's environment)
    stop_after_batches: compute at most this many batches and return (simulates an interruption)
    """
    from precision_lab.data import load_documents
    from precision_lab.engine import resolve_engine
    from precision_lab.models import apply_policy, load_model

    cfg = cfg.normalized()
    env_rank, env_world, local = _dist_info()
    rank = env_rank if rank is None else rank
    world = env_world if world is None else world
    device = _pick_device(cfg.device, local)
    engine = resolve_engine(cfg.engine, device)
    fp_fields = _fingerprint_fields(cfg, engine)
    out = Path(cfg.out)

    model, tok = load_model(cfg.model, dtype=cfg.dtype, device=device, seed=cfg.model_seed)
    policies = ["fp32", *cfg.policies]
    apply_policy(model, policies, engine=engine, seed=cfg.seed)
    docs = load_documents(cfg.data, tok, n_docs=cfg.docs, tokens=cfg.tokens, skip_short=cfg.skip_short)
    # The fingerprint covers every setting that changes results and the exact tokens of each document.
    doc_hash = _hash([hashlib.sha256(d.tokens.numpy().tobytes()).hexdigest() for d in docs])
    settings = {**fp_fields, "doc_tokens_sha": doc_hash}
    fingerprint = _hash(settings)
    run_meta = {"kind": "kl-run", "schema_version": SCHEMA_VERSION, "fingerprint": fingerprint,
                "settings": settings}
    if rank == 0:
        _check_run_file(out, run_meta)
    else:
        out.mkdir(parents=True, exist_ok=True)
    bdir = out / "batches"
    bdir.mkdir(exist_ok=True)

    bs = cfg.batch_size
    batches = [list(range(i, min(i + bs, len(docs)))) for i in range(0, len(docs), bs)]
    decode_n = cfg.tokens - cfg.prefill
    todo, found = [], []
    for k, idx in enumerate(batches):
        path = bdir / f"batch_{k:05d}.npz"
        if path.exists():
            read_batch(path, fingerprint)  # verify now; raises on corrupted / foreign files
            found.append(k)
        elif k % world == rank:
            todo.append((k, idx, path))
    if found:
        log(f"kl: resuming {out}: {len(found)} of {len(batches)} batches already complete "
            f"(batch {_spans(found)}: {_count(sum(len(batches[k]) for k in found), 'document')}), "
            f"{len(todo)} to compute"
            + (f" on rank {rank}" if world > 1 else ""))
    total_tokens = len(todo) * cfg.tokens * bs
    bar = None
    if cfg.progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=total_tokens, unit="tok", desc=f"kl rank {rank}" if world > 1 else "kl",
                   dynamic_ncols=True, file=sys.stderr)
    budget = 2e9 if device.type == "cuda" else 2.5e8
    done = 0
    t_start = time.perf_counter()
    for k, idx, path in todo:
        if stop_after_batches is not None and done >= stop_after_batches:
            break
        toks = torch.stack([docs[i].tokens for i in idx])             # [B, N]
        B = toks.shape[0]
        G = len(policies)
        seq_ids = torch.tensor(idx, dtype=torch.int64)                   # SR ids = global document index
        kl, agree, nll = kl_stream(model, toks, n_groups=G, prefill=cfg.prefill, segment=cfg.segment,
                                   engine=engine, seq_ids=seq_ids, budget_bytes=budget,
                                   progress=(lambda n, B=B: bar.update(n * B)) if bar else None)
        _write_npz_atomic(path, {"kl": kl, "agree": agree, "nll": nll,
                                 "doc_index": np.array(idx, np.int64)},
                          {"fingerprint": fingerprint, "batch": k, "policies": policies,
                           "docs": [docs[i].doc_id for i in idx]})
        done += 1
    if bar:
        bar.close()
    elapsed = time.perf_counter() - t_start
    report = model.precision_lab_report()
    served = sorted({c for layer in report["layers"] for c in layer["calls"]})
    del model
    if stop_after_batches is not None and len(todo) > done:
        return None
    if env_world > 1 and world == env_world and torch.distributed.is_available():
        # torchrun: wait until every rank has written its batches, then rank 0 merges. gloo is enough
        # for a barrier and needs no device binding.
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group("gloo")
        torch.distributed.barrier()
    if rank != 0:
        return None
    missing = [k for k in range(len(batches)) if not (bdir / f"batch_{k:05d}.npz").exists()]
    if missing:
        log(f"kl: {len(missing)} batches not computed yet (other ranks?); rerun to finish and merge")
        return None
    parts = [read_batch(bdir / f"batch_{k:05d}.npz", fingerprint) for k in range(len(batches))]
    KL = np.concatenate([p["kl"] for p in parts], axis=1)
    AG = np.concatenate([p["agree"] for p in parts], axis=1)
    NLL = np.concatenate([p["nll"] for p in parts], axis=1)
    NLL = np.where(np.isnan(NLL), np.nanmean(NLL), NLL)  # the last position has no next token
    from precision_lab.provenance import provenance

    src = {"name": cfg.model, "seed": cfg.model_seed, "dtype": cfg.dtype}
    summary = {
        "kind": "kl", "schema_version": SCHEMA_VERSION,
        "provenance": provenance(policies=list(cfg.policies), reference="fp32", model=cfg.model, data=cfg.data,
                                 seed=cfg.seed, engine=engine, implementations=served, fingerprint=fingerprint,
                                 settings=run_meta["settings"]),
        "model": src,
        "data": {"source": cfg.data, "docs": len(docs), "tokens": cfg.tokens, "prefill": cfg.prefill,
                 "decode_tokens": decode_n, "doc_ids": [d.doc_id for d in docs],
                 "titles": [d.meta.get("short_book_title") or d.meta.get("title") for d in docs]},
        "reference": "fp32", "policies": list(cfg.policies), "seed": cfg.seed,
        "engine": {"requested": cfg.engine, "used": engine, "implementations": served},
        "length_definition": "decode steps taken when the position is predicted (1 = first decode token)",
        "results": summarize(KL, AG, NLL, list(cfg.policies)),
        "timing": {"seconds_this_process": elapsed, "batches_this_process": done},
    }
    tmp = out / f"summary.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps(summary, indent=1))
    os.replace(tmp, out / "summary.json")
    if cfg.plot:
        plot(summary, out / "kl_vs_length.png")
    return summary
