"""agent/report.py on a real tiny run folder: kept changes, discards, crashes, cost, ablation, branches."""
import json

from agent import report as report_mod
from agent import seeds
from search import knobs
from tests.loop_fixtures import fake_repo, git
from tests.test_loop import Scripted, run_in_process

BETTER = ("bpb = 1.0 + 0.01", "bpb = 0.995 + 0.01")
BEST = ("bpb = 0.995 + 0.01", "bpb = 0.99 + 0.01")


def make_run(tmp_path, monkeypatch):
    repo = fake_repo(tmp_path / "repo")
    bug = lambda s: s.replace("def main():\n", "def main():\n    1/0\n")
    proposer = Scripted([
        ("deeper: depth 6", lambda s: knobs.set_knobs(s, {"DEPTH": 6})),                  # 2 keep
        ("bias on", lambda s: knobs.set_knobs(s, {"USE_BIAS": True})),                    # 3 discard
        ("lr 0.08", lambda s: knobs.set_knobs(s, {"LR": 0.08})),                          # 4 discard
        ("better trick", lambda s: s.replace(*BETTER)),                                   # 5 keep
        ("divide by zero", bug),                                                          # 6 crash
        ("lr 0.02", lambda s: knobs.set_knobs(s, {"LR": 0.02})),                          # 7 discard
        ("best trick", lambda s: s.replace(*BEST)),                                       # 8 keep, builds on 5
    ])
    run_in_process(repo, tmp_path, monkeypatch, proposer, "--max-experiments", "8", "--fix-tries", "0")
    return repo, repo / ".autoresearch" / "s"


def test_report_with_ablation_and_branches(tmp_path, monkeypatch):
    repo, run = make_run(tmp_path, monkeypatch)
    got = report_mod.report(run, ablate_runs=True, branches=True)
    s = got["summary"]
    assert [c["description"] for c in s["changes"]] == ["deeper: depth 6", "better trick", "best trick"]
    first = s["changes"][0]
    assert abs(first["gain"] - 0.02) < 1e-6 and abs(first["before"] - 1.02) < 1e-6
    assert "+DEPTH = 6" in first["diff"] and first["hypothesis"] == "scripted"
    lr = next(d for d in s["discards"] if d["idea"] == "knobs: LR")
    assert lr["count"] == 2 and lr["experiments"] == [4, 7] and abs(lr["best"] - 1.045) < 1e-6 and lr["best_n"] == 7
    assert s["crashes"] == {"exception": 1}
    assert s["tokens"] == {"input": 70, "output": 35} and abs(s["cost_usd"] - 0.07) < 1e-9
    assert s["gpu_seconds"] > 0
    # leave-one-out on the final best (0.99 at depth 6): each change's worth is what removing it costs
    abl = got["ablations"]
    assert abs(abl["final"]["bpb"] - 0.99) < 1e-6
    worth = {c["description"]: abl[c["commit"]]["bpb"] - abl["final"]["bpb"] for c in s["changes"]
             if abl[c["commit"]]["ok"]}
    assert abs(worth["deeper: depth 6"] - 0.02) < 1e-6 and abs(worth["best trick"] - 0.005) < 1e-6
    assert abl[s["changes"][1]["commit"]]["ok"] is False, "reverting 'better trick' under 'best trick' conflicts"
    # branches: a change applies alone on the base, or the report says it does not
    by_k = {b["k"]: b for b in got["branches"]}
    assert by_k[1]["branch"] == "autoresearch/s-change-1" and by_k[2]["branch"] == "autoresearch/s-change-2"
    assert by_k[3]["branch"] is None and "does not apply alone" in by_k[3]["note"]
    base = json.loads((run / "run.json").read_text())["base_commit"]
    assert git(repo, "rev-parse", "autoresearch/s-change-2~1") == base
    assert "bpb = 0.995" in git(repo, "show", "autoresearch/s-change-2:train.py")
    assert "DEPTH = 4" in git(repo, "show", "autoresearch/s-change-2:train.py"), "change 2 alone, not change 1"
    assert git(repo, "worktree", "list").count("\n") == 1, "scratch worktrees are removed"
    md = (run / "report" / "report.md").read_text()
    assert "### 1. experiment 2: deeper: depth 6" in md and "worth +0.020000" in md
    assert "| knobs: LR | 2 | 1.045000 |" in md and "- exception: 1" in md
    page = (run / "report" / "report.html").read_text()
    assert "<svg" in page and "<script" not in page and "http://" not in page.replace("http://www.w3.org", "")
    assert (run / "report" / "progress.svg").exists()
    # a second report is free: the ablations come from the cache, nothing is trained again
    logs = sorted(p.name for p in (run / "logs").iterdir())
    again = report_mod.report(run, ablate_runs=True, measure=lambda *a: (_ for _ in ()).throw(AssertionError("ran")))
    assert again["ablations"] == abl and sorted(p.name for p in (run / "logs").iterdir()) == logs
    assert "worth +0.020000" in (run / "report" / "report.md").read_text()
    assert git(run, "status", "--porcelain") == "", "the report folder is a run file"


def test_an_empty_run_folder_is_an_error_not_an_exit(tmp_path):
    import pytest
    with pytest.raises(report_mod.ReportError, match="no experiments"):
        report_mod.report(tmp_path)
    assert report_mod.main(["--run", str(tmp_path)]) == 1


def test_the_report_shows_each_keeps_evidence_and_the_hand_overs():
    from agent.report import markdown, summarize
    from harness.experiment_record import ExperimentRecord
    base = {"n": 1, "commit": "b" * 40, "status": "keep", "proposer": "baseline", "trusted_bpb": 1.0,
            "verdicts": {"judge": {"basis": "baseline"}}}
    kept = {"n": 2, "commit": "c" * 40, "parent": "b" * 40, "status": "keep", "proposer": "offline",
            "trusted_bpb": 0.98, "description": "d", "decision_reason": "r", "handover": "cost cap: $1 spent",
            "evidence": {"p_keep": 0.99, "candidate": {"runs": [{"bpb": 0.979, "seed": 1016, "used": True},
                                                                 {"bpb": 0.981, "seed": 1017, "used": True},
                                                                 {"bpb": 1.2, "seed": 1018, "used": False, "why": "slow"}]},
                         "incumbent": {"commit": "b" * 40, "runs": [{"bpb": 1.0}] * 5},
                         "comparison": {"incumbent_mean": 1.0, "gain": 0.02, "margin": 0.01, "p_better": 0.9991,
                                        "sigma": 0.004, "df": 6}}}
    s = summarize({"records": [ExperimentRecord.from_dict(base), ExperimentRecord.from_dict(kept)], "tag": "t",
                   "base": "b" * 40})
    md = markdown(s, None, None, None)
    assert ("- evidence: 2 run(s) of its own [0.979000, 0.981000] (1 disturbed, left out); against the incumbent "
            "bbbbbbb's 5 run(s) (mean 1.000000); sigma 0.004000 (6 df); gain +0.020000 vs margin 0.010000; "
            "P(better) 0.9991 (keep at >= 0.99)") in md
    assert "- training runs: 4 for 2 decisions (1 for the baseline, 2 confirming or replacing a disturbed run)" in md
    assert "- hand-over: cost cap reached at exp 2" in md


def test_a_sealed_ablation_is_the_judge_s_measure_of_a_run_through_run_commit(tmp_path, monkeypatch):
    """measure_sealed hands JudgeHierarchy.measure a `train` that runs the commit through
    agent/experiment.run_commit on a slot of its own (the scratch worktree, the run folder); a
    crashed run is a failed measurement. Nothing trains here: run_commit, the data and the seal are stubbed."""
    from pathlib import Path
    from types import SimpleNamespace

    from agent import experiment, workspace
    repo = fake_repo(tmp_path / "repo")
    head = git(repo, "rev-parse", "HEAD")
    run = tmp_path / "run"
    (run / report_mod.REPORT_DIR).mkdir(parents=True)
    monkeypatch.setattr(workspace, "describe_data", lambda *a, **k: {})
    monkeypatch.setattr(workspace, "make_seal", lambda *a, **k: None)
    ran = []

    def crashed(slot, n, commit, log_name, env):
        ran.append((slot.files.worktree, slot.files.run_dir, n, commit, log_name, env))
        return SimpleNamespace(crash_class="timeout", log_path=Path(run / "logs" / log_name), summary=None)
    monkeypatch.setattr(experiment, "run_commit", crashed)
    data = {"run": run, "info": {"budget": 1, "tag": "t"}, "records": []}
    from agent import report_ablate
    out = report_ablate.measure_sealed(data, SimpleNamespace(path=repo), head, 9001)
    assert ran == [(repo, run, 9001, head, f"queue-{head[:7]}.log", report_ablate.seed_env(run))]
    assert ran[0][-1]["AUTORESEARCH_SEED"] == str(seeds.draw(seeds.key_of(run), seeds.ABLATE))
    assert out == {"ok": False, "bpb": None, "reason": "crashed: timeout", "log": str(run / "logs" / f"queue-{head[:7]}.log")}


def test_validate_prints_its_verdict_on_the_console(tmp_path, monkeypatch, capsys):
    """`agent/report.py --run DIR --validate K` says the verdict where it was asked, not only in report.md."""
    from tests.test_validate import TRICK, _run
    monkeypatch.delenv("AUTORESEARCH_STEPS", raising=False)
    _, run = _run(tmp_path, monkeypatch, TRICK)
    capsys.readouterr()
    assert report_mod.main(["--run", str(run), "--validate", "2"]) == 0
    out = capsys.readouterr().out
    verdict = next(line for line in out.splitlines() if line.startswith("validate: at 2x the budget"))
    assert "the gain HOLDS: +0.020000" in verdict, out
