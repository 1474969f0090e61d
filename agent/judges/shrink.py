"""The incumbent's honest value: an empirical-Bayes estimate of what a commit really scores.

A commit kept on one lucky run carries its luck in its figure: keep-if-lower then compares every
later candidate against the luckiest figure so far (the winner's curse), and refuses real gains
after a lucky keep. The default rule (agent/judges/judge.py advance) compares a candidate's run
against the incumbent's *shrunk* value instead: the posterior mean of its true value given its
runs and what the night has shown proposals do.

Model. A commit c proposed on top of its parent p has a true value theta_c = theta_p - delta_c;
delta_c, the proposal's effect (positive: better), is drawn from a prior G that the night's own
one-run results estimate; each run of c is theta_c + Normal(0, sigma^2) (sigma: the pooled seed
noise, agent/judges/stats.py). Given the parent's estimate (mean m_p, variance v_p) and the mean y
of c's k runs:

    theta_c | y  ~  posterior of  theta = (m_p - delta) + e_p,  e_p ~ N(0, v_p),  y ~ N(theta, sigma^2 / k)

with delta ~ G. G is a discrete prior on a grid, fitted by the nonparametric maximum likelihood
estimate (EM on a grid, Koenker and Mizera's convex form solved by fixed-point iteration) from every
experiment's first run d_i = m_parent - y_i, each with its own noise (v_parent + sigma^2); it is
mixed with a broad default prior, Normal(0, (DEFAULT_TAU x sigma)^2), of weight PRIOR_WEIGHT
experiments, so the first experiments of a night are shrunk by a sensible amount rather than by an
estimate made of two points. The posterior of theta_c is then a mixture of normals: its mean is the
shrunk value, and P(theta_c < m_p) the probability the commit is better than its parent's estimate.

Everything here is plain float arithmetic, for the judge and scripts/rule_sim.py alike.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# The default prior's spread, in sigmas, and its weight in experiments: a proposal's effect is
# usually of the order of the seed noise, and after PRIOR_WEIGHT experiments the night's own
# estimate weighs as much as it.
DEFAULT_TAU = 1.0
PRIOR_WEIGHT = 4.0
# The grid the prior lives on: this many points over the observed range widened by GRID_PAD sigmas.
GRID_POINTS = 81
GRID_PAD = 3.0
# EM iterations of the grid prior's weights (a fixed-point iteration of the likelihood: each one
# raises it; 200 are enough for 100 experiments to a part in a thousand).
EM_ITERATIONS = 200


@dataclass(frozen=True)
class Estimate:
    """A commit's value as the judge believes it: posterior mean and variance (bpb, bpb^2)."""
    mean: float
    var: float

    @property
    def sd(self) -> float:
        return math.sqrt(max(0.0, self.var))


@dataclass(frozen=True)
class Prior:
    """The prior over a proposal's effect delta (positive: better): atoms and their weights."""
    atoms: tuple[float, ...]
    weights: tuple[float, ...]

    @property
    def mean(self) -> float:
        return sum(a * w for a, w in zip(self.atoms, self.weights))


def _phi(x: float, var: float) -> float:
    return math.exp(-0.5 * x * x / var) / math.sqrt(2 * math.pi * var) if var > 0 else float(x == 0)


def default_prior(sigma: float) -> Prior:
    """Normal(0, (DEFAULT_TAU sigma)^2) on a grid of +-4 tau."""
    tau = max(1e-12, DEFAULT_TAU * sigma)
    atoms = tuple(tau * (-4 + 8 * i / (GRID_POINTS - 1)) for i in range(GRID_POINTS))
    w = [_phi(a, tau * tau) for a in atoms]
    total = sum(w)
    return Prior(atoms, tuple(x / total for x in w))


def fit_prior(effects: list[tuple[float, float]], sigma: float) -> Prior:
    """The prior over effects from observed (d_i, noise variance of d_i) pairs: the grid NPMLE mixed
    with the default prior (weight PRIOR_WEIGHT experiments against len(effects))."""
    base = default_prior(sigma)
    obs = [(d, v) for d, v in effects if math.isfinite(d) and math.isfinite(v) and v > 0]
    if not obs:
        return base
    lo = min(min(d for d, _ in obs), base.atoms[0]) - GRID_PAD * sigma
    hi = max(max(d for d, _ in obs), base.atoms[-1]) + GRID_PAD * sigma
    atoms = [lo + (hi - lo) * i / (GRID_POINTS - 1) for i in range(GRID_POINTS)]
    like = [[_phi(d - a, v) for a in atoms] for d, v in obs]
    w = [1.0 / len(atoms)] * len(atoms)
    for _ in range(EM_ITERATIONS):
        new = [0.0] * len(atoms)
        for row in like:
            total = sum(wj * lj for wj, lj in zip(w, row))
            if total <= 0:
                continue
            for j, lj in enumerate(row):
                new[j] += w[j] * lj / total
        s = sum(new)
        if s <= 0:
            return base
        w = [x / s for x in new]
    # the default prior, moved onto the same grid
    dflt = [_phi(a, (DEFAULT_TAU * sigma) ** 2) for a in atoms]
    dsum = sum(dflt) or 1.0
    n, k = len(obs), PRIOR_WEIGHT
    mixed = [(n * wj + k * dj / dsum) / (n + k) for wj, dj in zip(w, dflt)]
    return Prior(tuple(atoms), tuple(mixed))


def posterior(parent: Estimate, runs: list[float], sigma: float, prior: Prior) -> tuple[Estimate, float]:
    """(the commit's value given its runs, P(it is better than the parent's estimate)).

    theta = m_p - delta + e_p; the mean y of k runs ~ N(theta, sigma^2 / k). For each atom a of the
    prior, theta | y, delta=a is normal (the parent's uncertainty and the runs' noise combined);
    the atoms are weighted by how well each explains y."""
    k = len(runs)
    if k == 0:
        return parent, 0.5
    y = sum(runs) / k
    obs_var = sigma * sigma / k
    comps = []
    for a, w in zip(prior.atoms, prior.weights):
        if w <= 0:
            continue
        m0, v0 = parent.mean - a, parent.var
        lik = _phi(y - m0, v0 + obs_var)
        post_var = v0 * obs_var / (v0 + obs_var) if v0 > 0 else 0.0
        post_mean = (m0 * obs_var + y * v0) / (v0 + obs_var) if v0 > 0 else m0
        comps.append((w * lik, post_mean, post_var))
    total = sum(c[0] for c in comps)
    if total <= 0 or not math.isfinite(total):   # y far outside anything the prior allows: the runs decide
        return Estimate(y, obs_var), (1.0 if y < parent.mean else 0.0)
    mean = sum(c[0] * c[1] for c in comps) / total
    second = sum(c[0] * (c[2] + c[1] * c[1]) for c in comps) / total
    better = sum(c[0] * _below(parent.mean, c[1], c[2]) for c in comps) / total
    return Estimate(mean, max(0.0, second - mean * mean)), better


def _below(x: float, mean: float, var: float) -> float:
    """P(N(mean, var) < x)."""
    if var <= 0:
        return 1.0 if mean < x else 0.0
    return 0.5 * (1 + math.erf((x - mean) / math.sqrt(2 * var)))
