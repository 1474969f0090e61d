"""The incumbent run again for a contested candidate (agent/judges/stats.py INCUMBENT_RUNS): the
hierarchy asks for it, takes its run into the bar and the record, a resumed judge restores it, and
the loop (agent/experiment.py) runs the incumbent's commit while the record stays the candidate's."""
import json
from types import SimpleNamespace

from agent.judges import evidence, stats
from agent.judges.hierarchy import JudgeHierarchy
from harness.decision import Decision
from harness.experiment_record import ExperimentRecord
from harness.verify import VerifyResult
from tests.loop_fixtures import fake_run
from tests.test_judge_stats import CAND, OTHER, baseline, best_of, ctx, decide


def incumbent_run(bpb):
    """A run of the incumbent, its trusted evaluation made where it ran (as the loop's executor does)."""
    return fake_run(summary={}, extra={"verify_result": VerifyResult(True, "verified", bpb, bpb, True, 0.5)})


def test_a_contested_candidate_waits_for_the_incumbent_to_be_run_again(tmp_path):
    """An incumbent kept on 2 runs is the bar of every later comparison: a candidate still contested
    after 3 runs asks for a run of the incumbent (Decision.run_next), which joins the bar, and the
    candidate is decided again on it; the record says so, and a resumed judge knows that run."""
    h = JudgeHierarchy(baseline_repeats=5)
    best = best_of(baseline(h, tmp_path))
    for v in (1.382, 1.378):                         # CAND: kept on its 2 runs, the new incumbent
        kept = decide(h, ctx(tmp_path, 2, CAND, best), v)
    assert kept.status == "keep"
    inc = {"commit": CAND, "val_bpb": kept.trusted_bpb}
    asked = None
    for v in (1.374, 1.376, 1.379):                  # OTHER: a small gain, not yet clear
        asked = decide(h, ctx(tmp_path, 3, OTHER, inc), v)
        if asked.run_next:
            break
    assert asked.is_again and asked.run_next == CAND and asked.verdicts["evidence"]["measure_incumbent"] == CAND
    assert "first the incumbent" in asked.reason and len(asked.verdicts["evidence"]["candidate"]["runs"]) == 3
    # the incumbent's run: its value joins the bar, numbered as the experiment it was run for
    again = h.judge_incumbent(ctx(tmp_path, 3, OTHER, inc), incumbent_run(1.384))
    ev = again.verdicts["evidence"]
    assert ev["comparison"]["incumbent_runs"] == [1.382, 1.378, 1.384]
    assert [r["n"] for r in ev["incumbent"]["runs"]] == [2, 2, 3]
    assert not again.run_next           # equal runs now: the next run, if any, is the candidate's
    # a crashed run of the incumbent is not counted, and the decision is made on the runs there are
    crashed = h.judge_incumbent(ctx(tmp_path, 3, OTHER, inc), fake_run(crash_class="timeout"))
    assert "incumbent's run crashed (timeout); not counted" in crashed.reason
    assert crashed.verdicts["evidence"]["comparison"]["incumbent_runs"] == [1.382, 1.378, 1.384]
    # the record of experiment 3 carries that run; a judge rebuilt from the journal has it again
    recs = [ExperimentRecord.of(n=n, commit=c, status="keep", trusted_bpb=d.trusted_bpb, evidence=d.verdicts["evidence"])
            for n, c, d in ((2, CAND, kept), (3, OTHER, again))]
    rebuilt = evidence.restore([ExperimentRecord.from_dict(json.loads(json.dumps(r.to_dict()))) for r in recs])
    assert [(s.bpb, s.n) for s in rebuilt[CAND]] == [(1.382, 2), (1.378, 2), (1.384, 3)]
    assert "1 of them run again for this decision" in recs[1].evidence_view().summary()


def test_the_incumbent_is_run_again_only_while_it_has_fewer_runs_and_a_few_times_a_decision():
    assert not stats.rerun_incumbent(2, 1) and not stats.rerun_incumbent(2, 2)
    assert stats.rerun_incumbent(2, 3) and stats.rerun_incumbent(3, 5)
    assert not stats.rerun_incumbent(stats.INCUMBENT_RUNS, stats.MAX_RUNS + 1)   # enough runs of the bar


def test_a_baseline_with_its_five_runs_is_never_run_again_for_a_candidate(tmp_path):
    h = JudgeHierarchy(baseline_repeats=5)
    best = best_of(baseline(h, tmp_path))
    for v in (1.394, 1.396, 1.395, 1.397, 1.393):   # contested all the way: MAX_RUNS runs of its own
        d = decide(h, ctx(tmp_path, 2, CAND, best), v)
        assert d.run_next is None
    assert d.reason.startswith("contested:")


def test_the_loop_runs_the_incumbent_when_asked_and_records_the_candidates_run(tmp_path, monkeypatch):
    """agent/experiment.py: a Decision.again with run_next makes the next run the incumbent's (its
    own log and seed), judged by reviewer.judge_incumbent; the decision after it is the candidate's,
    and the record's run is the candidate's last one, with the incumbent's run among the reruns.
    The real run_experiment on a real repository; only the run itself is a stand-in."""
    from agent import experiment
    from agent.coordinator import Coordinator
    from agent.experiment import Attempt, Slot, run_experiment
    from agent.proposers.base import Proposal
    from agent.workspace import RunFiles
    from agent import gitops
    from harness.clock import ClockReference
    from runfiles.run import RunInfo
    from tests.loop_fixtures import make_repo
    repo = make_repo(tmp_path / "repo", {"train.py": "x = 1\n"})
    base = gitops.head(repo)
    (repo / "train.py").write_text("x = 2\n")
    cand = gitops.commit_file(repo, "train.py", "x = 2")
    ran = []

    def run_commit(slot, n, commit, log_name, env=None, *, parent=None, status=None, stop_limits=None):
        ran.append((commit, log_name, (env or {}).get("AUTORESEARCH_SEED")))
        return fake_run(summary={"val_bpb": 1.0}, log_path=tmp_path / log_name)
    monkeypatch.setattr(experiment, "run_commit", run_commit)

    class Reviewer:
        said = []

        def judge(self, ctx, run):
            self.said.append(("judge", run.log_path.name))
            first = len(self.said) == 1
            return Decision.again("discard", "more", 1.0, {}, run_next=base if not first else None) \
                if len(self.said) < 3 else Decision("keep", "kept", 1.0, {})

        def judge_incumbent(self, ctx, run):
            self.said.append(("incumbent", run.log_path.name))
            return Decision.again("discard", "more", 1.0, {})

    class Status:
        def span(self, name, input):
            from contextlib import nullcontext
            return nullcontext(SimpleNamespace(log=lambda **k: None))

        def __getattr__(self, name):   # phase, tick, attempt, run, judged, decided, event: shown nowhere
            return lambda *a, **k: None

    coord = Coordinator(base)
    coord.moved(base, {"commit": base, "val_bpb": 1.1})
    slot = Slot(files=RunFiles(repo, "t", repo, tmp_path / "run"), run_info=RunInfo(), budget=1.0, timeout=10.0,
                seal=None, sealed=False, executor=None, clock_reference=lambda recipe=None: ClockReference())
    (tmp_path / "run").mkdir()
    ideas = SimpleNamespace(ahead=lambda *a: None, config=SimpleNamespace(fix_tries=0), feedback="")
    a = Attempt(n=4, parent=base, proposal=Proposal("d", "h", "x = 2\n", "offline"), commit=cand)
    rec = run_experiment(a, coord, slot, ideas, Reviewer(), Status(), committed=True)
    assert [c for c, _, _ in ran] == [cand, cand, base, cand]
    assert [log for _, log, _ in ran] == ["exp-0004.log", "exp-0004.rerun1.log", "exp-0004.rerun2.incumbent.log",
                                          "exp-0004.rerun3.log"]
    assert len({seed for _, _, seed in ran}) == 4                    # a seed of its own each
    assert Reviewer.said == [("judge", "exp-0004.log"), ("judge", "exp-0004.rerun1.log"),
                             ("incumbent", "exp-0004.rerun2.incumbent.log"), ("judge", "exp-0004.rerun3.log")]
    assert rec.status == "keep" and rec.log == str(tmp_path / "exp-0004.rerun3.log")
    assert [r.get("commit") for r in rec.verdicts["reruns"]] == [None, None, base]
    assert coord.last_kept == cand and gitops.head(repo) == cand     # kept: the branch moved
