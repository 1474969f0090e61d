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
train.py is told only its start (AUTORESEARCH_CLOCK `{"started_at"}`) and knows its budget:
runtime.budget_spent() stops it once the next step would pass the budget since its first step
line. It is never told an allowance, so it cannot size silent training to fit one.
"""
from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field

from harness.experiment_record import ExperimentRecord

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
    allowed = max(SLACK_FRAC * fig.train_s * fig.load.train, STEPS_SLACK_FRAC * fig.allowance_s)
    if excess <= allowed:
        return None, ""
    why = (f"by the harness's clock the run spent {excess:.1f}s beyond its allowances around its step lines "
           f"(startup {fig.startup_s or 0:.1f}s against {fig.allowance_s:.1f}s at load x{fig.load.startup:.2f}, "
           f"after the last step {fig.post_s or 0:.1f}s against {fig.post_allowance_s:.1f}s), {allowed:.1f}s "
           f"allowed for {fig.train_s:.1f}s of step lines")
    saturated = max(fig.load.startup, fig.load.train, fig.load.post) >= MAX_LOAD * SATURATED
    if excess > CHEAT_FACTOR * allowed + 0.5 * fig.train_s and not saturated:
        return "cheat", why + ": time nobody saw it train, far past what a start and a save take"
    return "over", why + (": the load reached the meter's cap, no evidence, run again" if saturated
                          else ": no evidence, run again")


@dataclass(frozen=True)
class ClockReference:
    """The tag's baseline: how long the unmodified train.py takes to start and to finish."""
    startup_s: float | None = None     # on an idle machine (each run's own divided by its load)
    post_s: float | None = None

    @classmethod
    def from_figures(cls, figures: list[dict]) -> "ClockReference":
        """The slowest idle-equivalent startup and post of a baseline's runs (ClockFigures dicts):
        the unmodified train.py's own jitter is allowed, not charged."""
        def slowest(key, load_key):
            vals = [float(f[key]) / max(1.0, float(f.get(load_key) or 1.0)) for f in figures
                    if isinstance(f, dict) and isinstance(f.get(key), (int, float))
                    and isinstance(f.get(load_key, 1.0), (int, float))]
            return max(vals) if vals else None
        return cls(slowest("startup_s", "load_startup"), slowest("post_s", "load_post"))

    def startup_allowance(self) -> float:
        return self.startup_s * (1 + JITTER) if self.startup_s is not None else STARTUP_FIRST_S

    def post_allowance(self) -> float:
        return self.post_s * (1 + JITTER) if self.post_s is not None else POST_FIRST_S


def reference_of(history: list) -> ClockReference:
    """The tag's clock reference from its journal records (ExperimentRecord, or journal dicts):
    the baseline's runs (its own clock figures and those of its repeats)."""
    for rec in history:
        rec = ExperimentRecord.from_dict(rec) if isinstance(rec, dict) else rec
        if isinstance(rec, ExperimentRecord) and rec.proposer == "baseline" and isinstance(rec.run.clock, dict):
            return ClockReference.from_figures(rec.clock_runs())
    return ClockReference()


def startup_allowance(reference_startup: float | None) -> float:
    """The startup not charged: the reference's own (kept for callers that pass a float)."""
    return ClockReference(reference_startup).startup_allowance()


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

    def as_dict(self) -> dict:
        s, ld = self.steps, self.load
        flat = {"startup_s": self.startup_s, "train_s": self.train_s, "charged_s": self.charged_s,
                "steps_seen": s.seen, "first_step": s.first, "last_step": s.last, "allowance_s": self.allowance_s,
                "last_line": s.last_line, "post_s": self.post_s, "silent_steps": s.silent, "pace_s": s.pace_s,
                "post_allowance_s": self.post_allowance_s, "tok_s": s.tok_s, "load_startup": ld.startup,
                "load_train": ld.train, "load_post": ld.post, "other_cores_train": ld.other_cores,
                "load_spread": ld.spread, "own_cpu_s": ld.own_cpu_s, "accounting": "cgroup" if ld.exact else "tree"}
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in flat.items()}

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
        return cls(startup_s=num("startup_s"), train_s=num("train_s", 0.0), charged_s=num("charged_s", 0.0),
                   allowance_s=num("allowance_s", 0.0), post_s=num("post_s"),
                   post_allowance_s=num("post_allowance_s", POST_FIRST_S), steps=steps, load=load)


@dataclass
class LogClock:
    """Stamps step lines with the harness's monotonic clock as they arrive (feed() from the
    runner's reader thread; figures() and live_charge() from anywhere)."""

    def __init__(self, started: float, reference: ClockReference | None = None, meter: LoadMeter | None = None):
        self.started = started
        self.reference = reference or ClockReference()
        self.meter = meter
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
            charged = (train + max(silent * pace, max(0.0, startup - s_allow))
                       + max(0.0, (post or 0.0) - p_allow))
            toks = sorted(self._tok_s[1:] or self._tok_s)
            tok = toks[len(toks) // 2] if toks else None
            steps = StepLines(seen=self.steps_seen, first=self.first_step, last=self.last_step, silent=silent,
                              pace_s=pace, tok_s=tok, last_line=self.last_line)
            loads = PhaseLoads(ls, tr.factor, lp, tr.other_cores, spread, own, exact)
            return ClockFigures(startup, train, charged, s_allow, post, p_allow, steps, loads)


def progress_fields(line: str) -> dict:
    """{"loss": 3.2, "tok/s": 51200.0, "trained": 1.2, "dt": 40.0} from a progress line."""
    out = {}
    for key, value in FIELD_RE.findall(line or ""):
        try:
            out[key] = float(value.replace(",", ""))
        except ValueError:
            continue
    return out


# ---- LoadMeter: how much of the machine the rest of it took while a run ran.
#
# On a wall-clock budget an honest run on a busy machine starts, steps and saves slower than the
# tag's baseline did. The clock above scales the run's allowances by how much the machine was
# loaded, and the judge compares runs made under comparable loads (agent/judges/pairing.py), so
# the harness must know the load without asking the run. This meter reads /proc/stat (every CPU
# second the machine spent busy, interrupt time left out) and the run's own CPU (its cgroup,
# harness/procs.py CpuAccount, which counts every process the run ever started; where there is
# none, its process tree in /proc), and keeps the difference: CPU the *others* used, sampled over
# time. Without a cgroup the others are also counted directly (every process outside the run's
# tree) and the smaller reading is kept: a run whose children the kernel reaps unseen (SIGCHLD
# ignored) would otherwise pass their CPU off as the others' and widen its own allowances.
#
#     other cores  = the others' CPU seconds per second (0 .. ncpu)
#     load factor  = k / (ncpu - other cores), clamped to [1, MAX_LOAD]
#
# where k is the cores the run wants (its AUTORESEARCH_THREADS, else every core): a run on one
# thread is not time-sliced while a core stays free for it. It is still slowed by a neighbour on
# the other core (shared caches, memory bandwidth), which the factor does not say: the judge
# compares the other cores themselves too (agent/judges/pairing.py). What the run burns itself (a
# process of its own that spins to look "loaded") is its own CPU, never the others'. Where /proc is
# not there (not Linux) the factor is 1: the allowances are the idle ones. Limits: on a box the
# others keep busy beyond 3/4 of its cores every run reads MAX_LOAD (saturated: no evidence); a GPU
# run is slowed less by CPU load than the factor says; contention on a GPU itself is not seen here.

# The largest slowdown the meter grants: on a box where the others take more than 3/4 of the
# cores a run is "no evidence" territory anyway, and a bound keeps a mis-measured phase from
# stretching an allowance without limit.
MAX_LOAD = 4.0
# Seconds between samples: reading every process's /proc entry costs a few milliseconds, and a
# phase shorter than this takes its neighbours'.
SAMPLE_EVERY_S = 0.5
_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def ncpu() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _busy_ticks() -> int | None:
    """Busy CPU ticks of the whole machine since boot (see busy_of)."""
    try:
        with open("/proc/stat") as f:
            return busy_of(f.readline())
    except OSError:
        return None


def busy_of(line: str) -> int | None:
    """Busy ticks in /proc/stat's `cpu` line: user, nice, system and steal. Interrupt time (irq,
    softirq) is left out: the kernel services a run's own loopback network and disk traffic there,
    charged to no process, so counting it would let a run raise the factor by making traffic
    (a loopback TCP stream: about a quarter of its CPU shows up as softirq)."""
    parts = line.split()
    if not parts or parts[0] != "cpu":
        return None
    try:
        v = [int(x) for x in parts[1:9]] + [0] * 8
    except ValueError:
        return None
    return v[0] + v[1] + v[2] + v[7]


def _processes() -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """(pid -> parent pid, pid -> CPU ticks with its waited-for children's, pid -> its own ticks
    alone) of every process."""
    parent, ticks, own = {}, {}, {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return parent, ticks, own
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            parent[pid] = int(rest[1])
            own[pid] = int(rest[11]) + int(rest[12])
            ticks[pid] = own[pid] + int(rest[13]) + int(rest[14])
        except (OSError, IndexError, ValueError):
            continue
    return parent, ticks, own


def _tree(root: int, parent: dict[int, int]) -> set[int]:
    inside, grew = {root}, True
    while grew:   # until no process joins: a tree of any depth, whatever order its pids came in
        before = len(inside)
        inside.update(pid for pid, pp in parent.items() if pp in inside)
        grew = len(inside) > before
    return inside


def _tree_ticks(root: int) -> int | None:
    """CPU ticks of `root` and its descendants (each with its reaped children's); None once `root`
    is gone (its ticks then moved to whoever reaped it: no longer measurable as its own)."""
    parent, ticks, _ = _processes()
    if root not in parent:
        return None
    return sum(ticks.get(pid, 0) for pid in _tree(root, parent))


def factor_of(other_cores: float, cores: int | None = None, wants: int | None = None) -> float:
    """The slowdown of a run that wants `wants` cores (default: every one) while others keep
    `other_cores` busy: none while the cores left free hold its threads."""
    n = cores or ncpu()
    k = max(1, min(n, wants or n))
    free = max(n - max(0.0, other_cores), k / MAX_LOAD)
    return min(MAX_LOAD, max(1.0, k / free))


def threads_of(env: dict) -> int | None:
    """The torch threads a run is given (AUTORESEARCH_THREADS, set by the harness or the user, never
    by the run), or None: every core (runtime.setup_device)."""
    try:
        v = int(env.get("AUTORESEARCH_THREADS") or 0)
    except ValueError:
        return None
    return v if v > 0 else None


@dataclass(frozen=True)
class Span:
    """What the meter saw over a span of a run: the others' busy cores on average, the load factor
    they make for the run, and the CPU seconds the run itself spent."""
    other_cores: float = 0.0
    factor: float = 1.0
    own_cpu_s: float = 0.0


class LoadMeter:
    """Samples the CPU the rest of the machine used while process `root` (and everything it
    started) ran: sample() from the runner's wait loop; span(a, b) and factor(a, b) for any span
    of the run (monotonic times). `account`: the run's cgroup (harness/procs.py CpuAccount), which
    makes its own CPU exact."""

    def __init__(self, root: int | None = None, clock=time.monotonic, wants: int | None = None, account=None):
        self.root, self.clock, self.account = root, clock, account
        # the run's own CPU is its cgroup's: nothing it started escapes the count (kept after the
        # account is closed, for the figures made once the run is over)
        self.exact = account is not None and account.path is not None
        self.cores = ncpu()
        self.wants = wants   # the run's threads: a single-threaded run is not slowed by one busy core
        self.samples: list[tuple[float, float, float]] = []   # (time, the others' CPU s so far, the run's)
        self._base: tuple[int, float] | None = None
        self._others: dict[int, int] = {}     # pid -> ticks at the last sample (the direct count)
        self._direct = 0.0
        self._lock = threading.Lock()

    def sample(self, now: float | None = None, force: bool = False) -> None:
        now = self.clock() if now is None else now
        if self.samples and now - self.samples[-1][0] < (0.0 if force else SAMPLE_EVERY_S):
            return
        busy = _busy_ticks()
        if busy is None:
            return
        own = self.account.used_s() if self.exact and self.account.path is not None else None
        if own is None:
            own = self._tree_and_others()
            if own is None:
                return
        with self._lock:
            if self._base is None:
                self._base = (busy, own)
                self.samples.append((now, 0.0, 0.0))
                return
            mine = max(0.0, own - self._base[1])
            other = max(0.0, (busy - self._base[0]) / _HZ - mine)
            if not self.exact:
                other = min(other, self._direct)
            last = self.samples[-1]
            # never backwards (a child that exited before its parent reaped it)
            self.samples.append((now, max(other, last[1]), max(mine, last[2])))

    def _tree_and_others(self) -> float | None:
        """Without a cgroup: the run's tree's CPU seconds, and (into self._direct) the CPU the
        processes outside it used since the first sample, counted one by one: each process's own
        time, between two samples that both saw it (a process that lives less than a sample
        interval is missed, so this count errs low, never high)."""
        parent, ticks, own_ticks = _processes()
        if self.root is not None and self.root not in parent:
            return None
        inside = _tree(self.root, parent) if self.root is not None else set()
        outside = {pid: t for pid, t in own_ticks.items() if pid not in inside}
        if self._base is not None:
            self._direct += sum(max(0, t - self._others[pid]) for pid, t in outside.items()
                                if pid in self._others) / _HZ
        self._others = outside
        return sum(ticks.get(pid, 0) for pid in inside) / _HZ

    def add(self, now: float, other_cpu_s: float, own_cpu_s: float = 0.0) -> None:
        """A sample made elsewhere (tests, a remote node's figures)."""
        with self._lock:
            self.samples.append((now, other_cpu_s, own_cpu_s))

    def span(self, a: float | None, b: float | None) -> Span:
        """What the meter saw over [a, b], widened to the samples around it (a phase shorter than
        the sampling interval takes its neighbours'); an empty Span without two samples."""
        with self._lock:
            s = list(self.samples)
        if len(s) < 2 or a is None or b is None:
            return Span()
        lo = max((x for x in s if x[0] <= a), default=s[0], key=lambda x: x[0])
        hi = min((x for x in s if x[0] >= b), default=s[-1], key=lambda x: x[0])
        if hi[0] <= lo[0]:
            i = s.index(lo)
            lo, hi = (s[i - 1], s[i]) if i > 0 else (s[0], s[1])
        dt = hi[0] - lo[0]
        if dt <= 0:
            return Span()
        other = (hi[1] - lo[1]) / dt
        return Span(other, factor_of(other, self.cores, self.wants), hi[2] - lo[2])

    def factor(self, a: float | None, b: float | None) -> float:
        """The load factor over [a, b]; 1.0 without two samples."""
        return self.span(a, b).factor

    def spread(self, a: float | None, b: float | None, parts: int = 4) -> float:
        """How much the load factor changed within [a, b]: the largest of its `parts` equal spans'
        factors over the smallest (1.0 when too short to tell)."""
        if a is None or b is None or b - a < parts * SAMPLE_EVERY_S * 2:
            return 1.0
        step = (b - a) / parts
        fs = [self.span(a + i * step, a + (i + 1) * step).factor for i in range(parts)]
        return max(fs) / min(fs)
