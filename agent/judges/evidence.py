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
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent.judges import pairing, stats
from agent.judges.judge import Opinion
from harness import clock as harness_clock
from harness.procs import MAX_LOAD
from harness.decision import Basis
from harness.experiment_record import ExperimentRecord
from harness.results_table import finite

# Runs of one commit the judge may ask for beyond its statistical plan, to replace disturbed ones.
DISTURBED_RERUNS = 2
# Loads within this factor, and the others' busy cores within this many, are one machine for the
# noise estimate (pairing.LOAD_SAME's and pairing.OTHER_SAME's figures).
LOAD_BAND = 1.3
OTHER_BAND = 0.5
# Without the harness clock (a run that printed no step lines), its wall clock may be this factor
# of the budget plus this grace before it counts as trained past the budget (time-budget mode only).
WALL_FACTOR = 1.5
WALL_GRACE_S = 90.0


@dataclass
class RunSpeed:
    """What the harness measured of the machine while a run trained (harness/procs.py LoadMeter):
    what pairing compares (None: not measured: steps mode, or a record written before). pace_s
    is shown, never compared: it divides the harness's time by step numbers train.py printed."""
    pace_s: float | None = None          # seconds per printed step, by the harness clock (shown only)
    load: float | None = None            # the load factor while it trained
    other: float | None = None           # the others' busy cores while it trained


@dataclass
class Sample:
    commit: str
    bpb: float
    seed: int | None = None
    n: int | None = None                 # the experiment it was run in
    log: str | None = None
    speed: RunSpeed = field(default_factory=RunSpeed)
    within: str | None = None            # the machine's load changed while it trained (the harness's meter)
    disturbed: str | None = None         # why it is no evidence (set by screen())
    over: str | None = None              # over its clock limit, short of a cheat (harness/clock.py)
    at: float | None = None              # when it was judged (the order of a decision's runs)

    @property
    def used(self) -> bool:
        return self.disturbed is None

    def as_dict(self) -> dict:
        """The run as the record's evidence keeps it: everything the screen and the pairing read,
        so `restore` gives back the Sample the decision was made on."""
        return {"bpb": self.bpb, "seed": self.seed, "n": self.n, "log": self.log, "pace_s": self.speed.pace_s,
                "load": self.speed.load, "other_cores": self.speed.other, "within": self.within,
                "over": self.over, "at": self.at, "used": self.used, "why": self.disturbed}

    @classmethod
    def of_record(cls, commit: str, r) -> "Sample":
        """A run read back from a record's evidence (harness/decision.py EvidenceRun)."""
        s = cls(commit, r.bpb, r.seed, r.n, r.log, RunSpeed(pace_s=r.pace_s, load=r.load, other=r.other_cores),
                within=r.within, over=r.over, at=r.at)
        s.disturbed = r.why
        return s


def sample_of(ctx, run, bpb: float) -> Sample:
    """The trusted value of `run` with what the harness measured while it trained: its clock and
    the machine's load. Nothing train.py printed (step times, losses, token counts) goes in."""
    clock = run.clock
    steps_mode = run.steps_mode or bool(os.environ.get("AUTORESEARCH_STEPS"))
    timed = clock is not None and clock.startup_s is not None and not steps_mode
    log = None
    if run.log_path:
        try:
            log = str(Path(run.log_path).relative_to(ctx.run_dir))
        except ValueError:
            log = str(run.log_path)
    speed = RunSpeed(pace_s=clock.steps.pace_s if timed and finite(clock.steps.pace_s) and clock.steps.pace_s > 0
                     else None,
                     load=clock.load.train if timed else None, other=clock.load.other_cores if timed else None)
    return Sample(commit=ctx.commit, bpb=float(bpb), seed=run.seed, n=ctx.n, log=log, speed=speed,
                  within=disturbed_by_machine(clock) if timed else None, at=time.time())


def disturbed_by_machine(clock) -> str | None:
    """Why the harness's meter says the machine disturbed a run while it trained, or None: the load
    reached the meter's cap (how much it slowed the run is then unknown), or it changed by more
    than WITHIN_SLOW within the run (the run is then like neither a quiet run nor a loaded one)."""
    ld = clock.load
    if ld.train >= MAX_LOAD * harness_clock.SATURATED:
        return (f"the rest of the machine kept {ld.other_cores:.1f} cores busy while it trained: its load "
                f"reached the meter's cap (x{ld.train:.2f}), so how much it slowed the run is unknown")
    if ld.spread > WITHIN_SLOW:
        return (f"the rest of the machine's load changed while it trained: the load factor of its busiest "
                f"quarter was {ld.spread:.2f}x its quietest's (> {WITHIN_SLOW:g}x)")
    return None


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
    """Steps mode: the step count and the time around the step lines by the harness clock
    (harness/clock.py over_steps); a sealed run must show its steps (step lines)."""
    try:
        steps = int(os.environ.get("AUTORESEARCH_STEPS") or 0)
    except ValueError:
        steps = 0
    if clock is None or clock.startup_s is None:
        if run.sealed:
            return "cheat", ("the run printed no step lines (`step N | ...`): the harness cannot count its "
                             "steps, so it cannot be kept")
        return None, ""
    return harness_clock.over_steps(clock, steps, resumed=run.resumed)


def screen(samples: list[Sample]) -> None:
    """Mark the runs of one commit that are no evidence: over their clock limit (short of a cheat),
    disturbed by the machine while they trained (disturbed_by_machine), or made at a load not
    comparable with most of the commit's runs (the largest group of mutually comparable loads;
    on a tie, the lightest), which are left out of its mean and its noise but still paired with
    the incumbent's runs made beside them (agent/judges/pairing.py). Each run on what the harness
    measured of it: a single run can never disqualify the others."""
    for s in samples:
        s.disturbed = s.over or s.within
    timed = [s for s in samples if s.used and s.speed.load]
    if len(timed) < 2:
        return
    groups = [[x for x in timed if not pairing.comparable(x.speed.load, s.speed.load, pairing.LOAD_SAME,
                                                          x.speed.other, s.speed.other)] for s in timed]
    ref = max(groups, key=lambda g: (len(g), -min(x.speed.load for x in g)))
    for s in timed:
        if s not in ref:
            why = pairing.comparable(s.speed.load, ref[0].speed.load, pairing.LOAD_SAME, s.speed.other,
                                     ref[0].speed.other)
            s.disturbed = f"made at another load than most of its commit's runs: {why}"


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
    seen: set[tuple] = set()   # a baseline's continuation carries the cut record's runs again
    for rec in history:
        if not rec.is_experiment or not isinstance(rec.commit, str):
            continue
        ev = rec.evidence_view()
        if ev is not None and ev.has_runs:
            for r in ev.runs:
                key = (rec.commit, r.log, r.seed, r.bpb)
                if r.bpb is not None and (r.log is None or key not in seen):
                    seen.add(key)
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
    within LOAD_BAND of each other and the others' cores within pairing.OTHER_SAME share a group):
    sigma is the seed noise at one load, never the spread a varying machine adds (that is what
    pairing answers, agent/judges/pairing.py)."""
    groups: dict[str, list[float]] = {}
    for c, ss in store.items():
        for s in ss:
            if s.used:
                load, other = s.speed.load, s.speed.other
                key = c if not load else (f"{c}@{math.floor(math.log(max(1.0, load)) / math.log(LOAD_BAND))}"
                                          f":{math.floor((other or 0.0) / OTHER_BAND)}")
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
        self.rule_figures: dict[int, dict] = {}   # the one-run rule's figures of a decision the strict judge took over
        self.handed: dict[int, str] = {}          # and why it handed it over


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


# A run whose training saw the machine's load factor change by more than this (its busiest quarter
# against its quietest) is no evidence: a competing process that started or stopped mid-run makes it
# like neither a quiet run nor a loaded one. The meter's own jitter on an idle box is a few percent.
WITHIN_SLOW = 1.5
