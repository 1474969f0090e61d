"""How much of the machine the rest of it took while a run ran: the harness's measure of load.

On a wall-clock budget an honest run on a busy machine starts, steps and saves slower than the
tag's baseline did. The harness clock (harness/clock.py) scales the run's allowances by how
much the machine was loaded, so it must know that without asking the run: this meter reads
/proc/stat (every CPU second the machine spent busy, interrupt time left out) and /proc/<pid>/stat of the run's own process
tree (what the run itself spent, its reaped children included), and keeps the difference: CPU
the *others* used, sampled over time.

    load factor = k / (ncpu - cores the others kept busy), clamped to [1, MAX_LOAD]

where k is the cores the run wants (its AUTORESEARCH_THREADS, else every core): a run on one
thread is not slowed while a core stays free for it.

A run that wants every core and shares the box with processes that keep o cores busy gets
ncpu - o of them: it is slowed by that factor (one busy process on 2 cores: ~1.5-2x). What the
run burns itself (a process of its own that spins to look "loaded") is its own CPU, not the
others': it cannot raise the factor, and a sleeping run lowers nothing but its own work. Where
/proc is not there (not Linux) the factor is 1: the allowances are the idle ones. Limits: on a box
the others keep busy beyond 3/4 of its cores every run reads MAX_LOAD, so the factor no longer
tells runs apart; a GPU run is slowed less by CPU load than the factor says (its allowances are
then generous by that much); contention on a GPU itself is not seen here.
"""
from __future__ import annotations

import os
import threading
import time

# The largest slowdown the meter grants: on a box where the others take more than 3/4 of the
# cores a run is "no evidence" territory anyway, and a bound keeps a mis-measured phase from
# stretching an allowance without limit.
MAX_LOAD = 4.0
# Seconds between samples: reading every process's /proc entry costs a few milliseconds, and a
# phase shorter than this takes its neighbours' load.
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


def _tree_ticks(root: int) -> int | None:
    """CPU ticks of `root` and its descendants (each with its reaped children's); None once `root`
    is gone (its ticks then moved to whoever reaped it: no longer measurable as its own)."""
    parent, ticks = {}, {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        try:
            parent[pid] = int(rest[1])
            ticks[pid] = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
        except (ValueError, IndexError):
            continue
    if root not in parent:
        return None
    inside, grew = {root}, True
    while grew:   # until no process joins: a tree of any depth, whatever order its pids came in
        before = len(inside)
        inside.update(pid for pid, pp in parent.items() if pp in inside)
        grew = len(inside) > before
    return sum(ticks.get(pid, 0) for pid in inside)


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


class LoadMeter:
    """Samples the CPU the rest of the machine used while process `root` (and its tree) ran.
    sample() from the runner's wait loop; factor(a, b) for any span of the run (monotonic times)."""

    def __init__(self, root: int | None = None, clock=time.monotonic, wants: int | None = None):
        self.root, self.clock = root, clock
        self.cores = ncpu()
        self.wants = wants   # the run's threads: a single-threaded run is not slowed by one busy core
        self.samples: list[tuple[float, float]] = []   # (monotonic time, the others' CPU seconds so far)
        self._base: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def sample(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        if self.samples and now - self.samples[-1][0] < SAMPLE_EVERY_S:
            return
        busy = _busy_ticks()
        own = _tree_ticks(self.root) if self.root else 0
        if busy is None or own is None:
            return
        with self._lock:
            if self._base is None:
                self._base = (busy, own)
                other = 0.0
            else:
                other = max(0.0, ((busy - self._base[0]) - (own - self._base[1])) / _HZ)
                if self.samples:   # never backwards (a child that exited before its parent reaped it)
                    other = max(other, self.samples[-1][1])
            self.samples.append((now, other))

    def add(self, now: float, other_cpu_s: float) -> None:
        """A sample made elsewhere (tests, a remote node's figures)."""
        with self._lock:
            self.samples.append((now, other_cpu_s))

    def factor(self, a: float | None, b: float | None) -> float:
        """The load factor over [a, b]: widened to the samples around it (a phase shorter than the
        sampling interval takes its neighbours'); 1.0 without two samples."""
        with self._lock:
            s = list(self.samples)
        if len(s) < 2 or a is None or b is None:
            return 1.0
        lo = max((x for x in s if x[0] <= a), default=s[0], key=lambda x: x[0])
        hi = min((x for x in s if x[0] >= b), default=s[-1], key=lambda x: x[0])
        if hi[0] <= lo[0]:
            i = s.index(lo)
            lo, hi = (s[i - 1], s[i]) if i > 0 else (s[0], s[1])
        span = hi[0] - lo[0]
        if span <= 0:
            return 1.0
        return factor_of((hi[1] - lo[1]) / span, self.cores, self.wants)
