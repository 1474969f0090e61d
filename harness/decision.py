"""What a judge decided and on what grounds: the Decision a reviewer returns, its typed Basis (a
str Enum: the journal keeps the same strings), and VerdictReads, the typed reads of a verdicts
dict that a Decision and a journal record (harness/experiment_record.py) share; and, at the end,
EvidenceFigures: a record's `evidence` read safely, what a decision rested on.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum

from harness.results_table import as_dict, as_int, as_str, fnum

# The judge's figures a reviewer is shown (the LLM judge's prompt, a queue item's payload).
FIGURE_KEYS = ("best_before", "threshold", "spread", "runs", "improvement", "net_lines")


class VerdictReads:
    """Typed reads of `self.verdicts` (what each judge said, as the journal stores it): shared by
    a Decision in memory and the ExperimentRecord read back. Every read is safe on hostile data."""
    verdicts: dict

    def verdict(self, part: str) -> dict:
        """verdicts[part] ("judge", "verify", "metajudge", "guard"...), or {}."""
        return as_dict(as_dict(self.verdicts).get(part))

    @property
    def judge(self) -> dict:
        """verdicts["judge"] (the judge's figures), or {}."""
        return self.verdict("judge")

    @property
    def escalated(self) -> bool:
        """On the human queue as well (an escalation the judge filed with this decision)."""
        return bool(self.judge.get("escalations"))

    @property
    def verify(self) -> dict:
        """verdicts["verify"] (harness/verify.py VerifyResult.as_dict()), or {}."""
        return self.verdict("verify")

    @property
    def metajudge(self) -> dict:
        """verdicts["metajudge"] (the MetaJudge's audit), or {}."""
        return self.verdict("metajudge")

    def verify_figure(self, key: str) -> float | None:
        """One figure of the trusted evaluation (trusted_bpb, printed_bpb, seconds), else None."""
        return fnum(self.verify.get(key))

    @property
    def verify_reason(self) -> str | None:
        return as_str(self.verify.get("reason"))

    def opinion_of(self, part: str) -> dict | None:
        """One opinion the judge weighed, as stored: verdicts.judge[part] (part "rule", "llm")."""
        v = self.judge.get(part)
        return v if isinstance(v, dict) else None

    @property
    def metajudge_flags(self) -> list | None:
        """The MetaJudge's flags (each {"kind", "reason", ...}), None without an audit."""
        v = self.metajudge.get("flags")
        return v if isinstance(v, list) else None

    def judge_figures(self) -> dict:
        """The judge's FIGURE_KEYS, None where it has none (the figures a reviewer is shown)."""
        jd = self.judge
        return {k: jd.get(k) for k in FIGURE_KEYS}

    @property
    def escalations(self) -> list[tuple[str, int | None]]:
        """(kind, queue item id or None) of each escalation the judge recorded."""
        raw = self.judge.get("escalations")
        return [(e["kind"], e.get("id") if isinstance(e.get("id"), int) else None)
                for e in (raw if isinstance(raw, list) else [])
                if isinstance(e, dict) and isinstance(e.get("kind"), str)]

    def verdict_cost(self) -> float:
        """What the judges' own LLM calls cost (each verdict's cost_usd)."""
        return sum(fnum(v.get("cost_usd")) or 0.0 for v in as_dict(self.verdicts).values() if isinstance(v, dict))


class Basis(str, Enum):
    """What a decision rests on; the journal stores the value (verdicts.judge.basis)."""
    BASELINE = "baseline"        # the unmodified train.py, measured (with repeats) for the noise band
    METRIC = "metric"            # the trusted val_bpb against the best and the noise band
    SIMPLICITY = "simplicity"    # program.md's simplicity rule (tiny gain for much code; deletions)
    EFFICIENCY = "efficiency"    # equal result, clearly cheaper to serve
    LLM_VETO = "llm_veto"        # the LLM judge vetoed a rule keep
    INTEGRITY = "integrity"      # the trusted evaluation failed or the run broke the rules
    CRASH = "crash"              # the run crashed
    GUARD = "guard"              # rejected before running
    CONFLICT = "conflict"        # --workers: a late keep that cannot be stacked on the moved tip

    @classmethod
    def parse(cls, value) -> "Basis | None":
        """The Basis a stored string names, or None (unknown, missing, not a string)."""
        try:
            return cls(value) if isinstance(value, str) else None
        except ValueError:
            return None


# What a judge's call on one run can say. keep, discard and crash are decisions the loop records;
# "again" asks for one more run before the judge decides (a baseline repeat, a confirming run, a
# run that replaces one the machine disturbed, or a run of the incumbent for a fair bar).
DECIDED = ("keep", "discard", "crash")
AGAIN = "again"


@dataclass
class Decision(VerdictReads):
    """A judge's call on one run (the Reviewer protocol, agent/judges/reviewer.py): keep, discard
    or crash (recorded), or again (`Decision.again`: one more run first). A recorded decision the
    judge also put on the human queue says so (`escalated`)."""
    status: str                      # keep | discard | crash | again
    reason: str
    trusted_bpb: float | None = None
    verdicts: dict = field(default_factory=dict)
    basis: Basis = Basis.METRIC      # set by the judge where it decides, never parsed from `reason`
    leaning: str | None = None       # "again" only: the call the judge would make on the runs so far
    run_next: str | None = None      # "again" only: this commit (the incumbent) runs next; None: the candidate

    def __post_init__(self):
        self.basis = Basis(self.basis)   # a plain string from a caller becomes the enum (or raises)
        if self.status not in (*DECIDED, AGAIN):
            raise ValueError(f"a decision is one of {(*DECIDED, AGAIN)}, not {self.status!r}")
        if (self.status == AGAIN) != (self.leaning in DECIDED):
            raise ValueError("a leaning goes with 'again', and only with it")

    @classmethod
    def again(cls, leaning: str, reason: str, trusted_bpb: float | None = None, verdicts: dict | None = None, *,
              basis: Basis = Basis.METRIC, run_next: str | None = None) -> "Decision":
        """One more run before the judge decides; `leaning`: its call on the runs so far."""
        return cls(AGAIN, reason, trusted_bpb, dict(verdicts or {}), basis=basis, leaning=leaning, run_next=run_next)

    @property
    def is_again(self) -> bool:
        return self.status == AGAIN

    def as_leaning(self, why: str) -> "Decision":
        """An "again" taken as its leaning (the runs so far are all there will be): `why` is added."""
        return Decision(self.leaning or self.status, f"{self.reason} ({why})", self.trusted_bpb, self.verdicts,
                        basis=self.basis)


# ---------------------------------------------------------------- the journal's experiment record


# ---- A record's `evidence` (agent/judges/hierarchy.py), read safely: what a decision rested on.
#
# EvidenceFigures is ExperimentRecord.evidence_view() (harness/experiment_record.py, which
# re-exports these names): the candidate's runs (EvidenceRun), the incumbent's side (BarFigures)
# and the test the call used (ComparisonFigures). Read from disk it is data: nothing here raises
# on a hostile record.


@dataclass
class EvidenceRun:
    bpb: float | None
    seed: int | None
    used: bool
    why: str | None                       # why it is no evidence (disturbed), else None
    log: str | None
    pace_s: float | None = None           # seconds per step by the harness clock
    n: int | None = None                  # the experiment it was run for (an incumbent's: a later one's)
    # What the judge's screen and pairing read of a run (agent/judges/evidence.py Sample), so a
    # judge that reads its runs back from the journal decides as the one that saw them (None: an
    # older record, or not measured).
    load: float | None = None             # the machine's load factor while it trained
    other_cores: float | None = None      # the others' busy cores while it trained
    within: str | None = None             # the machine's load changed while it trained
    over: str | None = None               # over its clock limit, short of a cheat
    at: float | None = None               # when it was judged


@dataclass
class BarFigures:
    """The incumbent's side of a decision (the evidence's "incumbent", and the comparison's mean)."""
    commit: str | None = None
    runs: list = field(default_factory=list)   # its runs (EvidenceRun)
    mean: float | None = None             # the bar: the mean of its used runs
    remembered: bool = False              # the bar was the loop's remembered figure (no runs known)


@dataclass
class ComparisonFigures:
    """The test the call used (the evidence's "comparison" and "noise", and its p_keep)."""
    gain: float | None = None
    margin: float | None = None
    p_better: float | None = None
    p_keep: float | None = None
    sigma: float | None = None
    df: float | None = None               # the pooled sigma's (an int), or Welch's where a side is erratic
    se: float | None = None
    erratic: list = field(default_factory=list)          # sides whose runs disagree beyond the noise


@dataclass
class RuleFigures:
    """What a one-run rule recorded (the evidence's "rule"): the default rule's advance on the
    incumbent's shrunk value (agent/judges/advance.py), or the reference rule's keep-if-lower; and
    whether the commit was confirmed since (agent/judges/confirm.py writes that in its own record)."""
    rule: str | None = None               # default | reference
    decided_by: str | None = None         # the rule, or "strict" where the strict judge took the decision over
    run: float | None = None              # the candidate's trusted figure
    bar: float | None = None              # what it was compared with (shrunk value, or best recorded)
    bar_sd: float | None = None
    sigma: float | None = None
    effect_d: float | None = None         # the incumbent's shrunk value minus the run (a first-run effect)
    effect_var: float | None = None
    surprise: float | None = None         # P(an effect this large) under the night's prior
    p_better: float | None = None
    estimate_mean: float | None = None    # the commit's own shrunk value, and its variance
    estimate_var: float | None = None
    parent_mean: float | None = None      # the estimate of the commit it was advanced on
    parent_var: float | None = None

    @classmethod
    def of(cls, d) -> "RuleFigures | None":
        if not isinstance(d, dict):
            return None
        eff = d.get("effect") if isinstance(d.get("effect"), dict) else {}
        est = d.get("estimate") if isinstance(d.get("estimate"), dict) else {}
        par = est.get("parent") if isinstance(est.get("parent"), dict) else {}
        return cls(rule=as_str(d.get("rule")), decided_by=as_str(d.get("decided_by")), run=fnum(d.get("run")),
                   bar=fnum(d.get("bar")),
                   bar_sd=fnum(d.get("bar_sd")), sigma=fnum(d.get("sigma")), effect_d=fnum(eff.get("d")),
                   effect_var=fnum(eff.get("var")), surprise=fnum(d.get("surprise")), p_better=fnum(d.get("p_better")),
                   estimate_mean=fnum(est.get("mean")), estimate_var=fnum(est.get("var")),
                   parent_mean=fnum(par.get("mean")), parent_var=fnum(par.get("var")))


@dataclass
class EvidenceFigures:
    """A record's `evidence` (agent/judges/hierarchy.py), read safely: what the decision rested on.
    The candidate's runs here, the incumbent's side and the test in their parts."""
    call: str | None = None               # keep | discard | more | undecided | baseline
    why: str | None = None
    runs: list = field(default_factory=list)             # the candidate's (or the baseline's) runs
    has_runs: bool = False                # the candidate's runs were recorded (a list; older journals: none)
    incumbent: BarFigures = field(default_factory=BarFigures)
    comparison: ComparisonFigures = field(default_factory=ComparisonFigures)
    rule: RuleFigures | None = None       # a one-run rule's figures (default: the advance; reference)

    @classmethod
    def of(cls, ev) -> "EvidenceFigures | None":
        if not isinstance(ev, dict) or not ev:
            return None

        def runs(raw):
            out = []
            for r in raw if isinstance(raw, list) else []:
                if isinstance(r, dict):
                    out.append(EvidenceRun(fnum(r.get("bpb")), as_int(r.get("seed")), r.get("used") is not False,
                                           as_str(r.get("why")), as_str(r.get("log")), fnum(r.get("pace_s")),
                                           as_int(r.get("n")), fnum(r.get("load")), fnum(r.get("other_cores")),
                                           as_str(r.get("within")), as_str(r.get("over")), fnum(r.get("at"))))
            return out
        cand = ev.get("candidate") if isinstance(ev.get("candidate"), dict) else {}
        inc = ev.get("incumbent") if isinstance(ev.get("incumbent"), dict) else {}
        cmp = ev.get("comparison") if isinstance(ev.get("comparison"), dict) else {}
        noise = ev.get("noise") if isinstance(ev.get("noise"), dict) else {}
        bar = BarFigures(commit=as_str(inc.get("commit")), runs=runs(inc.get("runs")),
                         mean=fnum(cmp.get("incumbent_mean")), remembered=inc.get("remembered") is True)
        test = ComparisonFigures(gain=fnum(cmp.get("gain")), margin=fnum(cmp.get("margin")),
                                 p_better=fnum(cmp.get("p_better")), p_keep=fnum(ev.get("p_keep")),
                                 sigma=fnum(cmp.get("sigma", noise.get("sigma"))),
                                 df=fnum(cmp.get("df", noise.get("df"))), se=fnum(cmp.get("se")),
                                 erratic=[x for x in cmp.get("erratic") or [] if x in ("candidate", "incumbent")]
                                 if isinstance(cmp.get("erratic"), list) else [])
        return cls(call=as_str(ev.get("call")), why=as_str(ev.get("why")), runs=runs(cand.get("runs")),
                   has_runs=isinstance(cand.get("runs"), list), incumbent=bar, comparison=test,
                   rule=RuleFigures.of(ev.get("rule")))

    def as_dict(self) -> dict:
        """The figures flat, as the dashboard's /api/experiment has always given them."""
        inc, t = self.incumbent, self.comparison
        return {"call": self.call, "why": self.why, "runs": [asdict(r) for r in self.runs], "has_runs": self.has_runs,
                "incumbent_commit": inc.commit, "incumbent_runs": [asdict(r) for r in inc.runs],
                "incumbent_mean": inc.mean, "remembered": inc.remembered, "gain": t.gain, "margin": t.margin,
                "p_better": t.p_better, "p_keep": t.p_keep, "sigma": t.sigma, "df": t.df, "se": t.se,
                "erratic": list(t.erratic), "rule": asdict(self.rule) if self.rule is not None else None}

    def own_runs(self) -> list[EvidenceRun]:
        """The candidate's runs made for this decision: numbered as its latest run (a baseline that
        continued an interrupted one lists the earlier record's runs too, numbered as that record)."""
        return [r for r in self.runs if r.n is None or r.n == self.runs[-1].n]

    def fresh_incumbent_runs(self) -> list[EvidenceRun]:
        """The incumbent's runs made for this decision (agent/judges/stats.py INCUMBENT_RUNS):
        those numbered as the candidate's own runs."""
        own = {r.n for r in self.own_runs() if r.n is not None}
        return [r for r in self.incumbent.runs if r.n is not None and r.n in own]

    @property
    def runs_spent(self) -> int:
        """Training runs this decision took: the candidate's own and the incumbent's made for it."""
        return len(self.own_runs()) + len(self.fresh_incumbent_runs())

    def summary(self) -> str:
        """One line: the runs, the bar, the noise and the test the decision used."""
        r = self.rule
        if r is not None and r.decided_by == "default" and r.run is not None and r.bar is not None:
            return (f"1 run of its own {r.run:.6f} against the incumbent's shrunk value {r.bar:.6f}"
                    + (f" (+-{r.bar_sd:.6f})" if r.bar_sd is not None else "")
                    + (f"; its own shrunk value {r.estimate_mean:.6f}" if r.estimate_mean is not None else "")
                    + (f"; P(better) {r.p_better:.3f}" if r.p_better is not None else "")
                    + (f"; sigma {r.sigma:.6f}" if r.sigma is not None else ""))
        if r is not None and r.decided_by == "reference" and r.run is not None:
            return f"1 run of its own {r.run:.6f} against the best recorded " + \
                (f"{r.bar:.6f}" if r.bar is not None else "(none yet)") + " (the reference rule)"
        used = [r.bpb for r in self.runs if r.used and r.bpb is not None]
        left = sum(1 for r in self.runs if not r.used)
        parts = [f"{len(used)} run(s) of its own [{', '.join(f'{v:.6f}' for v in used)}]"
                 + (f" ({left} disturbed, left out)" if left else "")]
        inc, t = self.incumbent, self.comparison
        if inc.commit or inc.runs:
            m = len([r for r in inc.runs if r.used])
            bar = f"{inc.mean:.6f}" if inc.mean is not None else "-"
            fresh = self.fresh_incumbent_runs()
            parts.append(f"against the incumbent {str(inc.commit or '?')[:7]}'s "
                         + ("remembered figure" if inc.remembered else f"{m} run(s)")
                         + (f", {len(fresh)} of them run again for this decision" if fresh else "") + f" (mean {bar})")
        if t.sigma is not None:
            parts.append(f"sigma {t.sigma:.6f} ({t.df:.3g} df)" if t.df is not None else f"sigma {t.sigma:.6f}")
        if t.erratic:
            parts.append(f"the {' and '.join(t.erratic)}'s runs disagree beyond it: its own spread (Welch)")
        if t.gain is not None:
            parts.append(f"gain {t.gain:+.6f}" + (f" vs margin {t.margin:.6f}" if t.margin is not None else ""))
        if t.p_better is not None:
            parts.append(f"P(better) {t.p_better:.4f} (keep at >= {t.p_keep or 0.99:g})")
        return "; ".join(parts)
