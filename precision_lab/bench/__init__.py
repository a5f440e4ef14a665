"""Benchmark library: timing, problems, result schemas and tables behind scripts/bench_*.py."""
