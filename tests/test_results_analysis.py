"""results.tsv through the reference's analysis (karpathy/autoresearch analysis.ipynb): pandas
read_csv(sep="\\t"), the first row as the baseline, the kept rows, the improvement in percent,
the progress chart saved with matplotlib. `analyze` does what the notebook's cells do, in their
order, on a file the real loop wrote (and on variants: a baseline try that failed, an integrity
discard, a discard without a figure, crashes, a torn and an unparseable row after --resume).
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import pandas as pd
import pytest

from harness.experiment_record import ExperimentRecord
from harness.results_table import read_table
from harness.results import append_record, init_results, read_journal
from tests.loop_fixtures import FAKE_PREPARE, FAKE_TRAIN, REPO, fake_env, make_repo, run_loop

matplotlib.use("Agg")   # no display: the chart goes to a file, as the notebook's savefig does
import matplotlib.pyplot as plt  # noqa: E402

# The notebook's own tolerance: points up to this far above the baseline are drawn.
ABOVE_BASELINE = 0.0005

# train.py whose very first run crashes (a baseline try that fails) and whose experiment
# FAKE_CRASH_EXP crashes: the loop's own crash rows.
CRASHING_TRAIN = FAKE_TRAIN.replace('''def main():
''', '''def main():
    mark = os.environ.get("FAKE_FIRST_CRASH")
    if mark and not os.path.exists(mark):
        open(mark, "w").close()
        raise SystemExit("FAIL: the first run crashes")
    if os.environ.get("FAKE_CRASH_EXP", "-") + os.sep in os.environ.get("AUTORESEARCH_ARTIFACT", ""):
        raise SystemExit("FAIL: this experiment crashes")
''')


def analyze(path: Path, png: Path) -> dict:
    """The notebook's cells on one results.tsv: load, outcome counts, kept rows, the chart (saved
    to `png`), the summary (baseline = first row, best kept, improvement %), the top hits."""
    df = pd.read_csv(path, sep="\t")
    df["val_bpb"] = pd.to_numeric(df["val_bpb"], errors="coerce")
    df["memory_gb"] = pd.to_numeric(df["memory_gb"], errors="coerce")
    df["status"] = df["status"].str.strip().str.upper()
    counts = df["status"].value_counts()
    kept = df[df["status"] == "KEEP"].copy()

    valid = df[df["status"] != "CRASH"].reset_index(drop=True)
    chart_base = valid.loc[0, "val_bpb"]
    below = valid[valid["val_bpb"] <= chart_base + ABOVE_BASELINE]
    fig, ax = plt.subplots(figsize=(8, 4))
    disc = below[below["status"] == "DISCARD"]
    ax.scatter(disc.index, disc["val_bpb"], c="#cccccc", s=12, label="Discarded")
    kept_v = below[below["status"] == "KEEP"]
    ax.scatter(kept_v.index, kept_v["val_bpb"], c="#2ecc71", s=50, label="Kept")
    mask = valid["status"] == "KEEP"
    ax.step(valid.index[mask], valid.loc[mask, "val_bpb"].cummin(), where="post", label="Running best")
    best = kept["val_bpb"].min()
    margin = (chart_base - best) * 0.15 or 0.001   # the notebook's margin; a flat run gets a hair
    ax.set_ylim(best - margin, chart_base + margin)
    ax.legend()
    fig.savefig(png, dpi=60)
    plt.close(fig)

    baseline = df.iloc[0]["val_bpb"]
    kept["delta"] = kept["val_bpb"].shift(1) - kept["val_bpb"]
    return {"df": df, "counts": counts, "kept": kept, "baseline": baseline, "chart_baseline": chart_base,
            "best": best, "improvement_pct": (baseline - best) / baseline * 100,
            "plotted_discards": list(disc["val_bpb"]), "hits_total": kept.iloc[1:]["delta"].sum()}


def check(run: Path, tmp: Path) -> dict:
    """The analysis agrees with the journal: one row per tabled experiment, in order, no commit
    twice; the baseline is the kept baseline's figure; nothing plotted at 0; a real chart file."""
    png = tmp / "progress.png"
    got = analyze(run / "results.tsv", png)
    df = got["df"]
    records = [ExperimentRecord.from_dict(r) for r in read_journal(run / "journal.jsonl")[0]]
    tabled = [r for r in records if r.in_results]
    assert list(df["commit"]) == [r.commit[:7] for r in tabled], "one row per experiment, in order"
    assert df["commit"].is_unique, "a commit is never on two rows"
    assert list(df["status"]) == [r.status.upper() for r in tabled]
    base = next(r for r in records if r.is_baseline and r.status == "keep")
    assert df.iloc[0]["status"] == "KEEP" and got["baseline"] == pytest.approx(base.decision_bpb, abs=1e-6)
    assert got["chart_baseline"] == got["baseline"]
    best = min(r.decision_bpb for r in tabled if r.status == "keep")
    assert got["best"] == pytest.approx(best, abs=1e-6)
    expected = (base.decision_bpb - best) / base.decision_bpb * 100
    assert math.isfinite(got["improvement_pct"]) and got["improvement_pct"] == pytest.approx(expected, abs=1e-3)
    kv = got["kept"]["val_bpb"]
    assert got["hits_total"] == pytest.approx(kv.iloc[0] - kv.iloc[-1], abs=1e-6)   # deltas add up to the gain
    assert all(v > 0 for v in got["plotted_discards"]), "no discard is drawn at 0.0"
    for r, (_, row) in zip(tabled, df.iterrows()):   # each row's figure is the record's own, or none
        want = r.row_bpb
        if r.status == "crash":
            assert row["val_bpb"] == 0.0 and row["memory_gb"] == 0.0   # the reference protocol's crash row
        elif want is None:
            assert math.isnan(row["val_bpb"]), "a discard without a figure reads as missing, not 0.0"
        else:
            assert row["val_bpb"] == pytest.approx(want, abs=1e-6)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
    assert read_table(run / "results.tsv").problems == []
    return got


def test_the_reference_analysis_reads_a_results_tsv_the_loop_wrote(loop_run, tmp_path):
    got = check(loop_run, tmp_path)
    assert got["counts"].get("KEEP", 0) >= 1 and got["improvement_pct"] >= 0


def crashing_run(tmp: Path, tag: str = "c") -> tuple[Path, Path, dict]:
    repo = make_repo(tmp / "repo", {"prepare.py": FAKE_PREPARE, "train.py": CRASHING_TRAIN,
                                    "program.md": (REPO / "program.md").read_text()})
    env = fake_env(tmp, FAKE_FIRST_CRASH=tmp / "crashed-once", FAKE_CRASH_EXP="exp-0004")
    p = run_loop(repo, env, "--tag", tag, "--budget", "1", "--max-experiments", "5")
    assert p.returncode == 0, p.stdout + p.stderr
    return repo, repo / ".autoresearch" / tag, env


def test_a_failed_baseline_try_stays_in_the_journal_and_crashes_read_as_crashes(tmp_path):
    repo, run, _ = crashing_run(tmp_path)
    records = [ExperimentRecord.from_dict(r) for r in read_journal(run / "journal.jsonl")[0]]
    first, second = records[0], records[1]
    assert first.proposer == second.proposer == "baseline" and first.status == "crash" and second.status == "keep"
    assert first.commit == second.commit and not first.in_results
    got = check(run, tmp_path)
    assert got["counts"]["CRASH"] == 1 and len(got["df"]) == len(records) - 1


def test_torn_and_unparseable_rows_are_replaced_in_place_by_resume(tmp_path):
    """A row whose figure no longer parses and a torn last row: --resume rebuilds both from the
    journal where they stood, so the file still has one row per experiment."""
    repo, run, env = crashing_run(tmp_path, "t")
    res = run / "results.tsv"
    before = res.read_text()
    lines = before.splitlines(True)
    cells = lines[2].split("\t")
    lines[2] = "\t".join([cells[0], cells[1][:3] + "x" + cells[1][4:], *cells[2:]])   # "1.0x0000"
    res.write_text("".join(lines)[:-12])                                           # the last row torn
    assert read_table(res).problems
    p = run_loop(repo, env, "--tag", "t", "--budget", "1", "--max-experiments", "5", "--resume")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "results.tsv: replaced the malformed row of experiment 3 from the journal" in p.stdout
    assert "(left as is)" not in p.stdout
    assert res.read_text() == before, "every row back as the loop wrote it, none appended"
    check(run, tmp_path)


def _rec(n, commit, status, **kw) -> ExperimentRecord:
    kw.setdefault("memory_gb", 1.0)
    if kw.get("proposer") != "baseline":
        kw.setdefault("parent", "a" * 40)   # every experiment here builds on the kept baseline
    return ExperimentRecord.of(n=n, tag="v", commit=commit * 40, short=commit * 7, status=status,
                            description=kw.pop("description", f"experiment {n}"), **kw)


def integrity_records() -> list[ExperimentRecord]:
    """The records behind the issue's file: the baseline's first try discarded on integrity
    grounds (its trusted figure 3.2686 known), then kept; an integrity discard that was measured,
    a guard rejection never run, a crash, a keep."""
    verify = {"verify": {"ok": False, "reason": "over budget", "trusted_bpb": 3.2686}}
    return [_rec(1, "a", "discard", proposer="baseline", verdicts=dict(verify, judge={"basis": "integrity"})),
            _rec(2, "a", "keep", proposer="baseline", trusted_bpb=3.27,
                 verdicts={"judge": {"basis": "baseline", "baseline_values": [3.26, 3.28], "threshold": 1.82}}),
            _rec(3, "b", "discard", proposer="offline", verdicts={"verify": {"ok": False, "trusted_bpb": 3.25}}),
            _rec(4, "c", "discard", proposer="offline", memory_gb=0.0, decision_reason="guard: the proposal does not change train.py"),
            _rec(5, "d", "crash", proposer="offline", crash_class="oom"),
            _rec(6, "e", "keep", proposer="offline", trusted_bpb=3.2)]


def write_run(run: Path, records: list[ExperimentRecord]) -> Path:
    """journal.jsonl and results.tsv as agent/experiment.py record() writes them (append_record)."""
    from harness.results import append_journal
    run.mkdir(parents=True, exist_ok=True)
    init_results(run / "results.tsv")
    for rec in records:
        append_journal(run / "journal.jsonl", rec.to_dict())
        append_record(run / "results.tsv", rec)
    return run


def test_an_integrity_discarded_baseline_try_leaves_the_kept_baseline_first(tmp_path):
    run = write_run(tmp_path / "run", integrity_records())
    text = (run / "results.tsv").read_text()
    assert "0.000000\t1.0\tdiscard" not in text
    got = check(run, tmp_path)
    assert got["baseline"] == pytest.approx(3.27) and got["improvement_pct"] == pytest.approx(2.1407, abs=1e-3)
    assert got["plotted_discards"] == [pytest.approx(3.25)]   # the measured integrity discard; the guard's has none
    assert text.splitlines()[3] == "ccccccc\tnan\t0.0\tdiscard\texperiment 4"
