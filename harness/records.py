"""The run's typed records, in one module: what the loop writes and every reader reads.

- results.tsv: RESULT_COLUMNS, ResultRow, ResultLine, ResultTable, parse_results, read_table
  (harness/results_table.py, re-exported here: the one table the loop, recovery and the dashboard read).
- Decision and its typed Basis: what a judge decided and on what grounds (str Enum: the journal
  keeps the same strings).
- ExperimentRecord: the journal's "experiment" record (agent/experiment.py record()), with
  to_dict/from_dict that round-trip a journal line exactly (unknown keys kept in `extra`) and
  typed accessors for what readers need (the decision's val_bpb, the noise band, the basis...).
- RunState and WorkerState: state.json (agent/loop.py Loop.refresh).

Records read from disk are data, not trusted: from_dict never raises and keeps values as read;
the accessors check types (a hostile journal gives None, never an exception).
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from enum import Enum

# results.tsv: the table lives in harness/results_table.py; its names are re-exported here,
# where readers of the typed records have always found them.
from harness.results_table import (MAX_DESCRIPTION, QUOTE_CHARS, RESULT_COLUMNS, RESULT_HEADER,  # noqa: F401
                                   STATUSES, ResultLine, ResultRow, ResultTable, clean_description, finite,
                                   fnum, parse_results, read_table)

# ---------------------------------------------------------------- decisions

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


@dataclass
class Decision:
    """A judge's decision on one run (the Reviewer protocol, agent/judges/reviewer.py)."""
    status: str                      # keep | discard | crash
    reason: str
    trusted_bpb: float | None = None
    verdicts: dict = field(default_factory=dict)
    rerun: bool = False              # ask the loop to run the same commit again (e.g. a noisy call)
    basis: Basis = Basis.METRIC      # set by the judge where it decides, never parsed from `reason`

    def __post_init__(self):
        self.basis = Basis(self.basis)   # a plain string from a caller becomes the enum (or raises)


# ---------------------------------------------------------------- the journal's experiment record

@dataclass
class NoiseBandFigures:
    """The judge's noise band as its baseline record stores it (verdicts.judge.band)."""
    values: list[float]          # trusted val_bpb of the baseline runs
    spread: float | None
    k: float | None
    threshold: float | None      # k x spread: a gain must clear this


@dataclass
class ExperimentRecord:
    """journal.jsonl, kind "experiment": the keys agent/experiment.py record() writes, in order."""
    kind: str = "experiment"
    n: int | None = None
    tag: str | None = None
    parent: str | None = None
    commit: str | None = None
    short: str | None = None
    status: str | None = None
    description: str = ""
    hypothesis: str = ""
    proposer: str | None = None
    model: str | None = None
    diff: str = ""
    summary: dict | None = None
    trusted_bpb: float | None = None
    clock: dict | None = None
    sealed: bool = False
    verify_seconds: float | None = None
    crash_class: str | None = None
    decision_reason: str = ""
    verdicts: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    tokens: dict = field(default_factory=lambda: {"input": 0, "output": 0})
    cost_usd: float = 0.0
    log: str | None = None
    discarded_ref: str | None = None
    started_at: float | None = None
    memory_gb: float = 0.0
    config: dict = field(default_factory=dict)
    code: str | None = None
    attempts: list = field(default_factory=list)
    notes: str = ""
    # Written only when present (the loop's optional keys; recovery's minimal records).
    fallback: str | None = None
    proposal_error: str | None = None
    fix_error: str | None = None
    prefetched: object = None
    rebased_from: str | None = None
    fixes: list | None = None
    resumed: bool | None = None
    stale_parent: object = None
    screen: dict | None = None
    screen_error: str | None = None
    recovered: bool | None = None
    rebases: list | None = None          # --workers: the runs on parents the branch moved past
    evidence: dict | None = None         # the judge's evidence: the runs, the bar, the noise, the test
    handover: str | None = None          # why the offline proposer had this turn (cost cap, crash streak)
    dropped_prefetch: list | None = None  # LLM proposals made ahead and not used (charged to this record)
    worker: int | None = None            # --workers: which worker carried it
    ended_at: float | None = None
    extra: dict = field(default_factory=dict)                            # keys this class does not know
    _keys: tuple | None = field(default=None, repr=False, compare=False)  # key order as read

    # ---- (de)serialisation
    def to_dict(self) -> dict:
        """The journal object: a record read by from_dict gives back the same keys in the same
        order; a new one gives record()'s keys (optional ones only when set)."""
        vals = {k: getattr(self, k) for k in RECORD_KEYS}
        if self._keys is None:
            keys = [k for k in RECORD_KEYS if k not in OPTIONAL_KEYS or vals[k] is not None]
        else:
            keys = [k for k in self._keys if k in vals or k in self.extra]
            keys += [k for k in RECORD_KEYS if k not in self._keys and vals[k] != _DEFAULTS[k]]
        out = {k: (vals[k] if k in vals else self.extra[k]) for k in keys}
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "ExperimentRecord":
        """Never raises on a dict; values are kept as read (check them with the accessors)."""
        known = {k: d[k] for k in RECORD_KEYS if k in d}
        extra = {k: v for k, v in d.items() if k not in known}
        return cls(**known, extra=extra, _keys=tuple(d))

    # ---- typed accessors
    @property
    def number(self) -> int | None:
        return self.n if isinstance(self.n, int) and not isinstance(self.n, bool) else None

    @property
    def judge(self) -> dict:
        """verdicts["judge"] (the judge's figures), or {}."""
        v = self.verdicts.get("judge") if isinstance(self.verdicts, dict) else None
        return v if isinstance(v, dict) else {}

    @property
    def verify(self) -> dict:
        """verdicts["verify"] (harness/verify.py VerifyResult.as_dict()), or {}."""
        v = self.verdicts.get("verify") if isinstance(self.verdicts, dict) else None
        return v if isinstance(v, dict) else {}

    @property
    def basis(self) -> Basis | None:
        return Basis.parse(self.judge.get("basis"))

    @property
    def is_baseline(self) -> bool:
        """The loop's baseline: the unmodified train.py (basis "baseline", or proposer "baseline")."""
        return self.basis is Basis.BASELINE or self.proposer == "baseline"

    @property
    def decision_bpb(self) -> float | None:
        """The val_bpb the decision rests on: the trusted figure, else the printed one."""
        if finite(self.trusted_bpb):
            return float(self.trusted_bpb)
        printed = self.summary.get("val_bpb") if isinstance(self.summary, dict) else None
        return fnum(printed)

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


# record()'s keys in order (optional ones before ended_at, as the loop writes them).
RECORD_KEYS = tuple(f.name for f in fields(ExperimentRecord) if f.name not in ("extra", "_keys"))
OPTIONAL_KEYS = ("fallback", "proposal_error", "fix_error", "prefetched", "rebased_from", "fixes",
                 "resumed", "stale_parent", "screen", "screen_error", "recovered", "rebases", "evidence", "handover",
                 "dropped_prefetch", "worker")
_DEFAULTS = {f.name: (f.default if f.default is not MISSING else f.default_factory())
             for f in fields(ExperimentRecord) if f.name in RECORD_KEYS}


def experiment_records(records: list[dict]) -> list[ExperimentRecord]:
    """Journal objects of kind "experiment" (the default when absent), typed."""
    return [ExperimentRecord.from_dict(r) for r in records
            if isinstance(r, dict) and r.get("kind", "experiment") == "experiment"]


# ---------------------------------------------------------------- state.json

PHASES = ("setup", "proposing", "screening", "guarding", "training", "evaluating", "judging", "idle",
          "stopped")


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v) -> str | None:
    return v if isinstance(v, str) else None


@dataclass
class WorkerState:
    """One experiment in flight under --workers N."""
    worker: int
    n: int | None = None
    phase: str | None = None
    phase_started_at: float | None = None
    run_started_at: float | None = None
    commit: str | None = None
    parent: str | None = None
    description: str = ""
    gpu: str | None = None               # its CUDA_VISIBLE_DEVICES, None on CPU
    done: int = 0                        # experiments it has recorded in this session

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in WORKER_KEYS}

    @classmethod
    def from_dict(cls, d) -> "WorkerState | None":
        if not isinstance(d, dict) or _int(d.get("worker")) is None:
            return None
        return cls(worker=d["worker"], n=_int(d.get("n")), phase=_str(d.get("phase")),
                   phase_started_at=fnum(d.get("phase_started_at")), run_started_at=fnum(d.get("run_started_at")),
                   commit=_str(d.get("commit")), parent=_str(d.get("parent")),
                   description=_str(d.get("description")) or "", gpu=_str(d.get("gpu")),
                   done=_int(d.get("done")) or 0)

    def elapsed(self, now: float) -> float | None:
        """Seconds in the current run (training) or phase."""
        t = self.run_started_at if self.phase in ("training", "evaluating") and self.run_started_at else \
            self.phase_started_at
        return max(0.0, now - t) if t is not None else None


WORKER_KEYS = tuple(f.name for f in fields(WorkerState))


@dataclass
class RunState:
    """state.json: the loop's live status, rewritten atomically (harness/results.write_state)."""
    tag: str | None = None
    phase: str | None = None
    experiment: int | None = None
    started_at: float | None = None
    run_started_at: float | None = None
    budget: float | None = None
    best: dict | None = None             # {"commit", "val_bpb"}
    last_decision: str | None = None
    keep_rate: float | None = None
    tokens: dict | None = None           # {"input", "output"}
    cost_usd: float | None = None
    pid: int | None = None
    phase_started_at: float | None = None
    log: str | None = None               # the running experiment's log, relative to the run folder
    progress: dict | None = None         # its last step line: {"step", "loss", "tok_s", "trained"}
    workers: list[WorkerState] = field(default_factory=list)   # --workers N: the experiments in flight
    updated_at: float | None = None      # set by write_state

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in STATE_KEYS}
        out["workers"] = [w.to_dict() for w in self.workers]
        if out["updated_at"] is None:
            del out["updated_at"]
        return out

    @classmethod
    def from_dict(cls, d) -> "RunState":
        """Every field checked for its type (state.json is data): a wrong one reads as None."""
        d = d if isinstance(d, dict) else {}
        best = d.get("best") if isinstance(d.get("best"), dict) else None
        if best is not None:
            best = {"commit": _str(best.get("commit")), "val_bpb": fnum(best.get("val_bpb"))}
        tokens = d.get("tokens") if isinstance(d.get("tokens"), dict) else None
        if tokens is not None:
            tokens = {k: int(fnum(tokens.get(k)) or 0) for k in ("input", "output")}
        progress = d.get("progress") if isinstance(d.get("progress"), dict) else None
        workers = d.get("workers") if isinstance(d.get("workers"), list) else []
        last = d.get("last_decision")
        return cls(tag=_str(d.get("tag")), phase=_str(d.get("phase")) or None, experiment=_int(d.get("experiment")),
                   started_at=fnum(d.get("started_at")), run_started_at=fnum(d.get("run_started_at")),
                   budget=fnum(d.get("budget")), best=best,
                   last_decision=last if isinstance(last, (str, dict)) else None,
                   keep_rate=fnum(d.get("keep_rate")), tokens=tokens, cost_usd=fnum(d.get("cost_usd")),
                   pid=_int(d.get("pid")), phase_started_at=fnum(d.get("phase_started_at")),
                   log=_str(d.get("log")), progress=progress,
                   workers=[w for w in (WorkerState.from_dict(x) for x in workers) if w is not None],
                   updated_at=fnum(d.get("updated_at")))


STATE_KEYS = tuple(f.name for f in fields(RunState))


# ---------------------------------------------------------------- the judge's evidence

@dataclass
class EvidenceRun:
    bpb: float | None
    seed: int | None
    used: bool
    why: str | None                       # why it is no evidence (disturbed), else None
    log: str | None


@dataclass
class EvidenceFigures:
    """A record's `evidence` (agent/judges/hierarchy.py), read safely: what the decision rested on."""
    call: str | None = None               # keep | discard | more | undecided | baseline
    why: str | None = None
    runs: list = field(default_factory=list)             # the candidate's (or the baseline's) runs
    incumbent_commit: str | None = None
    incumbent_runs: list = field(default_factory=list)   # the bar's runs
    incumbent_mean: float | None = None
    remembered: bool = False              # the bar was the loop's remembered figure (no runs known)
    gain: float | None = None
    margin: float | None = None
    p_better: float | None = None
    p_keep: float | None = None
    sigma: float | None = None
    df: int | None = None
    se: float | None = None

    @classmethod
    def of(cls, ev) -> "EvidenceFigures | None":
        if not isinstance(ev, dict) or not ev:
            return None

        def runs(raw):
            out = []
            for r in raw if isinstance(raw, list) else []:
                if isinstance(r, dict):
                    out.append(EvidenceRun(fnum(r.get("bpb")), _int(r.get("seed")), r.get("used") is not False,
                                           _str(r.get("why")), _str(r.get("log"))))
            return out
        cand = ev.get("candidate") if isinstance(ev.get("candidate"), dict) else {}
        inc = ev.get("incumbent") if isinstance(ev.get("incumbent"), dict) else {}
        cmp = ev.get("comparison") if isinstance(ev.get("comparison"), dict) else {}
        noise = ev.get("noise") if isinstance(ev.get("noise"), dict) else {}
        return cls(call=_str(ev.get("call")), why=_str(ev.get("why")), runs=runs(cand.get("runs")),
                   incumbent_commit=_str(inc.get("commit")), incumbent_runs=runs(inc.get("runs")),
                   incumbent_mean=fnum(cmp.get("incumbent_mean")), remembered=inc.get("remembered") is True,
                   gain=fnum(cmp.get("gain")), margin=fnum(cmp.get("margin")), p_better=fnum(cmp.get("p_better")),
                   p_keep=fnum(ev.get("p_keep")), sigma=fnum(cmp.get("sigma", noise.get("sigma"))),
                   df=_int(cmp.get("df", noise.get("df"))), se=fnum(cmp.get("se")))

    def summary(self) -> str:
        """One line: the runs, the bar, the noise and the test the decision used."""
        used = [r.bpb for r in self.runs if r.used and r.bpb is not None]
        left = sum(1 for r in self.runs if not r.used)
        parts = [f"{len(used)} run(s) of its own [{', '.join(f'{v:.6f}' for v in used)}]"
                 + (f" ({left} disturbed, left out)" if left else "")]
        if self.incumbent_commit or self.incumbent_runs:
            m = len([r for r in self.incumbent_runs if r.used])
            bar = f"{self.incumbent_mean:.6f}" if self.incumbent_mean is not None else "-"
            parts.append(f"against the incumbent {str(self.incumbent_commit or '?')[:7]}'s "
                         + ("remembered figure" if self.remembered else f"{m} run(s)") + f" (mean {bar})")
        if self.sigma is not None:
            parts.append(f"sigma {self.sigma:.6f} ({self.df} df)")
        if self.gain is not None:
            parts.append(f"gain {self.gain:+.6f}" + (f" vs margin {self.margin:.6f}" if self.margin is not None else ""))
        if self.p_better is not None:
            parts.append(f"P(better) {self.p_better:.4f} (keep at >= {self.p_keep or 0.99:g})")
        return "; ".join(parts)
