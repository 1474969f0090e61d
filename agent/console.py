"""What the person watching sees: a rich live panel on a terminal, plain lines otherwise.

The panel shows the phase and how long it has lasted (a clock that moves in every phase, redrawn
by rich's own refresh thread even while the loop waits on a child), the experiment number, the
running experiment's log and its training progress (step, loss, tok/s and the *training* clock
that train.py reports, apart from the wall clock since launch, which includes startup), the best
val_bpb and its commit, the last decision (interim ones too: "baseline run 1/2 ...; rerunning"),
the keep rate and the cost so far. Plain mode (logs, nohup, tests) prints one line per phase
change, one per decision and a training progress line now and then.
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from rich.console import Console as RichConsole
from rich.live import Live
from rich.table import Table
from rich.text import Text

from runfiles.run import DataInfo
from harness.experiment_record import ExperimentRecord
from runfiles.state import RunState
from harness.secrets import clean_text

# Redraws per second of the live panel: enough to watch a clock, cheap for the loop.
REFRESH_PER_SECOND = 2
# train.py's progress line: "step 00012 | loss 3.200000 | lrm 1.000 | dt 40ms | tok/s 51,200 |
# epoch 0 | trained 1.2s" (numbers may carry thousands separators).
PROGRESS_RE = re.compile(r"step (\d+) \| loss ([-+0-9.eEnaif]+) \|.*?tok/s ([0-9,.]+) \|.*?trained ([0-9.]+)s")
# Bytes read from the end of a log to find its last progress line (lines are ~100 bytes).
TAIL_BYTES = 4096
# Plain mode: at most one training progress line this often (a nohup log stays readable).
PLAIN_PROGRESS_SECONDS = 60.0
# Phases in which a training run (and so a log) is in flight.
RUN_PHASES = ("training", "evaluating")


# ---- reading the running experiment ----------------------------------------------------------
def parse_progress(text: str) -> dict | None:
    """The last progress line in `text` as {"step", "loss", "tok_s", "trained"}, or None."""
    found = PROGRESS_RE.findall(text)
    if not found:
        return None
    step, loss, tok_s, trained = found[-1]
    try:
        return {"step": int(step), "loss": float(loss), "tok_s": float(tok_s.replace(",", "")),
                "trained": float(trained)}
    except ValueError:
        return None


def read_tail(path: Path, nbytes: int = TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - nbytes))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def current_log(run_dir: Path, since: float | None, n: int | None = None) -> Path | None:
    """The running experiment's log: the newest logs/exp-NNNN*.log (of experiment n, reruns and
    fixes included) written since the run started; None until the runner has created it."""
    pattern = f"exp-{n:04d}*.log" if isinstance(n, int) else "exp-*.log"
    best, best_t = None, since or 0.0
    try:
        entries = list((Path(run_dir) / "logs").glob(pattern))
    except OSError:
        return None
    for p in entries:
        try:
            t = p.stat().st_mtime
        except OSError:
            continue
        if t >= best_t:
            best, best_t = p, t
    return best


def run_progress(run_dir: Path, phase: str | None, since: float | None,
                 n: int | None = None) -> tuple[str | None, dict | None]:
    """(log path relative to run_dir, last progress) of the run in flight; (None, None) otherwise."""
    if phase not in RUN_PHASES or not since:
        return None, None
    log = current_log(run_dir, since, n)
    if log is None:
        return None, None
    try:
        shown = str(log.relative_to(run_dir))
    except ValueError:
        shown = str(log)
    return shown, parse_progress(read_tail(log))


# ---- formatting ----------------------------------------------------------------------------------
def data_warning(info: DataInfo | dict) -> str | None:
    """The loud line for a tag trained on the offline fallback data (prepare.log says it too);
    `info` is prepare.describe()'s."""
    if not (info if isinstance(info, DataInfo) else DataInfo.of(info)).offline:
        return None
    return ("WARNING: the data is the OFFLINE FALLBACK (Python's standard library sources), not ClimbMix: "
            "this tag's val_bpb is not comparable with ClimbMix runs or published figures. When the hub "
            "is reachable: `uv run prepare.py --source climbmix`, then start a new tag.")


def clock(seconds: float | None) -> str:
    """12s, 3m05s, 2h03m."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def one_line(text) -> str:
    """Proposed text (a description, a hypothesis, a reason) as one clean line: a newline in it
    cannot start a line that reads like the loop's own."""
    return clean_text(text, one_line=True)


def decision_line(rec: ExperimentRecord) -> str:
    bpb = rec.decision_bpb
    bpb_text = f"{bpb:.6f}" if bpb is not None else "-"
    extra = f" [{one_line(rec.crash_class)}]" if rec.crash_class else ""
    extra += " (escalated to the human queue)" if rec.escalated else ""
    why = rec.why_kept if rec.status == "keep" else rec.decision_reason   # a keep always says why
    return (f"exp {rec.n} {rec.short} {rec.status}{extra} val_bpb {bpb_text}: "
            f"{one_line(rec.description)} -- {one_line(why)}")


def progress_text(progress: dict | None, budget: float) -> str:
    if not progress:
        return "starting (imports, model build, warm-up)"
    loss = progress["loss"]
    return (f"step {progress['step']} | loss {loss:.4f} | {progress['tok_s']:,.0f} tok/s | "
            f"trained {progress['trained']:.1f}s of {budget:g}s")


def idea_text(idea: dict) -> str:
    """state.json's idea as one line: what is tried, and why."""
    hyp = one_line(idea["hypothesis"]) if "hypothesis" in idea else ""
    return one_line(idea["description"] if "description" in idea else "-") + (f" -- hypothesis: {hyp}" if hyp else "")


def run_text(run: dict) -> str:
    """state.json's run as "2 of 5 (confirming a possible gain)"."""
    why = f" ({run['why']})" if "why" in run and run["why"] else ""
    return f"{run['k']} of {run['of']}{why}" if "of" in run and run["of"] else f"{run['k']}{why}"


def as_state(state) -> RunState:
    """state.json's object (the loop's RunState.to_dict(), or a file read back), typed."""
    return state if isinstance(state, RunState) else RunState.from_dict(state)


def panel_rows(tag: str, budget: float, state, now: float) -> list[tuple[str, str]]:
    """The panel's rows for state `state` (RunState, or its dict) at time `now` (a pure function:
    the tests render it)."""
    s = as_state(state)
    cur, tally = s.running, s.tally
    phase = str(s.phase or "setup")
    since_phase = s.phase_started_at
    rows = [("phase", f"{phase} for {clock(now - since_phase)}" if since_phase else phase),
            ("experiment", str(cur.experiment or "-"))]
    if cur.idea:
        rows.append(("idea", idea_text(cur.idea)))
    if phase in RUN_PHASES:
        started = cur.run_started_at
        which = f"run {run_text(cur.run)}, " if cur.run else ""
        rows.append(("run", f"{which}{clock(now - started)} since launch (startup included)" if started else "-"))
        if phase == "training":
            rows.append(("training", progress_text(cur.progress, budget)))
        else:
            rows.append(("evaluating", "the trusted evaluator measures the saved model (training done"
                         + (f": {cur.progress['step']} steps" if cur.progress else "") + ")"))
        rows.append(("log", str(cur.log or "-")))
    best = tally.best or {"commit": None, "val_bpb": None}
    rows.append(("best val_bpb", f"{best['val_bpb']:.6f} @ {str(best['commit'])[:7]}"
                 if best["val_bpb"] is not None else "-"))
    rows.append(("last decision", str(tally.last_decision or "-")))
    rate = tally.keep_rate
    rows.append(("keep rate", f"{rate:.0%}" if rate is not None else "-"))
    rows.append(("cost so far", f"${tally.cost_usd or 0.0:.4f}"))
    started = s.started_at
    rows.append(("up", f"{clock(now - started)} since the loop started" if started else "-"))
    return rows


def render_panel(tag: str, budget: float, state, now: float | None = None) -> Table:
    table = Table(title=f"autoresearch {tag}", show_header=False, expand=False)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column(overflow="fold")
    for k, v in panel_rows(tag, budget, state, time.time() if now is None else now):
        # proposed text is shown as written, never read as rich markup ("[link=...]") or escapes
        table.add_row(k, Text(clean_text(v)))
    return table


# ---- the console ----------------------------------------------------------------------------------
class Console:
    def __init__(self, tag: str, budget: float, live: bool | None = None, rich_console=None):
        self.tag, self.budget = tag, budget
        self.live_mode = sys.stdout.isatty() if live is None else live
        self.state: RunState = RunState()
        self._live = None
        self._last_phase, self._last_log = None, None
        self._last_progress_print = 0.0
        if self.live_mode:
            self._rich = rich_console or RichConsole()
            # get_renderable: rich's refresh thread re-renders, so the clocks move between updates
            self._live = Live(console=self._rich, refresh_per_second=REFRESH_PER_SECOND,
                              transient=False, get_renderable=self._render)
            self._live.start()

    def update(self, state) -> None:
        """The loop's state (RunState, or its dict as written to state.json)."""
        self.state = s = as_state(state)
        if self._live is not None:
            self._live.refresh()
            return
        cur = s.running
        key = (s.phase, cur.experiment)
        stamp = f"[{time.strftime('%H:%M:%S')}]" + (f" exp {cur.experiment}:" if cur.experiment is not None else "")
        if key != self._last_phase:
            self._last_phase, self._last_log = key, cur.log
            self._last_progress_print = time.time()
            log = f" (log {cur.log})" if cur.log else ""
            print(clean_text(f"{stamp} {s.phase}{log}"), flush=True)
        elif cur.log and cur.log != self._last_log:
            self._last_log = cur.log    # the log appears just after the phase changed
            print(clean_text(f"{stamp} {s.phase} (log {cur.log})"), flush=True)
        elif s.phase == "training" and cur.progress and \
                time.time() - self._last_progress_print >= PLAIN_PROGRESS_SECONDS:
            self._last_progress_print = time.time()
            print(f"{stamp} {progress_text(cur.progress, self.budget)}", flush=True)

    def event(self, text: str) -> None:
        """One line (or a few) for the person watching; proposed text in it is cleaned here
        (harness/secrets.py clean_text: no escapes, controls or bidi characters reach the terminal)."""
        text = clean_text(text)
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(text, flush=True)

    def decision(self, rec: ExperimentRecord) -> None:
        self.event(decision_line(rec))
        ev = rec.evidence_view()
        if ev is not None and ev.call != "baseline" and ev.runs:
            self.event(f"  evidence: {ev.summary()}")

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _render(self) -> Table:
        return render_panel(self.tag, self.budget, self.state)
