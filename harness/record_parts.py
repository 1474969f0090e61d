"""The parts of the journal's experiment record (harness/experiment_record.py), each a small type.

A journal line stays one flat JSON object; RECORD_PATHS says where each of its keys lives in the
record's parts:

- RecordIdentity: which experiment it is (n, tag, parent, commit, short, the worker...).
- RecordProposal: what was proposed (description, hypothesis, proposer, model, diff, notes) and
  `info`, the ProposalInfo: how the proposal came to be. The loop carries the same ProposalInfo
  with a proposal in flight and in pending.json, so the loop's keys and the record's are one type.
- RecordRun: what the run measured and left (summary, clock, log, config, crashed tries...).
- RecordDecision: what the judges decided and on what grounds (status, reason, trusted_bpb,
  verdicts, evidence).
- RecordCosts: what it cost (tokens, dollars) and when and how long (timings).

ProposalInfo splits its own optional keys into PrefetchInfo, ScreenInfo and FixInfo. Like the
record, it reads any dict without raising and writes it back with the same keys in the same order.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.results_table import fnum


@dataclass
class PrefetchInfo:
    """A proposal made ahead while the previous experiment trained (agent/proposing.py Prefetch)."""
    waited: float | None = None           # how long the loop waited for it
    prefetched: bool | None = None
    stale_parent: str | None = None       # made on a parent that was not kept
    rebased_from: str | None = None       # ...so its edit was merged onto the last kept commit
    dropped_prefetch: list | None = None  # LLM proposals made ahead and not used (charged here)


@dataclass
class ScreenInfo:
    """--screen K: the screen that picked the proposal (agent/screening.py)."""
    screen: dict | None = None
    screen_error: str | None = None


@dataclass
class FixInfo:
    """The fix proposals of the experiment's crashed tries (their ProposalInfo dicts)."""
    fixes: list | None = None
    fix_error: str | None = None


@dataclass
class ProposalInfo:
    """How experiment n's proposal came to be, and what happened to it before its record. The
    loop carries it with the proposal (pending.json holds to_dict()); the record keeps it in its
    proposal part, where every key but the timings (`seconds`, `waited`: the record's `timings`)
    is one of the record's optional keys, written when set."""
    seconds: float | None = None          # proposing it (a screen: every candidate's, and the screen's)
    handover: str | None = None           # why the offline proposer had this turn (agent/budget.py)
    fallback: str | None = None           # "offline": the proposer failed or was unavailable
    proposal_error: str | None = None
    rebases: list | None = None           # --workers: the runs on parents the branch moved past
    resumed: bool | None = None           # re-run after a stop (agent/recovery.py)
    prefetch: PrefetchInfo = field(default_factory=PrefetchInfo)
    screening: ScreenInfo = field(default_factory=ScreenInfo)
    fixing: FixInfo = field(default_factory=FixInfo)
    extra: dict = field(default_factory=dict)                             # keys this class does not know
    _keys: tuple | None = field(default=None, repr=False, compare=False)  # key order as read

    def to_dict(self) -> dict:
        """pending.json's object: one read by from_dict gives back the same keys in the same order
        (unknown ones kept); a new one gives INFO_KEYS' order, keys set only."""
        return flat(self, INFO_PATHS, self.extra, self._keys, lambda k, v: v is not None)

    @classmethod
    def from_dict(cls, d) -> "ProposalInfo":
        """Never raises; anything but a dict reads as an empty ProposalInfo."""
        d = d if isinstance(d, dict) else {}
        info = cls(extra={k: v for k, v in d.items() if k not in INFO_PATHS}, _keys=tuple(d))
        for k in INFO_PATHS:
            if k in d:
                set_path(info, INFO_PATHS[k], d[k])
        return info

    def for_record(self) -> "ProposalInfo":
        """What the experiment record keeps: its optional keys (the timings go to its `timings`,
        keys this class does not know stay in pending.json)."""
        out = ProposalInfo.from_dict({k: v for k, v in self.to_dict().items() if k in INFO_PATHS})
        out.seconds, out.prefetch.waited, out._keys = None, None, None
        return out

    @property
    def proposal_seconds(self) -> float:
        return fnum(self.seconds) or 0.0    # pending.json is data: a bad value reads as 0

    @property
    def proposal_wait(self) -> float:
        """What the loop waited for the proposal: a prefetched one's wait, else all of its time."""
        waited = fnum(self.prefetch.waited)
        return waited if waited is not None else self.proposal_seconds


# pending.json's keys of a ProposalInfo, in the order they are written, and where each lives.
INFO_PATHS = {"seconds": ("seconds",), "waited": ("prefetch", "waited"), "handover": ("handover",),
              "fallback": ("fallback",), "proposal_error": ("proposal_error",),
              "prefetched": ("prefetch", "prefetched"), "stale_parent": ("prefetch", "stale_parent"),
              "rebased_from": ("prefetch", "rebased_from"), "dropped_prefetch": ("prefetch", "dropped_prefetch"),
              "screen": ("screening", "screen"), "screen_error": ("screening", "screen_error"),
              "fixes": ("fixing", "fixes"), "fix_error": ("fixing", "fix_error"),
              "rebases": ("rebases",), "resumed": ("resumed",)}
INFO_KEYS = tuple(INFO_PATHS)
# The timings go to the record's `timings`; every other key is one of the record's optional keys.
TIMING_KEYS = ("seconds", "waited")


@dataclass
class RecordIdentity:
    """Which experiment a record is: its number, branch and commits, and where it came from."""
    kind: str = "experiment"
    n: int | None = None
    tag: str | None = None
    parent: str | None = None
    commit: str | None = None
    short: str | None = None
    discarded_ref: str | None = None     # where a commit not kept is preserved (git ref)
    recovered: bool | None = None        # rebuilt from results.tsv by recovery (agent/recovery.py)
    worker: int | None = None            # --workers: which worker carried it
    imported: str | None = None          # where an imported experiment came from (agent/import_run.py): unsealed


@dataclass
class RecordProposal:
    """What was proposed, and how the proposal came to be (`info`)."""
    description: str = ""
    hypothesis: str = ""
    proposer: str | None = None
    model: str | None = None
    diff: str = ""
    notes: str = ""
    info: ProposalInfo = field(default_factory=ProposalInfo)


@dataclass
class RecordRun:
    """What the run measured and left behind."""
    summary: dict | None = None          # train.py's summary block (a sealed run's val_bpb is the trusted one)
    clock: dict | None = None            # the harness clock's figures (harness/clock.py)
    sealed: bool = False
    verify_seconds: float | None = None  # the trusted re-evaluation's cost
    crash_class: str | None = None
    log: str | None = None
    memory_gb: float = 0.0
    config: dict = field(default_factory=dict)   # the knob values of its train.py (search/knobs.py)
    code: str | None = None                      # the code fingerprint of its train.py
    attempts: list = field(default_factory=list)  # crashed tries a fix replaced


@dataclass
class RecordDecision:
    """What the judges decided and on what grounds (a Decision, harness/decision.py, as recorded)."""
    status: str | None = None            # keep | discard | crash
    decision_reason: str = ""
    trusted_bpb: float | None = None     # the figure the decision rests on (the mean of the baseline's runs)
    verdicts: dict = field(default_factory=dict)
    evidence: dict | None = None         # the judge's evidence: the runs, the bar, the noise, the test


@dataclass
class RecordCosts:
    """What an experiment cost and when it ran."""
    timings: dict = field(default_factory=dict)   # seconds: proposal, run, eval, git, overhead...
    tokens: dict = field(default_factory=lambda: {"input": 0, "output": 0})
    cost_usd: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None


def get_path(obj, path: tuple):
    for name in path:
        obj = getattr(obj, name)
    return obj


def set_path(obj, path: tuple, value) -> None:
    for name in path[:-1]:
        obj = getattr(obj, name)
    setattr(obj, path[-1], value)


def flat(obj, paths: dict, extra: dict, keys: tuple | None, fresh, later=None) -> dict:
    """A flat JSON object of `obj`'s keys (`paths`: key -> where it lives). Read from one (`keys`,
    the order as read): those keys in that order, then each key not read whose value
    `later(key, value)` accepts (default: `fresh`). A new one (`keys` None): `paths`' order, the
    keys whose value `fresh(key, value)` accepts. Then unknown keys (`extra`)."""
    vals = {k: get_path(obj, p) for k, p in paths.items()}
    if keys is None:
        order = [k for k in paths if fresh(k, vals[k])]
    else:
        later = later or fresh
        order = [k for k in keys if k in vals or k in extra]
        order += [k for k in paths if k not in keys and later(k, vals[k])]
    out = {k: (vals[k] if k in vals else extra[k]) for k in order}
    for k, v in extra.items():
        out.setdefault(k, v)
    return out
