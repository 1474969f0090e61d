"""dashboard/matching.py: results.tsv rows to journal records, on files the real writers produced
(harness/results.py append_journal / append_result, as agent/experiment.py record writes them)."""
from dashboard import data
from dashboard.runview import match_journal
from runfiles.matching import match_rows
from harness.experiment_record import ExperimentRecord
from harness.results import append_journal, append_result, init_results, read_journal, read_results

RUNS = [(1, "a" * 40, "keep", 1.50), (2, "b" * 40, "discard", 1.52), (3, "a" * 40, "discard", 1.51),
        (4, "c" * 40, "keep", 1.45), (5, "d" * 40, "crash", None)]


def write(tmp_path, skip_row=(), skip_record=()):
    tmp_path.mkdir(exist_ok=True)
    res, jr = tmp_path / "results.tsv", tmp_path / "journal.jsonl"
    init_results(res)
    for n, commit, status, bpb in RUNS:
        if n not in skip_record:
            append_journal(jr, ExperimentRecord.of(n=n, tag="t", commit=commit, short=commit[:7], status=status,
                                                description=f"exp {n}", trusted_bpb=bpb).to_dict())
        if n not in skip_row:
            append_result(res, commit, bpb, 1.0, status, f"exp {n}")
    return read_results(res).rows, read_journal(jr)[0]


def test_a_clean_run_matches_row_i_to_record_i(tmp_path):
    rows, recs = write(tmp_path)
    assert match_rows(rows, recs) == {i: i for i in range(5)}


def test_a_missing_row_or_record_shifts_nothing_after_it(tmp_path):
    rows, recs = write(tmp_path, skip_row=(2,))          # killed between the journal line and the row
    assert {i: recs[j]["n"] for i, j in match_rows(rows, recs).items()} == {0: 1, 1: 3, 2: 4, 3: 5}
    rows, recs = write(tmp_path / "b", skip_record=(3,))  # the journal line was lost
    assert {i: recs[j]["n"] for i, j in match_rows(rows, recs).items()} == {0: 1, 1: 2, 3: 4, 4: 5}


def test_the_dashboard_pairs_malformed_rows_loosely(tmp_path):
    _, _ = write(tmp_path)
    text = (tmp_path / "results.tsv").read_text().splitlines(True)
    text[3] = text[3].replace("discard", "disc")           # a hand edit breaks the status of row 3
    (tmp_path / "results.tsv").write_text("".join(text))
    res = data.read_results(tmp_path / "results.tsv")
    recs = read_journal(tmp_path / "journal.jsonl")[0]
    by_row = match_journal(res.lines, recs)
    assert by_row[3]["n"] == 3 and [by_row[k]["n"] for k in (1, 2, 4, 5)] == [1, 2, 4, 5]
    assert 2 not in match_rows(res.lines, recs)            # strict (recovery): a broken row is no match


def test_hostile_journal_values_match_nothing_and_raise_nothing(tmp_path):
    rows, recs = write(tmp_path)
    recs[1] = dict(recs[1], status=["keep"], commit={"x": 1}, short=None)
    recs[2] = dict(recs[2], n=[3], status=7)
    strict, loose = match_rows(rows, recs), match_rows(rows, recs, loose=True)
    assert strict == {0: 0, 3: 3, 4: 4}
    assert loose == {0: 0, 2: 2, 3: 3, 4: 4}      # its commit is still good: the dashboard pairs it
