"""The coordinator: the one owner of a tag's state, and the one place decisions are serialised.

What the tag has decided (history, best, last kept commit), what is in flight (one entry per
experiment a worker carries: its number, parent, description, knob values) and the experiment
numbers handed out live here, behind one lock. A worker proposes, trains and is judged on its
own; only its record + git step (journal, results.tsv, then the branch) runs under the
coordinator's lock, so keeps stay a linear history and two decisions never interleave.

With one worker (the default) the loop is the only client and nothing changes; with
`--workers N` (agent/workers.py) N threads share one Coordinator.

Here too the one shape of an experiment that is not decided yet, in its two places:

- `InFlight`: an experiment in flight as the proposers see it (ProposalRequest.pending; its
  status reads "pending") (the single loop's prefetch, --screen's gathered candidates, the coordinator's
  experiments in flight under --workers). It carries the proposal's knob values and code
  fingerprint where known, so a proposer neither repeats it nor takes it for a lost trial.
- `PendingFile`: a journal line of kind "pending": committed but not recorded. Appended before
  the run (and after each new commit of the edit), superseded by the experiment's record;
  --resume and a stopping loop read the undecided ones (`undecided`: agent/recovery.py,
  agent/workers.py pending_attempts, Loop.stop).
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import asdict, dataclass, field, replace
from typing import ClassVar

from agent.proposers.base import Proposal
from search import knobs
from harness.results_table import as_str
from runfiles.run import Best, best_of
from harness.experiment_record import ExperimentRecord
from harness.secrets import scrub

BEING_PROPOSED = "(being proposed)"


@dataclass
class InFlight:
    status: ClassVar[str] = "pending"   # what a proposer reads beside the decided records' statuses
    n: int
    parent: str | None
    commit: str | None = None
    description: str = BEING_PROPOSED
    config: dict | None = None        # knob values of the proposed train.py, once there is one
    code: str | None = None           # its code fingerprint (search/knobs.code_fingerprint)
    proposer: str | None = None
    worker: int | None = None         # --workers: which worker carries it (0: queued for the first free)
    handover: str | None = None       # agent/budget.py: why the offline proposer made it

    @classmethod
    def of(cls, n: int, parent: str | None, proposal: Proposal | None = None, **fields) -> InFlight:
        entry = cls(n=n, parent=parent, **fields)
        if proposal is not None:
            entry.proposed(proposal)
        return entry

    def proposed(self, proposal: Proposal, description: str | None = None) -> None:
        """The proposal is made: what it tries becomes visible to the other proposers."""
        self.description = proposal.description if description is None else description
        self.proposer = proposal.proposer
        self.config, self.code = knobs.values(proposal.source), knobs.code_fingerprint(proposal.source)

    @property
    def knob_values(self) -> dict | None:
        """Its knob values (None until proposed): what ExperimentRecord.knob_values is for a record."""
        return self.config if isinstance(self.config, dict) else None

    @property
    def code_id(self) -> str | None:
        return self.code or None

    def snapshot(self) -> InFlight:
        """A copy a ProposalRequest carries (the coordinator's entry goes on changing)."""
        return replace(self)

    def as_crash(self) -> ExperimentRecord:
        """The record it would leave if it crashed (agent/budget.py: would that start a crash streak?)."""
        return ExperimentRecord.of(n=self.n, parent=self.parent, commit=self.commit, status="crash",
                                description=self.description, proposer=self.proposer, handover=self.handover,
                                config=self.config or {}, code=self.code)


@dataclass
class PendingFile:
    """An experiment committed but not recorded: a journal line of kind "pending" (agent/experiment.py
    write_pending), appended after each commit of its edit (as proposed, a fix, a rebase); its
    experiment record supersedes it. --resume runs the last one of each number again (undecided)."""
    n: int
    parent: str | None
    commit: str | None
    description: str = ""
    hypothesis: str = ""
    proposer: str = "offline"
    model: str | None = None
    notes: str = ""
    info: dict = field(default_factory=dict)
    attempts: list = field(default_factory=list)
    started_at: float | None = None
    worker: int | None = None       # --workers: the worker that carries it (None: the single loop)
    dropped: str | None = None      # set on the line that gives it up at a resume (why)

    @classmethod
    def of(cls, a, worker: int | None = None) -> PendingFile:
        """Of an Attempt (agent/experiment.py)."""
        p = a.proposal
        return cls(n=a.n, parent=a.parent, commit=a.commit, description=p.description, hypothesis=p.hypothesis,
                   proposer=p.proposer, model=p.model, notes=p.notes, info=a.info.to_dict(),
                   attempts=list(a.attempts), started_at=a.started_at, worker=worker)

    def as_line(self) -> dict:
        """The journal line (scrubbed)."""
        return scrub({"kind": PENDING_KIND, **asdict(self)})

    @classmethod
    def from_dict(cls, raw) -> PendingFile | None:
        """A journal line's experiment, or None where there is none to resume: not a "pending"
        line, or without an integer experiment number (a value of the wrong type is left at its
        default)."""
        if not isinstance(raw, dict) or raw.get("kind") != PENDING_KIND or not isinstance(raw.get("n"), int) \
                or isinstance(raw.get("n"), bool):
            return None
        out = cls(n=raw["n"], parent=as_str(raw.get("parent")) or None,
                  commit=as_str(raw.get("commit")) or None)
        for name, kind in (("description", str), ("hypothesis", str), ("proposer", str), ("model", str),
                           ("notes", str), ("info", dict), ("attempts", list), ("started_at", (int, float)),
                           ("worker", int), ("dropped", str)):
            if isinstance(raw.get(name), kind) and not isinstance(raw.get(name), bool):
                setattr(out, name, raw[name])
        return out

    def proposal(self, source: str) -> Proposal:
        return Proposal(description=self.description, hypothesis=self.hypothesis, source=source,
                        proposer=self.proposer, model=self.model, notes=self.notes)


PENDING_KIND = "pending"


def undecided(journal: list[dict]) -> list[PendingFile]:
    """The experiments the journal says were committed and never recorded, in number order: the
    last "pending" line of each number that has no experiment record, unless that line dropped it."""
    recorded, last = set(), {}
    for raw in journal:
        kind = raw.get("kind", "experiment") if isinstance(raw, dict) else None
        if kind == "experiment" and isinstance(raw.get("n"), int):
            recorded.add(raw["n"])
        elif kind == PENDING_KIND and (p := PendingFile.from_dict(raw)) is not None:
            last[p.n] = p
    return [p for n, p in sorted(last.items()) if n not in recorded and p.dropped is None]



class Coordinator:
    """The tag's state: its decided history, and the branch moves made outside an experiment (a
    human-queue decision applied). The tip and the best are derived from those, never stored:
    what the journal holds is all there is to resume (agent/recovery.py)."""

    def __init__(self, base: str | None = None):
        self.base = base                            # the tag's base commit: the tip before any keep
        self.history: list[ExperimentRecord] = []   # decided experiment records, in decision order
        # (records before it, head, its best or None: unchanged): the journal's queue_applied moves
        self.moves: list[tuple[int, str, Best | None]] = []
        self.in_flight: dict[int, InFlight] = {}   # n -> what the proposers are told about it
        # One record + git step at a time. Re-entrant: a record may refresh state under it.
        self.lock = threading.RLock()
        # Proposers are never called concurrently (an LLM conversation, an Optuna study).
        self.proposer_lock = threading.Lock()
        # The main thread's signal (Ctrl-C, SIGTERM) while it writes a record waits for the write.
        self.signals = DeferredSignal()

    def tip(self) -> tuple[str | None, Best | None]:
        """(the commit the branch points at, its best): the last event that moved the branch, a
        kept experiment (another machine's imported keep never is one) or a move; the base and no
        best before any."""
        with self.lock:
            head, best = self.base, None
            moves = sorted(self.moves, key=lambda m: m[0])
            at = 0
            for i, rec in enumerate([*self.history, None]):
                while at < len(moves) and moves[at][0] <= i:
                    head, best = moves[at][1], moves[at][2] if moves[at][2] is not None else best
                    at += 1
                if rec is not None and rec.status == "keep" and rec.commit and not rec.imported:
                    head, best = rec.commit, best_of(rec.commit, rec.decision_bpb)
            return head, best

    @property
    def last_kept(self) -> str | None:
        return self.tip()[0]

    @property
    def best(self) -> Best | None:
        return self.tip()[1]

    @contextlib.contextmanager
    def critical(self):
        """One record and its git step, alone (the lock) and whole: a signal to the main thread
        (the single loop writes there) waits until both are written, then stops the loop."""
        with self.lock:
            with self.signals.deferred():
                yield

    def decided(self, rec: ExperimentRecord) -> None:
        """A recorded decision joins the tag's state (under the lock, with its record)."""
        with self.lock:
            self.history.append(rec)

    def next_n(self) -> int:
        """The lowest experiment number neither decided nor in flight, without claiming it. A
        number handed out but never committed (a kill -9 while proposing) is handed out again,
        so --max-experiments N ends with experiments 1..N, none missing."""
        with self.lock:
            taken = {r.number for r in self.history} | set(self.in_flight)
            n = 1
            while n in taken:
                n += 1
            return n

    def claim(self, worker: int, parent: str | None, limit: int | None = None) -> int | None:
        """Hand out the next number to `worker` and mark it in flight; None once `limit` is reached."""
        with self.lock:
            n = self.next_n()
            if limit is not None and n > limit:
                return None
            self.in_flight[n] = InFlight(n=n, parent=parent, worker=worker)
            return n

    def adopt(self, worker: int, a) -> None:
        """Attempt `a`, resumed from a pending file: in flight under its old number (worker 0:
        queued for the first free worker)."""
        with self.lock:
            self.in_flight[a.n] = InFlight.of(a.n, a.parent, a.proposal, commit=a.commit, worker=worker)

    def update(self, n: int, **fields) -> None:
        with self.lock:
            entry = self.in_flight.get(n)
            for name, value in fields.items() if entry is not None else ():
                setattr(entry, name, value)

    def proposed(self, n: int, proposal) -> None:
        """Experiment n's proposal is made: the other workers' proposers see what it tries (its
        knob values and code), so an offline sampler keeps its trial running, not superseded."""
        with self.lock:
            if n in self.in_flight:
                self.in_flight[n].proposed(proposal)

    def finish(self, n: int) -> None:
        with self.lock:
            self.in_flight.pop(n, None)

    def pending_for_proposer(self, exclude: int | None = None) -> list[InFlight]:
        """The experiments in flight (copies; status "pending"): the proposer sees them and does
        not propose the same idea twice."""
        with self.lock:
            return [e.snapshot() for n, e in sorted(self.in_flight.items()) if n != exclude]

    def moved(self, head: str, best: dict | None = None) -> None:
        """The branch moved outside an experiment (a human-queue decision applied): its new head,
        and its measured best where that changed (None: unchanged)."""
        with self.lock:
            self.moves.append((len(self.history), head, best))


class LockedProposer:
    """A proposer whose calls wait for each other (workers share one proposer)."""

    def __init__(self, inner, lock: threading.Lock):
        self._inner, self._lock = inner, lock

    def propose(self, req):
        with self._lock:
            return self._inner.propose(req)

    def __getattr__(self, name):   # name, cheap_redo, close, ... of the proposer itself
        return getattr(self._inner, name)


class DeferredSignal:
    """Ctrl-C arriving while the main thread writes a record is held until the write is done."""

    def __init__(self):
        self.active, self.pending = False, False

    @contextlib.contextmanager
    def deferred(self):
        if threading.current_thread() is not threading.main_thread():
            yield   # signals reach the main thread only: a worker's write has nothing to defer
            return
        self.active = True
        try:
            yield
        finally:
            self.active = False
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    def handle(self, signum, frame) -> None:
        """The loop's SIGINT/SIGTERM handler: stop now, or once the record being written is."""
        if self.active:
            self.pending = True
            return
        raise KeyboardInterrupt
