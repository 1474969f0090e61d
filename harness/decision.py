"""What a judge decided and on what grounds: the Decision a reviewer returns, its typed Basis (a
str Enum: the journal keeps the same strings), and VerdictReads, the typed reads of a verdicts
dict that a Decision and a journal record (harness/experiment_record.py) share. harness/records.py
re-exports every name here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from harness.figures import as_dict, as_str, fnum

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
