"""The posterior engine: one home for the linear algebra of weight-space GPs on features Φ."""

from neuralgp.posterior.correction import correction_scale, trace_penalty
from neuralgp.posterior.exact import (PRECISIONS, ExactPosterior, GramStats, accumulate_stats, gram_stats,
                                     stream_stats)
from neuralgp.posterior.likelihoods import GaussianLikelihood, PoissonLikelihood, gauss_hermite
from neuralgp.posterior.objectives import chunked_exact_backward, exact_objective
from neuralgp.posterior.positive import Positive, inverse_softplus
from neuralgp.posterior.sparse import SparseRows
from neuralgp.posterior.variational import (FullRankPosterior, MeanFieldPosterior, elbo, mc_elbo,
                                            make_weight_posterior)

__all__ = ["PRECISIONS", "ExactPosterior", "GramStats", "accumulate_stats", "stream_stats", "gram_stats",
           "GaussianLikelihood",
           "PoissonLikelihood", "gauss_hermite", "FullRankPosterior", "MeanFieldPosterior", "elbo", "mc_elbo",
           "make_weight_posterior", "SparseRows", "correction_scale", "trace_penalty", "exact_objective",
           "chunked_exact_backward", "Positive", "inverse_softplus"]
