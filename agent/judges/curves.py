"""Early stopping (`--early-stop`): spend less on an idea whose printed curve is already far behind.

train.py prints its training loss at every step; the harness keeps it at points of the run's
budget (harness/clock.py CURVE_POINTS). That curve is the candidate's own claim, so it may only
make the harness spend *less* on an idea, never keep one: a candidate whose printed loss at a
point of its budget is above the incumbent's there by more than the baseline's own runs disagree
there (STOP_SPREADS of their spread, at least STOP_FLOOR of the loss) is ended (harness/runner.py
stopped_early) and discarded, and the time it would have taken goes to the next idea. A candidate
that prints a better curve than it trains gains nothing by it: it runs to the end and is judged
on the trusted evaluation like any other. Nor may a kept recipe's printed curve stop its successors
on more than its trusted figure supports: the incumbent's curve is the bar only where its printed
end agrees with its trusted val_bpb, and nowhere further ahead of the baseline's curve than a
multiple of its trusted gain (MID_LEAD, in printed-loss units); a curve that cannot be bounded
stops nothing.

What a stop costs is measured, not assumed: scripts/bench_research.py runs each stopped candidate
to its end beside its parent on fresh seeds (the false-stop rate: the gains it stopped) and
measures the true gain at equal device-seconds.
"""
from __future__ import annotations

import statistics

from harness.clock import ClockFigures
from harness.experiment_record import ExperimentRecord

# The points of the budget a candidate is checked at: late enough that the early steps' noise
# has settled, early enough to save a run's worth of time every two or three stops.
STOP_POINTS = (0.3, 0.5)
# How far behind the incumbent's printed loss a candidate must be there: this many of the
# baseline's own runs' spread at that point (seed noise of a curve), and never less than this
# fraction of the incumbent's loss (two baseline runs can agree by chance).
STOP_SPREADS = 4.0
STOP_FLOOR = 0.01
# How far an incumbent's printed end may sit from what its trusted val_bpb says it should print
# (the baseline's printed end per trusted bpb, scaled), as a fraction: train and validation loss
# agree within a few percent on these short runs (2.6% apart at most over a night of the local
# search at 16 steps); a curve printed lower than it trained does not.
END_AGREES = 0.05
# How far ahead of the baseline's curve, mid-run, an incumbent's printed curve may be believed, in
# multiples of its trusted gain at the end: an honest deeper model leads by more early than it
# ends (DEPTH 5 -> 6 on the research bench: 6x at 30% of its budget, 5.5x at 50%; other keeps
# 0.5-0.7x). A kept recipe that printed a lower curve than it trained can stop its successors by
# no more than this much of what it proved.
MID_LEAD = 8.0


def printed_curves(rec: ExperimentRecord) -> list[dict[float, float]]:
    """The printed curves of the record's own commit's runs."""
    out = []
    for c in rec.own_clock_runs():
        fig = ClockFigures.from_dict(c)
        if fig is not None and fig.curve:
            out.append({round(f, 2): v for f, v in fig.curve})
    return out


def limits(history: list[ExperimentRecord], incumbent: str | None) -> list[list[float]] | None:
    """[[point, loss limit], ...] for a candidate of `incumbent`, or None while the baseline has no
    two curves (no spread to calibrate on), the incumbent none, or the incumbent's printed curve
    cannot be bounded by the trusted figures (then every candidate runs to its end)."""
    base = next((r for r in history if r.is_experiment and r.is_baseline and r.status == "keep"), None)
    inc = next((r for r in reversed(history) if r.is_experiment and r.status == "keep" and r.commit == incumbent), None)
    if base is None or inc is None or not isinstance(base.commit, str):
        return None
    base_curves, inc_curves = printed_curves(base), printed_curves(inc)
    if len(base_curves) < 2 or not inc_curves:
        return None
    lead = trusted_lead(base, inc, base_curves, inc_curves)
    if lead is None:
        return None
    out = []
    for f in STOP_POINTS:
        b = [c[f] for c in base_curves if f in c]
        i = [c[f] for c in inc_curves if f in c]
        if len(b) < 2 or not i:
            continue
        bar = max(statistics.fmean(i), statistics.fmean(b) - MID_LEAD * lead)   # never far ahead of what it proved
        out.append([f, bar + max(STOP_SPREADS * statistics.stdev(b), STOP_FLOOR * abs(bar))])
    return out or None


def trusted_lead(base: ExperimentRecord, inc: ExperimentRecord, base_curves: list[dict], inc_curves: list[dict]) -> float | None:
    """How far below the baseline's printed curve the incumbent's may be believed, in printed-loss
    units: its trusted gain over the baseline, converted by the baseline's printed end per trusted
    bpb. None when that cannot be said (no trusted figures or printed ends) or when the incumbent's
    printed end disagrees with its trusted figure by more than END_AGREES."""
    b_end = [c[1.0] for c in base_curves if 1.0 in c]
    i_end = [c[1.0] for c in inc_curves if 1.0 in c]
    tb, ti = base.trusted_bpb, inc.trusted_bpb
    if not b_end or not i_end or not isinstance(tb, (int, float)) or not isinstance(ti, (int, float)) or tb <= 0:
        return None
    per_bpb = statistics.fmean(b_end) / tb
    expected = ti * per_bpb
    if abs(statistics.fmean(i_end) - expected) > END_AGREES * abs(expected):
        return None
    return max(0.0, (tb - ti) * per_bpb)
