"""The morning report on hostile figures and text, in files the real writers produced: an imported
tag (agent/import_run.py) whose results.tsv carries +-1e308 and other impossible val_bpb, a
results.tsv-only folder with inf and nan, and a journal whose every number is replaced by a
hostile one. The report never crashes, never prints a 309-digit figure or inf/nan as a result, and
no escape, control or bidi character of a description reaches report.md or report.html."""
import json
import re
import subprocess
import sys
import unicodedata

import pytest

from agent import report
from harness.experiment_record import ExperimentRecord
from harness.results import append_journal, read_journal
from tests.loop_fixtures import REPO, fake_repo, git

HOSTILE_DESC = ("evil \x1b[31mred\x1b[0m \x1b]0;title\x07 \u202eexe.txt\u202c nul\x00 del\x7f \x9b1m "
                "| pipe\n## Results to share\n- forged line ```")
# Numbers a file may carry that are no val_bpb: each must be shown as no figure, never crash.
HOSTILE_BPB = ["1e308", "-1e308", "1.7976931348623157e308", "-5e307", "1e300", "-0.5", "123456789.5"]
# Numbers for a journal's every numeric field: JSON holds them all (Python reads Infinity, NaN and
# an int of 400 digits back as such).
HOSTILE_NUMBERS = [1e308, -1e308, float("inf"), float("-inf"), float("nan"), 10 ** 400, -(10 ** 400), 0]


def _edit(repo, old, new, message):
    path = repo / "train.py"
    path.write_text(path.read_text().replace(old, new))
    git(repo, "commit", "-q", "-am", message)
    return git(repo, "rev-parse", "--short", "HEAD")


def imported_run(tmp, bpb: str):
    """A run in the reference's loop shape with an impossible figure on a keep and on a discard,
    and a hostile description; imported by agent/import_run.py (the real writer)."""
    repo = fake_repo(tmp / "repo")
    git(repo, "checkout", "-q", "-b", "autoresearch/mar5")
    rows = [("baseline", "1.020000", "0.1", "keep", "baseline")]
    rows.append((_edit(repo, "DEPTH = 4", "DEPTH = 5", "depth 5"), bpb, "0.1", "keep", HOSTILE_DESC.replace("\n", " ")))
    rows.append((_edit(repo, "LR = 0.04", "LR = 0.08", "lr 0.08"), bpb, "0.1", "discard", "lr 0.08 | pipe \u202e"))
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    rows.append((_edit(repo, "DEPTH = 5", "DEPTH = 6", "depth 6"), "1.000000", "0.1", "keep", "depth 6\x1b[2J"))
    git(repo, "checkout", "-q", "master")
    results = tmp / "results.tsv"
    results.write_text("commit\tval_bpb\tmemory_gb\tstatus\tdescription\n" + "".join("\t".join(r) + "\n" for r in rows))
    p = subprocess.run([sys.executable, str(REPO / "agent" / "import_run.py"), "--repo", str(repo), "--branch",
                        "autoresearch/mar5", "--results", str(results), "--tag", "imp"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return repo / ".autoresearch" / "imp"


def _bad_chars(text):
    return [hex(ord(c)) for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) < 0xa0
            or unicodedata.category(c) in ("Cf", "Cs")]


def _check_pages(run):
    md = (run / "report" / "report.md").read_text()
    page = (run / "report" / "report.html").read_text()
    for text in (md, page):
        assert not _bad_chars(text), _bad_chars(text)
        assert not re.search(r"\d{20}", text), "a 1e308 printed in full"
    # (the inline chart may name a malformed row's "inf" in its tooltip, as the dashboard does)
    assert not re.search(r"\b(inf|nan)\b", md, re.I), "inf or nan shown as a figure"
    assert md.count("\n## Results to share\n") == 1, "a description's newline started no section"
    assert "\n- forged line" not in md
    return md


@pytest.mark.parametrize("bpb", HOSTILE_BPB)
def test_an_imported_impossible_figure_never_crashes_the_report(tmp_path, bpb):
    run = imported_run(tmp_path, bpb)
    got = report.report(run)
    md = _check_pages(run)
    assert (run / "report" / "progress.png").exists()
    c = got["summary"]["changes"][0]
    assert c["bpb"] is None and c["gain"] is None, "an impossible figure is no result"
    assert "is no val_bpb: left out" in md
    assert "evil red" in md and "exe.txt" in md, "the text itself stays readable"
    assert "| lr 0.08 \\| pipe |" in md, "a pipe in a table cell is escaped"
    page = (run / "report" / "report.html").read_text()
    assert "<td>lr 0.08 | pipe</td></tr>" in page, "and the page's table keeps its four cells"


def test_the_report_command_on_an_imported_1e308(tmp_path):
    """The command the issue ran, `uv run agent/report.py --run DIR`, as a process."""
    run = imported_run(tmp_path, "-1e308")
    p = subprocess.run([sys.executable, str(REPO / "agent" / "report.py"), "--run", str(run)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stdout + p.stderr
    _check_pages(run)


def test_a_results_tsv_alone_with_inf_nan_and_1e308(tmp_path):
    """A reference run's folder (results.tsv, no journal): the malformed rows are left out, the
    impossible ones shown as no figure."""
    rows = [("aaaaaaa", "1.020000", "0.1", "keep", "baseline"), ("bbbbbbb", "inf", "0.1", "keep", "infinite keep"),
            ("ccccccc", "-1e308", "0.1", "keep", "huge negative \x1b[31m"), ("ddddddd", "nan", "0.1", "discard", "not a number"),
            ("eeeeeee", "1e308", "1e308", "discard", "huge \u202e"), ("fffffff", "0.990000", "0.1", "keep", "real")]
    (tmp_path / "results.tsv").write_text("commit\tval_bpb\tmemory_gb\tstatus\tdescription\n"
                                          + "".join("\t".join(r) + "\n" for r in rows))
    got = report.report(tmp_path)
    _check_pages(tmp_path)
    assert got["summary"]["final_bpb"] == 0.99


def _replace_numbers(obj, value):
    """`obj` with every number (not a bool) replaced by `value`."""
    if isinstance(obj, dict):
        return {k: _replace_numbers(v, value) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_replace_numbers(v, value) for v in obj]
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return value
    return obj


JUDGED = dict(status="keep", proposer="claude", description="judged \u202ekeep\x1b[1m", hypothesis="h\x00yp",
              decision_reason="trusted val_bpb 0.99 beats 1.0\n## forged", trusted_bpb=0.99, memory_gb=1.5,
              tokens={"input": 1200, "output": 300}, cost_usd=0.02, started_at=1000.0, ended_at=1300.0,
              timings={"run": 280.0, "eval": 12.0, "total": 300.0}, verify_seconds=12.0, summary={"val_bpb": 0.99},
              verdicts={"judge": {"basis": "metric", "threshold": 0.004, "spread": 0.002,
                                  "baseline_values": [1.0, 1.002], "band": {"k": 2.0}}},
              evidence={"call": "keep", "candidate": {"runs": [{"bpb": 0.99, "used": True}, {"bpb": 0.991}]},
                        "incumbent": {"commit": "abcdef0", "runs": [{"bpb": 1.0}], "mean": 1.0},
                        "comparison": {"p_better": 0.995, "gain": 0.01, "margin": 0.004, "sigma": 0.002, "df": 3}})


@pytest.mark.parametrize("value", HOSTILE_NUMBERS, ids=repr)
def test_a_journal_whose_every_number_is_hostile(tmp_path, value):
    """Every numeric field of every record (the import's, and a judged keep with its evidence, as
    the loop writes one) replaced by one hostile number."""
    run = imported_run(tmp_path, "1.010000")
    recs = read_journal(run / "journal.jsonl")[0]
    last = recs[-1]
    judged = ExperimentRecord.of(n=len(recs) + 1, commit=last["commit"], parent=last["commit"], **JUDGED)
    append_journal(run / "journal.jsonl", judged.to_dict())   # the loop's own writer
    lines = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines() if line.strip()]
    (run / "journal.jsonl").write_text("".join(json.dumps(_replace_numbers(r, value)) + "\n" for r in lines))
    report.report(run)
    _check_pages(run)
