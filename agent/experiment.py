"""One experiment, start to finish: steps 5-10 of agent/loop.py (guard, commit, run with crash
fixes, evaluate, judge, record, keep/reset). The order is the point: the journal record and the
results.tsv row are written (fsynced) before git moves, and a "pending" line marks a committed,
unrecorded experiment, so a kill at any moment leaves what agent/recovery.py reconciles.
"""
from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from agent.errors import ProposalError, WorkerStopped
from agent.coordinator import PendingFile
from agent.proposers.base import Proposal
from agent.proposing import ProposalInfo, same_edit
from agent.workspace import RunFiles
from agent.judges.reviewer import Decision, ExperimentContext, GuardVerdict
from agent import gitops, seeds
from search import knobs
from harness.clock import ClockReference
from harness.verify import Seal, eval_rows
from harness.decision import Basis
from harness.experiment_record import ExperimentRecord
from runfiles.run import RunInfo
from harness.results import append_journal, append_record
from harness.job import EvalSpec, JobSeal, TrainJob
from executors import Executor, LocalExecutor, SharedExecutor
from agent.gitops import sources_at
from harness.runner import RunResult
from harness.secrets import scrub

TRAIN = "train.py"
# The judge may ask for the same commit to be run again (baseline repeats, confirming runs, runs
# that replace disturbed ones); a safety net above the judge's own plan (5 + 2 runs per commit).
MAX_RERUNS = 12
# A would-be keep whose parent is no longer the tip (another worker kept first) is rebased onto
# the tip and confirmed by a run there; after this many rebases in a row it is discarded.
MAX_REBASES = 3
# How often a worker asks the executor whether its job is done (a dict lookup; the status panel
# ticks at most once a second): a run ends on average half of it before the loop sees it.
EXECUTOR_POLL_S = 0.05


def reference_of(history: list, recipe: str | None = None) -> ClockReference:
    """The tag's clock reference from its journal records (ExperimentRecord, or journal dicts): the
    baseline's runs. `recipe`: the kept commit a run descends from (a candidate's parent), whose pace,
    where slower than the baseline's, is the pace a step is measured in (steps mode, harness/clock.py):
    the tag accepted that recipe's steps on its trusted figure, and a search compounds its moves
    from it (a deeper model on a doubled batch is 20x the baseline's step)."""
    recs = [ExperimentRecord.from_dict(r) if isinstance(r, dict) else r for r in history]
    recs = [r for r in recs if isinstance(r, ExperimentRecord)]
    base = next((r for r in recs if r.proposer == "baseline" and isinstance(r.clock, dict)), None)
    if base is None:
        return ClockReference()
    ref = ClockReference.from_figures(base.clock_runs())
    kept = next((r for r in reversed(recs) if recipe and r.commit == recipe and r.status == "keep"
                 and not r.imported), None)
    pace = ClockReference.from_figures(kept.own_clock_runs()).pace_s if kept is not None else None
    if pace is not None and ref.pace_s is not None and pace > ref.pace_s:
        ref = replace(ref, pace_s=pace)
    return ref


def job_seal(seal, *, sealed: bool = False, data_mode: str = "train", clock_reference: dict | None = None,
             stand_ins: dict | None = None) -> JobSeal:
    """A job's JobSeal from a harness.verify.Seal (the loop's sandbox and data view; None: no
    sandbox, no data view): TrainJob(..., seal=job_seal(loop.seal, sealed=True, ...))."""
    if seal is None:
        return JobSeal(sealed=sealed, data_mode=data_mode, clock_reference=clock_reference, stand_ins=stand_ins)
    return JobSeal(sealed=sealed, sandbox=seal.sandbox.kind, data=seal.data.as_dict() if seal.data else None,
                   data_mode=data_mode, stand_ins=stand_ins, clock_reference=clock_reference)


def eval_spec(seal, *, prepare_source: str, train_source: str, profile: str,
              timeout_s: float | None = None, eval_tokens: int | None = None) -> EvalSpec:
    """The EvalSpec of a loop's run (harness/job.py evaluates it where the model is): the trusted prepare.py, the
    run's evaluation batch, the seal's pinned inputs (and the data cache to repair them from)."""
    return EvalSpec(prepare_source=prepare_source, batch_size=eval_rows(profile),
                    inputs=dict(seal.inputs) if seal is not None else {},
                    eval_cache=str(seal.eval_cache) if seal is not None and seal.eval_cache else None,
                    data_cache=str(seal.data.cache) if seal is not None and seal.data else None,
                    timeout_s=timeout_s, train_source=train_source, eval_tokens=eval_tokens)


@dataclass(frozen=True)
class Slot:
    """Where one experiment's runs go, and the tag's fixed terms for them: its files (worktree,
    journal; `branch_worktree` where keeps move the branch), run.json, the budget and timeout,
    the seal, whether the reviewer evaluates (a sealed run and its trusted evaluation in the job),
    the executor (the single loop's one local slot, a --workers slot, a Ray node), the clock
    reference the harness charges a run against, the worker's number (None: the single loop), the
    event that stops it (None: the single loop is stopped by its signal) and the environment check
    made after a crashed run. The single loop's, each worker's and an ablation's are each one."""
    files: RunFiles
    run_info: RunInfo
    budget: float
    timeout: float
    seal: Seal | None
    sealed: bool
    executor: Executor
    clock_reference: Callable[[str | None], ClockReference]   # (the kept recipe a run descends from) -> reference
    wid: int | None = None
    stop: threading.Event | None = None
    check_environment: Callable[[], None] | None = None
    early_stop: Callable[[], list | None] | None = None   # --early-stop: a candidate's curve limits now


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
    run_seconds: float = 0.0                        # wall time of every run this decision made (device-seconds)

    def __post_init__(self):
        if not isinstance(self.info, ProposalInfo):   # as a pending line holds it
            self.info = ProposalInfo.from_dict(self.info)


def seed_for(run_dir: Path, n: int, r: int) -> int | None:
    """AUTORESEARCH_SEED of run r (0 = the first) of experiment n, drawn with the run folder's key
    (agent/seeds.py: no run replays another, and train.py cannot tell a loop's run from a
    re-measurement's); None: the baseline's first run, on train.py's own SEED."""
    return seeds.loop_seed(seeds.key_of(run_dir), n, r)


def commit_message(p: Proposal) -> str:
    return scrub(f"{p.description}\n\nHypothesis: {p.hypothesis}\n\n"
                 f"Proposer: {p.proposer}\nModel: {p.model or '-'}\n")


def context(tag, slot: Slot, a: Attempt, old_source: str, new_source: str, diff: str) -> ExperimentContext:
    return ExperimentContext(n=a.n, tag=slot.files.tag, worktree=slot.files.worktree, parent=a.parent or a.commit,
                             commit=a.commit, old_source=old_source, new_source=new_source, diff=diff,
                             proposal=a.proposal, history=list(tag.history),
                             # the baseline (its repeats continued after an interrupt too) is judged as one
                             best=None if a.parent is None and a.proposal.proposer == "baseline" else tag.best,
                             run_dir=slot.files.run_dir)


def _timed_git(a: Attempt, fn, *args):
    t0 = time.monotonic()
    try:
        return fn(*args)
    finally:
        a.git_seconds += time.monotonic() - t0


def write_pending(slot: Slot, a: Attempt) -> None:
    """The journal's "pending" line for `a` (committed, not recorded): --resume runs it again."""
    append_journal(slot.files.journal_path, PendingFile.of(a, worker=slot.wid).as_line())


def run_experiment(a: Attempt, tag, slot: Slot, ideas, reviewer, status, *, committed: bool = False) -> ExperimentRecord:
    """Steps 5-10 for experiment `a`, top to bottom; returns its journal record.

    `tag`: the coordinator (history, best, last kept commit, the decision lock); `slot`: where it
    runs; `ideas`: the proposer side (fixes, the next proposal prefetched, feedback); `reviewer`:
    the guard and the judge; `status`: the panel (agent/status.py). Nothing is called back."""
    repo = slot.files.repo
    old_source = gitops.show_file(repo, a.parent, TRAIN) if a.parent else a.proposal.source
    status.attempt(a)
    guard = GuardVerdict(True, "baseline: unmodified train.py")
    if a.parent is not None and not committed:                        # 5. guard
        status.phase("guarding", a.n)
        guard = _guarded(reviewer, status, context(tag, slot, a, old_source, a.proposal.source,
                                           gitops.text_diff(old_source, a.proposal.source)))
        if not _commit(slot, a):                                      # 6. commit
            guard = GuardVerdict(False, "the proposal does not change train.py")
            # a commit of its own all the same: its row never repeats the parent's commit
            a.commit = _timed_git(a, gitops.commit_empty, slot.files.worktree, commit_message(a.proposal))
        if not guard.ok:
            ideas.feedback = f"The guard rejected experiment {a.n} before it ran: {guard.reason}"
            return record(a, tag, slot, status, None, Decision("discard", f"guard: {guard.reason}",
                                                               basis=Basis.GUARD), guard)
    write_pending(slot, a)                                            # 6. the journal's pending line
    while True:   # one pass per commit of the edit: as proposed, a crash fixed, rebased onto a moved tip
        new_source = gitops.show_file(repo, a.commit, TRAIN)
        diff = _timed_git(a, gitops.diff, repo, a.parent, a.commit) if a.parent else ""
        ctx = context(tag, slot, a, old_source, new_source, diff)
        ideas.ahead(a, new_source)                                    # 4. for n + 1, while this trains
        reruns, run, asked = [], None, None
        while True:   # runs until the judge decides: repeats, confirming runs, the incumbent's runs
            incumbent = asked.run_next if asked is not None else None
            status.run(a, len(reruns), asked)
            try:
                ran = _run(a, slot, status, len(reruns), incumbent)   # 7. run, 8. evaluate
                a.run_seconds += ran.wall_seconds
                status.phase("judging", a.n)
                with status.span("judge", {"n": a.n, "crash_class": ran.crash_class,
                                           "incumbent": incumbent is not None}) as sp:
                    decision = reviewer.judge_incumbent(ctx, ran) if incumbent else reviewer.judge(ctx, ran)
                    sp.log(output={"status": decision.status, "reason": decision.reason})   # 9. judge
            except KeyboardInterrupt:
                if a.parent is None and asked is not None and asked.leaning == "keep" and run is not None:
                    # Ctrl-C during a baseline repeat: the baseline is recorded on the runs that finished
                    asked.verdicts["reruns"] = reruns[:-1]
                    asked.verdicts.setdefault("judge", {})["interrupted"] = True   # --resume continues it
                    record(a, tag, slot, status, run, asked.as_leaning(
                        f"interrupted during repeat run {len(reruns) + 1}; recorded with the "
                        f"{len(reruns)} run(s) that finished"), guard)
                raise
            status.judged(a.n, decision)
            done = {"summary": ran.summary, "log": _rel(slot, ran.log_path), "clock": ran.clock_figures}
            if incumbent:   # a run of the bar, not of the candidate: the record stays the candidate's
                done.update(commit=incumbent, crash_class=ran.crash_class)
            if decision.is_again and len(reruns) < MAX_RERUNS:
                reruns.append(done)
                run, asked = run if incumbent else ran, decision
                continue
            if decision.is_again:   # out of reruns: contested (the human queue), never a silent discard
                decision = reviewer.out_of_reruns(ctx, decision, len(reruns) + 1)
            if incumbent:
                reruns.append(done)
            elif reruns and ran.crash_class is not None and decision.status != "crash":
                # the judge decided on the runs that finished; the record keeps their figures
                reruns.append({"summary": None, "log": _rel(slot, ran.log_path), "crash_class": ran.crash_class})
            else:
                run = ran
            if reruns:
                decision.verdicts.setdefault("reruns", reruns)
            break
        if run.crash_class is not None and slot.check_environment is not None:
            slot.check_environment()   # missing data is no crash of the idea (EnvironmentStop)
        if decision.status == "crash" and len(a.attempts) < ideas.config.fix_tries \
                and _fix(a, tag, slot, ideas, status, new_source, run):
            continue
        rec = record(a, tag, slot, status, run, decision, guard)      # 10. record, then git
        if rec is not None:
            return rec
        # another worker kept meanwhile: rebase onto the tip and confirm there
        moved = rebase_onto_tip(a, tag, slot, reviewer, status, old_source, new_source, run, decision)
        if isinstance(moved, Decision):
            return record(a, tag, slot, status, run, moved, guard)
        old_source, guard = moved


def rebase_onto_tip(a: Attempt, tag, slot: Slot, reviewer, status, old_source: str, new_source: str, run,
                    decision: Decision):
    """`a` would have been kept on its own parent, but the branch moved. Merge its edit onto the
    tip (three-way, train.py) and commit it there for a confirming run: returns (the tip's source,
    the guard's verdict on the merged edit), or a discard Decision when that cannot be done."""
    repo, tip = slot.files.repo, tag.last_kept
    tip_source = gitops.show_file(repo, tip, TRAIN)
    if a.info.rebases is None:
        a.info.rebases = []
    rounds = a.info.rebases
    rounds.append({"commit": a.commit, "parent": a.parent, "reason": decision.reason,
                   "val_bpb": decision.trusted_bpb if decision.trusted_bpb is not None
                   else run.printed("val_bpb") if run else None})

    def discard(why: str, basis: Basis = Basis.CONFLICT) -> Decision:
        return Decision("discard", why, decision.trusted_bpb, decision.verdicts, basis=basis)
    if len(rounds) > MAX_REBASES:
        return discard(f"would have been kept, but the branch moved under each of its {MAX_REBASES} "
                       f"confirming runs; discarded (last: {decision.reason})")
    merged = gitops.merge_file(tip_source, old_source, new_source)
    if merged is None:
        return discard(f"conflict: kept on its parent {str(a.parent)[:7]} ({decision.reason}), but its edit "
                       f"conflicts with what was kept since (tip {tip[:7]}); discarded")
    if merged == tip_source:
        return discard(f"already on the branch: the keeps since {str(a.parent)[:7]} contain this edit (tip {tip[:7]})")
    if not same_edit(old_source, new_source, tip_source, merged):
        # the keeps since hold part of the edit: what would run on the tip is another experiment than
        # the one measured and described, so it is not confirmed under this one's description
        return discard(f"only part of its edit applies on the tip {tip[:7]} (the keeps since {str(a.parent)[:7]} "
                       "hold the rest); discarded rather than run under a description that claims more")
    _timed_git(a, gitops.update_ref, repo, gitops.discarded_ref(slot.files.tag, a.n, attempt=f"r{len(rounds)}"),
               a.commit)
    _timed_git(a, gitops.reset_hard, slot.files.worktree, tip)
    old_parent = a.parent
    a.parent, a.info.rebased_from = tip, old_parent
    a.proposal = replace(a.proposal, source=merged,
                         notes=(a.proposal.notes + f" [rebased from {str(old_parent)[:7]} onto {tip[:7]} "
                                "to be confirmed]").strip())
    guard = _guarded(reviewer, status, context(tag, slot, a, tip_source, merged, gitops.text_diff(tip_source, merged)))
    if not guard.ok:
        return discard(f"guard (after rebasing onto {tip[:7]}): {guard.reason}", Basis.GUARD)
    if not _commit(slot, a):
        return discard("the rebased edit changes nothing")
    write_pending(slot, a)
    status.event(f"exp {a.n}: would be kept on {str(old_parent)[:7]}, but the branch moved to "
                 f"{tip[:7]}; rebased as {a.commit[:7]}, confirming it there")
    return tip_source, guard


def _guarded(reviewer, status, ctx: ExperimentContext) -> GuardVerdict:
    with status.span("guard", {"n": ctx.n}) as sp:
        guard = reviewer.guard(ctx)
        sp.log(output={"ok": guard.ok, "reason": guard.reason})
    return guard


def _run(a: Attempt, slot: Slot, status, done: int, incumbent: str | None) -> RunResult:
    """Run `done` of experiment `a` (of the incumbent's commit where the judge asked for it), with
    its own seed: the judge's evidence never replays another run, so the noise it measures is real."""
    commit = incumbent or a.commit
    status.phase("training", a.n, run_started_at=time.time())
    log_name = f"exp-{a.n:04d}" + (f".fix{len(a.attempts)}" if a.attempts else "") + \
               (f".rerun{done}" if done else "") + (".incumbent" if incumbent else "") + ".log"
    seed = seed_for(slot.files.run_dir, a.n, done)
    # a candidate's run may be ended early on its printed curve (agent/judges/curves.py): it costs less, never counts more
    limits = slot.early_stop() if slot.early_stop is not None and not incumbent and a.parent is not None else None
    with status.span("run", {"n": a.n, "commit": commit, "log": log_name, "incumbent": incumbent is not None}) as sp:
        run = run_commit(slot, a.n, commit, log_name, {"AUTORESEARCH_SEED": str(seed)} if seed is not None else {},
                         parent=a.parent, status=status, stop_limits=limits)
        run.extra["seed"] = seed
        sp.log(output={"crash_class": run.crash_class, "wall": run.wall_seconds,
                       "val_bpb": run.printed("val_bpb"), "seed": seed})
    return run


def run_commit(slot: Slot, n: int, commit: str, log_name: str, env: dict | None = None, *,
               parent: str | None = None, status=None, stop_limits: list | None = None) -> RunResult:
    """The one way a run is assembled: `commit`'s files, the seal and, for a reviewer that
    evaluates, the trusted evaluation, as a TrainJob on the slot's executor (executors/),
    so the evaluation runs where the model is and reaches the judge with the result. The queue's
    re-measurements, the ablations and --validate use it too. A stop (Ctrl-C, the slot's stop
    event) cancels the job."""
    files = sources_at(slot.files.repo, commit)
    evaluation = None
    if slot.sealed:
        profile = slot.run_info.profile or os.environ.get("AUTORESEARCH_PROFILE", "")
        base = slot.run_info.base_commit or parent or commit
        evaluation = eval_spec(slot.seal, prepare_source=gitops.show_file(slot.files.repo, base, "prepare.py"),
                               train_source=files[TRAIN], profile=profile, eval_tokens=slot.run_info.eval_tokens)
    seal = job_seal(slot.seal, sealed=slot.sealed, data_mode="train" if slot.sealed else "open",
                    clock_reference=vars(slot.clock_reference(parent or commit)))
    job = TrainJob(n=n, files=files, budget=slot.budget, run_dir=str(slot.files.run_dir), log_name=log_name,
                   commit=commit, timeout=slot.timeout, env=dict(env or {}), seal=seal, evaluation=evaluation,
                   stop_limits=stop_limits)
    jid = slot.executor.submit(job, on_tick=status.on_log if status is not None else None)
    try:
        while (res := slot.executor.poll(jid)) is None:
            if slot.stop is not None and slot.stop.is_set():
                raise WorkerStopped()
            if status is not None:
                status.tick()
            time.sleep(EXECUTOR_POLL_S)
    except BaseException:
        slot.executor.cancel(jid)
        raise
    if res.cancelled:
        raise KeyboardInterrupt(f"experiment {n}: its job was cancelled")
    return res   # its trusted evaluation in it (`verified`): the judge takes it as it is


# Where the single loop materialises a commit's run files (in the run folder, git-ignored; a
# sandboxed run sees this folder and nothing else of the project).
RUN_SRC = ".runs"


def one_slot(run_dir: Path):
    """The single loop's executor: one local slot, its folder in the run folder's git-ignored
    RUN_SRC (a sandboxed run sees its slot's files and nothing else of the project)."""
    return SharedExecutor(LocalExecutor(1, root=Path(run_dir) / RUN_SRC / "slots"))


def _fix(a: Attempt, tag, slot: Slot, ideas, status, crashed_source: str, run: RunResult) -> bool:
    """Show the proposer the crash; on a fix, preserve the crashed commit and commit the fix."""
    status.phase("proposing", a.n)
    try:
        fix, info = ideas.fix(a.n, a.proposal, crashed_source, run)
    except ProposalError as exc:
        a.info.fix_error = str(exc)
        return False
    ref = gitops.discarded_ref(slot.files.tag, a.n, attempt=len(a.attempts))
    _timed_git(a, gitops.update_ref, slot.files.repo, ref, a.commit)
    a.attempts.append({"commit": a.commit, "crash_class": run.crash_class, "ref": ref,
                       "log": _rel(slot, run.log_path), "description": a.proposal.description})
    base = a.parent or a.commit
    _timed_git(a, gitops.reset_hard, slot.files.worktree, base)
    if a.parent is None:
        a.parent = base   # a fixed baseline becomes a commit on top of the base
    a.proposal = fix
    a.info.fixes = [*(a.info.fixes or []), info.to_dict()]
    if not _commit(slot, a):
        a.info.fix_error = "the fix did not change train.py"
        _timed_git(a, gitops.reset_hard, slot.files.worktree, a.attempts[-1]["commit"])
        a.commit = a.attempts.pop()["commit"]
        return False
    write_pending(slot, a)
    return True


def _commit(slot: Slot, a: Attempt) -> bool:
    (slot.files.worktree / TRAIN).write_text(a.proposal.source)
    if not gitops.status_porcelain(slot.files.worktree):
        return False
    a.commit = _timed_git(a, gitops.commit_file, slot.files.worktree, TRAIN, commit_message(a.proposal))
    return True
def record(a: Attempt, tag, slot: Slot, status, run: RunResult | None, decision: Decision,
           guard: GuardVerdict) -> ExperimentRecord | None:
    """Journal, then results.tsv (both fsynced), then git: keep advances, else preserve + reset.
    None, with nothing written: a keep whose parent is no longer the branch tip (another worker
    kept first; the caller rebases it onto the tip)."""
    status.phase("judging", a.n)
    files = slot.files
    summary = dict((run.summary if run else None) or {})
    new_source = a.proposal.source
    outcome = decision.status
    commit = a.commit or a.parent
    sealed = bool(run and run.sealed)
    printed = run.printed("val_bpb") if run else None
    # The recorded figure is the trusted evaluator's; a printed one counts only for a reviewer that
    # trusts train.py (the simple reviewer of stand-in files). A sealed run printed none.
    bpb = decision.trusted_bpb if decision.trusted_bpb is not None else \
        (printed if not sealed and outcome != "crash" else None)
    if sealed:
        summary["val_bpb"] = bpb
    training = _num(run.printed("training_seconds") if run else None)
    eval_s = _num(run.printed("eval_seconds") if run else None)
    wall = run.wall_seconds if run else 0.0
    discarded = None
    if outcome != "keep" and a.commit and a.parent:
        discarded = gitops.discarded_ref(files.tag, a.n)
    verdicts = {"guard": {"ok": guard.ok, "reason": guard.reason, "details": guard.details},
                **decision.verdicts}
    evidence = verdicts.pop("evidence", None)   # the runs the decision rests on: a record field
    judge = decision.judge
    if "basis" not in judge or decision.basis in (Basis.GUARD, Basis.CONFLICT):
        # the basis the decision rests on, where the readers look for it (ExperimentRecord.basis)
        verdicts["judge"] = dict(judge, basis=decision.basis.value)
    p = a.proposal
    rec = ExperimentRecord(
        n=a.n, tag=files.tag, parent=a.parent, commit=commit, short=commit[:7], status=outcome,
        description=p.description, hypothesis=p.hypothesis, proposer=p.proposer, model=p.model,
        diff=gitops.diff(files.repo, a.parent, a.commit) if a.parent and a.commit else "",
        summary=summary or None, trusted_bpb=decision.trusted_bpb, clock=run.clock_figures if run else None,
        sealed=sealed, verify_seconds=decision.verify_figure("seconds"),   # trusted re-evaluation cost
        crash_class=run.crash_class if run else None, decision_reason=decision.reason, verdicts=verdicts,
        timings={"proposal": a.info.proposal_seconds, "proposal_wait": a.info.proposal_wait,
                 "run": wall, "runs": a.run_seconds, "training": training, "eval": eval_s,
                 "startup": max(0.0, wall - training - eval_s) if run else 0.0, "git": a.git_seconds},
        tokens=dict(p.tokens), cost_usd=p.cost_usd + decision.verdict_cost(),
        log=_rel(slot, run.log_path) if run else None, discarded_ref=discarded, started_at=a.started_at,
        memory_gb=_num(run.printed("peak_vram_mb") if run else None) / 1024,
        config=knobs.values(new_source), code=knobs.code_fingerprint(new_source), attempts=a.attempts,
        notes=p.notes, evidence=evidence, worker=slot.wid,   # --workers N: which carried it
        ended_at=time.time(), **a.info.for_record())
    total = time.monotonic() - a.t0
    rec.timings.update(total=total, overhead=total - training)
    # The record as the journal will hold it: every value through the one scrubber.
    rec = ExperimentRecord.from_dict(scrub(rec.to_dict()))
    with tag.critical():
        if outcome == "keep" and a.parent is not None and a.parent != tag.last_kept:
            return None   # nothing written yet: rebased and confirmed by the caller
        append_journal(files.journal_path, rec.to_dict())
        # results.tsv carries the figure the decision rests on: the trusted re-evaluation when
        # there is one, so a forged printed val_bpb never appears as the result (row_bpb).
        # A baseline try that was not kept stays in the journal only (ExperimentRecord.in_results):
        # the table's first row is the kept baseline, and no commit is on two rows.
        append_record(files.results_path, rec)
        t0 = time.monotonic()
        if outcome == "keep":
            branch = files.branch_worktree or files.worktree   # a worker's own worktree is not the branch's
            if a.commit and a.commit != gitops.head(branch):
                gitops.reset_hard(branch, a.commit)
        elif discarded:
            gitops.update_ref(files.repo, discarded, a.commit)
            gitops.reset_hard(files.worktree, tag.last_kept)
        try:   # under the lock too: workers' notes share one ref
            gitops.add_note(files.repo, commit, scrub(f"autoresearch {files.tag} exp {a.n}: {outcome} "
                                                     f"val_bpb={bpb} ({decision.reason})"))
        except gitops.GitError as exc:
            status.event(f"warning: could not write git note: {exc}")
        rec.timings["git"] += time.monotonic() - t0
        tag.decided(rec)
    status.decided(rec)
    return rec


def _num(x) -> float:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else 0.0


def _rel(slot: Slot, path) -> str:
    try:
        return str(path.relative_to(slot.files.run_dir))
    except ValueError:
        return str(path)
