"""scripts/bench_judge.py puts its scripted edits through the real loop: every experiment after the
baseline is the scripted proposer's, with the edit it planned (a regression once let the loop's
default offline search propose instead, and the table described edits that never ran)."""

import importlib.util

from agent import loop as loop_mod
from agent.experiment import run_experiment
from agent.proposers.scripted import Edit, ScriptedProposer
from harness import gitops, knobs
from tests.loop_fixtures import REPO, fake_repo

spec = importlib.util.spec_from_file_location("bench_judge", REPO / "scripts" / "bench_judge.py")
bench_judge = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_judge)


def test_the_loop_runs_the_scripted_edits_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_DATA_DIR", str(tmp_path / "fakedata"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    repo = fake_repo(tmp_path / "repo")
    base = (repo / "train.py").read_text()
    edits = {2: Edit("null", "a comment", lambda s: s.replace("def main():\n", "def main():\n    # a comment\n")),
             3: Edit("gain", "deeper from the base", lambda s: knobs.set_knobs(s, {"DEPTH": 6}), on_base=True, size=3)}
    args = loop_mod.parse_args(["--tag", "b", "--repo", str(repo), "--proposer", "offline", "--budget", "1",
                                "--reviewer", "simple", "--max-experiments", "3"])
    lp = loop_mod.Loop(args)
    try:
        lp.setup()
        bench_judge.use_scripted(lp, ScriptedProposer(edits, base))
        lp.ensure_baseline()
        for n in sorted(edits):
            run_experiment(lp, lp.next_attempt(n))
    finally:
        lp.stop()
    recs = [r for r in lp.history if r.is_experiment]
    assert [r.n for r in recs] == [1, 2, 3]
    assert [r.proposer for r in recs] == ["baseline", "scripted", "scripted"]
    assert recs[1].description == "null: a comment" and recs[2].description == "gain: deeper from the base"
    ran = {r.n: gitops.show_file(repo, r.commit, "train.py") for r in recs[1:]}
    assert "    # a comment\n" in ran[2]
    assert knobs.values(ran[3])["DEPTH"] == 6 and "# a comment" not in ran[3], "on_base: from the base source"
