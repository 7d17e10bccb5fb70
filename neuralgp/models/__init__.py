"""Estimators: thin scikit-learn style wrappers over feature maps and the posterior engine."""

from neuralgp.errors import ResourceLimitError
from neuralgp.models.baselines import (DKLRegressor, ExactGPRegressor, GPyTorchDBKRegressor, GridSVDKLRegressor,
                                       SGPRRegressor, SparseDKLRegressor, SVDKLClassifier, SVDKLRegressor,
                                       SVGPClassifier, SVGPRegressor)
from neuralgp.models.dak import DAKClassifier, DAKRegressor
from neuralgp.models.dbk import DBKRegressor
from neuralgp.models.dkm import DKMRegressor
from neuralgp.models.fmgp import FMGPClassifier, FMGPRegressor
from neuralgp.models.gpnn import GPnnRegressor, NNGPRegressor
from neuralgp.models.network import NetworkClassifier, NetworkRegressor
from neuralgp.models.sklearn_gp import SklearnGPRegressor
from neuralgp.models.twostage import TwoStageGPRegressor

__all__ = ["DBKRegressor", "DKMRegressor", "DAKRegressor", "DAKClassifier", "FMGPRegressor", "FMGPClassifier",
           "GPnnRegressor", "NNGPRegressor", "NetworkClassifier", "NetworkRegressor", "ExactGPRegressor",
           "SGPRRegressor", "SVGPRegressor", "SVGPClassifier", "DKLRegressor", "SparseDKLRegressor", "SVDKLRegressor",
           "SVDKLClassifier", "GridSVDKLRegressor", "GPyTorchDBKRegressor", "SklearnGPRegressor",
           "TwoStageGPRegressor", "ResourceLimitError"]
