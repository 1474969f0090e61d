"""One experiment, start to finish: steps 5-10 of the protocol in agent/loop.py (guard, commit, run
with crash fixes, evaluate, judge, record, keep/reset).

The order is the point: the journal record and the results.tsv row are written (and fsynced)
before git moves, and pending.json marks a committed-but-unrecorded experiment, so a kill at any
moment leaves something agent/recovery.py can reconcile.
"""
from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Protocol

from agent.config import LoopConfig
from agent.errors import BranchMoved, InterruptedBaseline, ProposalError, Rerun
from agent.pending import PendingFile
from agent.proposers.base import Proposal, ProposalRequest
from agent.proposing import ProposalInfo, Proposers, call_proposer, same_edit
from agent.workspace import RunFiles
from agent.judges.reviewer import Decision, ExperimentContext, GuardVerdict
from harness import gitops, knobs
from harness.clock import ClockReference
from harness.executors.base import Executor
from harness.pinned import Seal
from harness.records import Basis, Best, ExperimentRecord, RunInfo
from harness.results import append_journal, append_record
from harness.executors import CANCELLED, TrainJob, eval_spec, seal_fields, sources_at
from harness.executors.local import LocalExecutor
from harness.executors.shared import SharedExecutor
from harness.runner import RunResult
from harness.secrets import scrub

TRAIN = "train.py"
# The judge may ask for the same commit to be run again (baseline repeats, confirming runs, runs
# that replace disturbed ones); a safety net above the judge's own plan (5 + 2 runs per commit).
MAX_RERUNS = 12
# Every run gets a seed of its own (AUTORESEARCH_SEED), so no run replays another: run r of
# experiment n (r = 0 first) has RERUN_SEED_BASE + SEEDS_PER_EXPERIMENT * (n - 1) + r - 1; the
# baseline's first run keeps train.py's SEED, so `uv run train.py` reproduces it.
RERUN_SEED_BASE = 1000
SEEDS_PER_EXPERIMENT = 16
# A would-be keep whose parent is no longer the tip (another worker kept first) is rebased onto
# the tip and confirmed by a run there; after this many rebases in a row it is discarded.
MAX_REBASES = 3
# How often a worker asks the executor whether its job is done.
EXECUTOR_POLL_S = 0.2
# The training progress line of train.py: "... | trained 12.3s" (used to show the evaluating phase).
TRAINED_RE = re.compile(r"trained ([0-9.]+)s")


@dataclass(frozen=True)
class RunSite:
    """What assembling a run needs (run_commit, the one way): the tag's files and fixed terms
    (run.json, the budget, the timeout), the seal, whether the reviewer evaluates (a sealed run and
    its trusted evaluation in the job), the executor the job goes to, and the clock reference the
    harness charges the run against. The single loop's, a worker's (its own files and executor)
    and an ablation's (agent/report.py) are each one of these."""
    files: RunFiles
    run_info: RunInfo
    budget: float
    timeout: float
    seal: Seal | None
    sealed: bool
    executor: Executor
    clock_reference: Callable[[], ClockReference]


class ExperimentHost(Protocol):
    """What run_experiment needs from its caller: the single loop (agent/loop.py Loop) or one of
    --workers N (agent/workers.py Worker). Nothing else of either is read or written here."""
    files: RunFiles         # repo, tag, worktree (where edits are committed), run folder, pending file, branch
    runs: RunSite           # how its runs are assembled and where they go (run_commit)
    history: list; best: Best | None; last_kept: str | None      # the coordinator's state
    config: LoopConfig; reviewer: object; tracer: object; console: object
    proposers: Proposers                                         # who proposes (agent/proposing.py)
    prefetch: object; feedback: str; phase: str
    wid: int | None                                              # the worker's number (recorded); None: the single loop

    def critical(self): ...                                       # the decision lock
    def set_phase(self, phase: str, n=None, run_started_at=None) -> None: ...
    def refresh(self, force: bool = False) -> None: ...
    def request(self, n, source, feedback="", fix_of=None, pending=()) -> ProposalRequest: ...
    def prefetch_next(self, a: "Attempt", new_source: str) -> None: ...
    def after_record(self, rec: ExperimentRecord, bpb) -> None: ...
    def check_stop(self) -> None: ...                             # raises KeyboardInterrupt to stop


@dataclass
class Attempt:
    """What the loop knows about experiment n while it is in flight."""
    n: int
    parent: str | None               # None for the baseline (it is the base commit itself)
    proposal: Proposal
    info: ProposalInfo = field(default_factory=ProposalInfo)   # how the proposal came to be (a dict is read)
    commit: str | None = None
    git_seconds: float = 0.0
    started_at: float = field(default_factory=time.time)
    t0: float = field(default_factory=time.monotonic)
    attempts: list = field(default_factory=list)   # crashed tries that were fixed

    def __post_init__(self):
        if not isinstance(self.info, ProposalInfo):   # as pending.json holds it
            self.info = ProposalInfo.from_dict(self.info)


def seed_for(n: int, r: int) -> int | None:
    """AUTORESEARCH_SEED of run r (0 = the first) of experiment n; None: train.py's own SEED."""
    if n == 1 and r == 0:
        return None
    return RERUN_SEED_BASE + SEEDS_PER_EXPERIMENT * (n - 1) + r - 1


def commit_message(p: Proposal) -> str:
    return scrub(f"{p.description}\n\nHypothesis: {p.hypothesis}\n\n"
                 f"Proposer: {p.proposer}\nModel: {p.model or '-'}\n")


def context(loop, a: Attempt, old_source: str, new_source: str, diff: str) -> ExperimentContext:
    return ExperimentContext(n=a.n, tag=loop.files.tag, worktree=loop.files.worktree, parent=a.parent or a.commit,
                             commit=a.commit, old_source=old_source, new_source=new_source, diff=diff,
                             proposal=a.proposal, history=list(loop.history), best=loop.best,
                             run_dir=loop.files.run_dir)


def _timed_git(a: Attempt, fn, *args):
    t0 = time.monotonic()
    try:
        return fn(*args)
    finally:
        a.git_seconds += time.monotonic() - t0


def write_pending(loop, a: Attempt) -> None:
    PendingFile.of(a).write(loop.files.pending_path)


def run_experiment(loop: ExperimentHost, a: Attempt, *, committed: bool = False) -> dict:
    """Carry experiment `a` to a recorded decision; returns its journal record."""
    old_source = gitops.show_file(loop.files.repo, a.parent, TRAIN) if a.parent else a.proposal.source
    getattr(loop, "show_attempt", lambda *_: None)(a)   # its idea on the panel and in state.json while it runs
    guard = GuardVerdict(True, "baseline: unmodified train.py")
    if a.parent is not None and not committed:
        loop.set_phase("guarding", a.n)
        diff = gitops.text_diff(old_source, a.proposal.source)
        ctx = context(loop, a, old_source, a.proposal.source, diff)
        with loop.tracer.span("guard", input={"n": a.n}) as sp:     # 5. guard
            guard = loop.reviewer.guard(ctx)
            sp.log(output={"ok": guard.ok, "reason": guard.reason})
        if not _commit(loop, a):                                      # 6. commit
            guard = GuardVerdict(False, "the proposal does not change train.py")
            # a commit of its own all the same: its row never repeats the parent's commit
            a.commit = _timed_git(a, gitops.commit_empty, loop.files.worktree, commit_message(a.proposal))
        if not guard.ok:
            loop.feedback = f"The guard rejected experiment {a.n} before it ran: {guard.reason}"
            return record(loop, a, old_source, None,
                          Decision("discard", f"guard: {guard.reason}", basis=Basis.GUARD), guard)
    write_pending(loop, a)                                            # 6. pending.json

    while True:
        new_source = gitops.show_file(loop.files.repo, a.commit, TRAIN)
        diff = _timed_git(a, gitops.diff, loop.files.repo, a.parent, a.commit) if a.parent else ""
        ctx = context(loop, a, old_source, new_source, diff)
        loop.prefetch_next(a, new_source)
        try:
            run, decision = _run_and_judge(loop, a, ctx)              # 7. run, 8. evaluate, 9. judge
        except InterruptedBaseline as stop:   # Ctrl-C during a baseline repeat: keep what finished
            record(loop, a, old_source, stop.run, stop.decision, guard)
            raise KeyboardInterrupt from None
        getattr(loop, "check_after_run", lambda _: None)(run)   # missing data is no crash of the idea
        if decision.status == "crash" and len(a.attempts) < loop.config.fix_tries:
            if _ask_fix(loop, a, new_source, run) is not None:
                continue
        try:
            return record(loop, a, old_source, run, decision, guard)  # 10. record, then git
        except BranchMoved:   # another worker kept meanwhile: rebase onto the tip and confirm there
            moved = rebase_onto_tip(loop, a, old_source, new_source, run, decision)
            if isinstance(moved, Decision):
                return record(loop, a, old_source, run, moved, guard)
            old_source, guard = moved


def rebase_onto_tip(loop, a: Attempt, old_source: str, new_source: str, run, decision: Decision):
    """`a` would have been kept on its own parent, but the branch moved. Merge its edit onto the
    tip (three-way, train.py) and commit it there for a confirming run: returns (the tip's source,
    the guard's verdict on the merged edit), or a discard Decision when that cannot be done."""
    tip = loop.last_kept
    tip_source = gitops.show_file(loop.files.repo, tip, TRAIN)
    if a.info.rebases is None:
        a.info.rebases = []
    rounds = a.info.rebases
    rounds.append({"commit": a.commit, "parent": a.parent, "reason": decision.reason,
                   "val_bpb": decision.trusted_bpb if decision.trusted_bpb is not None
                   else run.printed("val_bpb") if run else None})
    if len(rounds) > MAX_REBASES:
        return Decision("discard", f"would have been kept, but the branch moved under each of its "
                        f"{MAX_REBASES} confirming runs; discarded (last: {decision.reason})",
                        decision.trusted_bpb, decision.verdicts, basis=Basis.CONFLICT)
    merged = gitops.merge_file(tip_source, old_source, new_source)
    if merged is None:
        return Decision("discard", f"conflict: kept on its parent {str(a.parent)[:7]} ({decision.reason}), "
                        f"but its edit conflicts with what was kept since (tip {tip[:7]}); discarded",
                        decision.trusted_bpb, decision.verdicts, basis=Basis.CONFLICT)
    if merged == tip_source:
        return Decision("discard", f"already on the branch: the keeps since {str(a.parent)[:7]} contain "
                        f"this edit (tip {tip[:7]})", decision.trusted_bpb, decision.verdicts, basis=Basis.CONFLICT)
    if not same_edit(old_source, new_source, tip_source, merged):
        # the keeps since hold part of the edit: what would run on the tip is another experiment than
        # the one measured and described, so it is not confirmed under this one's description
        return Decision("discard", f"only part of its edit applies on the tip {tip[:7]} (the keeps since "
                        f"{str(a.parent)[:7]} hold the rest); discarded rather than run under a description "
                        "that claims more", decision.trusted_bpb, decision.verdicts, basis=Basis.CONFLICT)
    _timed_git(a, gitops.update_ref, loop.files.repo, gitops.discarded_ref(loop.files.tag, a.n, attempt=f"r{len(rounds)}"),
               a.commit)
    _timed_git(a, gitops.reset_hard, loop.files.worktree, tip)
    old_parent = a.parent
    a.parent, a.info.rebased_from = tip, old_parent
    a.proposal = replace(a.proposal, source=merged,
                         notes=(a.proposal.notes + f" [rebased from {str(old_parent)[:7]} onto {tip[:7]} "
                                "to be confirmed]").strip())
    ctx = context(loop, a, tip_source, merged, gitops.text_diff(tip_source, merged))
    guard = loop.reviewer.guard(ctx)
    if not guard.ok:
        return Decision("discard", f"guard (after rebasing onto {tip[:7]}): {guard.reason}",
                        decision.trusted_bpb, decision.verdicts, basis=Basis.GUARD)
    if not _commit(loop, a):
        return Decision("discard", "the rebased edit changes nothing", decision.trusted_bpb, decision.verdicts, basis=Basis.CONFLICT)
    write_pending(loop, a)
    loop.console.event(f"exp {a.n}: would be kept on {str(old_parent)[:7]}, but the branch moved to "
                       f"{tip[:7]}; rebased as {a.commit[:7]}, confirming it there")
    return tip_source, guard


def _run_and_judge(loop, a: Attempt, ctx: ExperimentContext) -> tuple[RunResult, Decision]:
    reruns, last_ok, last_decision = [], None, None
    while True:
        try:
            return _run_and_judge_once(loop, a, ctx, reruns, last_ok, last_decision)
        except Rerun as again:
            last_ok, last_decision = again.run, again.decision
        except KeyboardInterrupt:
            if a.parent is None and last_ok is not None and last_decision is not None \
                    and last_decision.status == "keep":
                last_decision.rerun = False
                last_decision.reason += (f" (interrupted during repeat run {len(reruns) + 1}; recorded "
                                         f"with the {len(reruns)} run(s) that finished)")
                last_decision.verdicts["reruns"] = reruns[:-1]
                raise InterruptedBaseline(last_ok, last_decision) from None
            raise


def _run_and_judge_once(loop, a: Attempt, ctx: ExperimentContext, reruns: list, last_ok, asked: Decision | None):
    """One run and its judgement; raises Rerun when the judge asks for another run: of the same
    commit, or of the incumbent (`asked.rerun_commit`: judged by reviewer.judge_incumbent, and the
    candidate's last run stays the one the record describes)."""
    incumbent = asked.rerun_commit if asked is not None and asked.rerun else None
    commit = incumbent or a.commit
    getattr(loop, "show_run", lambda *_: None)(a, len(reruns), asked)   # which run of it, and why (agent/status.py)
    loop.set_phase("training", a.n, run_started_at=time.time())
    log_name = f"exp-{a.n:04d}" + (f".fix{len(a.attempts)}" if a.attempts else "") + \
               (f".rerun{len(reruns)}" if reruns else "") + (".incumbent" if incumbent else "") + ".log"
    with loop.tracer.span("run", input={"n": a.n, "commit": commit, "log": log_name,
                                        "incumbent": incumbent is not None}) as sp:
        # Every run its own seed: the judge's evidence for a candidate never replays the
        # incumbent's runs (nor its own), so the noise it measures is real.
        seed = seed_for(a.n, len(reruns))
        env = {"AUTORESEARCH_SEED": str(seed)} if seed is not None else {}
        run = execute(loop, a, log_name, env, commit)   # the run and its trusted evaluation, as a job
        run.extra["seed"] = seed
        sp.log(output={"crash_class": run.crash_class, "wall": run.wall_seconds,
                       "val_bpb": run.printed("val_bpb"), "seed": seed})
    loop.set_phase("judging", a.n)
    with loop.tracer.span("judge", input={"n": a.n, "crash_class": run.crash_class,
                                          "incumbent": incumbent is not None}) as sp:
        decision = loop.reviewer.judge_incumbent(ctx, run) if incumbent else loop.reviewer.judge(ctx, run)
        sp.log(output={"status": decision.status, "reason": decision.reason})
    done = {"summary": run.summary, "log": _rel(loop, run.log_path), "clock": run.clock_figures}
    if incumbent:   # a run of the bar, not of the candidate: the record stays the candidate's
        done.update(commit=incumbent, crash_class=run.crash_class)
        run = last_ok
    if decision.rerun and len(reruns) < MAX_RERUNS:
        reruns.append(done)
        raise Rerun(run, decision)
    if decision.rerun and hasattr(loop.reviewer, "out_of_reruns"):   # never a silent discard
        decision = loop.reviewer.out_of_reruns(ctx, decision, len(reruns) + 1)
    if incumbent:
        reruns.append(done)
    if reruns:
        decision.verdicts.setdefault("reruns", reruns)
        if run.crash_class is not None and decision.status != "crash":
            # the judge decided on the runs that finished; the record keeps their figures
            decision.verdicts["reruns"].append({"summary": None, "log": _rel(loop, run.log_path),
                                                "crash_class": run.crash_class})
            run = last_ok
    return run, decision


def execute(loop, a: Attempt, log_name: str, env: dict, commit: str | None = None) -> RunResult:
    """The run of `a` (or of `commit`, the incumbent, for `a`'s decision) on the loop's executor
    (run_commit); 'evaluating' shows once it trained."""
    return run_commit(loop, a.n, commit or a.commit, log_name, env, parent=a.parent,
                      on_tick=lambda el, log: _tick(loop, a, log))


def run_commit(host, n: int, commit: str, log_name: str, env: dict | None = None, *, parent: str | None = None,
               on_tick=None) -> RunResult:
    """The one way a run is assembled: `commit`'s files, the seal and, for a reviewer that
    evaluates, the trusted evaluation, as a TrainJob on the host's executor (harness/executors:
    the single loop's one local slot, a --workers slot, a Ray node), so the evaluation runs
    where the model is and reaches the judge with the result. The queue's re-measurements use
    it too. `host` gives the RunSite (`host.runs`) and, while the job runs, check_stop (a stop
    cancels the job) and refresh (the status). A stop (Ctrl-C) cancels the job."""
    site = host.runs
    files = sources_at(site.files.repo, commit)
    evaluation = None
    if site.sealed:
        profile = site.run_info.profile or os.environ.get("AUTORESEARCH_PROFILE", "")
        base = site.run_info.base_commit or parent or commit
        evaluation = eval_spec(site.seal, prepare_source=gitops.show_file(site.files.repo, base, "prepare.py"),
                               train_source=files[TRAIN], profile=profile, eval_tokens=site.run_info.eval_tokens)
    job = TrainJob(n=n, files=files, budget=site.budget, run_dir=str(site.files.run_dir), log_name=log_name,
                   commit=commit, timeout=site.timeout, env=dict(env or {}), sealed=site.sealed,
                   data_mode="train" if site.sealed else "open", clock_reference=vars(site.clock_reference()),
                   evaluation=evaluation, **seal_fields(site.seal))
    executor = site.executor
    jid = executor.submit(job, on_tick=on_tick)
    try:
        while (res := executor.poll(jid)) is None:
            host.check_stop()
            host.refresh()
            time.sleep(EXECUTOR_POLL_S)
    except BaseException:
        executor.cancel(jid)
        raise
    run = res.run_result()
    if res.crash_class == CANCELLED:
        raise KeyboardInterrupt(f"experiment {n}: its job was cancelled")
    verified = res.verify_result()
    if verified is not None:   # the judge takes it instead of evaluating again (agent/judges/hierarchy.py)
        run.extra["verify_result"] = verified
    return run


def one_slot(run_dir: Path):
    """The single loop's executor: one local slot, its folder in the run folder's git-ignored
    RUN_SRC (a sandboxed run sees its slot's files and nothing else of the project)."""
    return SharedExecutor(LocalExecutor(1, root=Path(run_dir) / RUN_SRC / "slots"))


# Where the single loop materialises a commit's run files (in the run folder, git-ignored; a
# sandboxed run sees this folder and nothing else of the project).
RUN_SRC = ".runs"


def _tick(loop, a: Attempt, log_path) -> None:
    """Show 'evaluating' once train.py reports it trained the whole budget."""
    if loop.phase != "training":
        return
    try:
        with open(log_path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 400))
            tail = f.read().decode(errors="replace")
    except OSError:
        return
    found = TRAINED_RE.findall(tail)
    if found and float(found[-1]) >= loop.runs.budget:
        loop.set_phase("evaluating", a.n)
    else:
        loop.refresh()


def _ask_fix(loop, a: Attempt, crashed_source: str, run: RunResult) -> bool | None:
    """Show the proposer the crash; on a fix, preserve the crashed commit and commit the fix."""
    loop.prefetch.wait()   # proposers are never called concurrently
    loop.set_phase("proposing", a.n)
    req = loop.request(a.n, crashed_source, feedback=(
        f"Experiment {a.n} crashed ({run.crash_class}). Last {len(run.log_tail.splitlines())} "
        f"lines of its log:\n{run.log_tail}"), fix_of=a.proposal)
    try:
        fix, info = call_proposer(loop.proposers, req)
    except ProposalError as exc:
        a.info.fix_error = str(exc)
        return None
    ref = gitops.discarded_ref(loop.files.tag, a.n, attempt=len(a.attempts))
    _timed_git(a, gitops.update_ref, loop.files.repo, ref, a.commit)
    a.attempts.append({"commit": a.commit, "crash_class": run.crash_class, "ref": ref,
                       "log": _rel(loop, run.log_path), "description": a.proposal.description})
    base = a.parent or a.commit
    _timed_git(a, gitops.reset_hard, loop.files.worktree, base)
    if a.parent is None:
        a.parent = base   # a fixed baseline becomes a commit on top of the base
    a.proposal = fix
    a.info.fixes = [*(a.info.fixes or []), info.to_dict()]
    if not _commit(loop, a):
        a.info.fix_error = "the fix did not change train.py"
        _timed_git(a, gitops.reset_hard, loop.files.worktree, a.attempts[-1]["commit"])
        a.commit = a.attempts.pop()["commit"]
        return None
    write_pending(loop, a)
    return True


def _commit(loop, a: Attempt) -> bool:
    (loop.files.worktree / TRAIN).write_text(a.proposal.source)
    if not gitops.status_porcelain(loop.files.worktree):
        return False
    a.commit = _timed_git(a, gitops.commit_file, loop.files.worktree, TRAIN, commit_message(a.proposal))
    return True


def record(loop, a: Attempt, old_source: str, run: RunResult | None, decision: Decision,
           guard: GuardVerdict) -> ExperimentRecord:
    """Journal, then results.tsv (both fsynced), then git: keep advances, else preserve + reset."""
    loop.set_phase("judging", a.n)
    summary = dict((run.summary if run else None) or {})
    new_source = a.proposal.source
    status = decision.status
    commit = a.commit or a.parent
    sealed = bool(run and run.sealed)
    printed = run.printed("val_bpb") if run else None
    # The recorded figure is the trusted evaluator's; a printed one counts only for a reviewer that
    # trusts train.py (the simple reviewer of stand-in files). A sealed run printed none.
    bpb = decision.trusted_bpb if decision.trusted_bpb is not None else \
        (printed if not sealed and status != "crash" else None)
    if sealed:
        summary["val_bpb"] = bpb
    training = _num(run.printed("training_seconds") if run else None)
    eval_s = _num(run.printed("eval_seconds") if run else None)
    wall = run.wall_seconds if run else 0.0
    discarded = None
    if status != "keep" and a.commit and a.parent:
        discarded = gitops.discarded_ref(loop.files.tag, a.n)
    verdicts = {"guard": {"ok": guard.ok, "reason": guard.reason, "details": guard.details},
                **decision.verdicts}
    evidence = verdicts.pop("evidence", None)   # the runs the decision rests on: a record field
    judge = decision.judge
    if "basis" not in judge or decision.basis in (Basis.GUARD, Basis.CONFLICT):
        # the basis the decision rests on, where the readers look for it (ExperimentRecord.basis)
        verdicts["judge"] = dict(judge, basis=decision.basis.value)
    rec = ExperimentRecord(
        kind="experiment", n=a.n, tag=loop.files.tag, parent=a.parent, commit=commit, short=commit[:7], status=status, description=a.proposal.description,
        hypothesis=a.proposal.hypothesis, proposer=a.proposal.proposer,
        model=a.proposal.model, diff=gitops.diff(loop.files.repo, a.parent, a.commit) if a.parent and a.commit else "",
        summary=summary or None, trusted_bpb=decision.trusted_bpb,
        clock=run.clock_figures if run else None, sealed=sealed,
        verify_seconds=decision.verify_figure("seconds"),   # trusted re-evaluation cost
        crash_class=run.crash_class if run else None, decision_reason=decision.reason,
        verdicts=verdicts,
        timings={"proposal": a.info.proposal_seconds, "proposal_wait": a.info.proposal_wait,
                 "run": wall, "training": training, "eval": eval_s,
                 "startup": max(0.0, wall - training - eval_s) if run else 0.0, "git": a.git_seconds},
        tokens=dict(a.proposal.tokens), cost_usd=a.proposal.cost_usd + decision.verdict_cost(),
        log=_rel(loop, run.log_path) if run else None, discarded_ref=discarded,
        started_at=a.started_at, memory_gb=_num(run.printed("peak_vram_mb") if run else None) / 1024,
        config=knobs.values(new_source), code=knobs.code_fingerprint(new_source),
        attempts=a.attempts, notes=a.proposal.notes, evidence=evidence)
    for key, value in a.info.record_fields().items():
        setattr(rec, key, value)
    rec.worker = loop.wid   # --workers N: which worker carried it
    rec.ended_at = time.time()
    total = time.monotonic() - a.t0
    rec.timings.update(total=total, overhead=total - training)
    # The record as the journal will hold it: every value through the one scrubber.
    rec = ExperimentRecord.from_dict(scrub(rec.to_dict()))
    with loop.critical():
        if status == "keep" and a.parent is not None and a.parent != loop.last_kept:
            raise BranchMoved(a.n)   # nothing written yet: rebased and confirmed by the caller
        append_journal(loop.files.journal_path, rec.to_dict())
        # results.tsv carries the figure the decision rests on: the trusted re-evaluation when
        # there is one, so a forged printed val_bpb never appears as the result (row_bpb).
        # A baseline try that was not kept stays in the journal only (ExperimentRecord.in_results):
        # the table's first row is the kept baseline, and no commit is on two rows.
        append_record(loop.files.results_path, rec)
        t0 = time.monotonic()
        if status == "keep":
            branch = loop.files.branch_worktree or loop.files.worktree   # a worker's own worktree is not the branch's
            if a.commit and a.commit != gitops.head(branch):
                gitops.reset_hard(branch, a.commit)
            loop.last_kept = commit
        elif discarded:
            gitops.update_ref(loop.files.repo, discarded, a.commit)
            gitops.reset_hard(loop.files.worktree, loop.last_kept)
        loop.files.pending_path.unlink(missing_ok=True)
        try:   # under the lock too: workers' notes share one ref
            gitops.add_note(loop.files.repo, commit, scrub(f"autoresearch {loop.files.tag} exp {a.n}: {status} "
                                                     f"val_bpb={bpb} ({decision.reason})"))
        except gitops.GitError as exc:
            loop.console.event(f"warning: could not write git note: {exc}")
        rec.timings["git"] += time.monotonic() - t0
        loop.after_record(rec, bpb)
    return rec


def _num(x) -> float:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else 0.0


def _rel(loop, path) -> str:
    try:
        return str(path.relative_to(loop.files.run_dir))
    except ValueError:
        return str(path)
