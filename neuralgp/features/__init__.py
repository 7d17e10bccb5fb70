"""Feature maps φ(x): the networks whose outputs are the basis functions of a learned kernel."""

from neuralgp.features.additive import AdditiveGridFeatures
from neuralgp.features.compose import ProductFeatures, SumFeatures
from neuralgp.features.grid import InducedGrid
from neuralgp.features.networks import MLP, ConstantNorm, ResNetMLP, build_backbone

__all__ = ["InducedGrid", "AdditiveGridFeatures", "MLP", "ResNetMLP", "ConstantNorm", "ProductFeatures", "SumFeatures",
           "build_backbone"]
