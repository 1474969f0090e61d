"""harness/results_table.py: one results table, written by the loop's writer (harness/results.py
init_results / append_result) and read back the same way by the loop (harness.results.read_results,
which recovery uses) and by the dashboard (dashboard.data.read_results), whole, torn or corrupt."""
import pytest

from dashboard import data
from dashboard.runview import match_journal
from harness import results
from runfiles.matching import match_rows
from harness.experiment_record import ExperimentRecord
from harness.results_table import ResultLine, ResultTable
from harness.results_table import PARTIAL_NOTE

RUNS = [(1, "a1" * 20, 1.500001, 44.0, "keep", "baseline"),
        (2, "b2" * 20, 1.52, 44.5, "discard", "wider\tmlp"),       # a tab: the writer cleans it
        (3, "c3" * 20, None, None, "crash", "oom"),
        (4, "d4" * 20, 1.45, 45.0, "keep", "muon lr 0.03")]


def write(tmp_path, runs=RUNS):
    res, jr = tmp_path / "results.tsv", tmp_path / "journal.jsonl"
    results.init_results(res)
    for n, commit, bpb, mem, status, desc in runs:
        results.append_journal(jr, ExperimentRecord.of(n=n, tag="t", commit=commit, short=commit[:7], status=status,
                                                    description=desc, trusted_bpb=bpb).to_dict())
        results.append_result(res, commit, bpb, mem, status, desc)
    return res, jr


def both(path):
    """The loop's read-back and the dashboard's (a fresh read: the cache key is the file's)."""
    return results.read_results(path), data.read_results(path)


def test_the_loop_and_the_dashboard_read_one_table(tmp_path):
    res, jr = write(tmp_path)
    loop, dash = both(res)
    assert type(loop) is type(dash) is ResultTable and all(isinstance(ln, ResultLine) for ln in loop.lines)
    assert loop.lines == dash.lines and loop.problems == dash.problems == [] and loop.complete == dash.complete == 4
    assert [(ln.n, ln.line) for ln in loop.lines] == [(1, 2), (2, 3), (3, 4), (4, 5)]
    first, _, crash, last = loop.rows
    assert (first.commit, first.val_bpb, first.memory_gb, first.status) == ("a1a1a1a", 1.500001, 44.0, "keep")
    assert (crash.val_bpb, crash.memory_gb, crash.status) == (0.0, 0.0, "crash")    # crashes carry zeros
    assert loop.rows[1].description == "wider mlp" and last.val_text is None and last.problem is None
    # the loop's rows and the dashboard's lines are the same typed lines; a row is read by attribute only
    assert [r.commit for r in loop.rows] == [r.commit for r in dash.lines]
    assert [r.line for r in loop.rows] == [2, 3, 4, 5]
    with pytest.raises(TypeError):
        first["val_bpb"]                # no dict-style reads (the old ResultLine.__getitem__ shim)
    # the pages and /api/results get plain values built from the typed lines
    view = data.row_view(dash.lines[0])
    assert view == {"n": 1, "line": 2, "raw": "a1a1a1a\t1.500001\t44.0\tkeep\tbaseline", "commit": "a1a1a1a",
                    "val_bpb": 1.500001, "val_text": None, "memory_gb": 44.0, "status": "keep",
                    "description": "baseline", "problem": None, "partial": False, "why": None}
    assert tuple(view) == data.ROW_VIEW_KEYS and data.page_problems(dash) == []
    # one matcher on one table: row i is record i for recovery (strict) and the dashboard (loose)
    recs = results.read_journal(jr)[0]
    assert match_rows(loop.rows, recs) == match_rows(dash.lines, recs, loose=True) == {i: i for i in range(4)}
    typed = [ExperimentRecord.from_dict(r) for r in recs]
    assert match_rows(loop.rows, typed) == {i: i for i in range(4)}
    assert {n: r.number for n, r in match_journal(dash.lines, typed).items()} == {1: 1, 2: 2, 3: 3, 4: 4}


def test_a_torn_last_line_is_flagged_by_both_then_cut_off_by_the_writer(tmp_path):
    res, _ = write(tmp_path, RUNS[:2])
    with open(res, "a") as f:
        f.write("c3c3c3c\t1.49")                          # killed mid-write: no newline, 2 of 5 cells
    loop, dash = both(res)
    assert loop.lines == dash.lines and len(loop.lines) == 3 and loop.complete == dash.complete == 2
    torn = dash.lines[-1]
    assert torn.partial and not torn.ok and torn.problem == f"2 of 5 columns; {PARTIAL_NOTE}"
    assert [r.commit for r in loop.rows] == ["a1a1a1a", "b2b2b2b"]   # the loop acts on whole rows only
    assert loop.problems == ["line 4: 2 of 5 columns"]
    assert data.page_problems(dash) == ["1 row(s) of results.tsv are malformed or incomplete; shown flagged"]
    # the next append quarantines the torn tail (harness/results.py) and writes a whole line
    results.append_result(res, "d4" * 20, 1.45, 45.0, "keep", "after the tear")
    assert len(list(tmp_path.glob("results.tsv.torn-*"))) == 1
    loop, dash = both(res)
    assert loop.problems == dash.problems == [] and [r.description for r in dash.lines][-1] == "after the tear"
    assert loop.lines == dash.lines and loop.complete == 3


def test_a_corrupt_file_keeps_every_row_and_says_where(tmp_path):
    res, jr = write(tmp_path)
    lines = res.read_text().splitlines(True)
    lines[2] = lines[2].replace("discard", "disc")        # a hand edit breaks row 2's status
    lines[3] = "c3c3c3c\tinf\t0.0\tcrash\toom\n"          # a number that is no figure
    res.write_bytes("".join(lines).encode() + b"\xff\xfe\tgarbage\n")
    loop, dash = both(res)
    seen = [(ln.n, ln.line, ln.raw, ln.problems, ln.partial) for ln in dash.lines]   # nan != nan: by what was read
    assert seen == [(ln.n, ln.line, ln.raw, ln.problems, ln.partial) for ln in loop.lines] and len(seen) == 5
    assert [ln.n for ln in dash.flagged] == [2, 3, 5]
    assert loop.problems == ["line 3: unknown status 'disc'", "line 4: val_bpb 'inf' is not finite",
                             "line 6: 2 of 5 columns; val_bpb 'garbage' is not a number"]
    assert [r.commit for r in loop.rows] == ["a1a1a1a", "d4d4d4d"]
    nan = data.row_view(dash.lines[2])
    assert nan["val_bpb"] is None and nan["val_text"] == "inf" and "is not finite" in nan["problem"]
    assert data.row_view(dash.lines[4])["raw"].startswith("\ufffd\ufffd")   # bytes not UTF-8, shown replaced
    recs = results.read_journal(jr)[0]
    assert 1 not in match_rows(dash.lines, recs)                   # strict (recovery): a broken row is no match
    by_row = match_journal(dash.lines, recs)                       # the dashboard pairs it by commit
    assert {n: rec["n"] for n, rec in by_row.items()} == {1: 1, 2: 2, 3: 3, 4: 4}


def test_a_missing_or_empty_file_is_an_empty_table_that_says_so(tmp_path):
    loop, dash = both(tmp_path / "results.tsv")
    assert loop.missing and dash.missing and loop.lines == dash.lines == []
    assert loop.problems == dash.problems == ["results.tsv not found"]
    (tmp_path / "results.tsv").write_text("")
    loop, dash = both(tmp_path / "results.tsv")
    assert not loop.missing and loop.problems == dash.problems == ["results.tsv is empty (no header yet)"]
