"""A run's processes: their group (end a run and everything it started, find the groups a dead
loop left), their CPU (CpuAccount: every second they spent, none escaping the count) and the rest
of the machine's while they ran (LoadMeter, which the harness clock scales allowances by).

A run lives in its own process group (harness/runner.py) and records the group in a pid file
before the harness waits on it (child.pid, child-K.pid for executor slots, verify*.pid for the
trusted evaluation), so a later `--resume` can kill a group left behind by a loop that died with
kill -9 (kill_leftover), and a timeout or Ctrl-C ends the helpers a run started, not just the leader.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

# After SIGTERM a group has this long to exit before SIGKILL.
TERM_GRACE_SECONDS = 5.0


def kill_group(pgid: int, proc: subprocess.Popen | None = None) -> None:
    """SIGTERM the group, then SIGKILL whatever is left after a grace period."""
    for sig, wait in ((signal.SIGTERM, TERM_GRACE_SECONDS), (signal.SIGKILL, 1.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc is not None:
                proc.poll()   # reap the leader, or it stays a zombie member of the group
            if not _group_alive(pgid):
                return
            time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process is in the group."""
    if Path("/proc").is_dir():
        return bool(_members(pgid))
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _members(pgid: int) -> list[int]:
    """Pids whose process group is pgid (Linux /proc; empty elsewhere)."""
    out = []
    proc = Path("/proc")
    if not proc.is_dir():
        return out
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def kill_leftover(run_dir: Path) -> str | None:
    """Kill the process groups left by a loop that died without cleaning up (kill -9, reboot):
    the training run's (child.pid) and the trusted evaluation's (verify.pid); returns what was done."""
    notes = [n for n in (_kill_recorded(p) for p in _pid_files(Path(run_dir))) if n]
    return "; ".join(notes) or None


def _pid_files(run_dir: Path) -> list[Path]:
    """child.pid / child-K.pid (executor slots) in the run folder, verify*.pid there and in its
    .verify/ folder (where the trusted evaluation records its group)."""
    found = []
    for folder in (run_dir, run_dir / ".verify"):
        if folder.is_dir():
            found += sorted(folder.glob("child*.pid")) + sorted(folder.glob("verify*.pid"))
    return found


def _kill_recorded(pid_file: Path) -> str | None:
    """The group is killed only if one of its processes still runs in the recorded folder, so a
    recycled process-group id of someone else's is never touched."""
    if not pid_file.exists():
        return None
    try:
        info = json.loads(pid_file.read_text())
        pgid, cwd = int(info["pgid"]), os.path.realpath(info["cwd"])
    except (ValueError, KeyError, TypeError, OSError) as exc:
        pid_file.unlink(missing_ok=True)
        return f"ignored unreadable pid file ({exc})"
    members = _members(pgid)
    ours = []
    for pid in members:
        try:
            if os.path.realpath(f"/proc/{pid}/cwd") == cwd:
                ours.append(pid)
        except OSError:
            continue
    note = None
    if ours:
        kill_group(pgid)
        note = f"killed leftover process group {pgid} ({len(members)} processes) of experiment {info.get('n')}"
    pid_file.unlink(missing_ok=True)
    return note


# ---- CpuAccount: every CPU second a run's processes spent, none escaping the count.
#
# The load meter (harness/clock.py) takes the machine's busy CPU and subtracts the run's own: what
# is left is the others'. So the run's own must be complete: a run that ignores SIGCHLD has its
# children reaped by the kernel, and their CPU never reaches its parent's counts in /proc, which
# would show as other users' load and widen the run's allowances. Where the harness can make a
# cgroup (v2, writable: root, or a delegated tree), the run starts inside one of its own and its
# usage is the cgroup's `cpu.stat`, which counts every process that ever ran in it, reaped or
# not. Elsewhere the meter falls back to counting the process tree and the others directly, and
# takes the smaller of the two readings of the others' load (harness/procs.py LoadMeter).

# Where a cgroup v2 hierarchy is mounted (a hybrid system mounts it under unified/), in order.
CGROUP_MOUNTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")
# The harness's cgroups, one per run: <mount>/<CGROUP_DIR>/<name>.
CGROUP_DIR = "autoresearch"


def _cgroup2_mount() -> Path | None:
    for m in CGROUP_MOUNTS:
        p = Path(m)
        if (p / "cgroup.procs").exists() and (p / "cgroup.controllers").exists() and os.access(p, os.W_OK):
            return p
    return None


class CpuAccount:
    """A cgroup of the run's own, when one can be made: `enter` is the argv prefix that moves the
    run's first process into it before it starts anything (a shell that writes its own pid, then
    execs the run), `used_s()` the CPU seconds every process in it has spent so far, `close()`
    ends what is left in it and removes it. `path` is None where no cgroup could be made."""

    def __init__(self, name: str):
        self.path: Path | None = None
        mount = _cgroup2_mount()
        if mount is None:
            return
        _remove_stale(mount / CGROUP_DIR)
        try:
            path = mount / CGROUP_DIR / f"run-{os.getpid()}-{name}"
            path.mkdir(parents=True, exist_ok=True)
            if (path / "cpu.stat").exists():
                self.path = path
        except OSError:
            self.path = None

    @property
    def enter(self) -> list[str]:
        if self.path is None:
            return []
        return ["/bin/sh", "-c", 'echo $$ > "$1" && shift && exec "$@"', "sh", str(self.path / "cgroup.procs")]

    def used_s(self) -> float | None:
        if self.path is None:
            return None
        try:
            for line in (self.path / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except (OSError, ValueError):
            return None
        return None

    def close(self) -> None:
        if self.path is None:
            return
        try:
            if (self.path / "cgroup.kill").exists():
                (self.path / "cgroup.kill").write_text("1")
            deadline = time.monotonic() + TERM_GRACE_SECONDS
            while time.monotonic() < deadline:
                try:
                    self.path.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)
        except OSError:
            pass
        self.path = None


def _remove_stale(folder: Path) -> None:
    """Remove the empty cgroups of loops that are gone (a kill -9 leaves them; rmdir refuses any
    cgroup that still holds a process, and one of a live loop is never touched)."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return
    for d in entries:
        parts = d.name.split("-")
        if len(parts) < 3 or parts[0] != "run" or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
            continue                  # its loop is alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        try:
            d.rmdir()
        except OSError:
            pass


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
