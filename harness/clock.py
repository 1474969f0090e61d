"""The harness's own clock of a training run: progress lines timed as they arrive.

train.py is written by the proposer, so the training time it reports is a claim. Every step prints
a line `step N | loss ... | tok/s ... | trained Xs` (flushed); the runner reads the log as it grows
and stamps each step line with its own monotonic clock. From those stamps:

    startup_s  process start -> first step line (imports, model build, compile of the first step)
    silent     steps before the first line (the first line's step number says how many)
    train_s    first step line -> last step line
    post_s     last step line -> process exit (saving the model; in loop mode nothing else)
    charged_s  train_s + whatever startup and post exceeded their allowances (silent steps are
               charged at the run's pace when that is more than the startup excess)

`charged_s` is what decides "within budget". A file that scales its own timer trains longer
between step lines; one that trains silently before its first line (or buffers its output) has
a long startup, and startup beyond the allowance is charged as training; one that goes on training
silently after its last line has a long post, charged the same way. In loop mode train.py does not
evaluate (the harness does, outside), so nothing honest happens after the last step but saving.
A slow, loaded machine makes a run slower, not an integrity failure: an honest train.py stops by
its own clock, which the load slows down just as it slows ours.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

STEP_RE = re.compile(r"^step (\d+) \|")
# Fields of a progress line shown on the console (and kept as the run's last figures).
FIELD_RE = re.compile(r"(loss|tok/s|trained|dt)\s+([0-9.,]+)")
# Charged training may exceed the budget by this factor plus this grace before the run counts as
# trained past its budget: the steps train.py does not count (compile, warm-up), the last step's
# overshoot, and the 0.2 s polling granularity of the stamps.
CLOCK_FACTOR = 1.05
CLOCK_GRACE_S = 10.0
# Startup allowance: this many times the tag's reference (baseline) startup, at least the floor;
# before a reference exists, the generous first-run allowance (a cold GPU compile takes minutes).
STARTUP_FACTOR = 4.0
STARTUP_MIN_S = 60.0
STARTUP_FIRST_S = 300.0
# After the last step line: saving the model and exiting (seconds, even for 200 MB on a busy disk).
POST_ALLOWANCE_S = 60.0
# The runner ends a run whose charged training passes the limit by this margin (it cannot be kept).
KILL_MARGIN_S = 30.0


def startup_allowance(reference_startup: float | None) -> float:
    if not reference_startup:
        return STARTUP_FIRST_S
    return max(STARTUP_MIN_S, STARTUP_FACTOR * reference_startup)


# Steps of slack at the run's own pace: the warm-up steps train.py does not count (slower than the
# rest: allocator and caches warm up; on a loaded 2-core box a tiny run's steps 2-3 took ~8 s each
# at a 3.7 s mean) and the last step's overshoot; capped at a fraction of the budget, so declaring
# giant "steps" buys little: at most max(10% of the budget, 30 s). At 300 s and a 0.3-0.4 s step
# that is ~3 s of slack; smoke budgets of seconds on a loaded box get the 30 s floor.
STEP_SLACK = 8
STEP_SLACK_CAP = 0.1
STEP_SLACK_MIN_S = 30.0


def limit_for(budget: float, pace: float = 0.0) -> float:
    """Most charged seconds a run of `budget` may train, at `pace` seconds per step."""
    cap = max(STEP_SLACK_CAP * budget, STEP_SLACK_MIN_S)
    return CLOCK_FACTOR * budget + CLOCK_GRACE_S + min(STEP_SLACK * pace, cap)


@dataclass
class ClockFigures:
    startup_s: float | None      # None: no step line was seen
    train_s: float
    charged_s: float
    steps_seen: int
    first_step: int | None
    last_step: int | None
    allowance_s: float
    last_line: str = ""
    post_s: float | None = None
    silent_steps: int = 0
    pace_s: float = 0.0           # mean seconds per step between the first and last lines


    def as_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


class LogClock:
    """Stamps step lines of a growing log file with the harness's monotonic clock."""

    def __init__(self, log_path: Path, started: float, allowance: float = STARTUP_FIRST_S):
        self.path, self.started, self.allowance = Path(log_path), started, allowance
        self._offset, self._partial = 0, b""
        self.first_at = self.last_at = None
        self.first_step = self.last_step = None
        self.steps_seen, self.last_line = 0, ""

    def poll(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return
        if not chunk:
            return
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            line = raw.decode(errors="replace")
            m = STEP_RE.match(line)
            if not m:
                continue
            step = int(m.group(1))
            if self.first_at is None:
                self.first_at, self.first_step = now, step
            self.last_at, self.last_step = now, step
            self.steps_seen += 1
            self.last_line = line.strip()[:200]

    def live_charge(self, now: float) -> float:
        """Charged training if the run ended now, post allowance granted (for the runner's kill)."""
        if self.first_at is None:
            return max(0.0, now - self.started - self.allowance)
        startup = self.first_at - self.started
        return max(0.0, now - self.first_at - POST_ALLOWANCE_S) + max(0.0, startup - self.allowance)

    def figures(self, ended: float | None = None) -> ClockFigures:
        """The run's figures; `ended` (process exit) charges a post beyond its allowance."""
        if self.first_at is None:
            return ClockFigures(None, 0.0, 0.0, 0, None, None, self.allowance, "")
        startup = self.first_at - self.started
        train = self.last_at - self.first_at
        post = None if ended is None else max(0.0, ended - self.last_at)
        # Steps before the first line (its number says how many) were trained where the clock
        # could not see them: charged at the run's own pace, beyond what the startup already is.
        silent = max(0, (self.first_step or 1) - 1)
        pace = train / (self.last_step - self.first_step) if self.last_step > self.first_step else 0.0
        charged = (train + max(silent * pace, max(0.0, startup - self.allowance))
                   + max(0.0, (post or 0.0) - POST_ALLOWANCE_S))
        return ClockFigures(startup, train, charged, self.steps_seen, self.first_step, self.last_step,
                            self.allowance, self.last_line, post, silent, pace)


def progress_fields(line: str) -> dict:
    """{"loss": 3.2, "tok/s": 51200.0, "trained": 1.2, "dt": 40.0} from a progress line."""
    out = {}
    for key, value in FIELD_RE.findall(line or ""):
        try:
            out[key] = float(value.replace(",", ""))
        except ValueError:
            continue
    return out
