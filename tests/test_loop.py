"""agent/loop.py end to end: real git, real subprocesses, the offline proposer (and a scripted one).

The real prepare.py/train.py run through the loop in tests/test_first_hour.py (its --smoke run:
tiny profile, 3 optimizer steps, checked with check_run below); these tests use the fast
stand-ins of tests/loop_fixtures.py to exercise the loop's mechanics: keep/discard bookkeeping,
refusals, kill -9 and Ctrl-C followed by --resume, guard rejections, crash fixes and the rebase of
a prefetched proposal.
"""
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from agent.coordinator import undecided
from agent import loop as loop_mod
from agent.proposers.base import Proposal
from search import knobs
from harness.results import RESULTS_HEADER, read_journal, read_results
from tests.loop_fixtures import (branch_commits, fake_env, fake_repo, git, loop_cmd,
                                 pid_alive, run_loop)

EXPERIMENT_KEYS = {"n", "tag", "parent", "commit", "short", "status", "description", "hypothesis",
                   "proposer", "model", "diff", "summary", "trusted_bpb", "crash_class",
                   "decision_reason", "verdicts", "timings", "tokens", "cost_usd", "log",
                   "discarded_ref", "started_at", "ended_at"}


def check_run(repo: Path, tag: str, n_expected: int, user_head: str):
    """The invariants every finished run must satisfy; returns (records, rows)."""
    wt = repo / ".autoresearch" / tag
    lines = (wt / "results.tsv").read_text().splitlines()
    assert lines[0] == RESULTS_HEADER
    assert all(len(l.split("\t")) == 5 for l in lines)
    table = read_results(wt / "results.tsv")
    assert table.problems == [] and len(table.rows) == n_expected
    records, problems = read_journal(wt / "journal.jsonl")
    assert problems == [] and [r["n"] for r in records] == list(range(1, n_expected + 1))
    for rec, row in zip(records, table.rows):
        assert EXPERIMENT_KEYS <= set(rec), EXPERIMENT_KEYS - set(rec)
        assert row.commit == rec["commit"][:7] == rec["short"] and row.status == rec["status"]
        assert row.description == rec["description"]
        if rec["status"] != "crash" and rec["summary"]:
            # the row shows the figure the decision rests on: trusted (mean over reruns) when verified
            shown = rec["trusted_bpb"] if rec.get("trusted_bpb") is not None else rec["summary"]["val_bpb"]
            assert row.val_bpb == pytest.approx(shown, abs=1e-6)
    # the branch holds the baseline (the base commit: the user's, or on top of it the commit that
    # writes the profile's knob values in), the kept commits, then the night end's steps back (each
    # holding the train.py of the commit it stepped back to), nothing else
    base = json.loads((wt / "run.json").read_text())["base_commit"]
    kept = [r["commit"] for r in records if r["status"] == "keep" and r["commit"] not in (user_head, base)]
    steps = read_journal(wt / "journal.jsonl", kind="step_back")[0]
    assert branch_commits(repo, tag) == list(dict.fromkeys([user_head, base])) + kept + [d["commit"] for d in steps]
    for d in steps:
        assert git(repo, "show", f"{d['commit']}:train.py") == git(repo, "show", f"{d['parent']}:train.py")
    refs = dict(l.split(" ") for l in git(repo, "for-each-ref", "--format=%(refname) %(objectname)",
                                          f"refs/autoresearch/{tag}/discarded").splitlines() if l)
    for rec in records:
        if rec["status"] != "keep" and rec["parent"]:
            assert refs[rec["discarded_ref"]] == rec["commit"]
            assert git(repo, "show", "--name-only", "--format=", rec["commit"]) == "train.py"
    # the user's checkout is untouched, uncommitted work included
    assert git(repo, "rev-parse", "HEAD") == user_head
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "master"
    assert "with an uncommitted edit" in (repo / "notes.txt").read_text()
    assert (repo / "scratch.txt").exists()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout
    assert set(status.splitlines()) == {" M notes.txt", "?? scratch.txt"}, "only the user's own changes"
    state = json.loads((wt / "state.json").read_text())
    assert state["phase"] == "stopped" and state["tag"] == tag
    assert undecided(read_journal(wt / "journal.jsonl", kind=None)[0]) == [] and not list(wt.glob("child*.pid"))
    assert not (wt / ".runs" / "slots").exists(), "the single loop's slot folder outlived a clean stop"
    return records, table.rows


def test_loop_keeps_and_discards(tmp_path):
    repo = fake_repo(tmp_path / "repo")
    user_head = git(repo, "rev-parse", "HEAD")
    env = fake_env(tmp_path)
    p = run_loop(repo, env, "--tag", "may29", "--budget", "1", "--max-experiments", "6")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "running prepare.py" in p.stdout, "missing data is prepared first"
    records, rows = check_run(repo, "may29", 6, user_head)
    statuses = [r["status"] for r in records]
    assert statuses[0] == "keep" and "discard" in statuses
    # the offline step search keeps its knob space in the run folder (plain JSON, git-ignored) and
    # opens no Optuna study while it has steps left (a sampler draw is its jump, once they run out)
    wt = repo / ".autoresearch" / "may29"
    space = json.loads((wt / "knob_space.json").read_text())
    moved = {k for r in records[1:] if r.get("config") for k, v in r["config"].items() if records[0]["config"].get(k) != v}
    assert moved and moved <= set(space), (moved, sorted(space))   # every knob it moved is in the space
    assert not (wt / "optuna.sqlite").exists()
    assert "knob_space.json" not in git(wt, "status", "--porcelain", "--ignored=no")
    # the branch tip is the best kept experiment, and its train.py has that experiment's knobs
    best = min((r for r in records if r["status"] == "keep"), key=lambda r: r["summary"]["val_bpb"])
    assert git(repo, "rev-parse", "autoresearch/may29") == best["commit"]
    assert knobs.values(git(repo, "show", "autoresearch/may29:train.py")) == best["config"]
    assert any(r.get("prefetched") for r in records), "proposals were prepared while a run trained"
    note = git(repo, "notes", "--ref", "refs/notes/autoresearch", "show", records[1]["commit"])
    assert f"exp 2: {records[1]['status']}" in note


def test_refusals(tmp_path):
    repo = fake_repo(tmp_path / "repo")
    env = fake_env(tmp_path)
    assert run_loop(repo, env, "--tag", "a", "--budget", "1", "--max-experiments", "1").returncode == 0
    again = run_loop(repo, env, "--tag", "a", "--budget", "1", "--max-experiments", "1")
    assert again.returncode == 2 and "exists" in again.stderr
    other_budget = run_loop(repo, env, "--tag", "a", "--budget", "5", "--resume", "--max-experiments", "2")
    assert other_budget.returncode == 2 and "never mixes budgets" in other_budget.stderr
    (tmp_path / "fakedata" / "ready").write_text("0123456789ab")
    other_data = run_loop(repo, env, "--tag", "a", "--budget", "1", "--resume", "--max-experiments", "2")
    assert other_data.returncode == 2 and "never mixes data" in other_data.stderr
    missing = run_loop(repo, env, "--tag", "nope", "--resume")
    assert missing.returncode == 2 and "no branch" in missing.stderr
    assert len(read_results(repo / ".autoresearch" / "a" / "results.tsv").rows) == 1


def _start_hanging(repo, env, tmp_path, tag):
    hang = tmp_path / "hang"
    hang.write_text("1")
    env = dict(env, FAKE_HANG_FILE=str(hang))
    proc = subprocess.Popen(loop_cmd("--tag", tag, "--budget", "1", "--max-experiments", "3"), cwd=repo,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pids_file = Path(str(hang) + ".pids")
    deadline = time.time() + 60
    while not pids_file.exists() and time.time() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.1)
    assert pids_file.exists(), "experiment 2 never started"
    time.sleep(0.2)
    hang.unlink()   # the re-run after --resume trains normally
    return proc, [int(x) for x in pids_file.read_text().split()]


def test_kill9_then_resume(tmp_path):
    repo = fake_repo(tmp_path / "repo")
    user_head = git(repo, "rev-parse", "HEAD")
    env = fake_env(tmp_path)
    proc, (train_pid, sleep_pid) = _start_hanging(repo, env, tmp_path, "k")
    proc.kill()   # kill -9 of the loop while experiment 2 trains
    proc.wait()
    assert pid_alive(train_pid) and pid_alive(sleep_pid), "the orphaned run survives its loop"
    p = run_loop(repo, env, "--tag", "k", "--budget", "1", "--max-experiments", "3", "--resume")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "killed leftover process group" in p.stdout and "re-running it" in p.stdout
    deadline = time.time() + 5
    while (pid_alive(train_pid) or pid_alive(sleep_pid)) and time.time() < deadline:
        time.sleep(0.05)
    assert not pid_alive(train_pid) and not pid_alive(sleep_pid), "no orphan after --resume"
    records, _ = check_run(repo, "k", 3, user_head)
    assert records[1].get("resumed") is True


def test_ctrl_c_then_resume(tmp_path):
    repo = fake_repo(tmp_path / "repo")
    user_head = git(repo, "rev-parse", "HEAD")
    env = fake_env(tmp_path)
    proc, (train_pid, sleep_pid) = _start_hanging(repo, env, tmp_path, "c")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert not pid_alive(train_pid) and not pid_alive(sleep_pid), "Ctrl-C ends the run's whole group"
    wt = repo / ".autoresearch" / "c"
    assert len(read_results(wt / "results.tsv").rows) == 1
    assert branch_commits(repo, "c") == [user_head], "branch back at the last kept commit"
    assert json.loads((wt / "state.json").read_text())["phase"] == "stopped"
    assert git(repo, "for-each-ref", "refs/autoresearch/c/interrupted")
    p = run_loop(repo, env, "--tag", "c", "--budget", "1", "--max-experiments", "3", "--resume")
    assert p.returncode == 0, p.stdout + p.stderr
    check_run(repo, "c", 3, user_head)


class Scripted:
    """A proposer that plays a script: each step maps a request to a new train.py."""
    name = "scripted"
    cheap_redo = False   # as an LLM: a stale proposal is rebased, not asked again

    def __init__(self, steps):
        self.steps, self.requests = list(steps), []

    def propose(self, req):
        self.requests.append(req)
        desc, edit = self.steps.pop(0)
        return Proposal(description=desc, hypothesis="scripted", source=edit(req.train_source),
                        proposer="scripted", model="script-1", tokens={"input": 10, "output": 5},
                        cost_usd=0.01)


def run_in_process(repo, tmp_path, monkeypatch, proposer, *extra):
    monkeypatch.setenv("FAKE_DATA_DIR", str(tmp_path / "fakedata"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setattr(loop_mod, "make_proposer", lambda *a, **k: proposer)
    args = loop_mod.parse_args(["--tag", "s", "--budget", "1", "--repo", str(repo), "--reviewer", "simple", *extra])
    lp = loop_mod.Loop(args)
    lp.run()
    lp.stop()
    return lp


def test_the_proposer_is_handed_typed_records_and_typed_experiments_in_flight(tmp_path, monkeypatch):
    """The history a proposer sees is the coordinator's ExperimentRecords (never journal dicts),
    and the experiment training meanwhile (the prefetch) is an InFlight entry beside it."""
    from agent.coordinator import InFlight
    from harness.experiment_record import ExperimentRecord
    repo = fake_repo(tmp_path / "repo")
    proposer = Scripted([("deeper", lambda s: knobs.set_knobs(s, {"DEPTH": 5})),
                         ("wider", lambda s: knobs.set_knobs(s, {"WIDTH": 96}))])
    lp = run_in_process(repo, tmp_path, monkeypatch, proposer, "--max-experiments", "3")
    by_n = {req.n: req for req in proposer.requests}
    assert sorted(by_n) == [2, 3]
    for req in proposer.requests:
        assert all(type(r) is ExperimentRecord for r in req.history)
        assert all(type(p) is InFlight and p.status == "pending" for p in req.pending)
        assert [r.n for r in req.history] + [p.n for p in req.pending] == list(range(1, req.n))
    assert any(req.history for req in proposer.requests)
    # the one in flight carries what it tries: the baseline's knobs, then experiment 2's
    for req in proposer.requests:
        for p in req.pending:
            assert p.knob_values is not None and p.proposer == ("baseline" if p.n == 1 else "scripted")
    done = [r for req in proposer.requests for r in req.history]
    assert done[0].is_baseline and done[0].decision_bpb == 1.02
    assert all(type(r) is ExperimentRecord for r in lp.history) and [r.n for r in lp.history] == [1, 2, 3]


def test_guard_rejection_and_crash_fix(tmp_path, monkeypatch):
    repo = fake_repo(tmp_path / "repo")
    user_head = git(repo, "rev-parse", "HEAD")
    proposer = Scripted([
        ("rename build_model", lambda s: s.replace("def build_model", "def make_model")),
        ("deeper, with a bug", lambda s: knobs.set_knobs(s, {"DEPTH": 5}).replace(
            "def main():\n", "def main():\n    raise RuntimeError('bug in the new code')\n")),
        ("deeper, fixed", lambda s: s.replace("    raise RuntimeError('bug in the new code')\n", "")),
    ])
    run_in_process(repo, tmp_path, monkeypatch, proposer, "--max-experiments", "3")
    records, rows = check_run(repo, "s", 3, user_head)
    rejected, fixed = records[1], records[2]
    assert rejected["status"] == "discard" and rejected["decision_reason"].startswith("guard:")
    assert "build_model" in rejected["decision_reason"] and rejected["log"] is None
    assert rejected["verdicts"]["guard"]["ok"] is False
    assert not (repo / ".autoresearch" / "s" / "logs" / "exp-0002.log").exists(), "rejected: no run"
    assert "guard rejected experiment 2" in proposer.requests[1].feedback
    # the crash was shown to the proposer, which fixed it; the crashed commit stays reachable
    fix_req = proposer.requests[2]
    assert fix_req.fix_of is not None and "RuntimeError: bug in the new code" in fix_req.feedback
    assert fixed["status"] == "keep" and fixed["attempts"][0]["crash_class"] == "exception"
    assert git(repo, "rev-parse", fixed["attempts"][0]["ref"]) == fixed["attempts"][0]["commit"]
    assert fixed["tokens"] == {"input": 10, "output": 5} and fixed["model"] == "script-1"
    assert "Model: script-1" in git(repo, "log", "-1", "--format=%B", fixed["commit"])


def test_crash_without_fix_is_recorded(tmp_path, monkeypatch):
    repo = fake_repo(tmp_path / "repo")
    user_head = git(repo, "rev-parse", "HEAD")
    bug = lambda s: knobs.set_knobs(s, {"DEPTH": 5}).replace("def main():\n", "def main():\n    1/0\n")
    proposer = Scripted([("divide by zero", bug), ("still broken", bug)])
    run_in_process(repo, tmp_path, monkeypatch, proposer, "--max-experiments", "2", "--fix-tries", "1")
    records, rows = check_run(repo, "s", 2, user_head)
    assert records[1]["status"] == "crash" and records[1]["crash_class"] == "exception"
    assert rows[1].val_bpb == 0.0 and rows[1].memory_gb == 0.0
    # one fix was allowed: it ran, crashed again, and the experiment was recorded as a crash
    assert len(proposer.requests) == 2 and len(records[1]["attempts"]) == 1
    assert records[1]["log"] == "logs/exp-0002.fix1.log"
    assert git(repo, "rev-parse", records[1]["attempts"][0]["ref"]) == records[1]["attempts"][0]["commit"]


def test_prefetched_proposal_is_rebased_when_its_parent_is_discarded(tmp_path, monkeypatch):
    repo = fake_repo(tmp_path / "repo")
    user_head = git(repo, "rev-parse", "HEAD")
    proposer = Scripted([
        ("wider (worse)", lambda s: knobs.set_knobs(s, {"WIDTH": 128})),
        ("deeper", lambda s: knobs.set_knobs(s, {"DEPTH": 5})),
    ])
    run_in_process(repo, tmp_path, monkeypatch, proposer, "--max-experiments", "3")
    records, _ = check_run(repo, "s", 3, user_head)
    assert records[1]["status"] == "discard"
    assert knobs.values(proposer.requests[1].train_source)["WIDTH"] == 128, "made on the running commit"
    third = records[2]
    assert third["rebased_from"] == records[1]["commit"] and third["parent"] == user_head
    assert third["config"]["DEPTH"] == 5 and third["config"]["WIDTH"] == 64
    assert third["status"] == "keep"


def test_claude_proposer_through_the_loop_with_an_outage(tmp_path):
    """The real anthropic client against the local Messages API server: experiment 2 is Claude's
    edit; then the API stays down past --api-patience and experiment 3 falls back to offline.
    Its proposal quotes the loop's own API key: no file, commit message or note the loop writes
    carries it."""
    from tests.fake_anthropic import FakeAnthropic
    repo = fake_repo(tmp_path / "repo")
    user_head = git(repo, "rev-parse", "HEAD")
    with FakeAnthropic() as fake:
        fake.push(FakeAnthropic.tool_use("str_replace", {"path": "train.py", "old_str": "DEPTH = 4  #",
                                                          "new_str": "DEPTH = 5  #"}),
                  FakeAnthropic.tool_use("submit", {"description": "one more layer sk-ant-test-not-a-real-key-000",
                                                    "hypothesis": "the stand-in is under-deep; "
                                                                  "sk-ant-test-not-a-real-key-000"}))
        fake.default = FakeAnthropic.error(529, "overloaded")
        env = fake_env(tmp_path, ANTHROPIC_API_KEY="sk-ant-test-not-a-real-key-000",
                       ANTHROPIC_BASE_URL=fake.base_url)
        p = run_loop(repo, env, "--tag", "c", "--budget", "1", "--max-experiments", "3",
                     "--api-patience", "1", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "proposer claude" in p.stdout
    records, _ = check_run(repo, "c", 3, user_head)
    claude, fallback = records[1], records[2]
    assert claude["proposer"] == "claude" and claude["description"] == "one more layer [redacted]"
    assert claude["model"] and claude["tokens"]["input"] > 0 and claude["status"] == "keep"
    assert "+DEPTH = 5  #" in claude["diff"]
    assert fallback["fallback"] == "offline" and fallback["proposer"] == "offline"
    assert "unavailable" in fallback["proposal_error"]
    wt = repo / ".autoresearch" / "c"
    for name in ("journal.jsonl", "traces.jsonl", "results.tsv", "state.json"):
        assert "sk-ant-test-not-a-real-key-000" not in (wt / name).read_text()
    messages = git(repo, "log", "--all", "--format=%B")
    notes = git(repo, "log", "--all", "--notes=*", "--format=%N")
    assert "one more layer [redacted]" in messages and "Hypothesis: the stand-in is under-deep; [redacted]" in messages
    assert "sk-ant-test-not-a-real-key-000" not in messages + notes and "exp 2" in notes
