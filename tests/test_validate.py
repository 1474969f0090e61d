"""agent/report.py --validate K (agent/validate.py): the final best and the base re-run at K x the
budget through the loop's own run path. On the stand-in train.py (printed figures, whose gain
depends on the budget it is given) and on the real train.py, tiny profile, sealed and judged by
the judge hierarchy."""
import json

import pytest

from agent import loop as loop_mod, report, validate
from dashboard.app import create_app
from search import knobs
from harness.experiment_record import experiment_records
from harness.results import read_journal
from runfiles.shared_results import Validation
from tests.dashboard_fixtures import TOKEN
from tests.loop_fixtures import copy_real, fake_repo, git, make_repo
from tests.test_loop import Scripted, run_in_process

# A trick that wins at the run's 1 s budget and loses at 2 s or more (the stand-in reads its budget).
SHORT_TRICK = ("bpb = 1.0 + 0.01", "bpb = (0.97 if float(os.environ.get('AUTORESEARCH_TIME_BUDGET', '1')) < 1.5 "
               "else 1.05) + 0.01")
# One that wins at every budget.
TRICK = ("bpb = 1.0 + 0.01", "bpb = 0.98 + 0.01")


def _run(tmp_path, monkeypatch, trick):
    repo = fake_repo(tmp_path / "repo")
    run_in_process(repo, tmp_path, monkeypatch, Scripted([("trick", lambda s: s.replace(*trick))]),
                   "--max-experiments", "2")
    run = repo / ".autoresearch" / "s"
    assert [r.status for r in experiment_records(read_journal(run / "journal.jsonl")[0])] == ["keep", "keep"]
    return repo, run


@pytest.mark.parametrize("trick,verdict,short,long", [(TRICK, "holds", 0.02, 0.02), (SHORT_TRICK, "reverses", 0.03, -0.05)])
def test_the_gain_holds_or_reverses_at_a_longer_budget(tmp_path, monkeypatch, trick, verdict, short, long):
    monkeypatch.delenv("AUTORESEARCH_STEPS", raising=False)
    repo, run = _run(tmp_path, monkeypatch, trick)
    tip = git(repo, "rev-parse", "autoresearch/s")
    got = report.report(run, validate=2)
    v = Validation.read(run)
    assert v.verdict == verdict and v.k == 2 and v.budget == 2 and len(v.seeds) == validate.DEFAULT_SEEDS
    assert len(v.final.runs) == len(v.base.runs) == validate.DEFAULT_SEEDS and not v.final.failed
    assert v.final.commit == got["summary"]["final"] == tip and abs(v.gain_short - short) < 1e-9
    assert abs(v.gain_long - long) < 1e-9
    assert len(list((run / "logs").glob("validate-*.log"))) == 2 * validate.DEFAULT_SEEDS
    assert git(repo, "rev-parse", "autoresearch/s") == tip and git(run, "status", "--porcelain") == ""
    assert git(repo, "worktree", "list").count("\n") == 1, "the scratch worktree is gone"
    md = (run / "report" / "report.md").read_text()
    assert f"the gain {verdict.upper()}" in md
    page = create_app(repo=repo, token=TOKEN).test_client().get("/t/s/").get_data(as_text=True)
    assert f"longer budget: {verdict}" in page


def test_nothing_to_validate_and_fixed_steps_are_said(tmp_path, monkeypatch):
    repo = fake_repo(tmp_path / "repo")
    run_in_process(repo, tmp_path, monkeypatch, Scripted([("worse", lambda s: s.replace("DEPTH = 4", "DEPTH = 2"))]),
                   "--max-experiments", "2")
    run = repo / ".autoresearch" / "s"
    monkeypatch.setenv("AUTORESEARCH_STEPS", "5")
    assert report.main(["--run", str(run), "--validate", "2"]) == 1
    monkeypatch.delenv("AUTORESEARCH_STEPS")
    out = validate.validate(run, 2)
    assert out["verdict"] == "unmeasured" and "nothing was kept" in out["reason"]
    assert not list((run / "logs").glob("validate-*.log"))
    with pytest.raises(validate.ValidateError):
        validate.validate(run, 0)


def test_verdicts():
    assert validate.verdict(0.03, 0.025, 0.001)[0] == "holds"
    assert validate.verdict(0.03, 0.01, 0.001)[0] == "shrinks"
    assert validate.verdict(0.03, 0.002, 0.005)[0] == "shrinks", "within the noise"
    assert validate.verdict(0.03, -0.02, 0.005)[0] == "reverses"
    assert validate.verdict(0.03, -0.002, 0.005)[0] == "shrinks", "a loss within the noise is no reversal"
    assert validate.verdict(0.03, None, None)[0] == "unmeasured"


def test_on_the_tiny_profile_sealed_and_trusted(tiny_cache, tmp_path, monkeypatch):
    """The real train.py: a base that cannot learn (every learning rate 0) and a kept change that
    restores them (half the reference's), judged by the hierarchy (sealed runs, trusted evaluation);
    then --validate 2: 2 seeds a side at 1 s, sealed and trusted too."""
    files = copy_real()
    fast = {"DEPTH": 2, "DEVICE_BATCH_SIZE": 4, "TOTAL_BATCH_SIZE": 256, "STARTUP_STEPS": 1}
    lrs = {k: knobs.values(files["train.py"])[k] for k in ("MATRIX_LR", "EMBEDDING_LR", "UNEMBEDDING_LR", "SCALAR_LR")}
    files["train.py"] = knobs.set_knobs(files["train.py"], {**fast, **{k: 0.0 for k in lrs}})
    repo = make_repo(tmp_path / "repo", files)
    # The loop in steps mode: a run's figure does not depend on how busy the shared machine is, so
    # no run is judged disturbed by it; the validation then trains by the (longer) budget.
    monkeypatch.setenv("AUTORESEARCH_STEPS", "8")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    proposer = Scripted([("learning rates back", lambda s: knobs.set_knobs(s, {k: v / 2 for k, v in lrs.items()}))])
    monkeypatch.setattr(loop_mod, "make_proposer", lambda *a, **k: proposer)
    # A 1 s budget (validated at 2 s, long enough for the harness's clock to tell a start's jitter
    # from training): a base that cannot learn against one that trains ~100 steps (~25 on a loaded
    # box) leaves a gain far above half the 8-step run's, so the verdict does not need longer runs.
    lp = loop_mod.Loop(loop_mod.parse_args(["--tag", "v", "--budget", "1", "--repo", str(repo), "--reviewer",
                                            "hierarchy", "--rule", "strict", "--baseline-repeats", "1",
                                            "--max-experiments", "2", "--final-runs", "0"]))
    lp.run()
    lp.stop()
    run = repo / ".autoresearch" / "v"
    recs = experiment_records(read_journal(run / "journal.jsonl")[0])
    assert [r.status for r in recs] == ["keep", "keep"], [r.decision_reason for r in recs]
    assert all(r.trusted_bpb is not None for r in recs)
    monkeypatch.delenv("AUTORESEARCH_STEPS")
    out = validate.validate(run, 2, seeds=2)
    assert out["sealed"] is True and out["budget"] == 2
    assert len(out["final"]["runs"]) == 2 and len(out["base"]["runs"]) == 2, out
    assert out["verdict"] == "holds" and out["gain_long"] > 0, out
    logs = sorted((run / "logs").glob("validate-*.log"))   # a disturbed run's rerun keeps a log of its own
    assert len([p for p in logs if ".rerun" not in p.name]) == 4 and all("step" in p.read_text() for p in logs)
    assert json.loads((run / "report" / "validation.json").read_text())["verdict"] == "holds"
    report.report(run)
    assert "the gain HOLDS" in (run / "report" / "report.md").read_text()


def test_a_disturbed_validation_run_is_run_again_and_a_cheat_is_not():
    """A run the harness's clock calls "no evidence" (slowed past what its load explains) is run
    again on its seed under a log of its own, up to the tries; an integrity failure, a crash or a
    failed evaluation is final, as in the judge and agent/remeasure.py."""
    def script(*outcomes):
        logs = []

        def one(log):
            logs.append(log)
            return validate.Measurement.of(outcomes[len(logs) - 1])
        return one, logs
    over = {"ok": False, "reason": "no evidence: slowed", "clock": "over"}
    good = {"ok": True, "reason": "", "trusted_bpb": 2.5}
    one, logs = script(over, good)
    assert validate.until_evidence(one, "validate-abc-s7") == validate.Measurement.of(good)
    assert logs == ["validate-abc-s7.log", "validate-abc-s7.rerun1.log"]
    one, logs = script(over, over, over, good)
    out = validate.until_evidence(one, "v", tries=3)
    assert out.clock == "over" and not out.ok and out.bpb is None and len(logs) == 3   # out of tries: no figure
    for final in ({"ok": False, "reason": "integrity: trained past", "clock": "cheat"},
                  {"ok": False, "reason": "crashed: oom"}, {"ok": False, "reason": "evaluation failed"}):
        one, logs = script(final, good)
        assert validate.until_evidence(one, "v") == validate.Measurement.of(final) and len(logs) == 1
