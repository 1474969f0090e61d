"""Fault injection: kill -9 the loop at random instants, --resume each time, then count what was lost.

    uv run scripts/fault_inject.py [--kills 8] [--seed 0] [--budget 5] [--experiments 6]
        [--max-wait 120] [--workers N] [--keep]

Builds a throwaway git repo with the real prepare.py / train.py / program.md (train.py shrunk to
a small model), prepares the tiny profile's data from a few standard-library files, then runs
agent/loop.py there (offline proposer, judge hierarchy with the trusted re-evaluation) in a
session of its own. N times: start the loop (the first time fresh, then --resume), wait a random
time, SIGKILL the loop process alone (its children are left as a real kill -9 would leave them),
noting the phase it was in. A last --resume runs to --experiments. Then it prints:

- rows / journal records / matched one to one / duplicates (an experiment recorded twice),
- orphans: live processes left in any process group the loop recorded (child*.pid) or ran in,
- leftovers: untracked files in the worktree (`git status`) and temp folders left in the
  loop's TMPDIR,
- whether the branch tip is the last kept commit.

It is CPU heavy (each experiment trains for --budget seconds and is re-evaluated). Exit status 0
when nothing was lost, duplicated, orphaned or left over; 1 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from search import knobs  # noqa: E402
from harness.results import read_journal, read_results  # noqa: E402

FILES = ("prepare.py", "runtime.py", "attention.py", "graph_export.py", "train.py", "program.md")
# A smaller model than the CPU defaults, as tests/test_loop.py uses: experiments take seconds.
SMALL = {"DEPTH": 2, "DEVICE_BATCH_SIZE": 4, "TOTAL_BATCH_SIZE": 256, "STARTUP_STEPS": 1}
# Standard-library files that make the tiny corpus (as tests/conftest.py does).
CORPUS = ("argparse.py", "difflib.py", "statistics.py", "calendar.py", "textwrap.py", "fractions.py",
          "heapq.py", "bisect.py", "string.py", "shlex.py", "csv.py", "json/decoder.py")
# The last --resume must finish the remaining experiments within this many seconds.
FINAL_TIMEOUT = 1800
TAG = "faults"
# The kill aims at one of these phases, chosen at random each time (state.json says the phase).
TARGET_PHASES = ("setup", "proposing", "guarding", "training", "evaluating", "judging", "idle")
# Once in the aimed phase, the kill comes after a random delay up to this (s): short phases are
# brief, so most kills land in them; a long one (training) is hit anywhere in its first seconds.
IN_PHASE_JITTER = 2.0
POLL_SECONDS = 0.02
# Folders kept in TMPDIR on purpose, reused by the next run: not leftovers. torch's compiler
# caches, and the sandbox's passwd/group naming its user (harness/sandbox.py _identity_files).
CACHE_PREFIXES = ("torchinductor_", "triton", "autoresearch-sandbox-")


def git(cwd, *args) -> str:
    return subprocess.run(["git", "-c", "user.name=fi", "-c", "user.email=fi@localhost", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def build(root: Path) -> tuple[Path, dict]:
    """The repo copy and the environment the loop runs with (tiny profile, data prepared)."""
    repo = root / "repo"
    repo.mkdir()
    for name in FILES:
        text = (REPO / name).read_text()
        (repo / name).write_text(knobs.set_knobs(text, SMALL) if name == "train.py" else text)
    git(repo, "init", "-q", "-b", "master")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "base")
    corpus = root / "corpus"
    corpus.mkdir()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in CORPUS:
        if (stdlib / name).exists():
            (corpus / (name.replace("/", "_") + ".txt")).write_bytes((stdlib / name).read_bytes())
    (root / "tmp").mkdir()
    env = dict(os.environ, AUTORESEARCH_PROFILE="tiny", AUTORESEARCH_CACHE=str(root / "cache"),
               AUTORESEARCH_THREADS="1", TMPDIR=str(root / "tmp"))
    for secret in ("ANTHROPIC_API_KEY", "BRAINTRUST_API_KEY"):
        env.pop(secret, None)
    subprocess.run([sys.executable, "prepare.py", "--source", str(corpus)], cwd=repo, env=env, check=True,
                   capture_output=True)
    return repo, env


def loop_cmd(args, resume: bool) -> list[str]:
    cmd = [sys.executable, str(REPO / "agent" / "loop.py"), "--tag", TAG, "--budget", f"{args.budget:g}",
           "--max-experiments", str(args.experiments), "--proposer", "offline", "--seed", str(args.seed)]
    if args.workers > 1:
        cmd += ["--workers", str(args.workers)]
    return cmd + (["--resume"] if resume else [])


def members(pgids: set[int]) -> list[tuple[int, int, str]]:
    """(pid, pgid, command) of live processes in any of `pgids`."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            pgid = int(fields[2])
            if pgid in pgids and fields[0] != "Z":
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                out.append((int(entry.name), pgid, cmd[:80]))
        except (OSError, ValueError, IndexError):
            continue
    return out


def phase_of(wt: Path, pid: int, target: str | None = None) -> str:
    """The phase the loop `pid` shows in state.json ("setup" until it wrote its own state); with
    --workers, `target` when any worker is in it, else the first worker's phase."""
    try:
        state = json.loads((wt / "state.json").read_text())
    except (OSError, ValueError):
        return "setup"
    if state.get("pid") != pid:
        return "setup"
    phases = [w.get("phase") for w in state.get("workers") or [] if isinstance(w, dict)]
    if phases:
        return target if target in phases else (phases[0] or "?")
    return state.get("phase", "?")


def one_cycle(args, repo, env, wt, rng, resume, pgids, log) -> str:
    """Start the loop, kill -9 it in a randomly chosen phase (at a random instant of it, or when
    --max-wait runs out first); returns the phase it was killed in."""
    proc = subprocess.Popen(loop_cmd(args, resume), cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    pgids.add(proc.pid)
    target = rng.choice(TARGET_PHASES)
    deadline = time.monotonic() + args.max_wait
    when = time.monotonic() + rng.uniform(0.0, 3.0) if target == "setup" else None
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        for pid_file in wt.glob("child*.pid"):   # child.pid, or one per executor slot (--workers)
            try:
                pgids.add(int(json.loads(pid_file.read_text())["pgid"]))
            except (OSError, ValueError, KeyError):
                pass
        if when is None and phase_of(wt, proc.pid, target) == target:
            when = time.monotonic() + rng.uniform(0.0, IN_PHASE_JITTER)
        if when is not None and time.monotonic() >= when:
            break
    if proc.poll() is not None:
        return f"(exited {proc.returncode} first)"
    phase = phase_of(wt, proc.pid, target)
    proc.send_signal(signal.SIGKILL)   # the loop alone, as `kill -9 <pid>` does
    proc.wait()
    time.sleep(0.2)
    left = members(pgids)
    for pid, pgid, cmd in left:
        print(f"  left running by the kill: pid {pid} (group {pgid}) {cmd}", flush=True)
    return phase


def summarize(repo: Path, wt: Path, root: Path, pgids: set[int]) -> dict:
    table = read_results(wt / "results.tsv")
    records, problems = read_journal(wt / "journal.jsonl")
    ns = [r.get("n") for r in records]
    dup_records = len(ns) - len(set(ns))
    rows = [(r.commit, r.status) for r in table.rows]
    # journal order = decision order (with --workers, not the order of the numbers)
    recs = [(str(r.get("commit"))[:7], r.get("status")) for r in records]
    matched = sum(1 for a, b in zip(rows, recs) if a == b)
    kept = [r["commit"] for r in records if r.get("status") == "keep"]
    tip = git(repo, "rev-parse", f"autoresearch/{TAG}")
    base = git(repo, "rev-parse", "master")
    untracked = [l for l in git(wt, "status", "--porcelain", "--untracked-files=all").splitlines() if l.strip()]
    temps = sorted(p.name for p in (root / "tmp").iterdir() if not p.name.startswith(CACHE_PREFIXES))
    orphans = members(pgids)
    return {"rows": len(table.rows), "records": len(records), "matched": matched,
            "duplicates": dup_records + sum((collections.Counter(rows) - collections.Counter(recs)).values()),
            "results_problems": table.problems, "journal_problems": problems,
            "torn_quarantined": sorted(p.name for p in wt.glob("*.torn-*")),
            "orphans": orphans, "untracked": untracked, "temp_left": temps,
            "tip_is_last_keep": tip == (kept[-1] if kept else base)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--kills", type=int, default=8, help="SIGKILLs of the loop, each followed by --resume")
    p.add_argument("--seed", type=int, default=0, help="seed of the kill instants (and the offline search)")
    p.add_argument("--budget", type=float, default=5.0, help="training seconds per experiment")
    p.add_argument("--experiments", type=int, default=6, help="experiments in all, baseline included")
    p.add_argument("--max-wait", type=float, default=120.0,
                   help="longest wait for the aimed phase before the kill comes anyway, seconds")
    p.add_argument("--workers", type=int, default=1, help="experiments in flight at once (--workers N)")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="fault-inject-"))
    t0 = time.monotonic()
    pgids: set[int] = set()
    try:
        repo, env = build(root)
        wt = repo / ".autoresearch" / TAG
        phases = collections.Counter()
        with open(root / "loop.log", "ab") as log:
            for k in range(args.kills):
                phase = one_cycle(args, repo, env, wt, rng, resume=wt.exists(), pgids=pgids, log=log)
                phases[phase] += 1
                print(f"kill {k + 1}/{args.kills}: {phase}", flush=True)
            final = subprocess.Popen(loop_cmd(args, resume=wt.exists()), cwd=repo, env=env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
            pgids.add(final.pid)
            final.wait(timeout=FINAL_TIMEOUT)
        repairs = [l for l in (root / "loop.log").read_text(errors="replace").splitlines() if "resume:" in l]
        s = summarize(repo, wt, root, pgids)
    finally:
        left = members(pgids)
        for pgid in {g for _, g, _ in left}:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"fault injection: {args.kills} kills (seed {args.seed}), budget {args.budget:g}s, "
          f"{args.experiments} experiments, {time.monotonic() - t0:.0f}s wall")
    print("kills by phase: " + ", ".join(f"{k} {v}" for k, v in sorted(phases.items())))
    print(f"final --resume: exit {final.returncode}; resume notes printed: {len(repairs)}")
    print(f"rows {s['rows']}, journal records {s['records']}, matched one to one {s['matched']}, "
          f"duplicates {s['duplicates']}, orphans {len(s['orphans'])}, leftovers "
          f"{len(s['untracked']) + len(s['temp_left'])} (untracked {len(s['untracked'])}, "
          f"temp {len(s['temp_left'])}), torn lines quarantined {len(s['torn_quarantined'])}")
    print(f"branch tip = last keep: {'yes' if s['tip_is_last_keep'] else 'NO'}")
    for what in ("orphans", "untracked", "temp_left", "results_problems", "journal_problems"):
        for item in s[what][:10]:
            print(f"  {what}: {item}")
    if args.keep:
        print(f"kept: {root}")
    ok = (final.returncode == 0 and s["rows"] == s["records"] == s["matched"] == args.experiments
          and s["duplicates"] == 0 and not s["orphans"] and not s["untracked"] and not s["temp_left"]
          and s["tip_is_last_keep"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
