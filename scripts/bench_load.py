"""A changing load for scripts/bench_judge.py --load: CPU-burning processes that start and stop
on a random schedule while the bench runs on a wall-clock budget, and the figures that matter
under it (nulls kept, gains kept, gains discarded without going to the human queue).

The burners are plain `python -c "while True: pass"` processes, outside the runs' process trees:
what the harness's load meter (harness/procs.py LoadMeter) sees as the machine's load, and what slows a
run's steps on a wall-clock budget. The bench's own process ends them (also on Ctrl-C).
"""
from __future__ import annotations

import ctypes
import random
import signal
import subprocess
import sys
import threading
import time

BURN = "while True:\n    pass\n"


def _die_with_parent() -> None:
    """A burner ends with the bench even when the bench is killed (Linux: PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass


class BackgroundLoad:
    """`procs` burners on for a random spell in `on_s`, off for one in `off_s`, until stop()."""

    def __init__(self, procs: int = 1, on_s=(20.0, 90.0), off_s=(20.0, 90.0), seed: int = 0):
        self.procs, self.on_s, self.off_s = procs, on_s, off_s
        self.rng = random.Random(seed)
        self.events: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._running: list[subprocess.Popen] = []
        self._thread = threading.Thread(target=self._cycle, name="bench-load", daemon=True)
        self.t0 = time.time()

    def start(self) -> "BackgroundLoad":
        self._thread.start()
        return self

    def _on(self) -> None:
        self._running = [subprocess.Popen([sys.executable, "-c", BURN], preexec_fn=_die_with_parent)
                         for _ in range(self.procs)]
        self.events.append((time.time() - self.t0, "on"))

    def _off(self) -> None:
        for p in self._running:
            p.kill()
            p.wait()
        if self._running:
            self.events.append((time.time() - self.t0, "off"))
        self._running = []

    def _cycle(self) -> None:
        on = self.rng.random() < 0.5
        while not self._stop.is_set():
            if on:
                self._on()
            span = self.rng.uniform(*(self.on_s if on else self.off_s))
            self._stop.wait(span)
            self._off()
            on = not on

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._off()

    def fraction_on(self) -> float:
        total, on_at, busy = time.time() - self.t0, None, 0.0
        for t, what in self.events:
            if what == "on":
                on_at = t
            elif on_at is not None:
                busy, on_at = busy + t - on_at, None
        if on_at is not None:
            busy += total - on_at
        return busy / total if total > 0 else 0.0


def escalated(rec: dict) -> bool:
    """Whether a record's decision went to the human queue as contested."""
    judge = ((rec.get("verdicts") or {}).get("judge") or {})
    return any(isinstance(e, dict) and e.get("kind") == "contested" for e in judge.get("escalations") or [])


def load_figures(records: list[dict], edits: dict, load: BackgroundLoad | None) -> dict:
    """Nulls kept, gains >= 3 sigma kept, and gains discarded without escalation."""
    by_n = {r["n"]: r for r in records}
    nulls = [by_n[n] for n, e in edits.items() if e.kind == "null" and n in by_n]
    gains = [(by_n[n], e) for n, e in edits.items() if e.kind == "gain" and n in by_n]
    big = [r for r, e in gains if e.size >= 3]
    lost = [r["n"] for r, _ in gains if r["status"] != "keep" and not escalated(r)]
    contested = [r["n"] for r, _ in gains if r["status"] != "keep" and escalated(r)]
    paired = sum(1 for r in records if ((r.get("evidence") or {}).get("paired")))
    return {"nulls_kept": sum(r["status"] == "keep" for r in nulls), "nulls": len(nulls),
            "gains3_kept": sum(r["status"] == "keep" for r in big), "gains3": len(big),
            "gains_discarded_without_escalation": lost, "gains_contested": contested,
            "decisions_paired": paired, "load_on_fraction": load.fraction_on() if load else None,
            "load_events": load.events if load else []}


def render(f: dict) -> str:
    return (f"under load: nulls kept {f['nulls_kept']}/{f['nulls']}; gains >= 3 sigma kept "
            f"{f['gains3_kept']}/{f['gains3']}; gains discarded without escalation "
            f"{len(f['gains_discarded_without_escalation'])} {f['gains_discarded_without_escalation']}; "
            f"contested (on the human queue) {f['gains_contested']}; decisions paired {f['decisions_paired']}; "
            f"the load was on {100 * (f['load_on_fraction'] or 0):.0f}% of the time")


def add_args(p) -> None:
    p.add_argument("--load", action="store_true", help="a wall-clock budget (--budget) while CPU burners start "
                   "and stop (scripts/bench_load.py); the gains keep their steps-mode calibration")
    p.add_argument("--budget", type=float, default=10.0, help="seconds per run with --load")
    p.add_argument("--load-procs", type=int, default=1, help="burners while the load is on")


class background:
    """With --load: the loop's runs on a wall-clock budget (no AUTORESEARCH_STEPS) beside a load
    that comes and goes, for the duration of the with-block; without it, nothing."""

    def __init__(self, args):
        self.args, self.load = args, None

    def __enter__(self) -> "BackgroundLoad | None":
        if self.args.load:
            import os
            os.environ.pop("AUTORESEARCH_STEPS", None)
            self.load = BackgroundLoad(self.args.load_procs).start()
        return self.load

    def __exit__(self, *exc) -> None:
        if self.load is not None:
            self.load.stop()


def report(s: dict, records: list[dict], edits: dict, load: BackgroundLoad | None) -> None:
    if load is not None:
        s["load"] = load_figures(records, edits, load)
        print(render(s["load"]), flush=True)
