"""Step 4 of the protocol and the crash fixes of step 7: who proposes, and what they are told.

`Ideas` is the proposer side of one experiment in flight (the single loop has one; each of
--workers N its own, sharing the proposers behind the coordinator's lock): the request a proposer
gets (program.md, the tag's history and best, what else is in flight, the feedback of the last
guard rejection), the proposal for experiment n (a prefetched one where the single loop made it
while n - 1 trained), the fix of a crashed run, and the hand-over notice once a spend cap is hit.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from agent import budget
from agent.config import IdeasConfig
from agent.coordinator import InFlight
from agent.proposers.base import Proposal, ProposalRequest
from agent.proposing import Prefetch, ProposalInfo, Proposers, call_proposer, with_dropped
from harness import gitops
from harness.records import ExperimentRecord

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
        """While `a` trains, propose n + 1 on top of it (the single loop; see agent/proposing.py)."""
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
