"""The end of a run: best val_bpb and commit, counts, wall time, cost, where the
results are and the dashboard command, printed when the loop stops (--max-experiments, Ctrl-C)."""
import json
import signal

from agent import summary
import subprocess
import time
from pathlib import Path

from tests.loop_fixtures import fake_env, fake_repo, git, loop_cmd, run_loop


def rec(n, status, bpb=None, trusted=None, cost=0.0, tokens=(0, 0), desc="x"):
    return {"kind": "experiment", "n": n, "status": status, "commit": f"{n:07d}" + "a" * 33, "description": desc,
            "summary": {"val_bpb": bpb} if bpb is not None else None, "trusted_bpb": trusted, "cost_usd": cost,
            "tokens": {"input": tokens[0], "output": tokens[1]}}


def test_summary_from_the_journal(tmp_path):
    records = [rec(1, "keep", 2.70, 2.69, desc="baseline"), rec(2, "discard", 2.60, 2.72, cost=0.02, tokens=(1000, 200)),
               rec(3, "crash", cost=0.01, tokens=(500, 50)),
               rec(4, "keep", 2.691109, 2.685143, cost=0.03, tokens=(2000, 300), desc="deeper model"),
               {"kind": "audit", "n": 4, "note": "not an experiment"}]
    (tmp_path / "journal.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\nnot json\n")
    s = summary.build(tmp_path, "may29", "reached --max-experiments 4", session_seconds=3725)
    text = summary.render(s)
    assert "stopped, reached --max-experiments 4" in text
    # the best is the trusted figure (the one results.tsv records), with its commit
    assert "best val_bpb  2.685143 at 0000004 (exp 4: deeper model)" in text
    assert "2.691109" not in text and "-0.004857 vs the first kept 2.690000" in text
    assert "4: 2 kept, 1 discarded, 1 crashed" in text
    assert "1h02m this session" in text
    assert "3,500 in / 550 out, $0.0600" in text
    assert f"results       {tmp_path / 'results.tsv'}" in text
    assert f"uv run dashboard/app.py --runs {tmp_path.parent} --tag may29" in text


def test_summary_of_a_run_with_nothing_kept(tmp_path):
    text = summary.render(summary.build(tmp_path, "empty", "interrupted", 5))
    assert "no experiment was kept" in text and "0: 0 kept, 0 discarded, 0 crashed" in text


def test_the_loop_ends_with_the_summary(tmp_path):
    repo = fake_repo(tmp_path / "repo")
    p = run_loop(repo, fake_env(tmp_path), "--tag", "end", "--budget", "1", "--max-experiments", "3")
    assert p.returncode == 0, p.stdout + p.stderr
    wt = repo / ".autoresearch" / "end"
    records = [r for r in map(json.loads, (wt / "journal.jsonl").read_text().splitlines())
               if r.get("kind", "experiment") == "experiment"]
    kept = [r for r in records if r["status"] == "keep"]
    best = min(kept, key=lambda r: r["summary"]["val_bpb"])
    tail = p.stdout[p.stdout.index("== autoresearch end: stopped, reached --max-experiments 3"):]
    assert f"best val_bpb  {best['summary']['val_bpb']:.6f} at {best['short']}" in tail
    assert f"3: {len(kept)} kept, {3 - len(kept)} discarded, 0 crashed" in tail
    assert f"results       {wt / 'results.tsv'}" in tail
    assert f"dashboard     uv run dashboard/app.py --runs {wt.parent} --tag end" in tail
    assert git(repo, "rev-parse", "autoresearch/end") == best["commit"]


def test_ctrl_c_ends_with_the_summary_and_how_to_continue(tmp_path):
    repo = fake_repo(tmp_path / "repo")
    hang = tmp_path / "hang"
    hang.write_text("1")
    # --sandbox none: the stand-in train.py must see the hang file under /tmp (a sandbox hides /tmp)
    proc = subprocess.Popen(loop_cmd("--tag", "cc", "--budget", "1", "--max-experiments", "3", "--sandbox", "none"),
                            cwd=repo, env=dict(fake_env(tmp_path), FAKE_HANG_FILE=str(hang)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pids = Path(str(hang) + ".pids")
    deadline = time.time() + 60
    while not pids.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert pids.exists(), "experiment 2 never started"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "== autoresearch cc: stopped, interrupted" in out and "--resume continues it" in out
    assert "1: 1 kept, 0 discarded, 0 crashed" in out and "dashboard     uv run dashboard/app.py" in out


def test_interrupted_reason_names_an_unrecorded_measurement():
    interim = (1, "baseline run 1/2: 2.916044; rerunning to measure the noise")
    text = summary.interrupted_reason(interim, [])
    assert "exp 1 had finished a run that is not recorded: baseline run 1/2: 2.916044" in text
    assert "not recorded" not in summary.interrupted_reason(interim, [1]), "recorded since: nothing lost"
    assert summary.interrupted_reason(None, []).endswith("--resume continues it")
