"""Ctrl-C during the second baseline run keeps the first, finished measurement, and a resumed tag
then goes on from it instead of measuring the baseline again: its cut repeats continue (a journal
record of their own, on fresh seeds, judged with the finished run), then the experiments."""
import json
import signal
import subprocess
import time

import pytest

from search import knobs
from harness.results import read_results
from tests.loop_fixtures import copy_real, git, loop_cmd, make_repo, run_loop


def test_ctrl_c_in_the_baseline_repeat_keeps_the_first_run(tiny_cache, tmp_path):
    files = copy_real()
    files["train.py"] = knobs.set_knobs(files["train.py"], {"DEPTH": 2, "DEVICE_BATCH_SIZE": 4,
                                                            "TOTAL_BATCH_SIZE": 256, "STARTUP_STEPS": 1})
    # the repeat (seed 1000) hangs after its first step line, so the interrupt lands mid-run
    files["train.py"] = files["train.py"].replace(
        '        if local_steps == 1:  # Python', '        if local_steps == 1 and seed == 1000:\n'
        '            time.sleep(300)\n        if local_steps == 1:  # Python', 1)
    assert "seed == 1000" in files["train.py"]
    repo = make_repo(tmp_path / "repo", files)
    env = dict(tiny_cache, AUTORESEARCH_STEPS="2")
    env.pop("ANTHROPIC_API_KEY", None)
    args = ("--tag", "b", "--budget", "2", "--reviewer", "hierarchy", "--baseline-repeats", "2")
    proc = subprocess.Popen(loop_cmd(*args, "--max-experiments", "1"), cwd=repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wt = repo / ".autoresearch" / "b"
    rerun_log = wt / "logs" / "exp-0001.rerun1.log"
    deadline = time.time() + 400
    rerun_seen = None
    while time.time() < deadline and not (rerun_log.exists() and "step 00001" in rerun_log.read_text()):
        assert proc.poll() is None, proc.stdout.read()
        if rerun_seen is None and rerun_log.exists():
            rerun_seen = time.time()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    rows = read_results(wt / "results.tsv").rows
    assert [r.status for r in rows] == ["keep"], out
    rec = [r for r in map(json.loads, (wt / "journal.jsonl").read_text().splitlines())
           if r.get("kind", "experiment") == "experiment"][0]   # after the baseline's pending line
    assert rec["proposer"] == "baseline" and rec["trusted_bpb"] == pytest.approx(rows[0].val_bpb, abs=1e-6)
    assert "interrupted during repeat run 2" in rec["decision_reason"]
    assert rec["verdicts"]["judge"]["baseline_values"] == [rec["trusted_bpb"]]
    # the kept baseline's model survives the interrupted repeat (a rerun stages, then swaps in)
    model = wt / "artifacts" / "exp-0001" / "model.pt"
    assert model.is_file() and model.stat().st_size > 0
    assert model.stat().st_mtime < (rerun_seen or time.time()), "the first run's model, not the cut one's"
    # --resume goes on from it: the baseline is not measured again (nothing left to run at --max 1)
    p = run_loop(repo, env, *args, "--max-experiments", "1", "--resume", timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    records = [json.loads(line) for line in (wt / "journal.jsonl").read_text().splitlines()]
    records = [r for r in records if r.get("kind", "experiment") == "experiment"]
    assert [r["proposer"] for r in records] == ["baseline"]
    assert not list((wt / "logs").glob("exp-0002*")) and len(read_results(wt / "results.tsv").rows) == 1
    assert model.is_file() and not (wt / "artifacts" / ".staging").exists(), "the cut run's staging is gone"
    # the branch is the tag's base: the user's commit plus the one writing the tiny profile's knobs
    assert git(repo, "rev-parse", "autoresearch/b^") == git(repo, "rev-parse", "master")
    assert git(repo, "log", "-1", "--format=%s", "autoresearch/b") == "baseline: the tiny profile's knob values"
    assert json.loads((wt / "run.json").read_text())["base_commit"] == git(repo, "rev-parse", "autoresearch/b")
    # --resume with room: the cut repeats continue as experiment 2, a baseline judged with run 1's figure
    p = run_loop(repo, env, *args, "--max-experiments", "2", "--resume", timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "resume: the baseline (experiment 1) was interrupted with 1 of its 2 runs counted" in p.stdout, p.stdout
    records = [json.loads(line) for line in (wt / "journal.jsonl").read_text().splitlines()]
    records = [r for r in records if r.get("kind", "experiment") == "experiment"]
    assert [(r["n"], r["proposer"], r["status"]) for r in records] == [(1, "baseline", "keep"), (2, "baseline", "keep")]
    judge = records[1]["verdicts"]["judge"]
    assert judge["continues"] == 1 and "interrupted" not in judge, judge
    first = records[0]["trusted_bpb"]
    assert len(judge["baseline_values"]) == 2 and first in judge["baseline_values"], judge
    assert records[1]["trusted_bpb"] == pytest.approx(sum(judge["baseline_values"]) / 2, abs=1e-6)
    seeds = [r.get("seed") for r in records[1]["evidence"]["candidate"]["runs"]]
    assert seeds[0] is None and seeds[1] is not None and seeds[1] != 1000, seeds   # a fresh seed, not the cut one's
    assert len(read_results(wt / "results.tsv").rows) == 1, "no commit on two rows: the continuation is the journal's"
    assert list((wt / "logs").glob("exp-0002*")), "its run has a log of its own"
    from agent import report
    s = report.report(wt)["summary"]
    assert s["baseline_bpb"] == pytest.approx(records[1]["trusted_bpb"]), "the report measures from all its runs"
    # a third resume has nothing to continue: the baseline's repeats are done
    p = run_loop(repo, env, *args, "--max-experiments", "2", "--resume", timeout=400)
    assert p.returncode == 0 and "was interrupted with" not in p.stdout, p.stdout
