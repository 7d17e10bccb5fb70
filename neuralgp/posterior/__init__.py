"""The posterior engine: one home for the linear algebra of weight-space GPs on features Φ."""

from neuralgp.posterior.exact import PRECISIONS, ExactPosterior, GramStats, accumulate_stats, gram_stats
from neuralgp.posterior.likelihoods import GaussianLikelihood, PoissonLikelihood, gauss_hermite
from neuralgp.posterior.variational import (FullRankPosterior, MeanFieldPosterior, elbo,
                                            make_weight_posterior)

__all__ = ["PRECISIONS", "ExactPosterior", "GramStats", "accumulate_stats", "gram_stats", "GaussianLikelihood",
           "PoissonLikelihood", "gauss_hermite", "FullRankPosterior", "MeanFieldPosterior", "elbo",
           "make_weight_posterior"]
