"""A record's `evidence` (agent/judges/hierarchy.py), read safely: what a decision rested on.

EvidenceFigures is ExperimentRecord.evidence_view() (harness/experiment_record.py, which
re-exports these names): the candidate's runs (EvidenceRun), the incumbent's side (BarFigures)
and the test the call used (ComparisonFigures). Read from disk it is data: nothing here raises
on a hostile record.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from harness.figures import as_int as _int, as_str as _str, fnum

@dataclass
class EvidenceRun:
    bpb: float | None
    seed: int | None
    used: bool
    why: str | None                       # why it is no evidence (disturbed), else None
    log: str | None
    pace_s: float | None = None           # seconds per step by the harness clock
    n: int | None = None                  # the experiment it was run for (an incumbent's: a later one's)
    # What the judge's screen reads of a run besides its pace (agent/judges/evidence.py Sample), so a
    # judge that reads its runs back from the journal decides as the one that saw them (None: an
    # older record, or not measured).
    load: float | None = None             # the machine's load factor while it trained
    flops_rate: float | None = None       # FLOPs per second
    within: str | None = None             # its own pace says it was slowed mid-run
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
class EvidenceFigures:
    """A record's `evidence` (agent/judges/hierarchy.py), read safely: what the decision rested on.
    The candidate's runs here, the incumbent's side and the test in their parts."""
    call: str | None = None               # keep | discard | more | undecided | baseline
    why: str | None = None
    runs: list = field(default_factory=list)             # the candidate's (or the baseline's) runs
    has_runs: bool = False                # the candidate's runs were recorded (a list; older journals: none)
    incumbent: BarFigures = field(default_factory=BarFigures)
    comparison: ComparisonFigures = field(default_factory=ComparisonFigures)

    @classmethod
    def of(cls, ev) -> "EvidenceFigures | None":
        if not isinstance(ev, dict) or not ev:
            return None

        def runs(raw):
            out = []
            for r in raw if isinstance(raw, list) else []:
                if isinstance(r, dict):
                    out.append(EvidenceRun(fnum(r.get("bpb")), _int(r.get("seed")), r.get("used") is not False,
                                           _str(r.get("why")), _str(r.get("log")), fnum(r.get("pace_s")),
                                           _int(r.get("n")), fnum(r.get("load")), fnum(r.get("flops_rate")),
                                           _str(r.get("within")), _str(r.get("over")), fnum(r.get("at"))))
            return out
        cand = ev.get("candidate") if isinstance(ev.get("candidate"), dict) else {}
        inc = ev.get("incumbent") if isinstance(ev.get("incumbent"), dict) else {}
        cmp = ev.get("comparison") if isinstance(ev.get("comparison"), dict) else {}
        noise = ev.get("noise") if isinstance(ev.get("noise"), dict) else {}
        bar = BarFigures(commit=_str(inc.get("commit")), runs=runs(inc.get("runs")),
                         mean=fnum(cmp.get("incumbent_mean")), remembered=inc.get("remembered") is True)
        test = ComparisonFigures(gain=fnum(cmp.get("gain")), margin=fnum(cmp.get("margin")),
                                 p_better=fnum(cmp.get("p_better")), p_keep=fnum(ev.get("p_keep")),
                                 sigma=fnum(cmp.get("sigma", noise.get("sigma"))),
                                 df=fnum(cmp.get("df", noise.get("df"))), se=fnum(cmp.get("se")),
                                 erratic=[x for x in cmp.get("erratic") or [] if x in ("candidate", "incumbent")]
                                 if isinstance(cmp.get("erratic"), list) else [])
        return cls(call=_str(ev.get("call")), why=_str(ev.get("why")), runs=runs(cand.get("runs")),
                   has_runs=isinstance(cand.get("runs"), list), incumbent=bar, comparison=test)

    def as_dict(self) -> dict:
        """The figures flat, as the dashboard's /api/experiment has always given them."""
        inc, t = self.incumbent, self.comparison
        return {"call": self.call, "why": self.why, "runs": [asdict(r) for r in self.runs], "has_runs": self.has_runs,
                "incumbent_commit": inc.commit, "incumbent_runs": [asdict(r) for r in inc.runs],
                "incumbent_mean": inc.mean, "remembered": inc.remembered, "gain": t.gain, "margin": t.margin,
                "p_better": t.p_better, "p_keep": t.p_keep, "sigma": t.sigma, "df": t.df, "se": t.se,
                "erratic": list(t.erratic)}

    def fresh_incumbent_runs(self) -> list[EvidenceRun]:
        """The incumbent's runs made for this decision (agent/judges/stats.py INCUMBENT_RUNS):
        those numbered as the candidate's own runs."""
        own = {r.n for r in self.runs if r.n is not None}
        return [r for r in self.incumbent.runs if r.n is not None and r.n in own]

    @property
    def runs_spent(self) -> int:
        """Training runs this decision took: the candidate's own and the incumbent's made for it."""
        return len(self.runs) + len(self.fresh_incumbent_runs())

    def summary(self) -> str:
        """One line: the runs, the bar, the noise and the test the decision used."""
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
