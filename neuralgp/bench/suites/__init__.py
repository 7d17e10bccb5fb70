"""Benchmark suites, one module per paper (its suites, its models and its published numbers); a new paper's
suites are one new module added to ``MODULES``."""

from neuralgp.bench.suites import calibration, dak, dbk, dkm, fmgp, scaleout, streaming, twostage

MODULES = (calibration, dbk, fmgp, dak, twostage, dkm, scaleout, streaming)
SUITES = {suite.name: suite for module in MODULES for suite in module.SUITES}
