"""The runs a decision rests on: one Sample per trusted run, screened for disturbance, per commit.

The judge hierarchy keeps every trusted run of the tag here (commit -> samples), so the noise is
pooled over all of them and the incumbent's bar is the mean of its own runs. After --resume the
store is rebuilt from the journal (each record's `evidence`, or the older figures of records
written before it existed). What a decision used is written into its record as `evidence`
(docs/contracts.md), which the morning report and the dashboard show.
"""
from __future__ import annotations

import math
import os
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent.judges import stats
from agent.judges.judge import Opinion
from harness import clock as harness_clock
from harness.records import Basis, ExperimentRecord, finite

# Runs of one commit the judge may ask for beyond its statistical plan, to replace disturbed ones.
DISTURBED_RERUNS = 2
# Loads within this factor are one machine for the noise estimate (pairing.LOAD_SAME's figure).
LOAD_BAND = 1.3
# Without the harness clock (a run that printed no step lines), its wall clock may be this factor
# of the budget plus this grace before it counts as trained past the budget (time-budget mode only).
WALL_FACTOR = 1.5
WALL_GRACE_S = 90.0


@dataclass
class RunSpeed:
    """How fast a run trained and under what load: what the disturbance screen and pairing
    compare (None: not measured, e.g. in steps mode or a record written before)."""
    pace_s: float | None = None          # the harness clock's seconds per step
    flops_rate: float | None = None      # FLOPs per second (header's flops/token x tokens/step / pace)
    load: float | None = None            # the machine's load factor while it trained (harness/clock.py LoadMeter)


@dataclass
class Sample:
    commit: str
    bpb: float
    seed: int | None = None
    n: int | None = None                 # the experiment it was run in
    log: str | None = None
    speed: RunSpeed = field(default_factory=RunSpeed)
    within: str | None = None            # the run's own pace says it was disturbed
    disturbed: str | None = None         # why it is no evidence (set by screen())
    suspect: str | None = None           # a first run slower than the incumbent's FLOP rate
    over: str | None = None              # over its clock limit, short of a cheat (harness/clock.py)
    at: float | None = None              # when it was judged (the order of a decision's runs)

    @property
    def used(self) -> bool:
        return self.disturbed is None

    def as_dict(self) -> dict:
        """The run as the record's evidence keeps it: everything the screen and the pairing read,
        so `restore` gives back the Sample the decision was made on."""
        return {"bpb": self.bpb, "seed": self.seed, "n": self.n, "log": self.log, "pace_s": self.speed.pace_s,
                "load": self.speed.load, "flops_rate": self.speed.flops_rate, "within": self.within,
                "over": self.over, "at": self.at, "used": self.used, "why": self.disturbed}

    @classmethod
    def of_record(cls, commit: str, r) -> "Sample":
        """A run read back from a record's evidence (harness/decision.py EvidenceRun)."""
        s = cls(commit, r.bpb, r.seed, r.n, r.log, RunSpeed(pace_s=r.pace_s, flops_rate=r.flops_rate, load=r.load),
                within=r.within, over=r.over, at=r.at)
        s.disturbed = r.why
        return s


def sample_of(ctx, run, bpb: float) -> Sample:
    """The trusted value of `run` with what its log and clock say about its pace."""
    clock = run.clock
    text = ""
    log_path = run.log_path
    if log_path:
        try:
            text = Path(log_path).read_text(errors="replace")
        except OSError:
            text = ""
    pace_s = clock.steps.pace_s if clock is not None and finite(clock.steps.pace_s) and clock.steps.pace_s > 0 else None
    per_step = flops_per_step(text)
    steps_mode = run.steps_mode or bool(os.environ.get("AUTORESEARCH_STEPS"))
    log = None
    if log_path:
        try:
            log = str(Path(log_path).relative_to(ctx.run_dir))
        except ValueError:
            log = str(log_path)
    speed = RunSpeed(pace_s=None if steps_mode else pace_s,
                     flops_rate=per_step / pace_s if per_step and pace_s and not steps_mode else None,
                     load=clock.load.train if clock is not None and clock.startup_s is not None and not steps_mode
                     else None)
    return Sample(commit=ctx.commit, bpb=float(bpb), seed=run.seed, n=ctx.n, log=log, speed=speed,
                  within=None if steps_mode else within_run(step_times(text)), at=time.time())


def over_budget(run, budget: float | None) -> tuple[str | None, str]:
    """(None | "over" | "cheat", why) by the harness's clock (harness/clock.py), not train.py's
    own figure: "over" is no evidence (the run is rerun), "cheat" an integrity failure."""
    clock = run.clock
    if run.steps_mode or os.environ.get("AUTORESEARCH_STEPS"):
        return over_steps(run, clock)
    if not budget:
        return None, ""
    if clock is None or clock.startup_s is None:
        if run.sealed:
            return "cheat", ("the run printed no step lines (`step N | ...`): the harness cannot time its "
                             "training, so it cannot be kept")
        if run.wall_seconds <= WALL_FACTOR * budget + WALL_GRACE_S:
            return None, ""
        return "cheat", (f"the run took {run.wall_seconds:.0f}s of wall clock for a {budget:g}s budget "
                         f"(limit {WALL_FACTOR:g}x + {WALL_GRACE_S:.0f}s): it trained past the budget")
    return harness_clock.over_budget(clock, budget)


def over_steps(run, clock) -> tuple[str | None, str]:
    """Steps mode is not timed, but its count is checked: a sealed run must show its steps
    (step lines) and none numbered past AUTORESEARCH_STEPS (train.py numbers them from 1, a resumed
    run from its state's step, so an honest run's last is at most the count). A train.py that kept
    the hook's name but trained more steps used to pass unchecked."""
    try:
        steps = int(os.environ.get("AUTORESEARCH_STEPS") or 0)
    except ValueError:
        steps = 0
    if clock is None or clock.startup_s is None:
        if run.sealed:
            return "cheat", ("the run printed no step lines (`step N | ...`): the harness cannot count its "
                             "steps, so it cannot be kept")
        return None, ""
    last = max(clock.steps.last or 0, clock.steps.seen)
    if steps > 0 and last > steps:
        return "cheat", (f"the run trained to step {last} for AUTORESEARCH_STEPS={steps} ({clock.steps.seen} step "
                         "lines): it trained past its step count")
    return None, ""


def screen(samples: list[Sample], incumbent: list[Sample] | None = None) -> None:
    """Mark the disturbed runs of one commit (again each time: a later fast run can show an earlier
    one was slow). `incumbent`: the bar's runs, for the FLOP-rate check of a commit's first run."""
    for s in samples:
        # A run slowed mid-run still bounds the commit's pace from above (it can only make the fastest
        # slower, never flag an honest run), so it counts as a reference: leaving it out would let a run
        # slowed from its first step pass when the commit's only other run wobbled.
        others = [o.speed.pace_s for o in samples if o is not s and o.speed.pace_s]
        s.disturbed = s.over or s.within or against_commit(s.speed.pace_s, others)
        s.suspect = None
    if incumbent is not None and len(samples) == 1 and samples[0].disturbed is None:
        why = against_incumbent(samples[0].speed.flops_rate, [o.speed.flops_rate for o in incumbent if o.used])
        if why:
            samples[0].suspect = why
            samples[0].disturbed = f"suspect until run again: {why}"


def values(samples: list[Sample]) -> list[float]:
    return [s.bpb for s in samples if s.used]


def bar_values(commit: str, samples: list[Sample], noise: stats.Noise, side: str) -> list[float]:
    """A commit's values for a mean, its flagged outliers left out only where that makes a keep
    harder: the incumbent's high ones (a lower bar), the candidate's low ones (a worse mean)."""
    vals = stats.distinct(values(samples))
    flagged = [v for c, v in noise.outliers if c == commit]
    if not flagged or len(vals) < 3:
        return vals
    rest = [v for v in vals if v not in flagged]
    mid = statistics.fmean(rest)
    drop = [v for v in flagged if (v > mid if side == "incumbent" else v < mid)]
    return [v for v in vals if v not in drop]


def restore(history: list[ExperimentRecord]) -> dict[str, list[Sample]]:
    """The store rebuilt from journal records (after --resume): every record's own runs, and the
    incumbent's runs made for its decision (each in the record of the experiment it was run for)."""
    out: dict[str, list[Sample]] = {}
    for rec in history:
        if not rec.is_experiment or not isinstance(rec.commit, str):
            continue
        ev = rec.evidence_view()
        if ev is not None and ev.has_runs:
            for r in ev.runs:
                if r.bpb is not None:
                    s = Sample.of_record(rec.commit, r)
                    s.n = rec.number
                    out.setdefault(rec.commit, []).append(s)
            inc = ev.incumbent
            if inc.commit and inc.commit != rec.commit:
                for r in inc.runs:
                    if r.bpb is not None and r.n is not None and r.n == rec.number:
                        out.setdefault(inc.commit, []).append(Sample.of_record(inc.commit, r))
            continue
        legacy = rec.judge_values("baseline_values" if rec.is_baseline else "runs")
        if legacy is not None and rec.status in ("keep", "discard"):
            for v in legacy:
                out.setdefault(rec.commit, []).append(Sample(rec.commit, v, n=rec.number))
    return out


def noise_of(store: dict[str, list[Sample]]) -> stats.Noise:
    """Sigma pooled over commits, a commit's runs grouped by the load they ran under (factors
    within LOAD_BAND of each other share a group): sigma is the seed noise at one load, never the
    spread a varying machine adds (that is what pairing answers, agent/judges/pairing.py)."""
    groups: dict[str, list[float]] = {}
    for c, ss in store.items():
        for s in ss:
            if s.used:
                load = s.speed.load
                key = c if not load else f"{c}@{math.floor(math.log(max(1.0, load)) / math.log(LOAD_BAND))}"
                groups.setdefault(key, []).append(s.bpb)
    noise = stats.pooled_noise(groups)
    noise.outliers = [(c.split("@")[0], v) for c, v in noise.outliers]   # the records name commits
    noise.erratic = list(dict.fromkeys(c.split("@")[0] for c in noise.erratic))
    return noise


@dataclass
class Margin:
    """The band rule_opinion (agent/judges/judge.py) weighs a gain against: this decision's margin."""
    spread: float
    threshold: float
    k: float

    @classmethod
    def of(cls, sigma: float | None, margin: float | None, fallback: float) -> "Margin":
        spread = sigma if sigma else fallback
        th = margin if margin is not None and math.isfinite(margin) else float("inf")
        return cls(spread, th, th / spread if spread else float("inf"))


@dataclass
class Band:
    """The noise figures a baseline record carries (verdicts.judge.band): sigma, and the gain a
    2-run candidate must show against the baseline (threshold = k x spread); None until known."""
    values: list[float]
    spread: float
    df: int
    threshold: float | None
    k: float | None
    measured: bool

    @classmethod
    def of(cls, vals: list[float], noise: stats.Noise) -> "Band":
        spread = noise.sigma if noise.sigma is not None else stats.floor_for(vals)
        m = max(1, len(stats.distinct(vals)))
        th = stats.margin_for(noise.sigma, noise.df, stats.MIN_KEEP_RUNS, m) if noise.sigma is not None else None
        return cls(list(vals), spread, noise.df, th, th / spread if th is not None else None, noise.sigma is not None)

    def as_dict(self) -> dict:
        return {"values": self.values, "spread": self.spread, "k": self.k, "threshold": self.threshold,
                "measured": self.measured, "df": self.df, "p_keep": stats.P_KEEP}


def with_call(rule: Opinion, said: str, why: str, n: int) -> Opinion | None:
    """The sequential test's call and the rule judge's opinion as one Opinion (None: run again).
    Keeps on simplicity or efficiency ("an equal result") are confirmed like metric keeps."""
    equal_keep = rule.status == "keep" and rule.basis in (Basis.SIMPLICITY, Basis.EFFICIENCY)
    if said == "more" or (equal_keep and n < stats.MIN_KEEP_RUNS):
        return None
    if equal_keep:
        return rule
    if said == "keep":   # the metric: rule_opinion sees the same margin (or a simplicity discard)
        return rule
    if said == "undecided":
        return Opinion("rule", "contested", f"{why}; {rule.reason}", rule.confidence, rule.details, rule.basis)
    if rule.status in ("discard", "crash"):
        return Opinion("rule", "discard", f"{rule.reason} ({why})", rule.confidence, rule.details, rule.basis)
    return Opinion("rule", "discard", f"not kept: {why} ({rule.reason})", rule.confidence, rule.details, Basis.METRIC)


class Unrecorded:
    """What a judge holds that the journal does not yet: the runs of decisions in flight (by
    commit; dropped once their experiment is recorded), the last verification of each commit being
    decided, the incumbent runs each decision asked for, and the audits for the next boundary."""

    def __init__(self):
        self.runs: dict[str, list[Sample]] = {}
        self.last_verify: dict = {}
        self.incumbent_tries: dict[int, int] = {}
        self.audits: list[dict] = []


def store_of(history: list[ExperimentRecord], memo: Unrecorded, commit: str | None = None,
             samples: list[Sample] | None = None) -> dict[str, list[Sample]]:
    """Every trusted run of the tag by commit: the recorded ones read back from the history's
    evidence (restore), then the runs of decisions not recorded yet (with --workers, the others in
    flight too). `samples`: `commit`'s runs as the decision holds them."""
    recorded = {r.number for r in history   # the records restore() reads runs from
                if r.is_experiment and r.number is not None and isinstance(r.commit, str)}
    store = restore(history)
    for c, runs in list(memo.runs.items()):
        runs[:] = [x for x in runs if x.n is None or x.n not in recorded]   # in the journal now
        if runs:
            store[c] = store.get(c, []) + runs
        else:
            del memo.runs[c]
    if samples is not None:
        store[commit] = samples
    return store


# ---- Was a run disturbed by the machine? Its pace, against itself and against its commit's other runs.
#
# On a wall-clock budget a run that another process slowed down trains fewer steps and comes out
# worse: its val_bpb measures the machine, not the commit. Three checks, from what every run
# already prints (`step N | ... | dt 412ms | ...` lines; the header's flops/token and tokens/step)
# and the harness clock's pace (seconds per step between the first and last step line):
#
# - within the run: the median step time of its slowest quarter against its fastest quarter (the
#   warm-up steps left out): a competing process that starts or stops mid-run shows here;
# - against the same commit's other runs: slower than the fastest of them by PACE_SLOW;
# - a commit's first run against the incumbent's runs, in FLOPs per second (so a bigger model is not
#   "slow"): slower or faster by PACE_SLOW_OTHER makes it suspect, and the judge runs it again to
#   tell the machine from the code (a rerun at the same pace is the code's own speed).
#
# Where the machine's load (measured by the harness, agent/judges/pairing.py) differs between a
# comparison's runs in either direction, the judge pairs the runs in time instead.
#
# A run judged disturbed is neither a noise sample nor evidence for a decision; the judge reruns it.
# In steps mode (AUTORESEARCH_STEPS) the pace does not change what a run learns: no check applies.

# Same commit, same step cost: a run this much slower than the commit's fastest run trained
# 1/1.3 = 77% of the steps, several sigma on a wall-clock budget; idle jitter is a few percent.
PACE_SLOW = 1.3
# A new commit against the incumbent, in FLOPs/s: code changes move the FLOP rate legitimately
# (a smaller model runs at a lower rate on CPU), so only a factor a competing process gives (one
# busy process on 2 cores: ~2.7x) makes a first run suspect.
PACE_SLOW_OTHER = 2.0
# Within a run: its slowest quarter's median step time against its fastest quarter's.
WITHIN_SLOW = 1.5
# Steps at the start left out of the within-run check (allocator and cache warm-up).
WARMUP_STEPS = 3
# Fewer timed steps than this: the within-run check says nothing.
MIN_STEPS = 8

DT_RE = re.compile(r"^step \d+ \|.*?\bdt ([0-9.]+)ms", re.M)
FLOPS_RE = re.compile(r"flops/token ([0-9.]+e[+-]?\d+|[0-9.]+)")
TOKENS_RE = re.compile(r"= ([0-9,]+) tokens/step")


def step_times(log_text: str) -> list[float]:
    """Seconds per step, in order, from the step lines."""
    return [float(x) / 1000.0 for x in DT_RE.findall(log_text or "")]


def flops_per_step(log_text: str) -> float | None:
    f, t = FLOPS_RE.search(log_text or ""), TOKENS_RE.search(log_text or "")
    if not f or not t:
        return None
    try:
        return float(f.group(1)) * float(t.group(1).replace(",", ""))
    except ValueError:
        return None


def within_run(dts: list[float]) -> str | None:
    """Why the run's own pace says it was disturbed, or None."""
    timed = dts[WARMUP_STEPS:]
    if len(timed) < MIN_STEPS:
        return None
    q = len(timed) // 4
    quarters = [timed[i * q:(i + 1) * q] for i in range(4)]
    medians = [statistics.median(x) for x in quarters if x]
    fast, slow = min(medians), max(medians)
    if fast > 0 and slow > WITHIN_SLOW * fast:
        return (f"its steps slowed down mid-run: the slowest quarter's median step {slow * 1000:.0f} ms "
                f"against {fast * 1000:.0f} ms in its fastest ({slow / fast:.1f}x > {WITHIN_SLOW:g}x)")
    return None


def against_commit(pace: float | None, paces: list[float]) -> str | None:
    """A run of pace `pace` (s/step) against the same commit's runs' paces."""
    others = [p for p in paces if p and p > 0]
    if not pace or not others:
        return None
    fastest = min(others + [pace])
    if pace > PACE_SLOW * fastest:
        return (f"{pace * 1000:.0f} ms/step against {fastest * 1000:.0f} ms in the same commit's fastest run "
                f"({pace / fastest:.1f}x > {PACE_SLOW:g}x)")
    return None


def against_incumbent(rate: float | None, incumbent_rates: list[float]) -> str | None:
    """A new commit's FLOPs/s against the incumbent's runs, in either direction: slower than their
    best, or faster than their slowest, by PACE_SLOW_OTHER (a first run in a quiet spell against an
    incumbent measured under load measures the machine as much as one under load against a quiet
    incumbent): a reason to run it again, or None."""
    rates = [r for r in incumbent_rates if r and r > 0]
    if not rate or not rates:
        return None
    best, slowest = max(rates), min(rates)
    if rate * PACE_SLOW_OTHER < best:
        return (f"{rate / 1e9:.3g} GFLOP/s against {best / 1e9:.3g} in the incumbent's runs "
                f"({best / rate:.1f}x slower > {PACE_SLOW_OTHER:g}x)")
    if rate > PACE_SLOW_OTHER * slowest:
        return (f"{rate / 1e9:.3g} GFLOP/s against {slowest / 1e9:.3g} in the incumbent's runs "
                f"({rate / slowest:.1f}x faster > {PACE_SLOW_OTHER:g}x)")
    return None
