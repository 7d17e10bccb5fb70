"""Estimators: thin scikit-learn style wrappers over feature maps and the posterior engine."""

from neuralgp.models.dbk import DBKRegressor
from neuralgp.models.fmgp import FMGPClassifier, FMGPRegressor
from neuralgp.models.gpnn import NNGPRegressor
from neuralgp.models.network import NetworkClassifier
from neuralgp.models.peers import (DKLRegressor, ExactGPRegressor, GPyTorchDBKRegressor, ResourceLimitError,
                                   SGPRRegressor, SparseDKLRegressor, SVDKLRegressor, SVGPClassifier,
                                   SVGPRegressor)

__all__ = ["DBKRegressor", "FMGPRegressor", "FMGPClassifier", "NNGPRegressor", "NetworkClassifier", "ExactGPRegressor",
           "SGPRRegressor", "SVGPRegressor", "SVGPClassifier", "DKLRegressor", "SparseDKLRegressor", "SVDKLRegressor",
           "GPyTorchDBKRegressor", "ResourceLimitError"]
