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

The reference is the tag's baseline: the unmodified train.py's own startup and post
(ClockReference: the slowest of its runs, each divided by the load it ran under, so the reference
is the idle machine's), each stretched by JITTER for an honest start's variation. Before one exists (the baseline's runs themselves, which run no proposed
code) the generous first-run allowances hold.

**The allowances follow the run's own load** (LoadMeter, at the end of this file: the CPU the rest
of the machine took during each phase, measured by the harness from /proc, never reported by the run): an honest
run slowed F-fold starts, steps and saves F times slower, so its startup allowance is the
reference's x F (that phase's F), its post allowance likewise, and its slack is
SLACK_FRAC x budget x F (the training phase's F). Silent training in that wall time runs at the
same slowed pace, so what it buys is at most SLACK_FRAC of the budget's work at every budget: no
floor of fixed seconds (a floor above a smoke budget let a proposal train 1.75x a 10 s budget).

The verdict (over_budget): charged_s <= limit (budget + slack): the run is evidence. Over the
limit but within CHEAT_FACTOR of it: no evidence (the judge runs it again; the load meter can
misjudge a phase, and an honest short run's startup varies by a fraction of a second), never an
integrity failure. Beyond CHEAT_FACTOR x the limit plus one step at the run's pace: trained past
the budget, an integrity failure (the baseline, which runs no proposed code, never is one).
train.py is told its start and the reference's own startup (AUTORESEARCH_CLOCK `{"started_at",
"startup_s"}`) and knows its budget: runtime.budget_spent() stops it once the next step would pass
the budget by this clock's charge with that startup as the allowance (never more than the real
one, which adds the jitter and the load), so an honest run whose start is slow (a slower first step,
a cold compile) pays it from its budget and ends inside its limit. Knowing the startup widens
nothing: the charge is on the harness's stamps, and what a run hides before its first line beyond
its allowance is charged whatever it was told.

Steps mode is counted, not timed (over_steps): the step count, and the time before the first line
and after the last against the same allowances, plus one step at the run's own pace (capped,
FIRST_STEP_CAP) since a step line comes after its step.
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field

from harness.procs import MAX_LOAD, LoadMeter, Span

STEP_RE = re.compile(r"^step (\d+) \|")
# Fields of a progress line shown on the console (and kept as the run's last figures).
FIELD_RE = re.compile(r"(loss|tok/s|trained|dt)\s+([0-9.,]+)")

# What a run may train beyond its budget by the harness clock, as a fraction of the budget (times
# the run's measured load): the last step's remainder and the stamps' granularity; all that
# silent training before the first step line or after the last can buy.
SLACK_FRAC = 0.05
# Charged beyond this factor of its limit a run trained past the budget (an integrity failure);
# between the limit and this it is no evidence and runs again. An honest run's excess is its
# startup's and save's jitter against the reference (a fraction of a second) and the load meter's
# error on a short phase; a proposal that trains silently for 1.75x a 10 s budget is far beyond.
CHEAT_FACTOR = 1.5
# A phase whose load reached this share of the meter's cap (MAX_LOAD) was slowed by
# an unknown amount beyond it: an excess then cannot be told from the load, so it is no evidence
# (never kept), never an integrity failure that accuses an honest run.
SATURATED = 0.98
# The unmodified train.py's own startup and save vary from run to run (the page cache, the
# allocator, a neighbour's burst): its reference allowances stretch by this fraction, so a tag
# measured on one or two baseline runs does not call an honest run's jitter training. Silent
# training it could buy is this fraction of a startup: a few seconds of a 300 s budget.
JITTER = 0.25
# Allowances while no reference exists (the baseline itself): a cold GPU compile takes minutes,
# saving a big model on a busy disk a minute.
STARTUP_FIRST_S = 300.0
POST_FIRST_S = 60.0
# The runner ends a run whose charged training passes the limit by this margin (it cannot be kept).
KILL_MARGIN_S = 30.0


def slack(budget: float, load: float = 1.0) -> float:
    return SLACK_FRAC * budget * max(1.0, load)


def limit_for(budget: float, load: float = 1.0) -> float:
    """Most charged seconds a run of `budget` may train while the machine slowed it `load`-fold."""
    return budget + slack(budget, load)


def over_budget(fig: "ClockFigures", budget: float) -> tuple[str | None, str]:
    """(None | "over" | "cheat", why) for a run's figures: "over" is no evidence (run it again),
    "cheat" is trained past the budget (an integrity failure)."""
    limit = limit_for(budget, fig.load.train)
    if fig.charged_s <= limit:
        return None, ""
    why = (f"by the harness's clock the run trained {fig.charged_s:.1f}s for a {budget:g}s budget (limit "
           f"{limit:.1f}s at load x{fig.load.train:.2f}; step lines {fig.train_s:.1f}s, startup "
           f"{fig.startup_s or 0:.1f}s against {fig.allowance_s:.1f}s allowed at load x{fig.load.startup:.2f}, "
           f"after the last step {fig.post_s or 0:.1f}s against {fig.post_allowance_s:.1f}s at load "
           f"x{fig.load.post:.2f})")
    # one step at the run's own pace more before a cheat: a step is the granularity of an honest
    # stop, and on a saturated machine one step can outlast a short budget (it is visible training:
    # such a run is no evidence, never kept)
    saturated = max(fig.load.startup, fig.load.train, fig.load.post) >= MAX_LOAD * SATURATED
    # (the step is the run's printed pace, so it is capped: a run that prints two step lines
    # around its whole training must not stretch its own threshold)
    if fig.charged_s > CHEAT_FACTOR * limit + min(fig.steps.pace_s, slack(budget, fig.load.train)) and not saturated:
        return "cheat", why + f", more than {CHEAT_FACTOR:g}x the limit and a step: it trained past the budget"
    if saturated:   # the meter is at its cap: it cannot tell a cheat from the load, so no verdict either way
        return "over", why + f": the load reached the meter's cap (x{MAX_LOAD:g}), no evidence, run again"
    return "over", why + ": no evidence, run again"


# Steps mode (AUTORESEARCH_STEPS) has a count of steps for its budget, not seconds, so a step may
# take what it takes; the time before the first step line and after the last is still the
# harness's to check, against the same reference: the run may exceed its allowances by the larger
# of SLACK_FRAC of its own training time and this fraction of its startup allowance (an honest
# startup's jitter on a short run), times its load.
STEPS_SLACK_FRAC = 0.5
# A step line comes after its step, so a startup ends with the run's first step: a recipe whose
# steps are slower than the baseline's (a bigger batch, a deeper model) starts slower by that much.
# Steps mode adds to the startup allowance one step at the run's own pace (the harness's stamps),
# at most this many of the reference's steps (x the load), and its slack counts each step at the
# reference's pace: wall time is not charged in steps mode, so a pace inflated by sleeping between
# steps must not buy unbounded silent time. The reference's pace is the kept recipe's the run
# descends from where that is slower than the baseline's (agent/experiment.py reference_of: a
# search compounds its moves from the incumbent). 8: the searches' largest moves together (DEPTH
# x2, the batch x4) stay inside it. What a sleeping run can buy, (1 + STEPS_SLACK_FRAC) x (the
# startup allowance + 8 of the reference's steps) unseen, is about what an honest 8x recipe holds
# in two printed steps (docs/limits.md "Steps mode is counted, not timed").
# A time budget needs no such term: its honest run pays a slow start from its budget
# (runtime.budget_spent is told the reference's startup), and wall time is what it is charged.
FIRST_STEP_CAP = 8.0


def over_steps(fig: "ClockFigures", steps: int, resumed: bool = False) -> tuple[str | None, str]:
    """(None | "over" | "cheat", why) for a steps-mode run's figures: the count (no step numbered
    past `steps`), no step before the first line (its number is 1, unless the run was `resumed`
    from a saved state), and the time around the step lines within the allowances."""
    last = max(fig.steps.last or 0, fig.steps.seen)
    if steps > 0 and last > steps:
        return "cheat", (f"the run trained to step {last} for AUTORESEARCH_STEPS={steps} ({fig.steps.seen} step "
                         "lines): it trained past its step count")
    if fig.steps.first is not None and fig.steps.first > 1 and not resumed:
        return "cheat", (f"its first step line is step {fig.steps.first}: {fig.steps.first - 1} steps were "
                         "trained before it printed one")
    excess = max(0.0, (fig.startup_s or 0.0) - fig.allowance_s) + max(0.0, (fig.post_s or 0.0) - fig.post_allowance_s)
    # its step lines' time, each step counted at most at the baseline's pace: sleeping between
    # steps (free in steps mode) must not widen what it may do unseen
    train = fig.train_s if fig.ref_pace_s is None else \
        min(fig.train_s, fig.ref_pace_s * max(0, (fig.steps.last or 0) - (fig.steps.first or 0)))
    allowed = max(SLACK_FRAC * train * fig.load.train, STEPS_SLACK_FRAC * fig.allowance_s)
    if excess <= allowed:
        return None, ""
    why = (f"by the harness's clock the run spent {excess:.1f}s beyond its allowances around its step lines "
           f"(startup {fig.startup_s or 0:.1f}s against {fig.allowance_s:.1f}s at load x{fig.load.startup:.2f}, "
           f"after the last step {fig.post_s or 0:.1f}s against {fig.post_allowance_s:.1f}s), {allowed:.1f}s "
           f"allowed for {fig.train_s:.1f}s of step lines")
    saturated = max(fig.load.startup, fig.load.train, fig.load.post) >= MAX_LOAD * SATURATED
    if excess > CHEAT_FACTOR * allowed + 0.5 * train and not saturated:
        return "cheat", why + ": time nobody saw it train, far past what a start and a save take"
    return "over", why + (": the load reached the meter's cap, no evidence, run again" if saturated
                          else ": no evidence, run again")


@dataclass(frozen=True)
class ClockReference:
    """The tag's baseline: how long the unmodified train.py takes to start, to step and to finish."""
    startup_s: float | None = None     # on an idle machine (each run's own divided by its load)
    post_s: float | None = None
    pace_s: float | None = None        # seconds between its step lines (FIRST_STEP_CAP's unit; or the kept recipe's)

    @classmethod
    def from_figures(cls, figures: list[dict]) -> "ClockReference":
        """The slowest idle-equivalent startup, post and pace of a baseline's runs (ClockFigures
        dicts): the unmodified train.py's own jitter is allowed, not charged."""
        def slowest(key, load_key):
            vals = [float(f[key]) / max(1.0, float(f.get(load_key) or 1.0)) for f in figures
                    if isinstance(f, dict) and isinstance(f.get(key), (int, float))
                    and isinstance(f.get(load_key, 1.0), (int, float)) and f[key] > 0]
            return max(vals) if vals else None
        return cls(slowest("startup_s", "load_startup"), slowest("post_s", "load_post"),
                   slowest("pace_s", "load_train"))

    def startup_allowance(self) -> float:
        return self.startup_s * (1 + JITTER) if self.startup_s is not None else STARTUP_FIRST_S

    def post_allowance(self) -> float:
        return self.post_s * (1 + JITTER) if self.post_s is not None else POST_FIRST_S


@dataclass
class StepLines:
    """What the run's step lines showed: how many arrived, the first and last step numbers, the
    steps trained before the first line (silent), the pace between the first and last lines
    (mean seconds per step), the median tok/s they reported (a disturbed run is slow) and the
    last line itself."""
    seen: int = 0
    first: int | None = None
    last: int | None = None
    silent: int = 0
    pace_s: float = 0.0
    tok_s: float | None = None
    last_line: str = ""


@dataclass
class PhaseLoads:
    """What the harness measured of the machine while the run ran (the load meter below): the load
    factor in each phase (each phase's allowance is the reference's times its load), the others'
    busy cores while it trained, how much the factor changed within its training (the largest
    quarter's over the smallest), the run's own CPU seconds over its life, and whether that count
    is exact (its own cgroup: every process it started counted)."""
    startup: float = 1.0
    train: float = 1.0
    post: float = 1.0
    other_cores: float = 0.0
    spread: float = 1.0
    own_cpu_s: float | None = None
    exact: bool = False


@dataclass
class ClockFigures:
    """A run's figures by the harness clock: the three phases' seconds, the charged training, the
    allowances not charged, what the step lines showed and the load in each phase. as_dict() is
    the flat dict the journal and a remote job carry (run.extra["clock"])."""
    startup_s: float | None      # None: no step line was seen
    train_s: float
    charged_s: float
    allowance_s: float            # startup not charged
    post_s: float | None = None
    post_allowance_s: float = POST_FIRST_S
    steps: StepLines = field(default_factory=StepLines)
    load: PhaseLoads = field(default_factory=PhaseLoads)
    curve: list = field(default_factory=list)     # the printed loss at CURVE_POINTS (untrusted: stops only)
    ref_pace_s: float | None = None   # steps mode: the baseline's pace x the load (the most a step counts for in the slack)

    def as_dict(self) -> dict:
        s, ld = self.steps, self.load
        flat = {"startup_s": self.startup_s, "train_s": self.train_s, "charged_s": self.charged_s,
                "steps_seen": s.seen, "first_step": s.first, "last_step": s.last, "allowance_s": self.allowance_s,
                "last_line": s.last_line, "post_s": self.post_s, "silent_steps": s.silent, "pace_s": s.pace_s,
                "post_allowance_s": self.post_allowance_s, "tok_s": s.tok_s, "load_startup": ld.startup,
                "load_train": ld.train, "load_post": ld.post, "other_cores_train": ld.other_cores,
                "load_spread": ld.spread, "own_cpu_s": ld.own_cpu_s, "accounting": "cgroup" if ld.exact else "tree"}
        if self.ref_pace_s is not None:
            flat["ref_pace_s"] = self.ref_pace_s
        out = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in flat.items()}
        if self.curve:
            out["curve"] = self.curve
        return out

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

        steps = StepLines(seen=count("steps_seen") or 0, first=count("first_step"), last=count("last_step"),
                          silent=count("silent_steps") or 0, pace_s=num("pace_s", 0.0), tok_s=num("tok_s"),
                          last_line=d.get("last_line") if isinstance(d.get("last_line"), str) else "")
        load = PhaseLoads(startup=num("load_startup", 1.0), train=num("load_train", 1.0), post=num("load_post", 1.0),
                          other_cores=num("other_cores_train", 0.0), spread=num("load_spread", 1.0),
                          own_cpu_s=num("own_cpu_s"), exact=d.get("accounting") == "cgroup")
        raw = d.get("curve")
        curve = [[float(p[0]), float(p[1])] for p in raw if isinstance(p, list) and len(p) == 2
                 and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in p)] \
            if isinstance(raw, list) else []
        return cls(startup_s=num("startup_s"), train_s=num("train_s", 0.0), charged_s=num("charged_s", 0.0),
                   allowance_s=num("allowance_s", 0.0), post_s=num("post_s"),
                   post_allowance_s=num("post_allowance_s", POST_FIRST_S), steps=steps, load=load, curve=curve,
                   ref_pace_s=num("ref_pace_s"))


@dataclass
class LogClock:
    """Stamps step lines with the harness's monotonic clock as they arrive (feed() from the
    runner's reader thread; figures() and live_charge() from anywhere)."""

    def __init__(self, started: float, reference: ClockReference | None = None, meter: LoadMeter | None = None,
                 budget: float | None = None, steps: int | None = None):
        self.started = started
        self.reference = reference or ClockReference()
        self.meter = meter
        self.budget, self.steps = budget, steps     # how far along a run is (Curve): seconds, or a step count
        self.first_at = self.last_at = None
        self.first_step = self.last_step = None
        self.steps_seen, self.last_line = 0, ""
        self._tok_s: list[float] = []
        self.losses: list[tuple[float, float]] = []   # (how far along, the loss printed there)
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
            fields = progress_fields(line)
            tok = fields.get("tok/s")
            if tok is not None and len(self._tok_s) < 100_000:
                self._tok_s.append(tok)
            done = self._along(now, step)
            if done is not None and fields.get("loss") is not None and len(self.losses) < 100_000:
                self.losses.append((done, fields["loss"]))

    def _along(self, now: float, step: int) -> float | None:
        """How far along its budget a step line is: its step over the count (steps mode), or the
        harness's seconds since the first step line over the budget."""
        if self.steps:
            return step / self.steps
        if self.budget and self.first_at is not None:
            return (now - self.first_at) / self.budget
        return None

    def curve(self) -> list[list[float]]:
        """The printed training loss at CURVE_POINTS of the budget (each the mean of the losses
        printed since the previous point): what train.py says of itself, so it may only stop a
        run early (spend less on an idea, agent/judges/curves.py), never decide a keep."""
        with self._lock:
            pts = list(self.losses)
        return curve_of(pts)

    def stop_early(self, limits: list) -> str | None:
        """Why the run should stop now (its printed loss at a point of its budget is above that
        point's limit: [[fraction, loss], ...]), or None."""
        if not limits:
            return None
        with self._lock:
            pts = list(self.losses)
        if not pts:
            return None
        reached = max(x for x, _ in pts)
        got = {f: v for f, v in curve_of(pts) if f <= reached + 1e-9}
        for f, limit in limits:
            v = got.get(round(f, 2))
            if v is not None and v > limit:
                return (f"its printed loss at {100 * f:.0f}% of its budget is {v:.4f}, above {limit:.4f} (the "
                        "incumbent's at that point and the baseline's own spread): stopped early, not judged")
        return None

    def live_charge(self, now: float) -> float:
        """Charged training if the run ended now, with the largest allowances any load could give
        (for the runner's kill, which must never end an honest run on a busy machine)."""
        s_allow = MAX_LOAD * self.reference.startup_allowance()
        p_allow = MAX_LOAD * self.reference.post_allowance()
        with self._lock:
            if self.first_at is None:
                return max(0.0, now - self.started - s_allow)
            startup = self.first_at - self.started
            return (self.last_at - self.first_at) + max(0.0, startup - s_allow) \
                + max(0.0, now - self.last_at - p_allow)

    def _span(self, a, b) -> Span:
        return self.meter.span(a, b) if self.meter is not None else Span()

    def figures(self, ended: float | None = None) -> ClockFigures:
        """The run's figures; `ended` (process exit) charges a post beyond the reference's. Each
        allowance is the reference's times the load the meter saw in that phase."""
        ref = self.reference
        with self._lock:
            first_at, last_at = self.first_at, self.last_at
        own = self.meter.span(self.started, ended if ended is not None else self.meter.clock()).own_cpu_s \
            if self.meter is not None and self.meter.samples else None
        exact = self.meter is not None and self.meter.exact
        if first_at is None:
            whole = self._span(self.started, ended)
            return ClockFigures(None, 0.0, 0.0, ref.startup_allowance() * whole.factor,
                                post_allowance_s=ref.post_allowance(),
                                load=PhaseLoads(startup=whole.factor, other_cores=whole.other_cores,
                                                own_cpu_s=own, exact=exact))
        ls, tr = self._span(self.started, first_at).factor, self._span(first_at, last_at)
        lp = self._span(last_at, ended).factor if ended is not None else 1.0
        spread = self.meter.spread(first_at, last_at) if self.meter is not None else 1.0
        s_allow, p_allow = ref.startup_allowance() * ls, ref.post_allowance() * lp
        with self._lock:
            startup = self.first_at - self.started
            train = self.last_at - self.first_at
            post = None if ended is None else max(0.0, ended - self.last_at)
            silent = max(0, (self.first_step or 1) - 1)
            pace = train / (self.last_step - self.first_step) if self.last_step > self.first_step else 0.0
            ref_pace = None
            if self.steps and ref.pace_s is not None:   # steps mode: its first step at its own pace (capped)
                s_allow += min(pace, FIRST_STEP_CAP * ref.pace_s * ls)
                ref_pace = ref.pace_s * tr.factor
            charged = (train + max(silent * pace, max(0.0, startup - s_allow))
                       + max(0.0, (post or 0.0) - p_allow))
            toks = sorted(self._tok_s[1:] or self._tok_s)
            tok = toks[len(toks) // 2] if toks else None
            steps = StepLines(seen=self.steps_seen, first=self.first_step, last=self.last_step, silent=silent,
                              pace_s=pace, tok_s=tok, last_line=self.last_line)
            loads = PhaseLoads(ls, tr.factor, lp, tr.other_cores, spread, own, exact)
            pts = list(self.losses)
        return ClockFigures(startup, train, charged, s_allow, post, p_allow, steps, loads, curve_of(pts), ref_pace)


# The points of a run's budget its printed curve is kept at (fractions), and how many of them a
# run must have passed before its loss there counts (the mean of the losses printed in the span).
CURVE_POINTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def curve_of(points: list[tuple[float, float]]) -> list[list[float]]:
    """[[point, mean printed loss in (previous point, point]], ...] for every point passed."""
    out, lo = [], 0.0
    for f in CURVE_POINTS:
        span = [v for x, v in points if lo < x <= f + 1e-9]
        if span:
            out.append([f, round(sum(span) / len(span), 6)])
        lo = f
    return out


def progress_fields(line: str) -> dict:
    """{"loss": 3.2, "tok/s": 51200.0, "trained": 1.2, "dt": 40.0} from a progress line."""
    out = {}
    for key, value in FIELD_RE.findall(line or ""):
        try:
            out[key] = float(value.replace(",", ""))
        except ValueError:
            continue
    return out


# ---- The summary block: Parse the summary block that train.py prints at the end of a run.
#
# The block is a line `---` followed by `key: value` lines (docs/contracts.md). We read the LAST
# such block in the log, so a run that printed `---` earlier (or a traceback after a partial block)
# is still read correctly. Values that look numeric become floats (or ints); the rest stay strings.
# Parsing is done here, in code, never by an LLM.
# A summary line: a bare identifier, a colon, a value. train.py pads "key:" to KEY_FIELD characters;
# we rely on that so that lines printed after the block at exit ("nanobind: leaked 4 instances!")
# are not mistaken for summary keys.
KEY_FIELD = 18
LINE_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):(\s+)(\S.*?)\s*$")
INT_RE = re.compile(r"^[+-]?\d+$")


def _convert(text: str):
    """'953' -> 953, '0.9979' -> 0.9979, 'nan' -> nan, 'sdpa' -> 'sdpa'."""
    if INT_RE.match(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def _padded(m: re.Match) -> bool:
    """True when the value starts in the column train.py pads to (or after one space for long keys)."""
    width = len(m.group(1)) + 1 + len(m.group(2))
    return width == KEY_FIELD or (len(m.group(1)) + 1 >= KEY_FIELD and len(m.group(2)) == 1)


def _block(lines: list[str], strict: bool) -> dict:
    block = {}
    for line in lines:
        m = LINE_RE.match(line.rstrip())
        if not m or (strict and not _padded(m)):
            break
        block[m.group(1)] = _convert(m.group(3))
    return block


def parse_summary(text: str) -> dict | None:
    """Return the last summary block of `text` as a dict, or None when there is none.

    A block counts only if it has `val_bpb`; missing other keys are tolerated (the caller sees
    which are absent) because a summary with the metric is still a result. Lines are read with
    the contract's padding; a block written without it (an edited print) is read loosely.
    """
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == "---"]
    for start in reversed(starts):
        for strict in (True, False):
            block = _block(lines[start + 1:], strict)
            if "val_bpb" in block:
                return block
    return None
