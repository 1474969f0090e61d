"""harness/results.py: the 5-column results.tsv, the journal, atomic state files."""
import json

import pytest

from harness import results
from runfiles import state


def test_header_and_rows(tmp_path):
    path = tmp_path / "results.tsv"
    results.init_results(path)
    results.init_results(path)   # idempotent: never a second header
    results.append_result(path, "a1b2c3d4e5f6", 0.9979, 44.0, "keep", "baseline")
    results.append_result(path, "b2c3d4e5f6a1", float("nan"), 1.0, "discard", "tabs\tand\nnewlines")
    results.append_result(path, "c3d4e5f6a1b2", 1.5, 3.0, "crash", "oom")
    lines = path.read_text().splitlines()
    assert lines[0] == "commit\tval_bpb\tmemory_gb\tstatus\tdescription"
    assert lines[1] == "a1b2c3d\t0.997900\t44.0\tkeep\tbaseline"
    assert lines[2] == "b2c3d4e\tnan\t1.0\tdiscard\ttabs and newlines"   # a discard without a figure
    assert lines[3] == "c3d4e5f\t0.000000\t0.0\tcrash\toom"
    assert all(len(line.split("\t")) == 5 for line in lines)
    table = results.read_results(path)
    assert [r.status for r in table.rows] == ["keep", "discard", "crash"] and table.problems == []


def test_bad_status_refused(tmp_path):
    with pytest.raises(ValueError):
        results.append_result(tmp_path / "r.tsv", "abc", 1.0, 1.0, "maybe", "x")


def test_reader_reports_malformed_lines(tmp_path):
    path = tmp_path / "results.tsv"
    path.write_text("commit\tval_bpb\tmemory_gb\tstatus\tdescription\n"
                    "a1b2c3d\t1.000000\t1.0\tkeep\tok\n"
                    "garbage line\n"
                    "b2c3d4e\tnot-a-number\t1.0\tkeep\tx\n"
                    "c3d4e5f\t1.000000\t1.0\tweird\tx\n"
                    "d4e5f6a\t0.900000\t1.0\tdiscard\tfine\n")
    table = results.read_results(path)
    assert [r.commit for r in table.rows] == ["a1b2c3d", "d4e5f6a"]
    assert len(table.problems) == 3 and table.problems[0].startswith("line 3")
    assert results.read_results(tmp_path / "absent.tsv").problems


def test_journal_skips_bad_lines_and_other_kinds(tmp_path):
    path = tmp_path / "journal.jsonl"
    results.append_journal(path, {"n": 1, "status": "keep"})
    with open(path, "a") as f:
        f.write('{"n": 2, "status": "disc')          # a torn line (kill -9 mid-write)
        f.write("\n[1, 2]\n")
    results.append_journal(path, {"kind": "audit", "n": 2})
    results.append_journal(path, {"kind": "experiment", "n": 3, "status": "crash"})
    recs, problems = results.read_journal(path)
    assert [r["n"] for r in recs] == [1, 3]
    assert len(problems) == 2
    everything, _ = results.read_journal(path, kind=None)
    assert len(everything) == 3


def test_state_is_replaced_atomically(tmp_path):
    path = tmp_path / "state.json"
    state.write_state(path, phase="training", experiment=3)
    state.write_state(path, phase="idle", experiment=3)
    data = json.loads(path.read_text())
    assert data["phase"] == "idle" and "updated_at" in data
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"], "no temp files left behind"
    assert state.read_json(tmp_path / "missing.json") is None
