"""The rule judge: keep, discard, crash or contested, from the trusted metric and the diff; and the
MetaJudge that audits its recent verdicts, and how an LLM judge's opinion combines with the rule's
(combine: the metric decides, the LLM can veto at LLM_VETO_CONFIDENCE) (at the end of this file).

Noise-aware. The hierarchy (agent/judges/hierarchy.py) pools the noise over every trusted run of the
tag and hands rule_opinion the margin a gain must clear for this decision (evidence.Margin: the
threshold, the sigma it rests on as `spread`, and k = threshold / spread). A change is kept only if
its trusted val_bpb beats the best by more than the threshold. Inside it a gain is "contested".

Simplicity (program.md): a gain that is tiny next to the band but adds many lines is discarded;
a change that deletes code with an equal result is kept: better than the best, or worse by at
most EQUAL_LOSS_BANDS of the band.

Efficiency (program.md): a change with an equal result (as above) is kept when it is clearly cheaper
to serve: its KV-cache bytes or decode FLOPs per token (inference/cost.py, from the artifacts'
configs and shapes, never from timings) are at least EFFICIENCY_MARGIN below the best's, and
neither figure grows. Its decision basis is "efficiency".
"""
from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from typing import Protocol

from harness.results_table import fnum
from harness.decision import Basis
from harness.experiment_record import ExperimentRecord

# Net added code lines that count as "much added complexity".
BIG_DIFF_LINES = 25
# A gain below this many bands is "tiny" when weighed against a big diff.
TINY_GAIN_BANDS = 2.0
# Net removed code lines that make a change a simplification.
DELETION_LINES = 3
# Diffs this similar (difflib ratio over the tokens of their changed lines) are "the same idea
# again". Token-level, so a one-line knob diff with another value is a different experiment, while
# a long diff with one number changed is the same idea.
NEAR_DUPLICATE_RATIO = 0.92
# A change inside the band counts as cheaper to serve when a serving figure (KV bytes or decode
# FLOPs per token) falls by at least this fraction: beyond what a knob nudge of a few percent
# gives, and roughly where a serving difference is measurable at all.
EFFICIENCY_MARGIN = 0.10
# ...and no serving figure grows by more than this fraction (trading KV for FLOPs is no clear win).
EFFICIENCY_MAX_GROWTH = 0.01
# An "equal result" (a simplicity or efficiency keep) may measure worse than the best by at most
# this fraction of the band. Half the band is ~1.3 standard errors (P(better) ~0.1); worse than that
# is more likely a regression the noise hides than a tie: with the whole band, a model measured
# 0.0895 worse (P(better) 0.012) counted as equal and was kept as cheaper to serve.
EQUAL_LOSS_BANDS = 0.5
# A knob line of train.py as a diff shows it: "+MATRIX_LR = 0.04  # comment".
KNOB_LINE_RE = re.compile(r"^[+-]([A-Z][A-Z0-9_]*) = ([^#\s]+)")
# Two knob-only proposals are the same experiment when every moved knob lands within this
# fraction of the earlier value (below the offline search's smallest step: a sixth of a range, or x sqrt 2).
KNOB_NEAR_RTOL = 0.01
TOKEN_RE = re.compile(r"\d+(?:\.\d+)?(?:[eE]-?\d+)?|\w+|\S")


class NoiseMargin(Protocol):
    """What rule_opinion reads of its band. The hierarchy passes an evidence.Margin (this decision's
    margin) or, for a crash, evidence.Band (the baseline's figures, whose threshold and k are None
    until a commit has two runs: a crash compares nothing, so it only records them)."""

    @property
    def spread(self) -> float: ...

    @property
    def threshold(self) -> float | None: ...

    @property
    def k(self) -> float | None: ...


@dataclass
class Opinion:
    judge: str                   # "rule" | "llm"
    status: str                  # keep | discard | crash | contested
    reason: str
    confidence: float            # 0..1
    details: dict = field(default_factory=dict)
    basis: Basis = Basis.METRIC  # what the call rests on (simplicity and efficiency rules say so)

    def as_dict(self) -> dict:
        return {"judge": self.judge, "status": self.status, "reason": self.reason,
                "confidence": round(self.confidence, 3), **self.details}


def serving_savings(cost: dict | None, best_cost: dict | None) -> dict | None:
    """Relative saving per serving figure (0.2 = 20% cheaper than the best; negative = dearer), or
    None when either side lacks the figures."""
    if not cost or not best_cost:
        return None
    out = {}
    for key in ("kv_bytes_per_token", "decode_flops_per_token"):
        mine, theirs = cost.get(key), best_cost.get(key)
        if mine is None or not theirs:
            return None
        out[key] = 1.0 - mine / theirs
    return out


def serving_costs(best: dict | None, history: list[ExperimentRecord], serving: dict | None
                  ) -> tuple[dict | None, dict | None]:
    """Serving figures of this experiment's model (`serving`, its trusted evaluation's) and of the
    best's, both as the trusted evaluator measured them from the recorded graphs (never from a
    config train.py wrote)."""
    commit = best["commit"] if best else None
    best_rec = next((r for r in reversed(history) if r.is_experiment and r.status == "keep" and r.commit == commit), None)
    if best_rec is None:
        return None, None
    return serving, best_rec.serving()

def clearly_cheaper(savings: dict | None) -> str | None:
    """A reason when the savings clear EFFICIENCY_MARGIN with no figure growing, else None."""
    if not savings or min(savings.values()) < -EFFICIENCY_MAX_GROWTH:
        return None
    won = {k: v for k, v in savings.items() if v >= EFFICIENCY_MARGIN}
    if not won:
        return None
    names = {"kv_bytes_per_token": "KV bytes/token", "decode_flops_per_token": "decode FLOPs/token"}
    return ", ".join(f"{names[k]} -{100 * v:.0f}%" for k, v in won.items())


def rule_opinion(*, trusted_bpb: float | None, best_bpb: float | None, band: NoiseMargin, lines: dict,
                 crash: str | None = None, similar_to: list | None = None,
                 serving: dict | None = None) -> Opinion:
    """The rule judge's call. `lines` is {"added", "removed", "net"} of code lines in the diff
    (guard.diff_lines; {} for no diff);
    `serving` the relative savings of serving_savings() against the best, when known."""
    facts = {"trusted_bpb": trusted_bpb, "best_bpb": best_bpb, "threshold": band.threshold,
             "spread": band.spread, "net_lines": lines["net"] if lines else 0, "similar_to": similar_to or []}
    if crash:
        return Opinion("rule", "crash", f"run crashed: {crash}", 1.0, facts, Basis.CRASH)
    if trusted_bpb is None or not math.isfinite(trusted_bpb):
        return Opinion("rule", "crash", f"no trusted val_bpb ({trusted_bpb})", 1.0, facts, Basis.CRASH)
    if best_bpb is None or not math.isfinite(best_bpb):
        return Opinion("rule", "keep", f"first result: trusted val_bpb {trusted_bpb:.6f}", 1.0, facts)
    gain = best_bpb - trusted_bpb
    th = band.threshold
    facts["improvement"] = gain
    net = facts["net_lines"]
    seen = f"; near-identical to experiment(s) {similar_to}" if similar_to else ""
    if gain > th:
        if net >= BIG_DIFF_LINES and gain < TINY_GAIN_BANDS * th:
            return Opinion("rule", "discard", f"simplicity: gain {gain:.6f} is under {TINY_GAIN_BANDS:g} bands "
                           f"({TINY_GAIN_BANDS * th:.6f}) for +{net} lines of code{seen}", 0.6, facts,
                           Basis.SIMPLICITY)
        conf = min(0.99, 0.6 + 0.1 * (gain / th - 1))
        return Opinion("rule", "keep", f"trusted val_bpb {trusted_bpb:.6f} beats best {best_bpb:.6f} by "
                       f"{gain:.6f}, beyond the noise band {th:.6f} ({band.k:g}x spread {band.spread:.6f}){seen}",
                       conf, facts)
    if abs(gain) <= th:
        cheaper = clearly_cheaper(serving)
        if serving is not None:
            facts["serving_savings"] = serving
        tie = -gain <= EQUAL_LOSS_BANDS * th * (1 + 1e-9)     # (1e-9: half the band itself is a tie)
        if cheaper and tie:
            return Opinion("rule", "keep", f"efficiency: {cheaper} at an equal result ({trusted_bpb:.6f} vs "
                           f"best {best_bpb:.6f}, within the band {th:.6f}){seen}", 0.65, facts,
                           Basis.EFFICIENCY)
        if net <= -DELETION_LINES and tie:
            return Opinion("rule", "keep", f"simplicity: {-net} fewer lines of code with an equal result "
                           f"({trusted_bpb:.6f} vs best {best_bpb:.6f}, within the band {th:.6f})", 0.7, facts,
                           Basis.SIMPLICITY)
        if gain > 0:
            return Opinion("rule", "contested", f"gain {gain:.6f} is inside the noise band {th:.6f}: "
                           f"{trusted_bpb:.6f} vs best {best_bpb:.6f}{seen}", 0.5, facts)
        unequal = "" if tie or not (cheaper or net <= -DELETION_LINES) else (
            f"; {'cheaper' if cheaper else 'shorter'}, but a loss of {-gain:.6f} is more than "
            f"{EQUAL_LOSS_BANDS:g} band: not an equal result")
        return Opinion("rule", "discard", f"no gain: {trusted_bpb:.6f} vs best {best_bpb:.6f} "
                       f"(band {th:.6f}){unequal}{seen}", 0.7, facts)
    return Opinion("rule", "discard", f"worse: {trusted_bpb:.6f} vs best {best_bpb:.6f}, by {-gain:.6f} "
                   f"(band {th:.6f}){seen}", min(0.99, 0.7 + 0.05 * (-gain / th)), facts)


def changed_lines(diff: str) -> list[str]:
    """Tokens of the +/- code lines of a diff, without headers: what two proposals are compared on."""
    lines = [line for line in (diff or "").splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    return TOKEN_RE.findall("\n".join(lines))


def knob_moves(diff: str) -> dict[str, str] | None:
    """{knob: new literal} when every changed line of the diff is a CAPS knob line, else None."""
    lines = [line for line in (diff or "").splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    if not lines or not all(KNOB_LINE_RE.match(line) for line in lines):
        return None
    return {m.group(1): m.group(2) for line in lines if line[0] == "+" for m in [KNOB_LINE_RE.match(line)]}


def _close(a: str, b: str) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return a == b
    return abs(x - y) <= KNOB_NEAR_RTOL * max(abs(x), abs(y)) or x == y


def near_duplicates(diff: str, history: list[ExperimentRecord], window: int = 50) -> list[int]:
    """Experiment numbers (recent first) whose diff is near-identical to this one. Knob-only
    diffs are compared by their values (the same knobs, each within KNOB_NEAR_RTOL of the earlier
    value): a knob moved the other way, or twice as far, is another experiment, whatever its
    comment says. Other diffs by their tokens."""
    mine = changed_lines(diff)
    if not mine:
        return []
    moves = knob_moves(diff)
    out = []
    for rec in reversed(history[-window:]):
        theirs_diff = rec.text("diff")
        if moves is not None and (theirs := knob_moves(theirs_diff)) is not None:
            if theirs.keys() == moves.keys() and all(_close(moves[k], theirs[k]) for k in moves):
                out.append(rec.n)
            continue
        theirs = changed_lines(theirs_diff)
        if theirs and difflib.SequenceMatcher(None, mine, theirs, autojunk=False).ratio() >= NEAR_DUPLICATE_RATIO:
            out.append(rec.n)
    return out


# ---- The MetaJudge: audits the Judge's recent verdicts against the trusted metric.
#
# Each experiment gets an audit over a sliding window of decided experiments:
#
# - keep rate against what the metric supports (gains beyond the noise band): a judge that keeps
#   far more than the metric supports is lenient;
# - verdicts that contradict the metric: kept though clearly worse, or discarded though clearly
#   better on the metric alone (simplicity and integrity discards are not contradictions);
# - leniency towards large diffs: big diffs kept for gains that are tiny next to the band;
# - how often the LLM and the rule judge disagree;
# - the proposer repeating itself: near-identical diffs within the window.
#
# It reads only what the Judge wrote into each journal record (verdicts["judge"]), so it needs no
# state of its own and works the same after --resume. It returns flags; the hierarchy escalates
# them to the human queue, at most once per flag kind per window (a cooldown, so a lasting bias is
# one queue item, not fifty).

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
    trusted, best, th = fnum(rec.trusted_bpb), rec.judge_figure("best_before"), rec.judge_figure("threshold")
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


# An LLM "discard"/"contested" at this confidence or more turns a rule keep into a contested discard.
LLM_VETO_CONFIDENCE = 0.7


def combine(rule: Opinion, llm: Opinion | None):
    """(status, basis, reason, escalation kind or None). The metric decides; the LLM can veto."""
    basis = rule.basis
    if rule.status == "contested":
        return "discard", basis, f"contested: {rule.reason}", "contested"
    if llm is None:
        return rule.status, basis, rule.reason, None
    st, conf = llm.status, round(llm.confidence or 0.0, 3)   # as the journal records it
    if rule.status == "keep" and st in ("discard", "contested") and conf >= LLM_VETO_CONFIDENCE:
        return ("discard", Basis.LLM_VETO, f"contested: the rule judge would keep ({rule.reason}) but the LLM "
                f"judge says {st} at {conf:.2f}: {llm.reason}", "disagreement")
    if rule.status == "discard" and st == "keep" and conf >= LLM_VETO_CONFIDENCE:
        return "discard", basis, f"{rule.reason} (the LLM judge would keep: {llm.reason})", "disagreement"
    suffix = f" (LLM judge agrees: {llm.reason})" if st == rule.status else ""
    return rule.status, basis, rule.reason + suffix, None
