"""neuralgp: Gaussian processes with learned kernels that stay fast and honest about uncertainty."""

from neuralgp import datasets, metrics
from neuralgp.errors import DataError, InputError, ModelFileError, NeuralGPError, NotFittedError
from neuralgp.io import load
from neuralgp.models import (DAKClassifier, DAKRegressor, DBKRegressor, DKLRegressor, DKMRegressor, ExactGPRegressor,
                             FMGPClassifier, FMGPRegressor, GPnnRegressor, GPyTorchDBKRegressor, GridSVDKLRegressor,
                             NetworkClassifier, NetworkRegressor, NNGPRegressor, SGPRRegressor, SklearnGPRegressor,
                             SparseDKLRegressor, SVDKLClassifier, SVDKLRegressor, SVGPClassifier, SVGPRegressor,
                             TwoStageGPRegressor)

__version__ = "0.2.0"
__all__ = ["DBKRegressor", "DKMRegressor", "DAKRegressor", "DAKClassifier", "FMGPRegressor", "FMGPClassifier",
           "GPnnRegressor", "NNGPRegressor", "NetworkClassifier", "NetworkRegressor", "ExactGPRegressor",
           "SGPRRegressor", "SVGPRegressor", "SVGPClassifier", "DKLRegressor", "SklearnGPRegressor",
           "SparseDKLRegressor", "SVDKLRegressor", "SVDKLClassifier", "GridSVDKLRegressor", "GPyTorchDBKRegressor",
           "TwoStageGPRegressor", "load", "datasets", "metrics",
           "NeuralGPError", "InputError", "DataError", "ModelFileError", "NotFittedError", "__version__"]
