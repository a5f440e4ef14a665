"""GPU timers: cold-L2 launch timing (CUDA-graph replay), CUDA-event medians, and the one used by
the quantizer benchmark (``triton.testing.do_bench``, which flushes the L2 before every call).

The L2 of an H200 (50 MB) holds a small batch's fp32 state whole; timing one buffer over and over would
measure the cache. ``time_launches`` cycles over enough independent buffer sets (``n_sets``) that
every launch reads its data from HBM.
"""
from __future__ import annotations

import math
import statistics
import time

import torch

#: bytes of independent buffer sets one timing cycles over (≫ the 50 MB L2)
COLD_BYTES = 256 << 20


def n_sets(bytes_per_launch: float, cold_bytes: int = COLD_BYTES, most: int = 64) -> int:
    """Buffer sets a launch that moves ``bytes_per_launch`` needs so that cycling over them moves
    ``cold_bytes`` (at least 1, at most ``most``)."""
    return int(min(most, max(1, math.ceil(cold_bytes / max(bytes_per_launch, 1)))))


def time_launches(launch, nsets: int, min_launches: int = 24, replays: int = 5) -> tuple[float, str]:
    """Median µs per launch; ``launch(i)`` runs the kernel on buffer set i (cycled for a cold L2).

    The launches are captured in one CUDA graph (≥ ``min_launches``, a multiple of ``nsets``) and
    the graph is replayed ``replays`` times; a launcher that cannot be captured (it syncs with the
    host) is timed with CUDA events around each launch instead. Returns (µs, how it was timed)."""
    reps = max(min_launches, nsets)
    reps = int(math.ceil(reps / nsets) * nsets)
    for i in range(nsets):
        launch(i)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    try:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            launch(0)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            for r in range(reps):
                launch(r % nsets)
        g.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(replays):
            e0.record()
            g.replay()
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) * 1e3 / reps)
        del g
        return statistics.median(times), "cuda-graph"
    except Exception as e:  # noqa: BLE001 - some peers sync on the host; fall back to events per launch
        torch.cuda.synchronize()
        times = []
        for r in range(reps * 2):
            e0.record()
            launch(r % nsets)
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) * 1e3)
        return statistics.median(times), f"events ({type(e).__name__})"


def event_median_ms(fn, reps: int) -> float:
    """Median milliseconds of ``reps`` calls of ``fn`` timed with CUDA events, after one warm-up
    (compile) call. For calls whose inputs are far larger than the L2 (a whole scan's inputs)."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return sorted(ts)[len(ts) // 2]


def do_bench_ms(fn, rep_ms: float, smoke: bool = False) -> float:
    """Median milliseconds of ``fn`` by ``triton.testing.do_bench`` (L2 flushed before each call).
    ``smoke`` (no GPU): one call timed on the host clock, only to run the code path."""
    if smoke:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=rep_ms, return_mode="median"))
