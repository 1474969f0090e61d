"""--workers N: experiments in flight side by side, one coordinator, a linear history of keeps.

Stand-in train.py files (tests/loop_fixtures.py) keep these fast; the Claude proposer (the real
anthropic client against tests/fake_anthropic.py) scripts edits that race each other.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.fake_anthropic import FakeAnthropic as F
from tests.loop_fixtures import FAKE_TRAIN, fake_env, fake_repo, git, loop_cmd, run_loop
from agent.coordinator import undecided
from harness.results import read_journal

# The stand-in with one more knob that helps (BOOST) and runs that take longer for some edits,
# so the order in which two workers finish is fixed by the edits, not by chance.
RACE_TRAIN = FAKE_TRAIN.replace(
    "USE_BIAS = False  # biases in linear layers\n",
    "USE_BIAS = False  # biases in linear layers\nBOOST = 0  # a free gain\n").replace(
    '    time.sleep(float(os.environ.get("FAKE_SLEEP", "0.2")))\n',
    '    slow = (BOOST and DEPTH == 4) or DEPTH == 5\n'
    '    time.sleep(2.5 if slow else float(os.environ.get("FAKE_SLEEP", "0.2")))\n').replace(
    "    bpb += 0.03 * USE_BIAS\n", "    bpb += 0.03 * USE_BIAS - 0.01 * BOOST\n")


def journal(repo: Path, tag: str) -> list[dict]:
    lines = (repo / ".autoresearch" / tag / "journal.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("kind", "experiment") == "experiment"]


def rows(repo: Path, tag: str) -> list[list[str]]:
    return [l.split("\t") for l in (repo / ".autoresearch" / tag / "results.tsv").read_text().splitlines()[1:]]


def no_process_left(repo: Path) -> list[str]:
    """Processes whose working folder is inside the test repo (a leftover run)."""
    left = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd.startswith(str(repo)):
            left.append(pid)
    return left


def prepared(tmp_path, **env_extra):
    repo = fake_repo(tmp_path / "repo")
    env = fake_env(tmp_path, **env_extra)
    subprocess.run([sys.executable, "prepare.py"], cwd=repo, env=env, check=True, capture_output=True)
    return repo, env


def test_two_workers_share_one_history(tmp_path):
    repo, env = prepared(tmp_path, FAKE_SLEEP="1.0")
    p = run_loop(repo, env, "--tag", "w", "--budget", "2", "--max-experiments", "7", "--workers", "2",
                 timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = journal(repo, "w")
    assert sorted(r["n"] for r in recs) == list(range(1, 8)), "every number once, none lost"
    assert len(rows(repo, "w")) == 7 and [r["commit"][:7] for r in recs] == [row[0] for row in rows(repo, "w")]
    assert {r.get("worker") for r in recs[1:]} == {1, 2}, "both workers carried experiments"
    # each experiment's parent was the tip when it started; keeps form one line from the base
    keeps = [r for r in recs if r["status"] == "keep"]
    log = git(repo, "rev-list", "--first-parent", "autoresearch/w").split()
    assert log[0] == keeps[-1]["commit"] and all(k["commit"] in log for k in keeps)
    overlap = [(a["n"], b["n"]) for a in recs[1:] for b in recs[1:]
               if a["n"] < b["n"] and a["started_at"] < b["ended_at"] and b["started_at"] < a["ended_at"]]
    assert overlap, "experiments ran side by side"
    state = json.loads((repo / ".autoresearch" / "w" / "state.json").read_text())
    assert [w["worker"] for w in state["workers"]] == [1, 2]
    assert not list((repo / ".autoresearch" / "w").glob("pending*.json"))
    assert not no_process_left(repo)


def _race(tmp_path, second_old: str, second_new: str, tag: str):
    repo = fake_repo(tmp_path / "repo")
    (repo / "train.py").write_text(RACE_TRAIN)
    git(repo, "commit", "-qam", "race stand-in")
    with F() as fake:
        fake.push(F.tool_use("str_replace", {"path": "train.py", "old_str": "DEPTH = 4  #", "new_str": "DEPTH = 6  #"}),
                  F.tool_use("submit", {"description": "deeper", "hypothesis": "under-deep"}),
                  F.tool_use("str_replace", {"path": "train.py", "old_str": second_old, "new_str": second_new}),
                  F.tool_use("submit", {"description": "second idea", "hypothesis": "also helps"}))
        fake.default = F.error(529, "overloaded")   # a third call would be a bug: offline answers it
        env = fake_env(tmp_path, ANTHROPIC_API_KEY="sk-ant-test-not-a-real-key-000",
                       ANTHROPIC_BASE_URL=fake.base_url)
        subprocess.run([sys.executable, "prepare.py"], cwd=repo, env=env, check=True, capture_output=True)
        p = run_loop(repo, env, "--tag", tag, "--budget", "3", "--max-experiments", "3", "--workers", "2",
                     "--api-patience", "1", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return repo, {r["description"]: r for r in journal(repo, tag)}


def test_a_keep_after_the_branch_moved_is_rebased_and_confirmed(tmp_path):
    repo, recs = _race(tmp_path, "BOOST = 0  #", "BOOST = 1  #", "rb")
    deeper, second = recs["deeper"], recs["second idea"]
    assert deeper["status"] == "keep" and second["status"] == "keep", second["decision_reason"]
    assert second["rebased_from"] != second["parent"] == deeper["commit"]
    first_try = second["rebases"][0]
    assert first_try["parent"] == second["rebased_from"] and first_try["commit"] != second["commit"]
    # the confirming run measured the stacked edits (0.01 + 0.02 better than the baseline)
    assert abs(second["summary"]["val_bpb"] - 0.99) < 1e-6
    assert git(repo, "rev-parse", "autoresearch/rb") == second["commit"]
    assert git(repo, "rev-parse", f"{second['commit']}^") == deeper["commit"], "a linear history"
    assert git(repo, "rev-parse", f"refs/autoresearch/rb/attempts/{second['n']}/r1") == first_try["commit"]
    assert "+BOOST = 1" in second["diff"] and "+DEPTH" not in second["diff"] and "-DEPTH" not in second["diff"]


def test_a_conflicting_late_keep_is_discarded_with_the_reason(tmp_path):
    repo, recs = _race(tmp_path, "DEPTH = 4  #", "DEPTH = 5  #", "cf")
    deeper, second = recs["deeper"], recs["second idea"]
    assert deeper["status"] == "keep"
    assert second["status"] == "discard" and second["decision_reason"].startswith("conflict"), second
    assert git(repo, "rev-parse", "autoresearch/cf") == deeper["commit"]
    assert git(repo, "rev-parse", f"refs/autoresearch/cf/discarded/{second['n']}") == second["commit"]


# Experiments (not the baseline, exp-0001) sleep FAKE_SLEEP seconds.
SLOW_TRAIN = FAKE_TRAIN.replace(
    '    time.sleep(float(os.environ.get("FAKE_SLEEP", "0.2")))\n',
    '    first = "exp-0001" in os.environ.get("AUTORESEARCH_ARTIFACT", "")\n'
    '    time.sleep(0.2 if first else float(os.environ.get("FAKE_SLEEP", "0.2")))\n')


def test_ctrl_c_ends_every_worker_and_resume_finishes_their_experiments(tmp_path):
    repo, env = prepared(tmp_path)
    (repo / "train.py").write_text(SLOW_TRAIN)
    git(repo, "commit", "-qam", "slow stand-in")
    proc = subprocess.Popen(loop_cmd("--tag", "cc", "--budget", "60", "--max-experiments", "3",
                                     "--workers", "2"), cwd=repo, env=dict(env, FAKE_SLEEP="60"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wt = repo / ".autoresearch" / "cc"
    deadline = time.time() + 120
    # wait until both workers train (baseline done, two pending files, two child pid files)
    while time.time() < deadline and len(list(wt.glob("child-*.pid"))) < 2:
        time.sleep(0.2)
    assert len(list(wt.glob("child-*.pid"))) == 2, proc.communicate(timeout=60)[0]
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    carried = undecided(read_journal(wt / "journal.jsonl", kind=None)[0])
    assert sorted(p.worker for p in carried) == [1, 2] and not list(wt.glob("child*.pid"))
    assert not no_process_left(repo)
    assert [r["n"] for r in journal(repo, "cc")] == [1]
    p = run_loop(repo, dict(env, FAKE_SLEEP="0.3"), "--tag", "cc", "--resume", "--budget", "60",
                 "--max-experiments", "3", "--workers", "2", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "was in flight" in p.stdout
    recs = journal(repo, "cc")
    assert sorted(r["n"] for r in recs) == [1, 2, 3] and all(r.get("resumed") for r in recs[1:])
    assert len(rows(repo, "cc")) == 3 and not list(wt.glob("pending*.json"))


def test_kill_9_mid_run_then_resume_loses_and_duplicates_nothing(tmp_path):
    repo, env = prepared(tmp_path)
    (repo / "train.py").write_text(SLOW_TRAIN)
    git(repo, "commit", "-qam", "slow stand-in")
    proc = subprocess.Popen(loop_cmd("--tag", "k9", "--budget", "60", "--max-experiments", "4",
                                     "--workers", "2"), cwd=repo, env=dict(env, FAKE_SLEEP="60"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wt = repo / ".autoresearch" / "k9"
    deadline = time.time() + 120
    while time.time() < deadline and len(list(wt.glob("child-*.pid"))) < 2:
        time.sleep(0.2)
    pids = [json.loads(p.read_text())["pgid"] for p in wt.glob("child-*.pid")]
    assert len(pids) == 2
    proc.kill()   # kill -9: no clean-up at all; both runs are orphaned
    proc.wait()
    assert all(_alive(pid) for pid in pids), "the orphaned runs outlive the loop (their own sessions)"
    p = run_loop(repo, dict(env, FAKE_SLEEP="0.3"), "--tag", "k9", "--resume", "--budget", "60",
                 "--max-experiments", "4", "--workers", "2", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "killed leftover process group" in p.stdout
    assert not any(_alive(pid) for pid in pids) and not no_process_left(repo)
    recs = journal(repo, "k9")
    assert sorted(r["n"] for r in recs) == [1, 2, 3, 4], "nothing lost, nothing twice"
    assert sum(1 for r in recs if r.get("resumed")) == 2
    assert [r["commit"][:7] for r in recs] == [row[0] for row in rows(repo, "k9")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie is not a leftover run
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


def test_real_tiny_runs_on_two_ray_workers_sealed_and_judged(tiny_cache, tmp_path):
    """The real train.py (tiny profile) on a local Ray runtime, the judge hierarchy, the sandbox
    when bubblewrap is here: every guarantee of a single run, per worker; no process left."""
    from search import knobs
    from tests.loop_fixtures import copy_real, make_repo
    files = copy_real()
    files["train.py"] = knobs.set_knobs(files["train.py"], {"DEPTH": 2, "DEVICE_BATCH_SIZE": 4,
                                                            "TOTAL_BATCH_SIZE": 256, "STARTUP_STEPS": 1})
    repo = make_repo(tmp_path / "repo", files)
    env = dict(tiny_cache, AUTORESEARCH_STEPS="2")
    env.pop("ANTHROPIC_API_KEY", None)
    # the loop's own Ray runtime lives under this folder (short: Ray's socket paths are limited);
    # another test's Ray runtime may be up meanwhile and is not counted
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    env["RAY_TMPDIR"] = ray_tmp
    p = run_loop(repo, env, "--tag", "rt", "--budget", "2", "--max-experiments", "3", "--reviewer", "hierarchy",
                 "--baseline-repeats", "1", "--workers", "2", "--executor", "ray", timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "workers on Ray (local runtime" in p.stdout
    recs = journal(repo, "rt")
    assert sorted(r["n"] for r in recs) == [1, 2, 3]
    assert [r["commit"][:7] for r in recs] == [row[0] for row in rows(repo, "rt")]
    assert {r.get("worker") for r in recs[1:]} == {1, 2}
    ran = [r for r in recs if r["status"] != "crash" and not r["decision_reason"].startswith("guard")]
    assert len(ran) >= 1 and ran[0]["proposer"] == "baseline", [r["decision_reason"] for r in recs]
    assert recs[0].get("worker") is None and all(r.get("worker") in (1, 2) for r in recs[1:])
    for rec in ran:
        assert rec["verdicts"]["verify"]["ok"] and rec["trusted_bpb"] is not None, rec["decision_reason"]
        assert rec["sealed"] is True and rec["summary"]["num_steps"] == 2
        assert (repo / ".autoresearch" / "rt" / rec["log"]).exists(), "the node's log came back"
    assert not no_process_left(repo)
    assert not ray_processes_left(ray_tmp), "the loop's Ray runtime ended with it"
    shutil.rmtree(ray_tmp, ignore_errors=True)


def ray_processes_left(marker: str) -> list[str]:
    """Ray's processes (raylet, gcs_server, workers) of the runtime whose temp folder is `marker`."""
    left = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd and _alive(int(pid)):
                left.append(f"{pid} {cmd[:80]}")
    return left
