"""What the person watching sees: a rich live panel on a terminal, plain lines otherwise.

The panel shows the phase, the experiment number, elapsed/remaining of the running run, the best
val_bpb and its commit, the last decision, the keep rate and the cost so far. Plain mode (logs,
nohup, tests) prints one line per phase change and one per decision instead of redrawing.
"""
from __future__ import annotations

import sys
import time

from rich.console import Console as RichConsole
from rich.live import Live
from rich.table import Table

# Redraws per second of the live panel: enough to watch a clock, cheap for the loop.
REFRESH_PER_SECOND = 2


class Console:
    def __init__(self, tag: str, budget: float, live: bool | None = None):
        self.tag, self.budget = tag, budget
        self.live_mode = sys.stdout.isatty() if live is None else live
        self.state: dict = {}
        self._live = None
        self._last_phase = None
        if self.live_mode:
            self._rich = RichConsole()
            self._live = Live(self._render(), console=self._rich, refresh_per_second=REFRESH_PER_SECOND,
                              transient=False)
            self._live.start()

    def update(self, state: dict) -> None:
        self.state = state
        if self._live is not None:
            self._live.update(self._render())
            return
        key = (state.get("phase"), state.get("experiment"))
        if key != self._last_phase:
            self._last_phase = key
            print(f"[{time.strftime('%H:%M:%S')}] exp {state.get('experiment')}: {state.get('phase')}",
                  flush=True)

    def event(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text)
        else:
            print(text, flush=True)

    def decision(self, rec: dict) -> None:
        bpb = (rec.get("summary") or {}).get("val_bpb")
        bpb_text = f"{bpb:.6f}" if isinstance(bpb, (int, float)) else "-"
        extra = f" [{rec['crash_class']}]" if rec.get("crash_class") else ""
        self.event(f"exp {rec['n']} {rec['short']} {rec['status']}{extra} val_bpb {bpb_text}: "
                   f"{rec['description']} -- {rec['decision_reason']}")

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _render(self) -> Table:
        s = self.state
        table = Table(title=f"autoresearch {self.tag}", show_header=False, expand=False)
        table.add_column(style="bold cyan")
        table.add_column()
        run_started = s.get("run_started_at")
        if run_started and s.get("phase") in ("training", "evaluating"):
            elapsed = time.time() - run_started
            clock = f"{elapsed:5.0f}s elapsed, {max(0.0, self.budget - elapsed):5.0f}s of budget left"
        else:
            clock = "-"
        best = s.get("best") or {}
        best_text = (f"{best['val_bpb']:.6f} @ {str(best.get('commit'))[:7]}"
                     if isinstance(best.get("val_bpb"), (int, float)) else "-")
        rate = s.get("keep_rate")
        rows = [("phase", str(s.get("phase", "setup"))), ("experiment", str(s.get("experiment", "-"))),
                ("run", clock), ("best val_bpb", best_text),
                ("last decision", str(s.get("last_decision") or "-")),
                ("keep rate", f"{rate:.0%}" if isinstance(rate, (int, float)) else "-"),
                ("cost so far", f"${s.get('cost_usd', 0.0):.4f}")]
        for k, v in rows:
            table.add_row(k, v)
        return table
