"""harness/experiment_record.py and runfiles/: the typed records every reader shares, checked against what the real loop writes."""
import json
import math
from types import SimpleNamespace

import pytest

from agent.judges.hierarchy import JudgeHierarchy
from agent.judges.judge import Opinion, combine, rule_opinion
from agent.judges.reviewer import Decision as ReexportedDecision, SimpleReviewer
from dashboard import data
from harness import results
from harness.decision import Basis, Decision
from harness.experiment_record import ExperimentRecord, experiment_records
from harness.results_table import RESULT_HEADER, ResultRow, parse_results
from runfiles.run import RunInfo, RunSeal
from runfiles.state import RunningExperiment, RunState, STATE_KEYS, WorkerState
from harness.verify import VerifyResult
from tests.test_judge import _ctx, _judge, margin
from tests.loop_fixtures import fake_run


# ---- the real loop's files ---------------------------------------------------------------------

def test_real_journal_lines_round_trip_exactly(loop_run):
    lines = [x for x in (loop_run / "journal.jsonl").read_text().splitlines()
             if json.loads(x).get("kind", "experiment") == "experiment"]   # the pending lines are no records
    assert len(lines) == 4
    for line in lines:
        obj = json.loads(line)
        rec = ExperimentRecord.from_dict(obj)
        assert rec.extra == {}, f"keys the record type does not know: {sorted(rec.extra)}"
        assert json.dumps(rec.to_dict()) == line
        # built from its fields (no memory of the line), the record has the loop's key order too
        fresh = ExperimentRecord.of(**{k: v for k, v in obj.items()})
        assert list(fresh.to_dict()) == list(obj)


def test_real_results_rows_agree_with_the_typed_records(loop_run):
    text = (loop_run / "results.tsv").read_text()
    table = parse_results(text)
    assert table.problems == [] and all(ln.ok and not ln.partial for ln in table.lines)
    for ln in table.lines:                   # parse and format are inverses on what the loop writes
        assert ln.row.format() == ln.raw + "\n"
    records = experiment_records(results.read_journal(loop_run / "journal.jsonl")[0])
    assert [r.number for r in records] == [1, 2, 3, 4]
    for rec, ln in zip(records, table.lines):
        assert (ln.row.commit, ln.row.status) == (rec.short, rec.status)
        assert ln.row.val_bpb == pytest.approx(rec.decision_bpb, abs=1e-6)
    assert records[0].is_baseline and records[0].proposer == "baseline"
    assert not any(r.is_baseline for r in records[1:])


def test_real_state_json_reads_as_a_run_state(loop_run):
    raw = json.loads((loop_run / "state.json").read_text())
    state = RunState.from_dict(raw)
    assert (state.tag, state.phase, state.running.experiment) == ("rec", "stopped", 4)
    assert state.workers == [] and state.tally.best["commit"] == raw["best"]["commit"]
    out = state.to_dict()
    assert set(raw) <= set(out) and out["workers"] == []
    for key in raw:
        assert out[key] == raw[key], key


# ---- results.tsv: corrupt lines -----------------------------------------------------------------

CORRUPT = (RESULT_HEADER + "\n"
           "a1b2c3d\t1.000000\t1.0\tkeep\tfine\n"
           "garbage line\n"
           "b2c3d4e\tnot-a-number\t1.0\tkeep\tbad figure\n"
           "c3d4e5f\tnan\t1.0\tkeep\tnot finite (a kept row needs a figure)\n"
           "d4e5f6a\t1.1\t1.0\tmaybe\tunknown status\n"
           "e5f6a1b\t1.2\t1.0\tdiscard\ta\ttab inside\n"
           "\n"
           "\x00\xff\tbinary\n"
           "f6a1b2c\t0.900000\t1.0\tkeep\thalf writ")


def test_corrupt_lines_are_flagged_with_their_line_never_dropped(tmp_path):
    table = parse_results(CORRUPT)
    assert len(table.lines) == 8, "every non-blank line after the header is a row"
    by_line = {ln.line: ln for ln in table.lines}
    assert by_line[2].ok and by_line[2].row.val_bpb == 1.0
    assert by_line[3].problems == ["1 of 5 columns"]
    assert by_line[4].problems == ["val_bpb 'not-a-number' is not a number"]
    assert by_line[5].problems == ["val_bpb 'nan' is not finite"] and math.isnan(by_line[5].row.val_bpb)
    assert by_line[6].problems == ["unknown status 'maybe'"]
    assert by_line[7].problems == ["extra tab(s) in the description"] and by_line[7].row.description == "a\ttab inside"
    assert by_line[9].problems[0] == "2 of 5 columns"
    assert by_line[10].partial and by_line[10].ok and table.complete == 7
    # the loop's reader: good rows only, and one "line N: why" per bad line
    path = tmp_path / "results.tsv"
    path.write_text(CORRUPT)
    strict = results.read_results(path)
    assert [r.commit for r in strict.rows] == ["a1b2c3d", "f6a1b2c"]
    assert [p.split(":")[0] for p in strict.problems] == [f"line {i}" for i in (3, 4, 5, 6, 7, 9)]
    # the dashboard's reader: every row shown, the bad ones flagged
    shown = data.read_results(path)
    assert len(shown.lines) == 8 and sum(bool(ln.problem) for ln in shown.lines) == 7


def test_a_lost_header_loses_no_row():
    table = parse_results("a1b2c3d\t1.000000\t1.0\tkeep\tfirst\nb2c3d4e\t0.9\t1.0\tkeep\tsecond\n")
    assert [ln.row.description for ln in table.lines] == ["first", "second"]
    assert table.problems and table.problems[0].startswith("line 1: header is")


def test_result_row_format_refuses_a_bad_status_and_writes_no_figure_as_nan():
    with pytest.raises(ValueError):
        ResultRow("abc", 1.0, 1.0, "maybe", "x").format()
    assert ResultRow("a" * 40, float("nan"), None, "discard", "t\tab").format() == \
        "aaaaaaa\tnan\t0.0\tdiscard\tt ab\n"   # no figure: never a 0.0 that reads as a result
    assert ResultRow("a" * 40, None, 3.0, "crash", "oom").format() == "aaaaaaa\t0.000000\t0.0\tcrash\toom\n"


# ---- the experiment record on its own ------------------------------------------------------------

def test_unknown_keys_are_kept_in_place_and_hostile_values_never_raise():
    line = '{"n": 7, "future_key": [1, 2], "status": "keep", "trusted_bpb": "1.0", "verdicts": "x", "tokens": {"input": 1e999}}'
    rec = ExperimentRecord.from_dict(json.loads(line))
    assert rec.extra == {"future_key": [1, 2]}
    assert json.dumps(rec.to_dict()) == json.dumps(json.loads(line))
    assert rec.decision_bpb is None and rec.trusted() == (None, None) and rec.judge == {} and rec.basis is None
    assert rec.token_counts() == {"input": 0, "output": 0} and rec.noise_band() is None
    rec.description = "changed after reading"     # a field set later is written too
    assert rec.to_dict()["description"] == "changed after reading"
    for hostile in ({}, {"n": True, "summary": [1]}, {"verdicts": {"judge": {"baseline_values": "x"}}}):
        r = ExperimentRecord.from_dict(hostile)
        assert r.number is None and r.decision_bpb is None


def test_noise_band_comes_from_the_record_that_carries_the_baseline(tmp_path):
    h = JudgeHierarchy(baseline_repeats=2)
    _judge(h, _ctx(tmp_path, 1, "b" * 40, None), 1.000)
    d = _judge(h, _ctx(tmp_path, 1, "b" * 40, None), 1.004)
    rec = ExperimentRecord.of(n=1, status="keep", trusted_bpb=d.trusted_bpb, verdicts=d.verdicts)
    band = rec.noise_band()
    # k is not a fixed 2 but the t-test's margin over sigma (here 1 df: t_0.99 = 31.8)
    assert band.values == [1.000, 1.004] and band.k == pytest.approx(h.band.k) and band.k > 2
    assert band.spread == pytest.approx(h.band.spread) and band.threshold == pytest.approx(h.band.threshold)
    later = ExperimentRecord.of(n=2, verdicts={"judge": {"spread": 0.1, "threshold": 0.2}})
    assert later.noise_band() is None


def test_run_state_with_workers_round_trips_and_checks_types():
    w = WorkerState(worker=1, n=5, phase="training", phase_started_at=100.0, run_started_at=110.0,
                    commit="c" * 40, parent="p" * 40, description="deeper")
    state = RunState(tag="t", phase="training", running=RunningExperiment(experiment=5), workers=[w])
    back = RunState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert back.workers == [w] and back == state
    assert tuple(state.to_dict()) == STATE_KEYS[:-1]      # flat, in the file's order (updated_at: write_state's)
    assert w.elapsed(130.0) == 20.0 and WorkerState(worker=0, phase="proposing", phase_started_at=125.0).elapsed(130.0) == 5.0
    odd = RunState.from_dict({"phase": 3, "experiment": True, "budget": "300", "best": [], "pid": 1.5,
                              "workers": [{"worker": "x"}, "y", {"worker": 2, "n": "3"}]})
    assert (odd.phase, odd.running.experiment, odd.budget, odd.tally.best, odd.pid) == (None, None, None, None, None)
    assert [(x.worker, x.n) for x in odd.workers] == [(2, None)]


def test_run_info_reads_and_writes_run_json_flat():
    """run.json keeps its keys where it always had them; the sandbox and the pinned inputs are the
    type's seal part, and an unknown key is kept in place."""
    raw = {"tag": "t", "budget": 300.0, "fingerprint": "f" * 8, "profile": "cpu", "base_commit": "b" * 40,
           "created_at": 1.5, "source": "offline-fallback", "sandbox": {"kind": "none", "reason": "--sandbox none"},
           "inputs": {"val.bin": "ab" * 32}, "settings": {"smoke": True}, "inventory": {"shards": 2},
           "eval_tokens": 4096, "later": [1]}
    info = RunInfo.from_dict(json.loads(json.dumps(raw)))
    assert info.seal.sandbox["kind"] == "none" and info.seal.inputs == raw["inputs"] and info.extra == {"later": [1]}
    assert info.unsealed == "--sandbox none" and info.smoke and info.sandbox_kind == "none"
    assert json.dumps(info.to_dict()) == json.dumps(raw)
    fresh = RunInfo(tag="t", budget=300.0).to_dict()      # a new tag: no seal yet, the fixed terms named
    assert "sandbox" not in fresh and "inputs" not in fresh and fresh["fingerprint"] is None
    assert RunInfo.from_dict({"sandbox": "x", "inputs": []}).seal == RunSeal()


# ---- Basis: set by the judges where they decide ---------------------------------------------------

def run(summary=None, crash=None):
    return fake_run(crash_class=crash, summary=summary)


def test_simple_reviewer_sets_the_basis():
    sr = SimpleReviewer()
    ctx = SimpleNamespace(best=None)
    assert sr.judge(ctx, run({"val_bpb": 1.0})).basis is Basis.BASELINE
    ctx.best = {"val_bpb": 1.0}
    assert sr.judge(ctx, run({"val_bpb": 0.9})).basis is Basis.METRIC
    assert sr.judge(ctx, run({"val_bpb": 1.1})).basis is Basis.METRIC
    assert sr.judge(ctx, run(crash="oom")).basis is Basis.CRASH
    assert ReexportedDecision is Decision


def test_the_rule_judge_and_the_hierarchy_set_the_basis_not_the_reason(tmp_path):
    band = margin([1.0, 1.004])
    th = band.threshold
    big = {"added": 60, "removed": 5, "net": 55}
    assert rule_opinion(trusted_bpb=1.0 - 1.2 * th, best_bpb=1.0, band=band, lines=big).basis is Basis.SIMPLICITY
    deletion = {"added": 0, "removed": 12, "net": -12}
    assert rule_opinion(trusted_bpb=1.0, best_bpb=1.0, band=band, lines=deletion).basis is Basis.SIMPLICITY
    assert rule_opinion(trusted_bpb=None, best_bpb=1.0, band=band, lines={}, crash="oom").basis is Basis.CRASH
    h = JudgeHierarchy()
    # a reason that merely starts with a basis name does not make the basis
    worded = Opinion("rule", "keep", "simplicity is not why", 0.9)
    assert combine(worded, None)[1] is Basis.METRIC
    veto = combine(Opinion("rule", "keep", "beats best", 0.9), Opinion("llm", "discard", "no", 0.9))
    assert veto[:2] == ("discard", Basis.LLM_VETO)
    # the hierarchy's decisions carry it, and the journal's verdicts.judge.basis is the same string
    for v in (1.0, 1.004, 0.996, 1.002, 0.998):
        base = _judge(h, _ctx(tmp_path, 1, "b" * 40, None), v)
    assert base.basis is Basis.BASELINE and base.verdicts["judge"]["basis"] == "baseline"
    best = {"commit": "b" * 40, "val_bpb": 1.0}
    _judge(h, _ctx(tmp_path, 2, "c" * 40, best), 0.9)   # a keep is confirmed by a second run
    kept = _judge(h, _ctx(tmp_path, 2, "c" * 40, best), 0.902)
    assert kept.status == "keep" and kept.basis is Basis.METRIC
    bad = h._integrity(_ctx(tmp_path, 3, None, best), VerifyResult(False, "the artifact is missing"))
    assert bad.basis is Basis.INTEGRITY
    stored = ExperimentRecord.from_dict(json.loads(json.dumps({"n": 3, "verdicts": bad.verdicts})))
    assert stored.basis is Basis.INTEGRITY and json.dumps(bad.basis) == '"integrity"'
    crashed = h.judge(_ctx(tmp_path, 4, "e" * 40, best), run(crash="oom"))
    assert crashed.basis is Basis.CRASH and crashed.verdicts["judge"]["basis"] == "crash"


def test_decision_takes_a_basis_string_and_refuses_an_unknown_one():
    assert Decision("keep", "r", basis="efficiency").basis is Basis.EFFICIENCY
    assert Decision("keep", "r").basis is Basis.METRIC
    with pytest.raises(ValueError):
        Decision("keep", "r", basis="vibes")
    assert Basis.parse("vibes") is None and Basis.parse(None) is None and Basis.parse("guard") is Basis.GUARD


# ---- the readers' accessors (the loop's history is these records, agent/ reads them so) ----------

def test_accessors_read_the_nested_parts_of_a_record():
    rec = ExperimentRecord.from_dict({
        "n": 4, "status": "discard", "summary": {"val_bpb": 1.25, "peak_vram_mb": 2048.0},
        "config": {"DEPTH": 4}, "code": "abc", "diff": "-A\n+B", "timings": {"run": 12.5, "eval": 2.0},
        "clock": {"startup_s": 1.0},
        "verdicts": {"judge": {"best_before": 1.2, "threshold": 0.01, "net_lines": 3, "runs": [1.2, "x", 1.3],
                               "rule": {"status": "discard"}, "llm": {"status": "keep"}},
                     "verify": {"trusted_bpb": 1.25, "details": {"serving": {"decode_tok_s": 99.0}}},
                     "metajudge": {"escalated": [{"kind": "lenient", "reason": "r"}, "junk"]},
                     "reruns": [{"clock": {"startup_s": 2.0}}, "junk", {"summary": None}]},
        "kind": "experiment"})
    assert rec.is_experiment and rec.printed_bpb == 1.25 and rec.summary_figure("peak_vram_mb") == 2048.0
    assert rec.summary_view["val_bpb"] == 1.25
    assert (rec.judge_figure("best_before"), rec.judge_figure("threshold"), rec.judge_figure("net_lines")) == \
        (1.2, 0.01, 3.0)
    assert rec.judge_values("runs") == [1.2, 1.3] and rec.judge_values("baseline_values") is None
    assert (rec.opinion("rule"), rec.opinion("llm"), rec.opinion("metajudge")) == ("discard", "keep", None)
    assert rec.serving() == {"decode_tok_s": 99.0} and rec.escalated_kinds() == ["lenient"]
    assert rec.metajudge["escalated"][0]["kind"] == "lenient"
    assert len(rec.reruns) == 2 and rec.clock_runs() == [{"startup_s": 1.0}, {"startup_s": 2.0}]
    assert (rec.timing("run"), rec.timing("eval"), rec.timing("git")) == (12.5, 2.0, None)
    assert rec.knob_values == {"DEPTH": 4} and rec.code_id == "abc"
    assert rec.text("diff") == "-A\n+B" and rec.text("hypothesis") == ""
    assert not ExperimentRecord.from_dict({"kind": "audit"}).is_experiment
    assert ExperimentRecord.of(n=1).knob_values == {}, "a new record's knobs: record() always writes them"


def test_accessors_read_a_hostile_record_as_missing_never_raise():
    hostile = {"n": [1], "summary": ["val_bpb", 1.0], "config": "DEPTH=4", "code": 5, "diff": 7,
               "description": {"x": 1}, "timings": "fast", "clock": 3,
               "verdicts": {"judge": {"best_before": "1.2", "threshold": float("nan"), "runs": "1.2",
                                      "rule": "keep", "llm": {"status": 1}},
                            "verify": {"details": {"serving": [1]}}, "metajudge": {"escalated": {"kind": "x"}},
                            "reruns": {"clock": {}}}}
    for raw in (hostile, {"verdicts": ["judge"]}, {"verdicts": None, "summary": None, "timings": None}, {}):
        rec = ExperimentRecord.from_dict(raw)
        assert rec.printed_bpb is None and rec.summary_figure("peak_vram_mb") is None and rec.summary_view == {}
        assert rec.judge_figure("best_before") is None and rec.judge_figure("threshold") is None
        assert rec.judge_values("runs") is None and rec.opinion("rule") is None and rec.opinion("llm") is None
        assert rec.serving() is None and rec.escalated_kinds() == [] and isinstance(rec.metajudge, dict)
        assert rec.reruns == [] and rec.timing("run") is None
        assert rec.knob_values is None and rec.code_id is None
        assert rec.text("diff") == "" and rec.text("description") == "" and rec.text("no_such_key") == ""
    assert ExperimentRecord.from_dict(hostile).clock_runs() == []


def test_evidence_view_keeps_each_runs_pace_and_says_whether_runs_were_recorded():
    ev = ExperimentRecord.from_dict({"evidence": {"candidate": {"runs": [{"bpb": 1.0, "pace_s": 0.5},
                                                                         {"bpb": 1.1, "pace_s": "slow"}]}}}).evidence_view()
    assert ev.has_runs and [r.pace_s for r in ev.runs] == [0.5, None]
    old = ExperimentRecord.from_dict({"evidence": {"candidate": {"commit": "c"}}}).evidence_view()
    assert old is not None and not old.has_runs and old.runs == []


def test_every_record_type_has_one_home():
    """A reader imports a type from where it is defined (no re-exporting module in between); the
    journal record reads its verdicts and evidence through the decision's own types."""
    import importlib.util

    import harness.decision as decision
    import harness.experiment_record as er
    for name in ("Basis", "Decision", "EvidenceFigures", "EvidenceRun"):
        assert getattr(er, name) is getattr(decision, name) and getattr(decision, name).__module__ == "harness.decision"
    for name in ("ExperimentRecord", "NoiseBandFigures", "experiment_records"):
        assert getattr(er, name).__module__ == "harness.experiment_record"
    assert importlib.util.find_spec("harness.records") is None


def test_the_coordinator_and_the_budget_read_a_hostile_history_safely():
    """A resumed journal may hold anything: the typed history reads it without raising."""
    from agent import budget
    from agent.coordinator import Coordinator
    c = Coordinator()
    c.history = [ExperimentRecord.from_dict({"n": [1], "cost_usd": "a lot", "status": ["crash"]}),
                 ExperimentRecord.of(n=1, cost_usd=0.5), ExperimentRecord.from_dict({"n": "2", "handover": None})]
    assert c.next_n() == 2 and budget.spent(c.history) == 0.5 and c.tip() == (None, None)
    assert budget.streak_reason(c.history, 1) is None and budget.night_lines(c.history) == []
