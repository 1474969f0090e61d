"""The morning report's headline figures (agent/report.py): the baseline it measures from, the
session's wall time, the device-seconds spent; and the records of a folder that holds only a
results.tsv (a reference run, or one whose journal was lost).

- the baseline is the kept baseline: a baseline try that was not kept (a crash, an integrity
  discard) is never the reference point;
- wall time is the union of the experiments' [started_at, ended_at] intervals (with --workers they
  overlap; a record's own timings are parts of its interval, never added on top);
- device-seconds are every training run of a decision plus its trusted evaluation.
"""
from __future__ import annotations

from pathlib import Path

from harness.results_table import fnum
from harness.experiment_record import ExperimentRecord
from harness.results_table import read_table


def kept_baseline(records: list[ExperimentRecord], base: str | None) -> ExperimentRecord | None:
    """The record every gain is measured from: the first kept baseline (the unmodified train.py,
    or the base commit's keep), or the last record that continued its repeats after an interrupt
    (all its runs); else the first keep of all; None when nothing was kept."""
    kept = [r for r in records if r.status == "keep"]
    first = next((r for r in kept if r.is_baseline or (base and r.commit == base)), kept[0] if kept else None)
    went_on = [r for r in kept if first is not None and r.continues is not None and r.commit == first.commit]
    return went_on[-1] if went_on else first


def _interval(rec: ExperimentRecord) -> tuple[float, float] | None:
    start, end = fnum(rec.started_at), fnum(rec.ended_at)
    if start is not None and end is None:
        total = rec.timing("total")
        end = start + total if total is not None else None
    return (start, end) if start is not None and end is not None and end >= start else None


def wall_seconds(records: list[ExperimentRecord]) -> float:
    """Seconds during which at least one experiment was under way (the union of their intervals);
    a record without times (an older or recovered one) adds its own total once."""
    spans = sorted(iv for iv in map(_interval, records) if iv is not None)
    out, cur = 0.0, None
    for start, end in spans:
        if cur is None or start > cur[1]:
            out += (cur[1] - cur[0]) if cur else 0.0
            cur = [start, end]
        else:
            cur[1] = max(cur[1], end)
    out += (cur[1] - cur[0]) if cur else 0.0
    return out + sum(r.timing("total") or 0.0 for r in records if _interval(r) is None)


def device_seconds(rec: ExperimentRecord) -> float:
    """One record's device time: its run (train.py's whole process, its own evaluation included)
    and the trusted evaluation of it (verify_seconds), plus each earlier run of the decision
    (verdicts.reruns: the baseline's repeats, confirming runs) with an evaluation of the same cost."""
    evaluation = fnum(rec.verify_seconds) or 0.0
    out = (rec.timing("run") or 0.0) + evaluation
    return out + sum(ran + evaluation for ran in rec.rerun_seconds())


def records_from_results(path: Path) -> list[ExperimentRecord]:
    """The experiments of a results.tsv alone, as minimal records: in file order, the first kept
    row the baseline, each later keep's parent the keep before it."""
    out, last_kept = [], None
    for n, row in enumerate(read_table(path).rows, start=1):
        first = last_kept is None and row.status == "keep"
        rec = ExperimentRecord.of(n=n, commit=row.commit, short=row.commit[:7], status=row.status,
                               description=row.description, parent=None if first else last_kept,
                               proposer="baseline" if first else None,
                               summary={"val_bpb": row.figure} if row.figure is not None else None,
                               memory_gb=row.memory_gb or 0.0)
        if row.status == "keep":
            last_kept = row.commit
        out.append(rec)
    return out
