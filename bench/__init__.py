"""Benchmarks and evaluations for compactor (not part of the installed package)."""
