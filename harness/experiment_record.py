"""The journal's experiment record, typed: what the loop keeps in memory and every reader reads.

- Decision, Basis and VerdictReads live in harness/decision.py (re-exported here).
- ExperimentRecord: the journal's "experiment" record (agent/experiment.py record()), one flat
  record: one field per key of the journal line, in the line's order, with to_dict/from_dict that
  round-trip a line exactly (unknown keys kept in `extra`) and typed accessors for what readers
  need (the decision's val_bpb, the judge's figures, the noise band, the basis, timings...). The
  loop's history is a list of these; a record becomes a dict only where it is written (the
  journal) and is built with from_dict only where it is read.
- EvidenceFigures: a record's `evidence`, read safely (harness/decision.py, re-exported).

Records read from disk are data, not trusted: from_dict never raises and keeps values as read;
the accessors check types (a hostile journal gives None or an empty value, never an exception).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from harness.decision import (  # noqa: F401  (the record's verdicts and evidence are read the decision's way)
    AGAIN, DECIDED, FIGURE_KEYS, BarFigures, Basis, ComparisonFigures, Decision, EvidenceFigures, EvidenceRun,
    VerdictReads)
from harness.results_table import as_dict, as_int, as_str, finite, fnum


@dataclass
class NoiseBandFigures:
    """The judge's noise band as its baseline record stores it (verdicts.judge.band)."""
    values: list[float]          # trusted val_bpb of the baseline runs
    spread: float | None
    k: float | None
    threshold: float | None      # k x spread: a gain must clear this


@dataclass
class ExperimentRecord(VerdictReads):
    """journal.jsonl, kind "experiment": the keys agent/experiment.py record() writes, in order, one
    field each (RECORD_KEYS is this order; OPTIONAL_KEYS are written only when set)."""
    # which experiment: its number, branch and commits
    kind: str = "experiment"
    n: int | None = None
    tag: str | None = None
    parent: str | None = None
    commit: str | None = None
    short: str | None = None
    status: str | None = None            # keep | discard | crash
    # what was proposed
    description: str = ""
    hypothesis: str = ""
    proposer: str | None = None
    model: str | None = None
    diff: str = ""
    # what the run measured, and what the judges decided on it
    summary: dict | None = None          # train.py's summary block (a sealed run's val_bpb is the trusted one)
    trusted_bpb: float | None = None     # the figure the decision rests on (the mean of the baseline's runs)
    clock: dict | None = None            # the harness clock's figures (harness/clock.py)
    sealed: bool = False
    verify_seconds: float | None = None  # the trusted re-evaluation's cost
    crash_class: str | None = None
    decision_reason: str = ""
    verdicts: dict = field(default_factory=dict)   # what each judge said (VerdictReads reads it)
    # what it cost, and where its things are
    timings: dict = field(default_factory=dict)    # seconds: proposal, run, eval, git, overhead...
    tokens: dict = field(default_factory=lambda: {"input": 0, "output": 0})
    cost_usd: float = 0.0
    log: str | None = None
    discarded_ref: str | None = None     # where a commit not kept is preserved (git ref)
    started_at: float | None = None
    memory_gb: float = 0.0
    config: dict = field(default_factory=dict)     # the knob values of its train.py (search/knobs.py)
    code: str | None = None                        # the code fingerprint of its train.py
    attempts: list = field(default_factory=list)   # crashed tries a fix replaced
    notes: str = ""
    # written only when set: how the proposal came to be (the loop's ProposalInfo, agent/proposing.py,
    # less its timings), recovery's and the import's marks, the judge's evidence
    fallback: str | None = None          # "offline": the proposer failed or was unavailable
    proposal_error: str | None = None
    fix_error: str | None = None
    prefetched: bool | None = None       # proposed ahead while the previous experiment trained
    rebased_from: str | None = None      # made on a parent that was not kept, merged onto the last kept
    fixes: list | None = None            # the fix proposals of its crashed tries
    resumed: bool | None = None          # re-run after a stop (agent/recovery.py)
    stale_parent: str | None = None
    screen: dict | None = None           # --screen K: the screen that picked it (agent/screening.py)
    screen_error: str | None = None
    recovered: bool | None = None        # rebuilt from results.tsv by recovery (agent/recovery.py)
    rebases: list | None = None          # --workers: the runs on parents the branch moved past
    evidence: dict | None = None         # the judge's evidence: the runs, the bar, the noise, the test
    handover: str | None = None          # why the offline proposer had this turn (agent/budget.py)
    dropped_prefetch: list | None = None  # LLM proposals made ahead and not used (charged here)
    worker: int | None = None            # --workers: which worker carried it
    imported: str | None = None          # where an imported experiment came from (agent/import_run.py): unsealed
    ended_at: float | None = None
    extra: dict = field(default_factory=dict)                            # keys this class does not know
    _keys: tuple | None = field(default=None, repr=False, compare=False)  # key order as read

    # ---- (de)serialisation
    def to_dict(self) -> dict:
        """The journal object. A record read by from_dict gives back the keys it was read with, in
        that order, then any key set since (a value other than the default), then unknown keys; a
        new one gives record()'s keys in order (optional ones only when set)."""
        vals = {k: getattr(self, k) for k in RECORD_KEYS}
        if self._keys is None:
            order = [k for k in RECORD_KEYS if k not in OPTIONAL_KEYS or vals[k] is not None]
        else:
            order = [k for k in self._keys if k in vals or k in self.extra]
            order += [k for k in RECORD_KEYS if k not in self._keys and vals[k] != _DEFAULTS[k]]
        out = {k: (vals[k] if k in vals else self.extra[k]) for k in order}
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "ExperimentRecord":
        """Never raises on a dict; values are kept as read (check them with the accessors)."""
        rec = cls.of(**{k: d[k] for k in RECORD_KEYS if k in d})
        rec.extra, rec._keys = {k: v for k, v in d.items() if k not in _KEY_SET}, tuple(d)
        return rec

    @classmethod
    def of(cls, **keys) -> "ExperimentRecord":
        """A new record from journal keys (`ExperimentRecord.of(n=2, status="keep")`); a key the
        journal does not have raises TypeError."""
        unknown = set(keys) - _KEY_SET
        if unknown:
            raise TypeError(f"not a key of the experiment record: {sorted(unknown)!r}")
        return cls(**keys)

    def value(self, key: str):
        """The value of one journal key as held (known or not; None when absent)."""
        return getattr(self, key) if key in _KEY_SET else self.extra.get(key)

    # ---- typed accessors
    @property
    def number(self) -> int | None:
        return self.n if isinstance(self.n, int) and not isinstance(self.n, bool) else None

    @property
    def basis(self) -> Basis | None:
        return Basis.parse(self.judge.get("basis"))

    @property
    def is_baseline(self) -> bool:
        """The loop's baseline: the unmodified train.py (basis "baseline", or proposer "baseline")."""
        return self.basis is Basis.BASELINE or self.proposer == "baseline"

    @property
    def why_kept(self) -> str:
        """Why a keep was kept, as every place that announces it says it (the console, the
        dashboard): its ground (the judge's basis: metric, efficiency, simplicity, baseline...) and
        the judge's reason, never an empty "kept"."""
        basis = self.basis.value if self.basis is not None else "the judge's call"
        reason = " ".join(self.text("decision_reason").split()) or "no reason recorded"
        return f"kept on {reason}" if reason.lower().startswith(f"{basis}:") else f"kept on {basis}: {reason}"

    @property
    def decision_bpb(self) -> float | None:
        """The val_bpb the decision rests on: the trusted figure, else the printed one."""
        if finite(self.trusted_bpb):
            return float(self.trusted_bpb)
        printed = self.summary.get("val_bpb") if isinstance(self.summary, dict) else None
        return fnum(printed)

    @property
    def row_bpb(self) -> float | None:
        """The figure its results.tsv row carries: the decision's (trusted when verified), else the
        trusted re-evaluation's own (a run discarded on integrity grounds was still measured);
        None for a crash or a discard that has none (written `nan`, harness/results_table.py)."""
        if self.status == "crash":
            return None
        v = self.decision_bpb
        return v if v is not None else fnum(self.verify.get("trusted_bpb"))

    @property
    def in_results(self) -> bool:
        """Whether it has a results.tsv row: every experiment does, but a baseline try that was
        not kept stays in the journal only (the baseline is run again on the same commit, and the
        table's first row is the kept baseline every reader measures against), and so does the
        continuation of a baseline's repeats after an interrupt (no commit is on two rows)."""
        return not (self.proposer == "baseline" and (self.status != "keep" or self.continues is not None))

    @property
    def cut_short(self) -> bool:
        """A baseline a Ctrl-C recorded on the runs that finished (verdicts.judge.interrupted)."""
        return self.judge.get("interrupted") is True

    @property
    def stopped_early(self) -> bool:
        """An experiment ended before its budget on its printed curve (verdicts.judge.stopped_early):
        a discard that cost less, no measure of a full run's time or figure."""
        return self.is_experiment and bool(as_str(self.judge.get("stopped_early")))

    @property
    def continues(self) -> int | None:
        """The baseline record whose interrupted repeats this one continued (verdicts.judge.continues)."""
        return as_int(self.judge.get("continues"))

    def trusted(self) -> tuple[float | None, str | None]:
        """(trusted val_bpb, where from): the decision's figure (the mean of the runs for the
        baseline), else the trusted re-evaluation's own."""
        if finite(self.trusted_bpb):
            return self.trusted_bpb, "decision"
        v = self.verify.get("trusted_bpb")
        return (v, "verification") if finite(v) else (None, None)

    def noise_band(self) -> NoiseBandFigures | None:
        """The noise band the baseline record carries (judge hierarchy: verdicts.judge has
        baseline_values, spread, threshold = k x spread, and band.k); None for any record
        without baseline_values (every other experiment)."""
        judge = self.judge
        raw = judge.get("baseline_values")
        if not isinstance(raw, list):
            return None
        band = judge.get("band") if isinstance(judge.get("band"), dict) else {}
        return NoiseBandFigures([float(v) for v in raw if finite(v)], fnum(judge.get("spread")),
                                fnum(band.get("k")), fnum(judge.get("threshold")))

    def evidence_figures(self) -> dict:
        """The judge's evidence (the hierarchy: runs, bar, noise, test) as stored, or {}."""
        return self.evidence if isinstance(self.evidence, dict) else {}

    def evidence_view(self) -> "EvidenceFigures | None":
        """The same, typed (hostile values read as None)."""
        return EvidenceFigures.of(self.evidence)

    def token_counts(self) -> dict:
        """{"input", "output"} as ints (0 for anything that is not a finite number)."""
        t = self.tokens if isinstance(self.tokens, dict) else {}
        return {k: int(fnum(t.get(k)) or 0) for k in ("input", "output")}

    def cost(self) -> float:
        return fnum(self.cost_usd) or 0.0

    # ---- what the readers look at (every one safe on a hostile record)
    @property
    def is_experiment(self) -> bool:
        """kind "experiment" (the journal's default when absent)."""
        return self.kind == "experiment"

    @property
    def summary_view(self) -> dict:
        """The summary block as parsed (train.py's keys), or {}."""
        return as_dict(self.summary)

    def summary_figure(self, key: str) -> float | None:
        """One summary key as a finite float, else None."""
        return fnum(self.summary_view.get(key))

    @property
    def printed_bpb(self) -> float | None:
        """The val_bpb in the summary block (a sealed run's is the trusted one, written in by record())."""
        return self.summary_figure("val_bpb")

    def serving(self) -> dict | None:
        """The serving figures the trusted evaluator measured (verdicts.verify.details.serving), or None."""
        v = as_dict(self.verify.get("details")).get("serving")
        return v if isinstance(v, dict) else None

    def escalated_kinds(self) -> list[str]:
        """The kinds of bias the MetaJudge escalated on this record (verdicts.metajudge.escalated)."""
        raw = self.metajudge.get("escalated")
        return [f["kind"] for f in raw if isinstance(f, dict) and isinstance(f.get("kind"), str)] \
            if isinstance(raw, list) else []

    def judge_figure(self, key: str) -> float | None:
        """One of the judge's figures (best_before, threshold, spread, net_lines...) as a float, else None."""
        return fnum(self.judge.get(key))

    def judge_values(self, key: str) -> list[float] | None:
        """A list of figures of the judge's (baseline_values, runs): its finite numbers, None when not a list."""
        raw = self.judge.get(key)
        return [float(v) for v in raw if finite(v)] if isinstance(raw, list) else None

    def opinion(self, part: str) -> str | None:
        """The status of one opinion the judge weighed: verdicts.judge[part].status (part "rule", "llm")."""
        return as_str(as_dict(self.judge.get(part)).get("status"))

    @property
    def reruns(self) -> list[dict]:
        """verdicts["reruns"]: the earlier runs of the same commit (the baseline's repeats), dicts only."""
        raw = as_dict(self.verdicts).get("reruns")
        return [r for r in raw if isinstance(r, dict)] if isinstance(raw, list) else []

    def rerun_seconds(self) -> list[float]:
        """train.py's total_seconds of each earlier run of this decision that finished (reruns)."""
        out = [fnum(as_dict(r.get("summary")).get("total_seconds")) for r in self.reruns]
        return [v for v in out if v is not None]

    @property
    def training_runs(self) -> int:
        """Training runs this decision took: its own run, the earlier runs of the same commit (the
        baseline's repeats, confirming runs, disturbed runs run again), the incumbent's runs made
        for it, and crashed tries a fix replaced. Each run writes a log of its own, so the distinct
        logs count them (a record whose last run was the incumbent's, or crashed, describes a run
        already among its reruns); a guard refusal ran nothing."""
        logs = {self.log} | {as_str(r.get("log")) for r in self.reruns} | \
            {as_str(as_dict(a).get("log")) for a in self.attempts}
        return len({x for x in logs if x})

    def clock_runs(self) -> list[dict]:
        """The harness clock figures of this record's run and of its reruns (harness/clock.py)."""
        return [c for c in [self.clock] + [r.get("clock") for r in self.reruns] if isinstance(c, dict)]

    def own_clock_runs(self) -> list[dict]:
        """The harness clock figures of this record's commit's own runs: its run and its reruns,
        not the incumbent's runs its decision asked for (those carry their commit)."""
        runs = [self.clock] + [r.get("clock") for r in self.reruns
                                   if isinstance(r, dict) and r.get("commit") in (None, self.commit)]
        return [c for c in runs if isinstance(c, dict)]

    def timing(self, key: str) -> float | None:
        """timings[key] (proposal, run, eval, git, overhead...) in seconds, else None."""
        return fnum(as_dict(self.timings).get(key))

    @property
    def knob_values(self) -> dict | None:
        """The knob values of the record's train.py (search/knobs.values); None when not a dict,
        or when the journal object it was read from had none."""
        if self._keys is not None and "config" not in self._keys:
            return None
        return self.config if isinstance(self.config, dict) else None

    @property
    def code_id(self) -> str | None:
        """The code fingerprint of its train.py (search/knobs.code_fingerprint), None when not a string."""
        return self.code if isinstance(self.code, str) and self.code else None

    def text(self, name: str) -> str:
        """A text field (description, hypothesis, decision_reason, diff, crash_class...) as a string
        ("" when missing or not a string)."""
        v = self.value(name)
        return v if isinstance(v, str) else ""


# record()'s keys in order (the fields', optional ones before ended_at, as the loop writes them)
RECORD_KEYS = tuple(f.name for f in fields(ExperimentRecord) if f.name not in ("extra", "_keys"))
_KEY_SET = frozenset(RECORD_KEYS)
OPTIONAL_KEYS = ("fallback", "proposal_error", "fix_error", "prefetched", "rebased_from", "fixes",
                 "resumed", "stale_parent", "screen", "screen_error", "recovered", "rebases", "evidence", "handover",
                 "dropped_prefetch", "worker", "imported")
_DEFAULTS = ExperimentRecord().to_dict() | dict.fromkeys(OPTIONAL_KEYS)


def experiment_records(records: list[dict]) -> list[ExperimentRecord]:
    """Journal objects of kind "experiment" (the default when absent), typed."""
    return [ExperimentRecord.from_dict(r) for r in records
            if isinstance(r, dict) and r.get("kind", "experiment") == "experiment"]

