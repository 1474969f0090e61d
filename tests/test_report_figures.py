"""The morning report's headline (agent/report.py, agent/report_figures.py): the kept baseline,
wall time as the union of the experiments' intervals, device-seconds with the evaluation, and a
folder that holds only a results.tsv."""
import shutil

import pytest

from agent import report as report_mod
from agent.report_figures import device_seconds, kept_baseline, wall_seconds
from harness.experiment_record import ExperimentRecord
from harness.results_table import read_table
from harness.results import read_journal
from tests.test_results_analysis import crashing_run, integrity_records, write_run


def records_of(run):
    return [ExperimentRecord.from_dict(r) for r in read_journal(run / "journal.jsonl")[0]]


def test_the_report_measures_from_the_kept_baseline_not_a_failed_try(tmp_path):
    _, run, _ = crashing_run(tmp_path)
    recs = records_of(run)
    assert recs[0].proposer == "baseline" and recs[0].status == "crash"   # the first try crashed
    got = report_mod.report(run)
    s = got["summary"]
    assert s["baseline"] is recs[1] or s["baseline"].n == recs[1].n
    assert s["baseline_bpb"] == pytest.approx(1.02)
    lines = (run / "report" / "report.md").read_text().splitlines()
    first = next(x for x in lines if "-> final" in x)   # the figures line, after the title and hardware lines
    assert "baseline 1.020000 -> final 1.020000" in first
    assert all(d["idea"] != "idea: baseline unmodified train" for d in s["discards"])


def test_an_integrity_discarded_baseline_try_is_never_the_baseline(tmp_path):
    recs = integrity_records()
    assert kept_baseline(recs, "a" * 40).n == 2
    run = write_run(tmp_path / "run", recs)
    s = report_mod.report(run)["summary"]
    assert s["baseline_bpb"] == pytest.approx(3.27) and s["final_bpb"] == pytest.approx(3.2)
    assert [c["n"] for c in s["changes"]] == [6] and s["changes"][0]["gain"] == pytest.approx(0.07)


def test_wall_time_is_the_union_of_the_experiments_intervals(loop_run):
    recs = records_of(loop_run)
    # the loop runs one experiment at a time: the union is the sum of each one's own span
    spans = [r.ended_at - r.started_at for r in recs]
    assert wall_seconds(recs) == pytest.approx(sum(spans))
    summed = sum(sum(v for v in r.timings.values() if isinstance(v, (int, float))) for r in recs)
    assert wall_seconds(recs) < summed, "never total + overhead + the parts added up"
    s = report_mod.summarize(report_mod.load(loop_run))
    assert s["wall_seconds"] == pytest.approx(sum(spans))
    # overlapping experiments (--workers) count once; one without times adds its own total
    t = [ExperimentRecord.of(n=1, started_at=100.0, ended_at=110.0, timings={"total": 10.0, "overhead": 9.0}),
         ExperimentRecord.of(n=2, started_at=105.0, ended_at=115.0, timings={"total": 10.0}),
         ExperimentRecord.of(n=3, started_at=120.0, timings={"total": 5.0}),
         ExperimentRecord.of(n=4, timings={"total": 7.0})]
    assert wall_seconds(t) == pytest.approx(15.0 + 5.0 + 7.0)


def test_device_seconds_count_the_trusted_evaluation_and_every_run():
    rec = ExperimentRecord.of(n=1, status="keep", verify_seconds=4.0, timings={"run": 10.0, "eval": 2.0},
                           verdicts={"reruns": [{"summary": {"total_seconds": 9.0}}, {"summary": None}]})
    # the run (train.py's own eval inside it), its evaluation, the repeat run and its evaluation
    assert device_seconds(rec) == pytest.approx(10.0 + 4.0 + 9.0 + 4.0)
    s = report_mod.summarize({"records": [rec], "base": None, "tag": "t", "run": None})
    assert s["gpu_seconds"] == pytest.approx(27.0)
    assert "device-seconds (every training run + its trusted evaluation): 27" in report_mod.markdown(s, None, None, None)


def test_a_folder_with_only_a_results_tsv_gets_a_report(loop_run, tmp_path):
    only = tmp_path / "reference"
    only.mkdir()
    shutil.copy(loop_run / "results.tsv", only / "results.tsv")
    rows = read_table(only / "results.tsv").rows
    got = report_mod.report(only)
    s = got["summary"]
    assert s["experiments"] == len(rows) and s["baseline_bpb"] == pytest.approx(rows[0].val_bpb)
    kept = [r for r in rows if r.status == "keep"]
    assert [c["commit"] for c in s["changes"]] == [r.commit for r in kept[1:]]
    assert s["final_bpb"] == pytest.approx(kept[-1].val_bpb)
    md = (only / "report" / "report.md").read_text()
    assert f"{len(rows)} experiments; baseline {rows[0].val_bpb:.6f}" in md
    assert "Read from results.tsv alone" in md and "no experiments in journal.jsonl" not in md
    assert (only / "report" / "progress.svg").exists()


def test_an_empty_folder_says_which_files_are_missing(tmp_path):
    with pytest.raises(report_mod.ReportError, match="neither journal.jsonl nor results.tsv"):
        report_mod.report(tmp_path)
    (tmp_path / "results.tsv").write_text("commit\tval_bpb\tmemory_gb\tstatus\tdescription\n")
    with pytest.raises(report_mod.ReportError, match="no experiments in results.tsv"):
        report_mod.report(tmp_path)
