"""Benchmarks of hiclass_parallel (not part of the installed package)."""
