"""Step 4 of the protocol: getting a proposal (Ideas, at the end: who proposes and what they are
told), its fallbacks, and the prefetch that overlaps proposing with training.

While experiment n trains, a thread asks the proposer for n+1 as if n will be kept (its parent is
n's commit). If n is kept, the proposal is used as is. If n is discarded or crashes, the parent
is gone: a cheap proposer (offline) is simply asked again; an expensive one (an LLM) has its
edit rebased onto the last kept commit with a three-way merge, used only when the merge carries
the whole edit and nothing else (same_edit: the proposal's description must describe the diff
that runs), and is asked again otherwise.

Neither takes the loop: `call_proposer` and the prefetch get a `Proposers` (who proposes, the
fallback, the tracer, the hand-over limits and who says a hand-over), built once by the loop and
per worker (agent/workers.py: the same proposers behind the coordinator's lock).
"""
from __future__ import annotations

import difflib
import threading
import time
import traceback
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable

from agent import budget
from agent.config import IdeasConfig
from agent.coordinator import InFlight
from agent.proposers.base import Proposal, ProposalError, ProposalRequest, ProposerUnavailable
from agent.proposers.local import FINE_SCALE, LocalProposer
from agent import gitops
from harness.experiment_record import ExperimentRecord
from harness.results_table import fnum


@dataclass
class ProposalInfo:
    """How experiment n's proposal came to be, and what happened to it before its record. The loop
    carries it with the proposal (its pending line holds to_dict()); the record keeps every key but the
    timings (`seconds`, `waited`: the record's `timings`) as one of its optional keys
    (harness/experiment_record.py OPTIONAL_KEYS), written when set."""
    seconds: float | None = None          # proposing it (a screen: every candidate's, and the screen's)
    waited: float | None = None           # a prefetched one: how long the loop waited for it
    handover: str | None = None           # why the offline proposer had this turn (agent/budget.py)
    fallback: str | None = None           # "offline": the proposer failed or was unavailable
    proposal_error: str | None = None
    prefetched: bool | None = None        # made ahead while the previous experiment trained (Prefetch)
    stale_parent: str | None = None       # ...on a parent that was not kept
    rebased_from: str | None = None       # ...so its edit was merged onto the last kept commit
    dropped_prefetch: list | None = None  # LLM proposals made ahead and not used (charged here)
    screen: dict | None = None            # --screen K: the screen that picked it (agent/screening.py)
    screen_error: str | None = None
    fixes: list | None = None             # the fix proposals of the experiment's crashed tries
    fix_error: str | None = None
    rebases: list | None = None           # --workers: the runs on parents the branch moved past
    resumed: bool | None = None           # re-run after a stop (agent/recovery.py)
    extra: dict = field(default_factory=dict)                             # keys this class does not know
    _keys: tuple | None = field(default=None, repr=False, compare=False)  # key order as read

    def to_dict(self) -> dict:
        """A pending line's `info`: one read by from_dict gives back the same keys in the same order
        (unknown ones kept), then keys set since; a new one gives INFO_KEYS' order, keys set only."""
        vals = {k: getattr(self, k) for k in INFO_KEYS}
        order = [k for k in (self._keys or ()) if k in vals or k in self.extra]
        order += [k for k in INFO_KEYS if k not in order and vals[k] is not None]
        out = {k: (vals[k] if k in vals else self.extra[k]) for k in order}
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out

    @classmethod
    def from_dict(cls, d) -> "ProposalInfo":
        """Never raises; anything but a dict reads as an empty ProposalInfo."""
        d = d if isinstance(d, dict) else {}
        return cls(**{k: d[k] for k in INFO_KEYS if k in d},
                   extra={k: v for k, v in d.items() if k not in INFO_KEYS}, _keys=tuple(d))

    def for_record(self) -> dict:
        """What the experiment record keeps: its optional keys that are set (the timings go to
        its `timings`, keys this class does not know stay in the pending line)."""
        return {k: v for k, v in self.to_dict().items() if k in INFO_KEYS and k not in TIMING_KEYS}

    @property
    def proposal_seconds(self) -> float:
        return fnum(self.seconds) or 0.0    # pending.json is data: a bad value reads as 0

    @property
    def proposal_wait(self) -> float:
        """What the loop waited for the proposal: a prefetched one's wait, else all of its time."""
        waited = fnum(self.waited)
        return waited if waited is not None else self.proposal_seconds


# pending.json's keys of a ProposalInfo, in the order they are written
INFO_KEYS = tuple(f.name for f in fields(ProposalInfo) if f.name not in ("extra", "_keys"))
# The timings go to the record's `timings`; every other key is one of the record's optional keys.
TIMING_KEYS = ("seconds", "waited")


@dataclass(frozen=True)
class Proposers:
    """What asking for a proposal needs: the proposer, the offline fallback (the same object when
    --proposer offline), the tracer, the hand-over limits (LoopConfig.max_cost, .crash_streak: what
    agent/budget.py's handover reads) and `announce(why, n)`, which says a hand-over as it starts
    (agent/budget.py Handovers.announce)."""
    proposer: object
    offline: object
    tracer: object
    max_cost: float | None = None
    crash_streak: int | None = None
    announce: Callable[[str, int], None] = lambda why, n: None

    @property
    def llm(self) -> bool:
        """The proposer is not the offline one: hand-overs (and their spend) apply."""
        return self.proposer is not self.offline


def call_proposer(p: Proposers, req: ProposalRequest) -> tuple[Proposal, ProposalInfo]:
    """Ask p.proposer; on an outage or a failed attempt fall back so the loop never stalls.

    ProposerUnavailable -> the offline proposer this time (journal: "fallback": "offline").
    ProposalError or a bug -> one more try with the error as feedback, then offline.
    Fix requests are not retried: their failure means the crash is recorded.
    A hand-over (agent/budget.py: the cost cap, a crash streak) -> the offline proposer, and the
    LLM is not called (journal: "handover" says why); a fix is then not asked of anyone.
    """
    t0 = time.monotonic()
    info = ProposalInfo()
    why = budget.handover(p, req.tried()) if p.llm else None
    if why is not None:
        if req.fix_of is not None:
            raise ProposalError(f"no fix asked of the LLM: {why}")
        p.announce(why, req.n)
        with p.tracer.span("propose", input={"n": req.n, "proposer": "offline", "handover": why}) as sp:
            proposal = p.offline.propose(req)
            sp.log(output={"description": proposal.description, "proposer": proposal.proposer, "handover": why})
        return proposal, ProposalInfo(handover=why, seconds=time.monotonic() - t0)
    with p.tracer.span("propose", input={"n": req.n, "proposer": p.proposer.name,
                                         "fix": req.fix_of is not None,
                                         "feedback": req.feedback[-2000:]}) as sp:
        try:
            proposal = p.proposer.propose(req)
        except ProposerUnavailable as exc:
            if req.fix_of is not None:
                raise ProposalError(f"proposer unavailable for the fix: {exc}") from exc
            info.fallback, info.proposal_error = "offline", f"unavailable: {exc}"
            proposal = p.offline.propose(req)
        except Exception as exc:   # ProposalError or a bug in a proposer: never kill the loop
            if req.fix_of is not None:
                raise ProposalError(str(exc)) from exc
            info.proposal_error = _describe(exc)
            try:
                proposal = p.proposer.propose(replace(
                    req, feedback=(req.feedback + f"\nYour previous attempt failed: {exc}").strip()))
            except Exception as exc2:
                if not p.llm:
                    raise ProposalError(f"offline proposer failed twice: {exc2}") from exc2
                info.fallback, info.proposal_error = "offline", _describe(exc2)
                proposal = p.offline.propose(req)
        sp.log(output={"description": proposal.description, "proposer": proposal.proposer,
                       **info.to_dict()}, tokens=proposal.tokens, cost=proposal.cost_usd)
    info.seconds = time.monotonic() - t0
    return proposal, info


def with_dropped(proposal: Proposal, info: ProposalInfo, dropped: list) -> tuple[Proposal, ProposalInfo]:
    """Charge LLM proposals that were made ahead and dropped to the proposal that replaces them, so
    the journal (and the cost cap) count every dollar spent."""
    if not dropped:
        return proposal, info
    cost = sum(p.cost_usd for p in dropped)
    tokens = {k: proposal.tokens.get(k, 0) + sum(p.tokens.get(k, 0) for p in dropped) for k in proposal.tokens}
    info = replace(info, dropped_prefetch=[{"description": p.description, "cost_usd": p.cost_usd} for p in dropped])
    dropped.clear()
    return replace(proposal, cost_usd=proposal.cost_usd + cost, tokens=tokens), info


def edit_of(old: str, new: str) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """The edit from `old` to `new` as its hunks' content (lines removed, lines added), in order,
    without their positions: what a description of the change describes."""
    a, b = old.splitlines(), new.splitlines()
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return [(tuple(a[i1:i2]), tuple(b[j1:j2])) for tag, i1, i2, j1, j2 in ops if tag != "equal"]


def same_edit(old: str, new: str, rebased_old: str, rebased_new: str) -> bool:
    """Whether rebasing the edit old -> new onto rebased_old (giving rebased_new) kept all of it
    and added nothing: a three-way merge drops the lines the new parent already has, and then
    the proposal's description would claim more than the commit changes."""
    return bool(edit_of(old, new)) and edit_of(old, new) == edit_of(rebased_old, rebased_new)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (ProposalError, ProposerUnavailable)):
        return f"{type(exc).__name__}: {exc}"
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


class Prefetch:
    """One background proposal at a time (proposers are never called concurrently)."""

    def __init__(self):
        self.proposers: Proposers | None = None   # who the proposal in flight was asked of
        self.thread: threading.Thread | None = None
        self.n = None
        self.parent = None          # commit the proposal was made on
        self.parent_source = ""
        self.result = None          # (proposal, info) or an exception
        self.dropped: list = []     # LLM proposals made ahead and not used: their cost is still spent

    def start(self, proposers: Proposers, req: ProposalRequest, parent: str) -> None:
        self.wait()
        self.n, self.parent, self.parent_source, self.result = req.n, parent, req.train_source, None
        self.proposers = proposers

        def work():
            try:
                self.result = call_proposer(proposers, req)
            except BaseException as exc:   # delivered to the main thread by take()
                self.result = exc
        self.thread = threading.Thread(target=work, name=f"prefetch-{req.n}", daemon=True)
        self.thread.start()

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()

    def busy(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def take(self, n: int, parent: str, parent_source: str) -> tuple[Proposal, ProposalInfo] | None:
        """The prefetched proposal for n on `parent` (rebased if needed), or None to propose anew."""
        if self.thread is None or self.n != n:
            return None
        t0 = time.monotonic()
        self.wait()
        self.thread, result = None, self.result
        if isinstance(result, BaseException) or result is None:
            return None
        proposal, info = result
        info = replace(info, waited=time.monotonic() - t0, prefetched=True)
        if self.parent == parent:
            return proposal, info
        info.stale_parent = self.parent
        if self.proposers.proposer.cheap_redo or proposal.proposer == "offline":
            return None   # re-asking costs nothing and sees the latest history
        merged = gitops.merge_file(parent_source, self.parent_source, proposal.source)
        if merged is None or not same_edit(self.parent_source, proposal.source, parent_source, merged):
            self.dropped.append(proposal)   # a conflict, or only part of the edit applies: ask again
            return None
        info.rebased_from = self.parent
        proposal = replace(proposal, source=merged,
                           notes=(proposal.notes + f" [rebased from {self.parent[:7]} onto {parent[:7]}]").strip())
        return proposal, info


# ---- Ideas: step 4 of the protocol and the crash fixes of step 7: who proposes, and what they are told.
#
# `Ideas` is the proposer side of one experiment in flight (the single loop has one; each of
# --workers N its own, sharing the proposers behind the coordinator's lock): the request a proposer
# gets (program.md, the tag's history and best, what else is in flight, the feedback of the last
# guard rejection), the proposal for experiment n (a prefetched one where the single loop made it
# while n - 1 trained), the fix of a crashed run, and the hand-over notice once a spend cap is hit.

TRAIN = "train.py"


@dataclass
class Ideas:
    proposers: Proposers
    coord: object                 # agent/coordinator.py Coordinator: history, best, what is in flight
    repo: Path                    # program.md is read from here first (the human edits it there) ...
    worktree: Path                # ... then from the tag's worktree
    config: IdeasConfig           # seed, fix_tries, the hand-over limits (max_cost, crash_streak)
    last_n: int | None = None     # --max-experiments: nothing is prefetched past it
    prefetch: Prefetch | None = None   # the single loop: n + 1 is proposed while n trains
    feedback: str = ""            # the last guard rejection, told to the next proposal

    def request(self, n: int, source: str, feedback: str = "", fix_of: Proposal | None = None,
                pending=()) -> ProposalRequest:
        """`pending`: experiments in flight (agent/coordinator.py InFlight) the proposer must not repeat;
        the other workers' are added."""
        in_flight = self.coord.pending_for_proposer(exclude=n)
        return ProposalRequest(n=n, worktree=self.worktree, train_source=source, program=self.program(),
                               history=list(self.coord.history), pending=list(pending) + in_flight,
                               best=self.coord.best, feedback=feedback, fix_of=fix_of, seed=self.config.seed)

    def program(self) -> str:
        """program.md, re-read every time: the human's checkout first (they edit it there)."""
        for path in (Path(self.repo) / "program.md", Path(self.worktree) / "program.md"):
            if path.exists():
                return path.read_text(errors="replace")
        return ""

    def propose(self, n: int, parent: str) -> tuple[Proposal, ProposalInfo]:
        """Experiment n's proposal on `parent`: the one prefetched for it if still good, else asked now."""
        source = gitops.show_file(self.repo, parent, TRAIN)
        got = None
        if self.prefetch is not None and not self.feedback:
            got = self.prefetch.take(n, parent, source)
            if got is not None and got[0].proposer != "offline" and budget.handover(self.config, self.coord.history):
                self.prefetch.dropped.append(got[0])   # made before the hand-over began: the offline turn
                got = None
        if got is None:
            if self.prefetch is not None:
                self.prefetch.wait()   # proposers are never called concurrently
            got = call_proposer(self.proposers, self.request(n, source, feedback=self.feedback))
        if self.prefetch is not None:
            got = with_dropped(*got, self.prefetch.dropped)
        self.feedback = ""
        return got

    def fix(self, n: int, crashed: Proposal, crashed_source: str, run) -> tuple[Proposal, ProposalInfo]:
        """A fix of the crashed edit (ProposalError when there is none)."""
        if self.prefetch is not None:
            self.prefetch.wait()
        tail = run.log_tail
        return call_proposer(self.proposers, self.request(n, crashed_source, fix_of=crashed, feedback=(
            f"Experiment {n} crashed ({run.crash_class}). Last {len(tail.splitlines())} lines of its log:\n{tail}")))

    def ahead(self, a, new_source: str) -> None:
        """While `a` trains, propose n + 1 on top of it (the single loop; see Prefetch above)."""
        n, c = a.n + 1, self.config
        if self.prefetch is None or self.prefetch.n == n or (self.last_n is not None and n > self.last_n):
            return
        pending = InFlight.of(a.n, a.parent, replace(a.proposal, source=new_source), commit=a.commit,
                              handover=a.info.handover)
        if self.proposers.llm:
            if budget.streak_reason(list(self.coord.history) + [pending.as_crash()], c.crash_streak):
                return   # if n crashes, a streak hands over: no LLM proposal made (and paid) ahead of it
            if c.max_cost is not None and budget.spent(self.coord.history) + a.proposal.cost_usd >= c.max_cost:
                return   # n's proposal reaches the cap: n + 1 is the offline proposer's
        self.prefetch.start(self.proposers, self.request(n, new_source, pending=[pending]), a.commit)

    def decided(self, rec: ExperimentRecord) -> None:
        """A spend cap reached by this record: the hand-over is said now (the judge stops calling
        the LLM at once)."""
        capped = budget.cap_reason(self.coord.history, self.config.max_cost)
        if capped and self.proposers.llm:
            self.proposers.announce(capped, rec.n + 1)


# Who proposes: built once by the loop (tests give their own through agent/loop.py's names for these).
def make_offline(search: str = "local"):
    """The offline proposer: local steps from the incumbent, or an Optuna sampler (tpe, cmaes, random)."""
    if search in ("local", "local-fine"):
        return LocalProposer(FINE_SCALE if search == "local-fine" else 1.0)
    from agent.proposers.offline import OfflineProposer   # Optuna, only for the samplers
    return OfflineProposer(search)


def make_proposer(kind: str, offline_search: str = "local", *, model: str | None = None,
                  api_patience: float = 600.0, tracer=None):
    if kind == "offline":
        return make_offline(offline_search)
    try:   # imported lazily: the offline path must not need the anthropic client
        from agent.proposers.claude import ClaudeProposer
    except ImportError as exc:
        raise SystemExit(f"--proposer claude: cannot import agent/proposers/claude.py ({exc})")
    kw = {"api_patience": api_patience, "tracer": tracer}
    if model:
        kw["model"] = model
    return ClaudeProposer(**kw)
