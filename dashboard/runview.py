"""What the pages show about one run, computed from its files.

results.tsv is the backbone (one row per experiment, even when everything else is missing);
the journal adds detail per experiment, state.json the live status, traces.jsonl the spans.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict

from dashboard import data, gitdiff
from dashboard.runs import Run

# Judge verdict keys that may hold the run-to-run spread estimated from the baseline repeats.
SPREAD_KEYS = ("spread", "noise", "noise_sd", "sigma", "std")
# Default multiple of the spread a change must clear (the Judge's default k).
DEFAULT_K = 2.0
# state.json older than this (seconds) while the loop claims to be busy is flagged stale.
STALE_STATE_S = 120


def match_journal(rows: list[dict], records: list[dict]) -> dict[int, dict]:
    """Row number -> its journal record: by commit (k-th row of a commit gets its k-th
    record, for baseline repeats and reruns), else by experiment number and status."""
    by_commit: dict[str, list[dict]] = defaultdict(list)
    for rec in records:
        c = str(rec.get("short") or rec.get("commit") or "")[:7].lower()
        if c:
            by_commit[c].append(rec)
    used, out = set(), {}
    for row in rows:
        queue = by_commit.get(row["commit"][:7].lower()) if len(row["commit"]) >= 7 else None
        while queue:
            rec = queue.pop(0)
            if id(rec) not in used:
                used.add(id(rec))
                out[row["n"]] = rec
                break
    by_n = {rec.get("n"): rec for rec in records if id(rec) not in used}
    for row in rows:
        rec = by_n.get(row["n"])
        if row["n"] not in out and rec is not None and rec.get("status") == row["status"]:
            out[row["n"]] = rec
    return out


def noise_band(rows: list[dict], records: list[dict]) -> dict:
    """Baseline val_bpb and the band around it that counts as noise.

    The spread comes from the Judge's verdicts when it recorded one; else from repeated
    baseline rows (same commit as the first row); else it is unknown and said so.
    """
    valid = [r for r in rows if r["val_bpb"] is not None and r["status"] != "crash"]
    if not valid:
        return {"baseline": None, "spread": None, "k": DEFAULT_K, "source": "no results yet"}
    first = valid[0]
    repeats = [r["val_bpb"] for r in valid if r["commit"] and r["commit"] == first["commit"]]
    baseline = sum(repeats) / len(repeats)
    for rec in reversed(records):
        verdicts = rec.get("verdicts") if isinstance(rec.get("verdicts"), dict) else {}
        judge = verdicts.get("judge")
        if not isinstance(judge, dict):
            continue
        # The figure may sit on the verdict itself or on one of its parts (rule opinion, band).
        for part in [judge, *(v for v in judge.values() if isinstance(v, dict))]:
            for key in SPREAD_KEYS:
                v = part.get(key)
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                    k = part.get("k", judge.get("k"))
                    k = float(k) if isinstance(k, (int, float)) and k > 0 else DEFAULT_K
                    return {"baseline": baseline, "spread": float(v), "k": k,
                            "source": f"the Judge's {key}"}
    if len(repeats) >= 2:
        spread = max(repeats) - min(repeats)
        return {"baseline": baseline, "spread": spread or None, "k": DEFAULT_K,
                "source": f"{len(repeats)} baseline repeats"}
    return {"baseline": baseline, "spread": None, "k": DEFAULT_K, "source": "unknown (one baseline run)"}


def _pid_alive(pid) -> bool | None:
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True          # exists, owned by someone else
    return True


def now_panel(run: Run, rows: list[dict], records: list[dict], now: float | None = None) -> dict:
    """The 'Now' panel: live status from state.json, rates from results and the journal."""
    now = time.time() if now is None else now
    state, problem = data.read_json(run.file("state.json"))
    s = state or {}
    out = {"problem": problem, "phase": s.get("phase") or "unknown", "experiment": s.get("experiment"),
           "updated_at": s.get("updated_at"), "last_decision": s.get("last_decision"),
           "server_now": now, "run_started_at": None, "budget": s.get("budget")}
    done = [r for r in rows if not r["partial"]]
    n_keep = sum(r["status"] == "keep" for r in done)
    # Best: the loop's own claim first, else the lowest kept val_bpb in results.tsv.
    best = s.get("best") if isinstance(s.get("best"), dict) else None
    if not best or best.get("val_bpb") is None:
        kept = [r for r in done if r["status"] == "keep" and r["val_bpb"] is not None]
        b = min(kept, key=lambda r: r["val_bpb"], default=None)
        best = {"commit": b["commit"], "val_bpb": b["val_bpb"]} if b else None
    out["best"] = best
    kr = s.get("keep_rate")
    out["keep_rate"] = kr if isinstance(kr, (int, float)) else (n_keep / len(done) if done else None)
    out["experiments"] = len(done)
    # Tokens and cost: state.json's running totals, else the journal's sums.
    tokens = s.get("tokens") if isinstance(s.get("tokens"), dict) else None
    if tokens is None:
        tokens = {"input": sum(_num((r.get("tokens") or {}).get("input")) for r in records),
                  "output": sum(_num((r.get("tokens") or {}).get("output")) for r in records)}
    out["tokens"] = tokens
    cost = s.get("cost_usd")
    out["cost_usd"] = cost if isinstance(cost, (int, float)) else sum(_num(r.get("cost_usd")) for r in records)
    # Rates over the journal's span: experiments per hour, and the share of wall time spent
    # training (duty cycle), which is what a faster harness improves.
    starts = [r["started_at"] for r in records if isinstance(r.get("started_at"), (int, float))]
    ends = [r["ended_at"] for r in records if isinstance(r.get("ended_at"), (int, float))]
    wall = (max(ends) - min(starts)) if starts and ends and max(ends) > min(starts) else None
    # Training seconds where the journal has them, else the run's wall time (includes start-up).
    run_s = sum(_num(t.get("training", t.get("run"))) for t in
                (r.get("timings") if isinstance(r.get("timings"), dict) else {} for r in records))
    out["per_hour"] = len(ends) / (wall / 3600) if wall else None
    out["duty_cycle"] = min(1.0, run_s / wall) if wall else None
    if out["phase"] == "training" and isinstance(s.get("run_started_at"), (int, float)):
        out["run_started_at"] = s["run_started_at"]
        out["elapsed"] = max(0.0, now - s["run_started_at"])
        b = s.get("budget")
        out["remaining"] = (b - out["elapsed"]) if isinstance(b, (int, float)) else None
    alive = _pid_alive(s.get("pid"))
    busy = out["phase"] not in ("stopped", "unknown")
    out["pid_alive"] = alive
    out["stale"] = bool(state) and busy and (
        alive is False or (isinstance(s.get("updated_at"), (int, float)) and now - s["updated_at"] > STALE_STATE_S))
    return out


def _num(v) -> float:
    return float(v) if isinstance(v, (int, float)) else 0.0


def spans_for(spans: list[dict], record: dict | None) -> list[dict]:
    """The trace spans of one experiment, laid out as a timeline.

    A span belongs to the experiment when its trace is one whose spans name the experiment
    (input n/experiment); when no span names it, when it starts inside the experiment's
    [started_at, ended_at].
    """
    if not record:
        return []
    n = record.get("n")
    t0, t1 = record.get("started_at"), record.get("ended_at")
    traces = {sp.get("trace") for sp in spans
              if isinstance(sp.get("input"), dict) and n is not None
              and n in (sp["input"].get("n"), sp["input"].get("experiment"))}
    traces.discard(None)
    timed = isinstance(t0, (int, float)) and isinstance(t1, (int, float))

    def mine(sp):
        # Trace membership when the tracer named the experiment; the time window otherwise
        # (it would also catch the next proposal, prepared while this run trained).
        if traces:
            return sp.get("trace") in traces
        s = sp.get("start")
        return timed and isinstance(s, (int, float)) and t0 <= s <= t1

    picked = [sp for sp in spans if mine(sp) and isinstance(sp.get("start"), (int, float))]
    if not picked:
        return []
    lo = min(sp["start"] for sp in picked)
    hi = max(max(_num(sp.get("end")), sp["start"]) for sp in picked)
    width = max(hi - lo, 1e-6)
    by_id = {sp.get("id"): sp for sp in picked}

    def depth(sp, seen=0):
        p = by_id.get(sp.get("parent"))
        return 0 if p is None or seen > 20 else 1 + depth(p, seen + 1)

    out = []
    for sp in sorted(picked, key=lambda s: s["start"]):
        end = sp.get("end") if isinstance(sp.get("end"), (int, float)) else None
        out.append({"name": str(sp.get("name", "?")), "depth": depth(sp),
                    "left": 100 * (sp["start"] - lo) / width,
                    "width": max(0.3, 100 * ((end if end is not None else hi) - sp["start"]) / width),
                    "duration": (end - sp["start"]) if end is not None else None,
                    "open": end is None, "tokens": sp.get("tokens"), "cost": sp.get("cost"),
                    "error": sp.get("error"), "input": sp.get("input"), "output": sp.get("output")})
    return out


def experiment(run: Run, n: int) -> dict | None:
    """Everything the experiment page shows; None when row n does not exist."""
    res = data.read_results(run.file("results.tsv"))
    row = next((r for r in res.rows if r["n"] == n), None)
    if row is None:
        return None
    journal = data.read_jsonl(run.file("journal.jsonl"))
    records = [r for r in journal.records if r.get("kind", "experiment") == "experiment"]
    rec = match_journal(res.rows, records).get(n)
    problems = []
    if journal.missing:
        problems.append("journal.jsonl not found: only the results.tsv row is known")
    elif rec is None:
        problems.append("no journal record for this experiment")
    if journal.bad:
        problems.append(f"{journal.bad} line(s) of journal.jsonl could not be parsed")
    rn = rec.get("n") if rec else None
    audits = [r for r in journal.records if r.get("kind") == "audit" and rn is not None
              and rn in (r.get("n"), r.get("experiment"))]
    log_rel = (rec or {}).get("log") or (f"logs/exp-{rn:04d}.log" if isinstance(rn, int) else None)
    log, log_problem = (data.log_tail(data.inside(run.path, log_rel)) if log_rel
                        else (None, "no log recorded"))
    traces = data.read_jsonl(run.file("traces.jsonl"))
    diff = gitdiff.experiment_diff(run.git_dir, run.tag, row, rec)
    return {"row": row, "record": rec, "problems": problems + ([row["problem"]] if row["problem"] else []),
            "audits": audits, "log": log, "log_problem": log_problem, "diff": diff,
            "spans": spans_for(traces.records, rec), "traces_missing": traces.missing,
            "prev": n - 1 if n > 1 else None, "next": n + 1 if n < len(res.rows) else None}
