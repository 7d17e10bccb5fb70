"""Benchmarks: commands that measure, never run by the test suite."""
