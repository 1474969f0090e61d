"""The harness's own clock of a training run: progress lines timed as they arrive.

train.py is written by the proposer, so the training time it reports is a claim. Every step prints
a line `step N | loss ... | tok/s ... | trained Xs` (flushed); the runner reads the child's output
as it comes and stamps each step line with its own monotonic clock. From those stamps:

    startup_s  process start -> first step line (imports, model build, the first step's compile)
    train_s    first step line -> last step line
    post_s     last step line -> process exit (saving the model)
    silent     steps before the first line (the first line's step number says how many)
    charged_s  train_s + startup beyond the reference + post beyond the reference
               (silent steps are charged at the run's pace when that is more than the startup excess)

The reference is the tag's baseline: the unmodified train.py's own measured startup and post
(ClockReference, the median over its runs). Before one exists (the baseline's runs themselves,
which run no proposed code) the generous first-run allowances hold. A run is within budget when
charged_s <= budget + slack(budget), slack = max(SLACK_FRAC x budget, SLACK_MIN_S): that slack is
all an honest run needs (its uncounted warm-up steps, the last step's overshoot, the stamps'
granularity, a slower start on a loaded machine) and all a cheat can gain by training where the
clock cannot see (before its first line, after its last, or in "steps" of its own numbering):
at a 300 s budget, 15 s (5%). runtime.budget_spent() lets an honest train.py whose start is slow
stop early enough (it is told the reference and the start through AUTORESEARCH_CLOCK).
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass

from harness.experiment_record import ExperimentRecord

STEP_RE = re.compile(r"^step (\d+) \|")
# Fields of a progress line shown on the console (and kept as the run's last figures).
FIELD_RE = re.compile(r"(loss|tok/s|trained|dt)\s+([0-9.,]+)")
# What a run may train beyond its budget by the harness clock: a fraction of the budget, never
# less than a floor (smoke budgets of seconds on a loaded box need that much for their warm-up).
SLACK_FRAC = 0.05
SLACK_MIN_S = 15.0
# Allowances while no reference exists (the baseline itself): a cold GPU compile takes minutes,
# saving a big model on a busy disk a minute.
STARTUP_FIRST_S = 300.0
POST_FIRST_S = 60.0
# The runner ends a run whose charged training passes the limit by this margin (it cannot be kept).
KILL_MARGIN_S = 30.0


def slack(budget: float) -> float:
    return max(SLACK_FRAC * budget, SLACK_MIN_S)


def limit_for(budget: float, pace: float = 0.0) -> float:
    """Most charged seconds a run of `budget` may train (`pace` is accepted for old callers)."""
    return budget + slack(budget)


@dataclass(frozen=True)
class ClockReference:
    """The tag's baseline: how long the unmodified train.py takes to start and to finish."""
    startup_s: float | None = None
    post_s: float | None = None

    @classmethod
    def from_figures(cls, figures: list[dict]) -> "ClockReference":
        """The median startup and post of a baseline's runs (their ClockFigures dicts)."""
        def median(key):
            vals = sorted(float(f[key]) for f in figures if isinstance(f, dict)
                          and isinstance(f.get(key), (int, float)))
            return vals[len(vals) // 2] if vals else None
        return cls(median("startup_s"), median("post_s"))

    def startup_allowance(self) -> float:
        return self.startup_s if self.startup_s is not None else STARTUP_FIRST_S

    def post_allowance(self) -> float:
        return self.post_s if self.post_s is not None else POST_FIRST_S


def reference_of(history: list) -> ClockReference:
    """The tag's clock reference from its journal records (ExperimentRecord, or journal dicts):
    the baseline's runs (its own clock figures and those of its repeats)."""
    for rec in history:
        rec = ExperimentRecord.from_dict(rec) if isinstance(rec, dict) else rec
        if isinstance(rec, ExperimentRecord) and rec.proposer == "baseline" and isinstance(rec.clock, dict):
            return ClockReference.from_figures(rec.clock_runs())
    return ClockReference()


def startup_allowance(reference_startup: float | None) -> float:
    """The startup not charged: the reference's own (kept for callers that pass a float)."""
    return ClockReference(reference_startup).startup_allowance()


@dataclass
class ClockFigures:
    startup_s: float | None      # None: no step line was seen
    train_s: float
    charged_s: float
    steps_seen: int
    first_step: int | None
    last_step: int | None
    allowance_s: float            # startup not charged
    last_line: str = ""
    post_s: float | None = None
    silent_steps: int = 0
    pace_s: float = 0.0           # mean seconds per step between the first and last lines
    post_allowance_s: float = POST_FIRST_S
    tok_s: float | None = None    # the median tok/s its step lines reported (a disturbed run is slow)

    def as_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d) -> "ClockFigures | None":
        """The figures as_dict() wrote (a journal's or a remote job's), None when `d` is no dict. A
        figure that is missing or not a number reads as its "nothing seen" value (startup None:
        no step line, so a sealed run cannot be timed)."""
        if not isinstance(d, dict):
            return None

        def num(k, default=None):
            v = d.get(k, default)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default

        def count(k):
            v = d.get(k)
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        return cls(startup_s=num("startup_s"), train_s=num("train_s", 0.0), charged_s=num("charged_s", 0.0),
                   steps_seen=count("steps_seen") or 0, first_step=count("first_step"), last_step=count("last_step"),
                   allowance_s=num("allowance_s", 0.0),
                   last_line=d.get("last_line") if isinstance(d.get("last_line"), str) else "",
                   post_s=num("post_s"), silent_steps=count("silent_steps") or 0, pace_s=num("pace_s", 0.0),
                   post_allowance_s=num("post_allowance_s", POST_FIRST_S), tok_s=num("tok_s"))


class LogClock:
    """Stamps step lines with the harness's monotonic clock as they arrive (feed() from the
    runner's reader thread; figures() and live_charge() from anywhere)."""

    def __init__(self, started: float, reference: ClockReference | None = None):
        self.started = started
        self.reference = reference or ClockReference()
        self.first_at = self.last_at = None
        self.first_step = self.last_step = None
        self.steps_seen, self.last_line = 0, ""
        self._tok_s: list[float] = []
        self._lock = threading.Lock()

    def feed(self, line: str, now: float | None = None) -> None:
        m = STEP_RE.match(line)
        if not m:
            return
        now = time.monotonic() if now is None else now
        step = int(m.group(1))
        with self._lock:
            if self.first_at is None:
                self.first_at, self.first_step = now, step
            self.last_at, self.last_step = now, step
            self.steps_seen += 1
            self.last_line = line.strip()[:200]
            tok = progress_fields(line).get("tok/s")
            if tok is not None and len(self._tok_s) < 100_000:
                self._tok_s.append(tok)

    def live_charge(self, now: float) -> float:
        """Charged training if the run ended now, post allowance granted (for the runner's kill)."""
        with self._lock:
            if self.first_at is None:
                return max(0.0, now - self.started - self.reference.startup_allowance())
            startup = self.first_at - self.started
            return (self.last_at - self.first_at) + max(0.0, startup - self.reference.startup_allowance()) \
                + max(0.0, now - self.last_at - self.reference.post_allowance())

    def figures(self, ended: float | None = None) -> ClockFigures:
        """The run's figures; `ended` (process exit) charges a post beyond the reference's."""
        ref = self.reference
        with self._lock:
            if self.first_at is None:
                return ClockFigures(None, 0.0, 0.0, 0, None, None, ref.startup_allowance(), "",
                                    post_allowance_s=ref.post_allowance())
            startup = self.first_at - self.started
            train = self.last_at - self.first_at
            post = None if ended is None else max(0.0, ended - self.last_at)
            silent = max(0, (self.first_step or 1) - 1)
            pace = train / (self.last_step - self.first_step) if self.last_step > self.first_step else 0.0
            charged = (train + max(silent * pace, max(0.0, startup - ref.startup_allowance()))
                       + max(0.0, (post or 0.0) - ref.post_allowance()))
            toks = sorted(self._tok_s[1:] or self._tok_s)
            tok = toks[len(toks) // 2] if toks else None
            return ClockFigures(startup, train, charged, self.steps_seen, self.first_step, self.last_step,
                                ref.startup_allowance(), self.last_line, post, silent, pace,
                                ref.post_allowance(), tok)


def progress_fields(line: str) -> dict:
    """{"loss": 3.2, "tok/s": 51200.0, "trained": 1.2, "dt": 40.0} from a progress line."""
    out = {}
    for key, value in FIELD_RE.findall(line or ""):
        try:
            out[key] = float(value.replace(",", ""))
        except ValueError:
            continue
    return out
