"""Process groups: end a run and everything it started, and find the groups a dead loop left.

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
import time
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
# takes the smaller of the two readings of the others' load (harness/clock.py LoadMeter).

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
