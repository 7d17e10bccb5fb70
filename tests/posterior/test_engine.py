"""The posterior engine against dense GP algebra (float64, to 1e-8)."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from neuralgp.models.weightspace import WeightSpaceModule
from neuralgp.posterior import correction_scale, trace_penalty
from neuralgp.features import MLP
from neuralgp.posterior import (ExactPosterior, FullRankPosterior, GaussianLikelihood, MeanFieldPosterior,
                                GramStats, PoissonLikelihood, accumulate_stats, elbo, gauss_hermite, gram_stats)

D = torch.float64


def problem(n=40, r=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    phi = torch.randn(n, r, generator=g, dtype=D)
    y = torch.randn(n, generator=g, dtype=D)
    return phi, y


def low_rank_as_dense(dense_gp, phi, y, noise, phi_star, diag=None, diag_star=None):
    """K = ΦΦᵀ + diag, test prior variance ‖φ*‖² + diag*, through the dense-GP reference."""
    K = phi @ phi.T + (torch.diag(diag) if diag is not None else 0)
    prior = (phi_star ** 2).sum(-1) + (diag_star if diag_star is not None else 0)
    return dense_gp(K, phi @ phi_star.T, prior, y, noise)


@pytest.mark.parametrize("n,r", [(40, 6), (5, 12)])
def test_lml_and_predictive_equal_dense_gp(n, r, dense_gp):
    phi, y = problem(n, r)
    noise = torch.tensor(0.3, dtype=D)
    post = ExactPosterior(gram_stats(phi, y), noise)
    _, _, S = low_rank_as_dense(dense_gp, phi, y, noise, phi[:1])
    dense_lml = multivariate_normal(mean=np.zeros(n), cov=S.numpy()).logpdf(y.numpy())
    assert post.log_marginal_likelihood().item() == pytest.approx(dense_lml, rel=1e-10, abs=1e-8)
    phi_star = torch.randn(7, r, dtype=D)
    mean, var_f, var_y = post.predict(phi_star)
    d_mean, d_var, _ = low_rank_as_dense(dense_gp, phi, y, noise, phi_star)
    torch.testing.assert_close(mean, d_mean, rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(var_f, d_var, rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(var_y, d_var + noise, rtol=1e-8, atol=1e-8)


def test_heteroscedastic_lml_equals_dense():
    phi, y = problem()
    noise = torch.tensor(0.2, dtype=D)
    d = torch.rand(len(y), dtype=D) + 0.5
    post = ExactPosterior(gram_stats(phi, y, d), noise)
    cov = (phi @ phi.T + noise * torch.diag(d)).numpy()
    dense = multivariate_normal(mean=np.zeros(len(y)), cov=cov).logpdf(y.numpy())
    assert post.log_marginal_likelihood().item() == pytest.approx(dense, rel=1e-10)


def test_variance_correction_equals_dense_gp_with_diagonal(dense_gp):
    """Eq. (12) is the GP with K̂ = ΦΦᵀ + diag(M − ‖φ_i‖²), noise σ², prior var max(M, ‖φ*‖²)."""
    phi, y = problem()
    noise = torch.tensor(0.05, dtype=D)
    sq = (phi ** 2).sum(-1)
    M = sq.max()
    post = ExactPosterior(gram_stats(phi, y, correction_scale(phi, noise, M)), noise)
    phi_star = torch.cat([torch.randn(5, phi.shape[1], dtype=D), 3 * torch.randn(2, phi.shape[1], dtype=D)])
    sq_star = (phi_star ** 2).sum(-1)
    c_star = torch.clamp(M - sq_star, min=0)
    mean, var_f, var_y = post.predict(phi_star, correction_scale(phi_star, noise, M))
    d_mean, d_var_f, _ = low_rank_as_dense(dense_gp, phi, y, noise, phi_star, diag=M - sq, diag_star=c_star)
    torch.testing.assert_close(mean, d_mean, rtol=1e-8, atol=1e-10)
    # the model's f excludes c(x*,x*): it is counted in the heteroscedastic noise of y
    torch.testing.assert_close(var_y, d_var_f + noise, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(var_f + c_star, d_var_f, rtol=1e-8, atol=1e-10)
    assert torch.allclose(sq + (M - sq), M.expand_as(sq))  # uniform corrected prior variance


def test_chunked_statistics_equal_one_shot():
    phi, y = problem(n=1003, r=5)
    scale = lambda p: 1.0 + p[:, 0] ** 2  # noqa: E731  a per-point noise multiplier computed from features
    whole = gram_stats(phi, y, scale(phi))
    chunked = accumulate_stats(lambda X: X, phi, y, noise_scale_fn=scale, chunk_size=97)
    assert chunked.n == whole.n == 1003
    for a, b in [(chunked.A, whole.A), (chunked.b, whole.b), (chunked.c, whole.c),
                 (chunked.logdet_d, whole.logdet_d)]:
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_gram_backward_matches_autograd_reference():
    phi, y = problem(n=20, r=4)
    phi.requires_grad_(True)
    d = torch.rand(20, dtype=D) + 0.5
    G = torch.randn(5, 5, dtype=D)
    s = gram_stats(phi, y, d)
    (s.A * G[:4, :4]).sum().backward(retain_graph=True)
    g1 = phi.grad.clone()
    phi.grad = None
    ((phi.T / d) @ phi * G[:4, :4]).sum().backward()
    torch.testing.assert_close(g1, phi.grad)
    assert torch.autograd.gradcheck(lambda p: gram_stats(p, y, d).A.sum() + gram_stats(p, y, d).b.sum(),
                                    (phi.detach().clone().requires_grad_(True),))


def test_lml_gradient_matches_appendix_formula():
    """∇_Φ log p = −Σ⁻¹Φ + Σ⁻¹yyᵀΣ⁻¹Φ (Appendix A.1)."""
    phi, y = problem(n=15, r=3)
    phi.requires_grad_(True)
    noise = torch.tensor(0.4, dtype=D)
    ExactPosterior(gram_stats(phi, y), noise).log_marginal_likelihood().backward()
    S = phi.detach() @ phi.detach().T + noise * torch.eye(15, dtype=D)
    Si_phi, Si_y = torch.linalg.solve(S, phi.detach()), torch.linalg.solve(S, y)
    torch.testing.assert_close(phi.grad, -Si_phi + torch.outer(Si_y, Si_y @ phi.detach()))


@pytest.mark.parametrize("batched_scales", [False, True])
def test_batched_lml_closed_form_gradient_finite_differences(batched_scales):
    """The closed-form r×r gradient (``_EvidenceTerms``) against finite differences: Φ, σ² and σ_f², for two
    regressions at once (the Dirichlet classifier's shape), with per-batch or shared noise and scale."""
    phi, y = problem(n=12, r=3)
    d = torch.rand(12, dtype=D) + 0.5
    raw = torch.tensor([[0.3, -0.2], [-0.4, 0.5]] if batched_scales else [[0.3], [-0.4]], dtype=D)

    def lml(p, raw):
        one, two = gram_stats(p, y, d), gram_stats(p, y.flip(0))
        stats = GramStats(*(torch.stack([getattr(one, k), getattr(two, k)]) for k in ("A", "b", "c")), 12,
                          torch.stack([one.logdet_d, two.logdet_d]))
        return ExactPosterior(stats, raw[0].exp(), raw[1].exp()).log_marginal_likelihood()
    assert torch.autograd.gradcheck(lml, (phi.clone().requires_grad_(True), raw.requires_grad_(True)))


def test_objective_gradient_finite_differences():
    """Whole DBK objective (LML − trace penalty) w.r.t. network weights and noise, in float64."""
    torch.manual_seed(0)
    X = torch.rand(12, 2, dtype=D) * 2 - 1
    y = torch.sin(3 * X[:, 0]).to(D)
    module = WeightSpaceModule(MLP(2, 3, hidden=5, depth=1), 3, 0.1, 1e-6, False, "full").double()
    params = dict(module.named_parameters())
    names = ["net.net.0.weight", "net.net.0.bias", "net.net.2.weight", "net.net.2.bias", "noise.raw"]
    inputs = tuple(params[k].detach().clone().requires_grad_(True) for k in names)

    def objective(w1, b1, w2, b2, raw_noise):
        phi = torch.tanh(X @ w1.T + b1) @ w2.T + b2
        noise = 1e-6 + torch.nn.functional.softplus(raw_noise)
        return ExactPosterior(gram_stats(phi, y), noise).log_marginal_likelihood() - trace_penalty(phi, noise)

    assert torch.autograd.gradcheck(objective, inputs, eps=1e-6, atol=1e-5)
    # the functional form above is the module's own forward
    torch.testing.assert_close(module.net(X), torch.tanh(X @ inputs[0].T + inputs[1]) @ inputs[2].T + inputs[3])


def optimal_q(phi, y, noise):
    post = ExactPosterior(gram_stats(phi, y), noise)
    lam = phi.T @ phi + noise * torch.eye(phi.shape[1], dtype=D)
    return post, torch.linalg.cholesky(noise * torch.linalg.inv(lam))


def test_elbo_at_optimum_equals_lml_and_predictive_equals_exact():
    phi, y = problem()
    noise = torch.tensor(0.3, dtype=D)
    post, L = optimal_q(phi, y, noise)
    q = FullRankPosterior(phi.shape[1]).double()
    q.set(post.weights_mean, L)
    value = elbo(phi, y, q, GaussianLikelihood(noise))
    assert value.item() == pytest.approx(post.log_marginal_likelihood().item(), rel=1e-10)
    phi_star = torch.randn(6, phi.shape[1], dtype=D)
    m1, v1 = q.predict_f(phi_star)
    m2, v2 = post.predict_f(phi_star)
    torch.testing.assert_close(m1, m2, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(v1, v2, rtol=1e-8, atol=1e-10)


def test_elbo_is_a_lower_bound_and_gradient_ascent_reaches_lml():
    phi, y = problem(n=30, r=3)
    noise = torch.tensor(0.5, dtype=D)
    lml = ExactPosterior(gram_stats(phi, y), noise).log_marginal_likelihood().item()
    for q in (FullRankPosterior(3).double(), MeanFieldPosterior(3).double()):
        opt = torch.optim.Adam(q.parameters(), lr=0.05)
        for _ in range(1500):
            opt.zero_grad()
            value = elbo(phi, y, q, GaussianLikelihood(noise))
            assert value.item() <= lml + 1e-9
            (-value).backward()
            opt.step()
    assert elbo(phi, y, FullRankPosterior(3).double(), GaussianLikelihood(noise)).item() < lml
    full = FullRankPosterior(3).double()
    opt = torch.optim.Adam(full.parameters(), lr=0.05)
    for _ in range(3000):
        opt.zero_grad()
        (-elbo(phi, y, full, GaussianLikelihood(noise))).backward()
        opt.step()
    assert elbo(phi, y, full, GaussianLikelihood(noise)).item() == pytest.approx(lml, abs=1e-4)


def test_minibatch_estimator_is_unbiased_over_a_partition():
    phi, y = problem(n=24, r=4)
    noise = torch.tensor(0.3, dtype=D)
    q = FullRankPosterior(4).double()
    with torch.no_grad():
        q.mean.normal_()
        q.raw_tril.normal_()
    lik = GaussianLikelihood(noise)
    full = elbo(phi, y, q, lik)
    assert elbo(phi, y, q, lik, n_total=24).item() == pytest.approx(full.item())
    batches = [elbo(phi[i:i + 6], y[i:i + 6], q, lik, n_total=24) for i in range(0, 24, 6)]
    assert torch.stack(batches).mean().item() == pytest.approx(full.item(), rel=1e-12)
    # the mini-batch trace term is biased downward: max over a batch <= max over all points
    assert sum(trace_penalty(phi[i:i + 6], noise) * 4 for i in range(0, 24, 6)) / 4 <= trace_penalty(phi, noise)


@pytest.mark.parametrize("cls", [FullRankPosterior, MeanFieldPosterior])
def test_kl_matches_torch_distributions(cls):
    q = cls(5).double()
    with torch.no_grad():
        for p in q.parameters():
            p.normal_()
    cov = torch.diag(q.std() ** 2) if cls is MeanFieldPosterior else q.scale_tril() @ q.scale_tril().T
    ref = torch.distributions.kl_divergence(
        torch.distributions.MultivariateNormal(q.mean, covariance_matrix=cov),
        torch.distributions.MultivariateNormal(torch.zeros(5, dtype=D), torch.eye(5, dtype=D)))
    assert q.kl_divergence().item() == pytest.approx(ref.item(), rel=1e-10)


def test_trace_bound_eq11():
    phi, y = problem()
    noise = torch.tensor(0.2, dtype=D)
    c = torch.rand(len(y), dtype=D)
    dense = multivariate_normal(mean=np.zeros(len(y)),
                                cov=(phi @ phi.T + torch.diag(c) + noise * torch.eye(len(y), dtype=D)).numpy())
    lml = ExactPosterior(gram_stats(phi, y), noise).log_marginal_likelihood().item()
    assert dense.logpdf(y.numpy()) >= lml - c.sum().item() / (2 * noise.item())


def test_poisson_closed_form_equals_quadrature_and_monte_carlo():
    lik = PoissonLikelihood()
    y = torch.tensor([0.0, 1.0, 3.0, 7.0], dtype=D)
    mean = torch.tensor([-1.0, 0.2, 1.0, 2.0], dtype=D)
    var = torch.tensor([0.3, 0.1, 0.5, 0.05], dtype=D)
    closed = lik.expected_log_prob(y, mean, var)
    torch.testing.assert_close(closed, gauss_hermite(lik.log_prob, y, mean, var), rtol=1e-9, atol=1e-9)
    f = mean + var.sqrt() * torch.randn(200000, 4, dtype=D, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(closed, lik.log_prob(y, f).mean(0), rtol=0, atol=0.02)
    rate, var_y = lik.predictive(mean, var)
    lam = torch.exp(f)
    torch.testing.assert_close(rate, lam.mean(0), rtol=0.02, atol=0)
    torch.testing.assert_close(var_y, lam.mean(0) + lam.var(0), rtol=0.05, atol=0)


def test_gaussian_closed_form_equals_quadrature():
    lik = GaussianLikelihood(torch.tensor(0.2, dtype=D))
    y, mean, var = (torch.randn(5, dtype=D), torch.randn(5, dtype=D), torch.rand(5, dtype=D))
    torch.testing.assert_close(lik.expected_log_prob(y, mean, var), gauss_hermite(lik.log_prob, y, mean, var))


def test_poisson_svi_recovers_rates():
    """Weight-space SVI with the Poisson likelihood on counts (Appendix A.5 on binned data)."""
    g = torch.Generator().manual_seed(1)
    x = torch.linspace(-1, 1, 400, dtype=D)
    phi = torch.stack([torch.ones_like(x), x, x ** 2], -1)
    true_rate = torch.exp(1.0 + 0.8 * x - 0.5 * x ** 2)
    y = torch.poisson(true_rate, generator=g)
    q = FullRankPosterior(3).double()
    opt = torch.optim.Adam(q.parameters(), lr=0.05)
    for _ in range(800):
        opt.zero_grad()
        (-elbo(phi, y, q, PoissonLikelihood())).backward()
        opt.step()
    rate, _ = PoissonLikelihood().predictive(*q.predict_f(phi))
    assert torch.mean(torch.abs(rate - true_rate) / true_rate).item() < 0.1
    assert math.isfinite(q.kl_divergence().item())


def test_reduced_precision_grams_are_close_returned_in_float64_and_mixed_is_closer():
    torch.manual_seed(0)
    # not a multiple of the mixed block (the tail is summed too); large enough that float32's error has grown:
    # measured mixed/float32 errors 6e-8/1.8e-7 at n = 2·10⁴, 2.7e-8/3.2e-7 at 2·10⁵ (MKL on an Intel CPU, 2 cores);
    # 2.3e-8/2.3e-5 at 2·10⁵ on an AMD EPYC, where MKL's float32 product sums far less accurately: the float32
    # bound below is the BLAS's, loose; the mixed bound is ours
    n, r = 200_000 + 77, 16
    phi = torch.randn(n, r) + 2.0  # a large common offset: float32 sums lose digits
    y, d = torch.randn(n, dtype=torch.float64), torch.rand(n, dtype=torch.float64) + 0.5
    reference = gram_stats(phi.double(), y.float().double(), d.float().double())
    errors = {}
    for precision in ("mixed", "float32"):
        s = gram_stats(phi, y, d, precision=precision)
        assert s.A.dtype == s.b.dtype == s.c.dtype == torch.float64
        errors[precision] = (s.A - reference.A).abs().max().item() / reference.A.abs().max().item()
        b_error = (s.b - reference.b).abs().max() / reference.b.abs().max()
        assert b_error < 1e-5, (precision, b_error)
    assert errors["float32"] < 1e-3 and errors["mixed"] < min(1e-7, errors["float32"] / 4), errors
    exact = gram_stats(phi, y, d)  # float64 keeps y and d unrounded
    torch.testing.assert_close(exact.A, gram_stats(phi.double(), y, d).A, rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(exact.b, gram_stats(phi.double(), y, d).b, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("precision", ["float64", "mixed", "float32"])
def test_gram_gradient_is_the_same_at_every_precision(precision):
    torch.manual_seed(1)
    phi = torch.randn(700, 5, dtype=torch.float64, requires_grad=True)
    y, d = torch.randn(700, dtype=torch.float64), torch.rand(700, dtype=torch.float64) + 0.5
    weights = torch.randn(6, 6, dtype=torch.float64)
    s = gram_stats(phi, y, d, precision=precision)
    ((s.A * weights[:5, :5]).sum() + (s.b * weights[5, :5]).sum()).backward()
    w_a, w_b = weights[:5, :5], weights[5, :5]  # ∂/∂Φ of ⟨W, ΦᵀD⁻¹Φ⟩ + ⟨w, ΦᵀD⁻¹y⟩
    expected = (phi.detach() @ (w_a + w_a.T) + torch.outer(y, w_b)) / d[:, None]
    torch.testing.assert_close(phi.grad, expected, rtol=1e-10, atol=1e-10)
