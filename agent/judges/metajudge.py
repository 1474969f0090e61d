"""The MetaJudge: audits the Judge's recent verdicts against the trusted metric.

Each experiment gets an audit over a sliding window of decided experiments:

- keep rate against what the metric supports (gains beyond the noise band): a judge that keeps
  far more than the metric supports is lenient;
- verdicts that contradict the metric: kept though clearly worse, or discarded though clearly
  better on the metric alone (simplicity and integrity discards are not contradictions);
- leniency towards large diffs: big diffs kept for gains that are tiny next to the band;
- how often the LLM and the rule judge disagree;
- the proposer repeating itself: near-identical diffs within the window.

It reads only what the Judge wrote into each journal record (verdicts["judge"]), so it needs no
state of its own and works the same after --resume. It returns flags; the hierarchy escalates
them to the human queue, at most once per flag kind per window (a cooldown, so a lasting bias is
one queue item, not fifty).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from agent.judges.judge import BIG_DIFF_LINES, TINY_GAIN_BANDS, near_duplicates
from harness.figures import fnum
from harness.records import Basis, ExperimentRecord

# Decided experiments the audit looks back over.
WINDOW = 20
# Fewest audited experiments before rates mean anything.
MIN_SAMPLES = 6
# Keep rate may exceed the metric-supported rate by at most this much.
LENIENCY_MARGIN = 0.3
# A discard "contradicts the metric" when the gain was at least this many bands.
CLEAR_GAIN_BANDS = 2.0
# Contradictions in the window that make a bias flag (one alone is escalated as itself).
CONTRADICTIONS_FOR_BIAS = 2
# Large diffs kept for tiny gains, in the window, that make a bias flag.
LENIENT_BIG_FOR_BIAS = 2
# LLM/rule disagreement rate that is flagged, and the fewest paired opinions to judge it on.
DISAGREEMENT_RATE = 0.4
MIN_PAIRED = 5
# Near-identical proposals in the window that are flagged.
REPEATS_FOR_FLAG = 3
# Discard bases that are not about the metric (not contradictions).
NON_METRIC_BASES = (Basis.SIMPLICITY, Basis.INTEGRITY, Basis.CRASH, Basis.GUARD)


@dataclass
class Audit:
    n: int
    metrics: dict
    flags: list[dict] = field(default_factory=list)       # {"kind", "reason"}
    contradiction: str | None = None                     # this experiment's own contradiction

    def as_dict(self) -> dict:
        return {"n": self.n, "metrics": self.metrics, "flags": self.flags, "contradiction": self.contradiction}

    @property
    def reason(self) -> str:
        parts = [f["reason"] for f in self.flags]
        if self.contradiction:
            parts.insert(0, self.contradiction)
        return "; ".join(parts) or "no bias detected"


def view(rec: ExperimentRecord) -> dict | None:
    """The audit's view of one journal experiment record, or None if it was not judged on a metric."""
    trusted, best, th = fnum(rec.decision.trusted_bpb), rec.judge_figure("best_before"), rec.judge_figure("threshold")
    if rec.status not in ("keep", "discard") or trusted is None or best is None or not th:
        return None
    basis = rec.basis
    return {"n": rec.n, "status": rec.status, "gain": best - trusted, "threshold": th,
            "net": rec.judge_figure("net_lines") or 0, "basis": basis.value if basis else "metric",
            "rule": rec.opinion("rule"), "llm": rec.opinion("llm"), "diff": rec.text("diff")}


def contradiction(v: dict) -> str | None:
    if v["status"] == "keep" and v["gain"] < -v["threshold"]:
        return f"exp {v['n']} was kept though it is worse by {-v['gain']:.6f} (band {v['threshold']:.6f})"
    if (v["status"] == "discard" and v["basis"] not in NON_METRIC_BASES
            and v["gain"] > CLEAR_GAIN_BANDS * v["threshold"]):
        return (f"exp {v['n']} was discarded though it is better by {v['gain']:.6f} "
                f"({v['gain'] / v['threshold']:.1f} bands)")
    return None


def audit(history: list[ExperimentRecord], current: ExperimentRecord) -> Audit:
    """Audit the window ending with `current` (this experiment's record as far as it is known)."""
    records = [*history, current]
    views = [v for v in (view(r) for r in records[-WINDOW:]) if v is not None]
    cur = view(current)
    a = Audit(n=current.n, metrics={"window": len(views)})
    if cur is not None:
        a.contradiction = contradiction(cur)
    if not views:
        return a
    keeps = sum(v["status"] == "keep" for v in views)
    supported = sum(v["gain"] > v["threshold"] for v in views)
    contradictions = [c for c in (contradiction(v) for v in views) if c]
    lenient_big = [v["n"] for v in views if v["status"] == "keep" and v["net"] >= BIG_DIFF_LINES
                   and v["gain"] < TINY_GAIN_BANDS * v["threshold"]]
    paired = [v for v in views if v["rule"] and v["llm"]]
    disagree = sum((v["rule"] == "keep") != (v["llm"] == "keep") for v in paired)
    repeats = [r.n for i, r in enumerate(records[-WINDOW:])
               if r.text("diff") and near_duplicates(r.text("diff"), records[-WINDOW:][:i], WINDOW)]
    a.metrics.update(keep_rate=keeps / len(views), metric_keep_rate=supported / len(views),
                     contradictions=len(contradictions), lenient_big_diffs=lenient_big,
                     llm_rule_pairs=len(paired), llm_rule_disagreement=(disagree / len(paired)) if paired else None,
                     near_duplicates=repeats)
    if len(views) >= MIN_SAMPLES and keeps / len(views) - supported / len(views) > LENIENCY_MARGIN:
        a.flags.append({"kind": "lenient", "reason": f"the judge kept {keeps}/{len(views)} while the metric "
                                                     f"supports {supported}/{len(views)}"})
    if len(contradictions) >= CONTRADICTIONS_FOR_BIAS:
        a.flags.append({"kind": "contradiction", "reason": f"{len(contradictions)} verdicts contradict the metric "
                                                           f"in the last {len(views)}: {contradictions[0]}"})
    if len(lenient_big) >= LENIENT_BIG_FOR_BIAS:
        a.flags.append({"kind": "large_diff_leniency",
                        "reason": f"large diffs kept for tiny gains: experiments {lenient_big}"})
    if len(paired) >= MIN_PAIRED and disagree / len(paired) >= DISAGREEMENT_RATE:
        a.flags.append({"kind": "llm_rule_disagreement",
                        "reason": f"LLM and rule judge disagree on {disagree}/{len(paired)} experiments"})
    if len(repeats) >= REPEATS_FOR_FLAG:
        a.flags.append({"kind": "repetition", "reason": f"near-identical proposals repeat: experiments {repeats}"})
    return a


def recently_flagged(history: list[ExperimentRecord], kind: str, window: int = WINDOW) -> bool:
    """True if a bias of this kind was already flagged (and escalated) within the window."""
    for rec in history[-window:]:
        if kind in rec.escalated_kinds():
            return True
    return False
