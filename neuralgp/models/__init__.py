"""Estimators: thin scikit-learn style wrappers over feature maps and the posterior engine."""

from neuralgp.models.dbk import DBKRegressor

__all__ = ["DBKRegressor"]
