"""What the pages show about one run, computed from its files.

results.tsv is the backbone (one row per experiment, even when everything else is missing);
the journal adds detail per experiment, state.json the live status, traces.jsonl the spans.
"""

from __future__ import annotations

import math
import re
import os
import time

from runfiles.matching import match_rows
from dashboard import data, gitdiff
from runfiles.run import OFFLINE_SOURCE, RunInfo
from harness.experiment_record import ExperimentRecord, experiment_records
from harness.results_table import ResultLine, finite as _finite, fnum as _fnum
from runfiles.state import RunState
from dashboard.runs import Run
from runfiles.journal import AuditRecord, SpanRecord, claim_label, read_claims
from dashboard.progress_points import noise_band, typed  # noqa: F401  (the pages' and tests' names for them)

# Largest pid there can be (Linux's limit is 2**22); anything larger is not a process.
PID_MAX = 2 ** 31
# Phases in which state.json's idea and run describe an experiment under way.
ACTIVE_PHASES = ("screening", "guarding", "training", "evaluating", "judging")
# state.json older than this (seconds) while the loop claims to be busy is flagged stale.
STALE_STATE_S = 120


def match_journal(rows: list[ResultLine], records: list) -> dict[int, object]:
    """Row number -> its journal record, as given (dashboard/matching.py, the matcher recovery uses too)."""
    return {rows[i].n: records[j] for i, j in match_rows(rows, records, loose=True).items()}


def rows_view(run: Run, lines: list[ResultLine]) -> list[dict]:
    """data.row_view of each of `lines`, in the order given, a keep with why it was kept (its
    journal record's ground and reason)."""
    records = data.journal_records(run.file("journal.jsonl"))
    by_n = match_journal(data.read_results(run.file("results.tsv")).lines, records) if records else {}
    return [data.row_view(ln, by_n.get(ln.n) if ln.n else None) for ln in lines]


def data_warning(run_json: dict | RunInfo | None) -> str | None:
    """What to say when the run's data is the offline stand-in (prepare.py's `offline-fallback`)."""
    if _info(run_json).source == OFFLINE_SOURCE:
        return ("offline data: prepare.py used its offline fallback corpus (no ClimbMix), so these "
                "val_bpb figures are not comparable with runs on the real data")
    return None


def seal_warning(run_json: dict | RunInfo | None) -> str | None:
    """What to say when the run's experiments ran without a sandbox (--sandbox none)."""
    why = _info(run_json).unsealed
    if why:
        return ("unsealed: these runs had no sandbox (" + why + "), so a "
                "train.py could read the validation data and the network: the results are not trusted")
    return None


def _info(run_json) -> RunInfo:
    """run.json as read by the dashboard (a hostile one reads as empty)."""
    return run_json if isinstance(run_json, RunInfo) else RunInfo.from_dict(run_json)


def is_baseline(record: ExperimentRecord | None) -> bool:
    """The loop's baseline record: the unmodified train.py, judged with basis "baseline"."""
    return record is not None and record.is_baseline


# The small table of the trusted re-evaluation: its name on the page -> VerifyResult.as_dict()'s key.
VERIFY_FIELDS = {"ok": "ok", "reason": "reason", "trusted": "trusted_bpb", "printed": "printed_bpb",
                 "causal": "causal", "seconds": "seconds", "details": "details"}


def verification(record: ExperimentRecord | None) -> dict | None:
    """verdicts.verify (ExperimentRecord.verify: VerifyResult.as_dict()) as the rows of a small
    table, or None."""
    v = record.verify if record is not None else {}
    if not v:
        return None
    return {name: v[key] if key in v else None for name, key in VERIFY_FIELDS.items()}


def trusted_bpb(record: ExperimentRecord | None):
    """(trusted val_bpb, where it came from): the record's decision figure (the mean of the
    runs for the baseline), else the trusted re-evaluation's own figure."""
    return record.trusted() if record is not None else (None, None)


def displayable(obj):
    """A copy of a journal object that templates can format: numbers that are not finite (or do
    not fit a float) become the words that describe them, so no format string ever sees them."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if obj != obj else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, int) and not isinstance(obj, bool) and not _finite(obj):
        return "(number too large)"
    if isinstance(obj, dict):
        return {str(k): displayable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [displayable(v) for v in obj]
    return obj


def _pid_alive(pid) -> bool | None:
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < PID_MAX:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True          # exists, owned by someone else
    return True


def now_panel(run: Run, rows: list[ResultLine], records: list[ExperimentRecord], now: float | None = None) -> dict:
    """The 'Now' panel: live status from state.json, rates from results and the journal."""
    now = time.time() if now is None else now
    state, problem = data.read_json(run.file("state.json"))
    # state.json is data: RunState checks every field for its type.
    s = RunState.from_dict(state)
    cur, tally = s.running, s.tally
    phase = s.phase or "unknown"
    out = {"problem": problem, "phase": phase[:40], "experiment": cur.experiment,
           "updated_at": s.updated_at, "last_decision": tally.last_decision,
           "server_now": now, "run_started_at": None, "budget": s.budget, "workers": workers_panel(s, now)}
    done = [r for r in rows if not r.partial and r.n > 0]   # a line numbered 0 is no experiment
    n_keep = sum(r.status == "keep" for r in done)
    # Best: the loop's own claim first (RunState: {"commit", "val_bpb"}, checked), else the
    # lowest kept val_bpb in results.tsv.
    best = tally.best
    if not best or best["val_bpb"] is None:
        kept = [r for r in done if r.status == "keep" and r.val_bpb is not None]
        b = min(kept, key=lambda r: r.val_bpb, default=None)
        best = {"commit": b.commit, "val_bpb": b.val_bpb} if b else None
    out["best"] = best
    kr = tally.keep_rate
    out["keep_rate"] = kr if kr is not None else (n_keep / len(done) if done else None)
    out["experiments"] = len(done)
    # Tokens and cost: state.json's running totals, else the journal's sums.
    records = typed(records)
    out["tokens"] = tally.tokens if tally.tokens is not None else \
        {k: sum(r.token_counts()[k] for r in records) for k in ("input", "output")}
    out["cost_usd"] = tally.cost_usd if tally.cost_usd is not None else sum(r.cost() for r in records)
    # Rates over the journal's span: experiments per hour, and the share of wall time spent
    # training (duty cycle), which is what a faster harness improves.
    starts = [r.started_at for r in records if _fnum(r.started_at) is not None]
    ends = [r.ended_at for r in records if _fnum(r.ended_at) is not None]
    wall = (max(ends) - min(starts)) if starts and ends and max(ends) > min(starts) else None
    run_s = sum(_training_seconds(r) for r in records)
    wall = wall if wall is not None and math.isfinite(wall) else None
    out["per_hour"] = len(ends) / (wall / 3600) if wall else None
    out["duty_cycle"] = min(1.0, run_s / wall) if wall and math.isfinite(run_s) else None
    # What is being tried, which run of it, and how long the trusted evaluation has taken: shown
    # while an experiment is under way (state.json's idea and run are the running one's).
    active = out["phase"] in ACTIVE_PHASES
    out["idea"] = cur.idea if active and cur.idea and (cur.idea["description"] or cur.idea["hypothesis"]) else None
    out["run"] = cur.run if active else None
    out["evaluating_for"] = (max(0.0, now - s.phase_started_at)
                             if out["phase"] == "evaluating" and s.phase_started_at is not None else None)
    started = cur.run_started_at
    if out["phase"] == "training" and started is not None:
        out["run_started_at"] = started
        out["elapsed"] = max(0.0, now - started)
        b = out["budget"]
        out["remaining"] = (b - out["elapsed"]) if b is not None else None
    alive = _pid_alive(s.pid)
    busy = out["phase"] not in ("stopped", "unknown")
    out["pid_alive"] = alive
    out["stale"] = bool(state) and busy and (
        alive is False or (out["updated_at"] is not None and now - out["updated_at"] > STALE_STATE_S))
    return out


def workers_panel(state: RunState, now: float) -> list[dict]:
    """One line per experiment in flight (--workers N): worker, experiment, phase, elapsed, description."""
    return [{"worker": w.worker, "n": w.n, "phase": (w.phase or "unknown")[:40], "elapsed": w.elapsed(now),
             "description": w.description[:200]} for w in state.workers]


def _num(v) -> float:
    """A finite number, else 0 (sums over hostile journals stay finite)."""
    return _fnum(v) or 0.0


def _training_seconds(rec: ExperimentRecord) -> float:
    """Training seconds where the journal has them (timings.training), else the run's wall time
    (timings.run, which includes start-up); 0 for anything that is not a finite number."""
    t = rec.timings if isinstance(rec.timings, dict) else {}
    return _num(t["training"] if "training" in t else t["run"] if "run" in t else None)


def spans_for(spans: list[dict], record: ExperimentRecord | None) -> list[dict]:
    """The trace spans of one experiment (traces.jsonl objects), laid out as a timeline.

    A span belongs to the experiment when its trace is one whose spans name the experiment
    (input n/experiment); when no span names it, when it starts inside the experiment's
    [started_at, ended_at].
    """
    if record is None:
        return []
    n = record.n
    t0, t1 = record.started_at, record.ended_at
    typed = [sp for sp in (SpanRecord.from_dict(d) for d in spans) if sp is not None]
    traces = {sp.trace for sp in typed if sp.trace is not None and sp.names_experiment(n)}
    timed = _finite(t0) and _finite(t1)

    def mine(sp: SpanRecord) -> bool:
        # Trace membership when the tracer named the experiment; the time window otherwise
        # (it would also catch the next proposal, prepared while this run trained).
        if traces:
            return sp.trace in traces
        return timed and sp.start is not None and t0 <= sp.start <= t1

    picked = [sp for sp in typed if sp.start is not None and mine(sp)]
    if not picked:
        return []
    lo = min(sp.start for sp in picked)
    hi = max(max(sp.end or 0.0, sp.start) for sp in picked)
    width = max(hi - lo, 1e-6)
    by_id = {sp.id: sp for sp in picked if sp.id is not None}

    def depth(sp, seen=0):
        p = by_id.get(sp.parent) if sp.parent is not None else None
        return 0 if p is None or seen > 20 else 1 + depth(p, seen + 1)

    out = []
    for sp in sorted(picked, key=lambda s: s.start):
        end = sp.end
        out.append({"name": sp.name, "depth": depth(sp),
                    "left": 100 * (sp.start - lo) / width,
                    "width": max(0.3, 100 * ((end if end is not None else hi) - sp.start) / width),
                    "duration": (end - sp.start) if end is not None else None,
                    "open": end is None, "tokens": sp.tokens or None, "cost": sp.cost,
                    "error": sp.error, "input": sp.input, "output": sp.output})
    return out


def experiment(run: Run, n: int) -> dict | None:
    """Everything the experiment page shows; None when row n does not exist."""
    res = data.read_results(run.file("results.tsv"))
    row = next((r for r in res.lines if r.n == n), None) if n > 0 else None
    if row is None:
        return None
    journal = data.read_jsonl(run.file("journal.jsonl"))
    rec = match_journal(res.lines, experiment_records(journal.records)).get(n)
    problems = []
    if journal.missing:
        problems.append("journal.jsonl not found: only the results.tsv row is known")
    elif rec is None:
        problems.append("no journal record for this experiment")
    if journal.bad:
        problems.append(f"{journal.bad} line(s) of journal.jsonl could not be parsed")
    rn = rec.n if rec else None
    # The MetaJudge's audits: journal records of their own kind (runfiles/journal.py AuditRecord).
    audits = [a.raw for a in (AuditRecord.from_dict(r) for r in journal.records) if a is not None
              and rn is not None and a.n == rn]
    log_rel = rec.log if rec else None
    if not isinstance(log_rel, str) or not log_rel:
        log_rel = f"logs/exp-{rn:04d}.log" if isinstance(rn, int) and 0 <= rn < 10 ** 6 else None
    log, log_problem = (data.log_tail(data.inside(run.path, log_rel)) if log_rel
                        else (None, "no log recorded"))
    traces = data.read_jsonl(run.file("traces.jsonl"))
    baseline = is_baseline(rec)
    if baseline:
        # The baseline is the user's train.py as it was: its commit's own diff is whatever the
        # upstream repository last changed, which says nothing about this run.
        diff = gitdiff.Diff(source="baseline")
    else:
        diff = gitdiff.experiment_diff(run.git_dir, run.tag, row, rec)
    trusted, trusted_from = trusted_bpb(rec)
    ev = rec.evidence_view() if rec else None
    claim = claim_label(rec, read_claims(run.file("journal.jsonl"))) \
        if rec is not None and rec.status == "keep" and not baseline else None
    # What templates and /api/experiment receive: plain values, built here from the typed ones.
    return {"row": data.row_view(row), "record": displayable(rec.to_dict()) if rec else None, "baseline": baseline,
            "trusted": trusted, "evidence": ev, "trusted_from": trusted_from, "claim": claim,
            "verification": displayable(verification(rec)), "problems": problems + ([row.problem] if row.problem else []),
            "audits": audits, "log": log, "log_problem": log_problem, "diff": diff,
            "spans": spans_for(traces.records, rec), "traces_missing": traces.missing,
            "prev": max((r.n for r in res.lines if 0 < r.n < n), default=None),
            "next": min((r.n for r in res.lines if r.n > n), default=None)}


BENCH_COMMIT_RE = re.compile(r"[0-9a-f]{7}")  # bench files are named by a kept commit's short hash


def bench_figures(run: Run, commit) -> dict | None:
    """The serving benchmark of a commit (inference/bench.py: <run>/bench/<short>.json), if any:
    decode tok/s at batch 1 and KV-cache bytes per token, checked to be finite numbers."""
    short = str(commit or "")[:7]
    if not BENCH_COMMIT_RE.fullmatch(short):
        return None
    obj, _ = data.read_json(run.file(f"bench/{short}.json"))
    if not isinstance(obj, dict):
        return None
    out = {k: obj.get(k) for k in ("decode_tok_s_b1", "kv_bytes_per_token")}
    return out if all(_finite(v) for v in out.values()) else None
