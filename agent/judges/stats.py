"""The judge's statistics: a pooled noise estimate and a sequential one-sided t-test.

Model: every run of a commit gives val_bpb = its true value + noise, the noise Normal with one
sigma for the whole tag (seed noise, and on a wall-clock budget the step count). Every run has a
seed of its own (agent/experiment.py seed_for), so two runs never replay each other.

- Noise: sigma is pooled over every commit measured more than once (the baseline's repeats, the
  candidates' confirming runs), with df = sum(n_i - 1). It grows more precise all night. A run
  that sits more than OUTLIER_T pooled sigmas from its commit's other runs (leave-one-out) is not
  a noise sample, so one bad run cannot blow the estimate up; runs the machine disturbed never get
  here (agent/judges/evidence.py, its pace checks). Identical values of one commit count once: a train.py that ignores
  AUTORESEARCH_SEED replays one draw, which is no evidence of the noise.
- Comparison: gain = mean(incumbent runs) - mean(candidate runs), se = sigma * sqrt(1/n + 1/m),
  t = gain / se with df degrees of freedom. The bar is the incumbent's mean over all its runs,
  never the luckiest one (the winner's curse), and its own uncertainty (1/m) is in se.
- A side whose own runs disagree beyond the tag's noise (two runs more than OUTLIER_T pooled
  sigmas apart, or runs that still do with their one outlier left out: a change that makes
  training erratic) is not described by the pooled sigma: its variance is its own runs' (Welch's se and df), so two
  runs 17 sigma apart cannot make a keep (on the pooled sigma their mean would claim a precision
  neither run has, and a proposer paid for a lower number finds such recipes). Such a
  candidate is run again up to MAX_RUNS, never discarded as faded on that se alone. Nor is an
  erratic commit a noise sample: one whose runs vary improbably much next to the others' (F test
  at ERRATIC_P) is left out of the pooled sigma whole (five runs at sd 0.045 would widen a tag's
  sigma of 0.006 to 0.031, and every other comparison with it).
- p_better = T_df(t): the probability that the candidate is better, under a flat prior. A keep
  needs p_better >= P_KEEP on at least MIN_KEEP_RUNS runs of the candidate's own.
- Sequential: after one run, a candidate that is not below the incumbent's mean is discarded (most
  proposals are, at the cost of one run); otherwise it is run again. After each further run: keep
  at p_better >= P_KEEP; discard when t < FUTILITY_T (the gain has faded); at MAX_RUNS runs still
  between, "undecided" (a contested discard, escalated to the human queue).

Why these numbers: scripts/judge_sim.py simulates the bench of scripts/bench_judge.py (20 null
edits, gains of 1, 2, 3 and 5 sigma) with this module's rule; P_KEEP 0.99 with 5 baseline runs and
up to 5 runs per candidate kept 1.08% of nulls and 98.6% of 3-sigma gains, so the bench's goal (at
most 1 null in 20, at least 9 of 10 gains >= 3 sigma) held in 98.7% of 300 benches (docs/judge.md).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

# Baseline runs before the first decision (--baseline-repeats): 4 degrees of freedom for sigma
# (t_0.99 = 3.75, falling toward 2.4 as confirming runs add more); fewer make 3-sigma gains hard to
# keep early (scripts/judge_sim.py --baseline-runs N, docs/judge.md); each ~5.5 minutes at 300 s.
BASELINE_RUNS = 5
# A keep needs this posterior probability that the candidate beats the incumbent: 1% false keeps
# per null edit, so 20 nulls give 2 or more false keeps in under 2% of nights.
P_KEEP = 0.99
# No keep rests on fewer runs of the candidate's own: a would-be keep is always confirmed.
MIN_KEEP_RUNS = 2
# Runs of one candidate at most (the first and its confirmations) before an undecided call.
MAX_RUNS = 5
# A contested candidate (its call "more") waits while the incumbent is run again, as long as the
# incumbent has fewer runs than the candidate and fewer than this: the incumbent's runs are the
# bar of every later comparison, and a commit kept on 2 lucky runs sets a bar below its truth
# (the winner's curse). Equal runs on both sides also give the t-test its smallest se for the runs.
INCUMBENT_RUNS = BASELINE_RUNS
# After the first run: go on only when the candidate is at least this many se below the bar
# (0: below the incumbent's mean). A true 3-sigma gain is stopped here 0.3% of the time.
FIRST_RUN_MIN_T = 0.0
# From the second run on: a candidate whose t falls under this is discarded (its gain faded).
FUTILITY_T = 1.0
# A run this many (leave-one-out) pooled sigmas from its commit's other runs is not a noise
# sample: an honest run is flagged about 1 time in 100 at df 3, 1 in 30,000 at df 20.
OUTLIER_T = 6.0
# A commit whose runs vary this improbably much next to the others' pooled variance (one-sided F
# test, after its one outlier is left out) is not a noise sample: a change that makes training
# erratic must not widen every later decision's band. An honest commit is left out 1 time in 1,000,
# which costs only its degrees of freedom.
ERRATIC_P = 1e-3
# Values of one commit closer than this are the same draw (a replay), counted once.
SAME_DRAW = 1e-9
# Sigma is never taken below this (bpb), nor below this fraction of the metric: identical runs
# would otherwise make any difference "significant".
SIGMA_FLOOR_ABS = 0.0005
SIGMA_FLOOR_REL = 0.0005


# ---- Student's t (no scipy in the project: the regularized incomplete beta function) ----------
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (Numerical Recipes' betacf)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 3e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom (df = inf: the normal)."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    if math.isinf(df):
        return 0.5 * (1.0 + math.erf(t / math.sqrt(2.0)))
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def f_sf(x: float, d1: float, d2: float) -> float:
    """P(F > x) for Fisher's F with (d1, d2) degrees of freedom."""
    if x <= 0:
        return 1.0
    return 1.0 - _betainc(d1 / 2.0, d2 / 2.0, d1 * x / (d1 * x + d2))


def t_ppf(p: float, df: float) -> float:
    """The t with t_cdf(t, df) = p (bisection: exact to ~1e-12)."""
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


# ---- the noise --------------------------------------------------------------------------------
def distinct(values: list[float]) -> list[float]:
    """Values with replays (equal to within SAME_DRAW) counted once, in order."""
    out: list[float] = []
    for v in values:
        if v is not None and math.isfinite(v) and not any(abs(v - o) <= SAME_DRAW for o in out):
            out.append(float(v))
    return out


def _ss(groups: list[list[float]]) -> tuple[float, int]:
    ss, df = 0.0, 0
    for g in groups:
        if len(g) > 1:
            mu = statistics.fmean(g)
            ss += sum((x - mu) ** 2 for x in g)
            df += len(g) - 1
    return ss, df


@dataclass
class Noise:
    sigma: float | None          # pooled, floored; None when no commit has two distinct runs
    df: int                      # degrees of freedom behind it
    raw: float | None = None     # before the floor
    runs: int = 0                # noise samples used
    outliers: list[tuple[str, float]] = field(default_factory=list)   # (commit, value) left out
    floored: bool = False
    erratic: list[str] = field(default_factory=list)   # commits left out whole (ERRATIC_P)

    def as_dict(self) -> dict:
        return {"sigma": self.sigma, "df": self.df, "raw_sigma": self.raw, "runs": self.runs,
                "outliers": [{"commit": c, "bpb": v} for c, v in self.outliers], "floored": self.floored,
                "erratic_commits": list(self.erratic)}


def pooled_noise(groups: dict[str, list[float]]) -> Noise:
    """Sigma pooled over commits (values per commit); at most one outlier per commit left out."""
    clean = {c: distinct(v) for c, v in groups.items()}
    outliers = []
    for c, vals in clean.items():
        if len(vals) < 2:
            continue
        worst, worst_z = None, OUTLIER_T
        for i, y in enumerate(vals):
            rest = vals[:i] + vals[i + 1:]
            others = [g for k, g in clean.items() if k != c] + [rest]
            ss, df = _ss(others)
            if df < 2 or ss <= 0:
                continue
            s = math.sqrt(ss / df)
            z = abs(y - statistics.fmean(rest)) / (s * math.sqrt(1.0 + 1.0 / len(rest)))
            if z > worst_z:
                worst, worst_z = i, z
        if worst is not None:
            outliers.append((c, vals[worst]))
    dropped = {}
    for c, v in outliers:
        dropped.setdefault(c, []).append(v)
    kept = {c: [v for v in vals if v not in dropped.get(c, [])] for c, vals in clean.items()}
    erratic_commits = []
    for c, g in kept.items():
        ss_c, df_c = _ss([g])
        ss_o, df_o = _ss([h for k, h in kept.items() if k != c and k not in erratic_commits])
        if df_c >= 1 and df_o >= 2 and ss_o > 0 and f_sf((ss_c / df_c) / (ss_o / df_o), df_c, df_o) < ERRATIC_P:
            erratic_commits.append(c)
    used = [g for c, g in kept.items() if c not in erratic_commits]
    ss, df = _ss(used)
    every = [v for g in used for v in g]
    ref = abs(statistics.fmean(every)) if every else 0.0
    if df == 0:
        return Noise(None, 0, None, sum(len(g) for g in used if len(g) > 1), outliers, erratic=erratic_commits)
    raw = math.sqrt(ss / df)
    floor = max(SIGMA_FLOOR_ABS, SIGMA_FLOOR_REL * ref)
    return Noise(max(raw, floor), df, raw, sum(len(g) for g in used if len(g) > 1), outliers, raw < floor,
                 erratic_commits)


def floor_for(values: list[float]) -> float:
    ref = abs(statistics.fmean(values)) if values else 0.0
    return max(SIGMA_FLOOR_ABS, SIGMA_FLOOR_REL * ref)


# ---- the comparison and the call --------------------------------------------------------------
@dataclass
class Comparison:
    incumbent: list[float]       # the bar's runs (distinct)
    candidate: list[float]
    gain: float                  # mean(incumbent) - mean(candidate): > 0 is better
    sigma: float | None
    df: float                    # the pool's (an int), or Welch's where a side is erratic
    se: float | None = None
    t: float | None = None
    p_better: float | None = None
    margin: float | None = None  # the gain that would give p_better = P_KEEP at these n, m, df
    erratic: tuple = ()          # the sides ("candidate", "incumbent") whose runs disagree beyond the noise

    @property
    def n(self) -> int:
        return len(self.candidate)

    @property
    def m(self) -> int:
        return len(self.incumbent)

    def as_dict(self) -> dict:
        return {"incumbent_runs": self.incumbent, "candidate_runs": self.candidate,
                "incumbent_mean": statistics.fmean(self.incumbent), "candidate_mean": statistics.fmean(self.candidate),
                "gain": self.gain, "sigma": self.sigma, "df": self.df, "se": self.se, "t": self.t,
                "p_better": self.p_better, "p_keep": P_KEEP, "margin": self.margin, "erratic": list(self.erratic)}


def _worst(values: list[float], sigma: float) -> tuple[int, float]:
    """(index, z) of the run farthest from the mean of the others, in pooled sigmas (leave-one-out)."""
    zs = [abs(y - statistics.fmean(values[:i] + values[i + 1:])) / (sigma * math.sqrt(1.0 + 1.0 / (len(values) - 1)))
          for i, y in enumerate(values)]
    i = max(range(len(zs)), key=zs.__getitem__)
    return i, zs[i]


def erratic(values: list[float], sigma: float | None, df: float | None = None) -> bool:
    """Whether a commit's runs are ones the tag's noise does not explain, as pooled_noise judges a
    commit: its one outlier (a run more than OUTLIER_T sigmas from the mean of the others) left
    out, the rest still holds one, or (given the pool's df) fails the F test at ERRATIC_P. Two runs
    that far apart are erratic: which one is the tail run is not known yet. One tail run among
    runs that agree is the noise's long tail (docs/judge.md), not an erratic change."""
    if not sigma or len(values) < 2:
        return False
    i, z = _worst(values, sigma)
    if z > OUTLIER_T:
        if len(values) == 2:
            return True
        values = values[:i] + values[i + 1:]
        if len(values) >= 2 and _worst(values, sigma)[1] > OUTLIER_T:
            return True
    return bool(df) and len(values) >= 2 and \
        f_sf(statistics.variance(values) / sigma ** 2, len(values) - 1, df) < ERRATIC_P


def compare(incumbent: list[float], candidate: list[float], noise: Noise) -> Comparison:
    inc, cand = distinct(incumbent), distinct(candidate)
    gain = statistics.fmean(inc) - statistics.fmean(cand)
    c = Comparison(inc, cand, gain, noise.sigma, noise.df)
    if noise.sigma is None or noise.df < 1:
        return c
    c.erratic = tuple(side for side, vals in (("candidate", cand), ("incumbent", inc)) if erratic(vals, noise.sigma, noise.df))
    if not c.erratic:
        c.se = noise.sigma * math.sqrt(1.0 / len(cand) + 1.0 / len(inc))
        df = noise.df
    else:   # Welch: an erratic side's variance is its own runs' (len - 1 df), the other side's the pool's
        parts = []
        for side, vals in (("candidate", cand), ("incumbent", inc)):
            own = side in c.erratic
            var, dfs = (statistics.variance(vals), len(vals) - 1) if own else (noise.sigma ** 2, noise.df)
            parts.append((var / len(vals), dfs))
        c.se = math.sqrt(sum(v for v, _ in parts))
        df = c.se ** 4 / sum(v * v / d for v, d in parts)
        c.df = df
    c.t = gain / c.se
    c.p_better = t_cdf(c.t, df)
    c.margin = t_ppf(P_KEEP, df) * c.se
    return c


def margin_for(sigma: float, df: int, n: int, m: int) -> float | None:
    """The gain a candidate of n runs must show against m incumbent runs to be kept."""
    if df < 1 or sigma is None:
        return None
    return t_ppf(P_KEEP, df) * sigma * math.sqrt(1.0 / n + 1.0 / m)


def rerun_incumbent(incumbent_runs: int, candidate_runs: int) -> bool:
    """After a "more" call: run the incumbent once more before the candidate (INCUMBENT_RUNS)."""
    return candidate_runs >= MIN_KEEP_RUNS and incumbent_runs < min(candidate_runs, INCUMBENT_RUNS)


def call(c: Comparison, runs: int | None = None) -> tuple[str, str]:
    """(keep | discard | more | undecided, why) for the candidate's runs so far. `runs`: how many
    it has had (replays included: they count toward MAX_RUNS, never toward a keep)."""
    n = c.n
    runs = max(n, runs or 0)
    if c.t is None:
        if runs < MAX_RUNS:
            return "more", (f"no noise estimate yet (no commit has two distinct runs): running it again "
                            f"({runs}/{MAX_RUNS})")
        return "undecided", f"no noise estimate after {runs} runs (the runs come out identical)"
    if n == 1 and c.t < FIRST_RUN_MIN_T:
        return "discard", f"its run is not below the incumbent's mean (t {c.t:.2f})"
    if n >= MIN_KEEP_RUNS and c.gain >= c.margin * (1 - 1e-9):   # a gain exactly at the margin is kept
        return "keep", f"P(better) {c.p_better:.4f} >= {P_KEEP:g} over {n} runs"
    if "candidate" in c.erratic and runs < MAX_RUNS and c.gain > 0:
        return "more", (f"its runs disagree beyond the tag's noise (sd {statistics.stdev(c.candidate):.4g} vs "
                        f"sigma {c.sigma:.4g}): P(better) {c.p_better:.3f} on its own spread; running it again "
                        f"({runs}/{MAX_RUNS})")
    if n >= MIN_KEEP_RUNS and c.t < FUTILITY_T:
        return "discard", f"the gain faded over {n} runs (t {c.t:.2f} < {FUTILITY_T:g}, P(better) {c.p_better:.3f})"
    if runs >= MAX_RUNS:
        return "undecided", (f"P(better) {c.p_better:.3f} after {runs} runs, short of {P_KEEP:g}"
                             + (f" (the {' and '.join(c.erratic)}'s runs disagree beyond the noise)" if c.erratic else ""))
    return "more", f"P(better) {c.p_better:.3f} after {runs} run(s): confirming it with run {runs + 1}"
