"""Early-stop rules tried on a night that ran every candidate to its end.

A night of the reference rule (no early stop) records every run's printed curve at points of its
budget (harness/clock.py CURVE_POINTS); scripts/bench_research.py keeps each night's journal
(journal-<base>-<rule>-<search>-<seed>.jsonl). On such a night a stop rule can be replayed: which
candidates it would have stopped against their parent, how much of their runs it would have saved,
and which of them the night's own trusted figures say were gains (a stop of a gain is the price).
The bars are agent/judges/curves.py's own `limits`, calibrated on the spread of a baseline with two
runs or more: the night's own, or (`--spread`) another night's of the same base and seeds (a
default-rule night's three baseline runs).

    uv run scripts/stop_rules.py out/br/journal-tuned-reference-local-1.jsonl \\
        --spread out/br/journal-tuned-default-local-1.jsonl

Rules: `now` (the default: stopped at the first point of curves.STOP_POINTS its curve is above the
bar), `late` (only the last point), `both` (at the last point, and only if above the bar at every
point). A gain here is a candidate whose one trusted run beat its parent's; `clear` when by more
than 2 sigma of the baseline's runs (single runs: a null may land on either side).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.judges import curves  # noqa: E402
from harness.experiment_record import ExperimentRecord, experiment_records  # noqa: E402
from harness.results import read_journal  # noqa: E402

RULES = ("now", "late", "both")


def _records(path: Path) -> list[ExperimentRecord]:
    return [r for r in experiment_records(read_journal(Path(path))[0]) if r.is_experiment]


def stop_point(rule: str, curve: dict[float, float], limits: list[list[float]] | None) -> float | None:
    """The point of its budget `rule` stops a candidate with printed `curve` at, or None."""
    if not limits:
        return None
    over = [(f, curve.get(round(f, 2)) is not None and curve[round(f, 2)] > lim) for f, lim in limits]
    if rule == "now":
        return next((f for f, above in over if above), None)
    if rule == "late":
        return over[-1][0] if over[-1][1] else None
    return over[-1][0] if all(above for _, above in over) else None


def replay(night: list[ExperimentRecord], spread: list[ExperimentRecord] | None = None) -> dict:
    """Each rule's stops on `night` (every candidate run to its end): {rule: [stop, ...]} with the
    candidate, its parent, the point and the trusted figures; and the baseline sigma used."""
    base = next((r for r in (spread or night) if r.is_baseline and r.status == "keep"), None)
    if base is None or len(curves.printed_curves(base)) < 2:
        raise SystemExit("no baseline with two runs' curves to calibrate the bars on: give --spread")
    band = base.noise_band()
    sigma = statistics.stdev(band.values) if band is not None and len(band.values) >= 2 else None
    by_commit = {r.commit: r for r in night if r.status == "keep"}
    out: dict[str, list[dict]] = {rule: [] for rule in RULES}
    candidates = 0
    for i, cand in enumerate(night):
        parent = by_commit.get(cand.parent)
        own = curves.printed_curves(cand)
        if cand.is_baseline or parent is None or not own or cand.trusted_bpb is None or parent.trusted_bpb is None:
            continue
        candidates += 1
        # the records the loop had before it, the calibrated baseline standing in for the night's own
        history = [base] + [r for r in night[:i] if not r.is_baseline]
        lim = curves.limits(history, base.commit if parent.is_baseline else parent.commit)
        for rule in RULES:
            f = stop_point(rule, own[0], lim)
            if f is not None:
                diff = cand.trusted_bpb - parent.trusted_bpb
                out[rule].append({"n": cand.n, "description": cand.description, "point": f, "diff": diff,
                                  "gain": diff < 0, "clear": sigma is not None and diff < -2 * sigma})
    return {"candidates": candidates, "sigma": sigma, "stops": out}


def render(result: dict) -> str:
    lines = [f"{result['candidates']} candidates run to their end; baseline sigma "
             + (f"{result['sigma']:.5f}" if result["sigma"] is not None else "unknown")]
    for rule in RULES:
        stops = result["stops"][rule]
        saved = sum(1.0 - s["point"] for s in stops)
        gains = [s for s in stops if s["gain"]]
        lines.append(f"{rule:5s} {len(stops):2d} stops, {saved:.1f} runs saved; gains stopped: {len(gains)} "
                     f"({sum(s['clear'] for s in gains)} clear)"
                     + "".join(f"\n        #{s['n']} {s['description']} at {s['point']:.0%}: {s['diff']:+.4f}"
                               + (" (a gain)" if s["gain"] else "") for s in stops))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("journal", help="a night's journal whose candidates all ran to their end")
    p.add_argument("--spread", help="a journal whose baseline ran twice or more (same base and seeds)")
    args = p.parse_args(argv)
    print(render(replay(_records(args.journal), _records(args.spread) if args.spread else None)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
