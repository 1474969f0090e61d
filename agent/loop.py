"""The research loop: propose an edit of train.py, commit it, train, judge, keep or reset. Forever.

    uv run agent/loop.py --tag may29 [--budget S] [--max-experiments N] [--max-runs N] [--until HH:MM]
        [--proposer claude|offline] [--offline-search local|tpe|cmaes|random] [--model M] [--resume]
        [--fix-tries 2] [--api-patience 600]
        [--seed 0] [--worktree-root DIR] [--baseline-repeats 5] [--screen K]
        [--workers N] [--executor local|ray] [--ray-address ADDR] [--gpus 0,1,...]

THE PROTOCOL. Set up once (Loop.setup), then LOOP FOREVER; one experiment is steps 4-10
(agent/experiment.py run_experiment, in this order):

 0. set up: the tag's worktree on branch autoresearch/<tag>, its lock, the data's description,
    run.json, the seal (agent/sealing.py), the trusted compile cache; with --resume, reconcile
    what a stop left half done (agent/recovery.py)
 1. baseline: the unmodified train.py, run until it is kept (Loop.ensure_baseline)
 2. stop? --max-experiments, --max-runs, --until, a signal (Ctrl-C, SIGTERM), a full disk (Loop.run)
 3. between experiments: the human queue's decisions applied to the branch (reviewer.boundary),
    old artifacts pruned, the disk checked (Loop.check_space)
 4. propose: Claude or the offline search edits train.py (agent/proposing.py; --screen K picks
    among K in agent/screening.py; the next proposal is prefetched while this one trains)
 5. guard: the diff is checked before anything runs (agent/judges/guard.py)
 6. commit on autoresearch/<tag>; pending.json marks it committed-but-unrecorded
 7. run: train.py trains in the sandbox for the budget, by the harness's clock (harness/runner.py,
    harness/sandbox.py); a crash may be sent back to the proposer to fix (--fix-tries)
 8. evaluate: the trusted evaluator replays the saved model graph on the pinned validation data
    (harness/verify.py, harness/eval_worker.py); the model crosses as data, never as code
 9. judge: keep, discard, run again, or escalate to the human queue (agent/judges/hierarchy.py:
    the sequential test of agent/judges/stats.py, the LLM judge, the MetaJudge)
10. record: the journal, then results.tsv (both fsynced), then git: a keep advances the branch,
    anything else is preserved under refs/autoresearch/<tag>/discarded/<n> and reset; pending.json goes
    (agent/experiment.py record)

Control flow by exception lives in agent/errors.py. The files a run writes (results.tsv,
journal.jsonl, state.json, logs/...) sit at the top of the tag's worktree. Ctrl-C (or SIGTERM)
ends the running child and leaves a consistent state; --resume continues after any stop. With
--workers N, N experiments are in flight at once, each in its own worktree and on its own GPU
(agent/workers.py: the same steps 4-10 per worker); the tag's state and its decisions stay with
one coordinator (agent/coordinator.py).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

from agent import between, budget, cli, envcheck, notify, smoke, summary
from agent.cli import DEFAULT_BUDGET, deadline_of, parse_args  # noqa: F401  (callers and tests use them from here)
from agent.config import LoopConfig
from agent.coordinator import Coordinator, Phased
from agent.console import AnnouncingReviewer, Console, data_warning
from agent.status import LoopStatus
from agent.experiment import RUN_SRC, Attempt, RunSite, one_slot, run_experiment
from agent.errors import EnvironmentStop, OutOfSpaceStop, ProposalError
from agent.pending import InFlight, PendingFile
from agent.proposers.base import Proposal, ProposalRequest
from agent.proposers.local import LocalProposer
from agent.proposers.offline import OfflineProposer
from agent.proposing import Prefetch, Proposers, call_proposer, with_dropped
from agent.recovery import reconcile
from agent import screening
from agent.judges.hierarchy import JudgeHierarchy
from agent.judges.reviewer import Reviewer, SimpleReviewer
from agent.tracing import Tracer
from agent import diskspace, sdk_logs, workspace
from agent.sealing import SealError, clear_leftovers, make_seal
from harness.pinned import PinnedError
from harness import gitops
from harness.appendlog import is_out_of_space
from harness.clock import ClockReference, reference_of
from harness.records import DataInfo, ExperimentRecord, best_of
from harness.sandbox import DataView
from harness.runner import kill_leftover, timeout_for
from harness.executors.node import clear_staging

BASELINE_TRIES = 2      # runs of the unmodified train.py before a tag whose baseline fails stops
# Exit status of a stop for disk space (EX_TEMPFAIL: try again later, with --resume).
EXIT_OUT_OF_SPACE = 75


def build_reviewer(kind: str, baseline_repeats: int, tracer=None, budget: float | None = None) -> Reviewer:
    """The reviewer the loop uses: the judge hierarchy (--reviewer hierarchy; an LLM judge only
    with ANTHROPIC_API_KEY), or SimpleReviewer with --reviewer simple."""
    if kind == "simple":
        return SimpleReviewer()
    return JudgeHierarchy.build(baseline_repeats, tracer=tracer, budget=budget)


def make_offline(search: str = "local"):
    """The offline proposer: local steps from the incumbent, or an Optuna sampler (tpe, cmaes, random)."""
    return LocalProposer() if search == "local" else OfflineProposer(search)


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


class Loop(Phased, LoopStatus):
    wid = None   # no worker: the single loop's records say "worker": null

    def __init__(self, config: LoopConfig):
        config = self.config = LoopConfig.of(config)   # frozen: what the loop was asked to do
        self.coord = Coordinator()   # the tag's decided state and the decision lock
        self.tag, self.budget = config.tag, float(config.budget)
        self.timeout = config.timeout or timeout_for(self.budget)
        self.repo = gitops.toplevel(Path(config.repo).resolve())
        self.worktree = workspace.worktree_path(self.repo, self.tag, config.worktree_root)
        self.run_dir = self.worktree
        self.files = workspace.RunFiles(self.repo, self.tag, self.worktree, self.run_dir)
        self.baseline_repeats = config.baseline_repeats
        self.feedback = ""
        self.phase, self.experiment, self.run_started_at = "setup", None, None
        self.started_at, self.last_decision = time.time(), None
        self.phase_started_at, self.stop_reason = self.started_at, None
        self.tokens, self.cost_usd = {"input": 0, "output": 0}, 0.0
        self.prefetch = Prefetch()
        self.seal, self.sealed = None, False   # set in setup(): sandbox + pinned eval inputs
        self.executor = None                   # where runs go (set in setup(), or by agent/workers.py)
        self._critical, self._stop_pending, self._last_state = False, False, 0.0
        self._lock = None   # held once setup took the tag's lock; until then stop() touches nothing
        self.tag_lock = None   # the tag's own lock (workspace.tag_lock), taken by main before anything exists
        self.idea, self.run_of = None, None   # the experiment in flight (state.json idea, run)
        self.data_view, self.eval_tokens = None, None
        self.console = Console(self.tag, self.budget)
        self.notify = notify.LoopNotify.of(self)   # --notify URL: posts from a thread, never blocks

    # The tag's state lives in the coordinator; the loop (and recovery, the hierarchy's queue
    # step) read and set it through these.
    history = property(lambda self: self.coord.history, lambda self, v: setattr(self.coord, "history", v))
    best = property(lambda self: self.coord.best, lambda self, v: setattr(self.coord, "best", v))
    last_kept = property(lambda self: self.coord.last_kept, lambda self, v: setattr(self.coord, "last_kept", v))

    # ---- setup -------------------------------------------------------------------------------
    def setup(self) -> Attempt | None:
        base, created = workspace.open_worktree(self.repo, self.tag, self.worktree, self.config.resume)
        self.created = created
        self._lock = workspace.lock(self.run_dir)
        workspace.ignore_run_files(self.worktree)
        self.tracer = Tracer(self.run_dir / "traces.jsonl")
        c = self.config
        proposer = make_proposer(c.proposer, c.offline_search, model=c.model, api_patience=c.api_patience,
                                 tracer=self.tracer)
        self.reviewer = AnnouncingReviewer(build_reviewer(c.reviewer, c.baseline_repeats, self.tracer, self.budget),
                                           self.announce)
        self.proposers = Proposers(proposer, proposer if c.proposer == "offline" else make_offline(c.offline_search),
                                   self.tracer, c.max_cost, c.crash_streak,
                                   budget.Handovers(self.console.event, self.reviewer.stop_llm).announce)
        (self.run_dir / "logs").mkdir(exist_ok=True)
        env = dict(os.environ, AUTORESEARCH_TIME_BUDGET=f"{self.budget:g}")
        info = workspace.describe_data(self.worktree, env, self.run_dir / "logs" / "prepare.log")
        data = DataInfo.of(info)
        self.data_view = DataView.from_describe(info)
        self.eval_tokens = smoke.eval_tokens_for(data.eval_tokens, self.budget)
        if not base:   # resuming: the base commit is in run.json (or the branch tip if never written)
            fixed = (self.run_dir / "run.json").exists()
            base = "" if fixed else gitops.head(self.worktree)
        if base:   # run.json not written yet: on cpu/tiny the tag's base writes in that profile's knobs
            base = workspace.commit_profile_knobs(self.worktree, data.profile, base)
        self.run_info = workspace.write_or_check_run_json(
            self.run_dir / "run.json", tag=self.tag, budget=self.budget, info=info,
            base_commit=base, resume=self.config.resume, settings=cli.settings_of(c),
            inventory=envcheck.inventory(self.worktree, self.data_view), eval_tokens=self.eval_tokens)
        self.eval_tokens = self.run_info.eval_tokens   # the tag's, fixed when it started
        self.check_environment()   # at start and on --resume: a broken environment costs no idea
        self.seal = make_seal(self.run_dir, info, self.run_info, self.config.sandbox, self.console.event)
        workspace.warm_compile_cache(self.repo, self.run_dir, self.run_info, self.seal, self.budget, self.console.event)
        self.sealed = bool(getattr(self.reviewer, "evaluates", False))
        if hasattr(self.reviewer, "seal"):
            self.reviewer.seal = self.seal
        workspace.start_results(self.files.results_path)
        self.console.event(f"tag {self.tag}: worktree {self.worktree}, budget {self.budget:g}s, "
                           f"data {data.fingerprint} ({data.source or '?'}), "
                           f"proposer {proposer.name}")
        if data_warning(data):
            self.console.event(data_warning(data))
        self.last_kept = self.run_info.base_commit
        rerun = None
        if self.config.resume:
            found = reconcile(self.files, self.run_info.base_commit)   # the tag's state, as recorded
            self.history, self.last_kept, self.best = found.history, found.last_kept, found.best
            notes = found.notes + [f"removed the leftover folder {name} of a run or an evaluation"
                                   for name in clear_leftovers(self.run_dir) + clear_staging(self.run_dir)]
            for note in notes:
                self.console.event(f"resume: {note}")
            rerun = found.rerun
        if not c.parallel:   # one local slot, after the leftovers went (agent/workers.py opens the --workers')
            self.executor = one_slot(self.run_dir)
        return rerun

    # ---- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        rerun = self.setup()                                          # 0. set up (and reconcile)
        deadline = deadline_of(self.config.until)
        if rerun is not None:
            self.check_space()
            run_experiment(self, rerun, committed=True)
        if not self.config.parallel:
            from agent import workers   # a parallel run's experiments in flight, resumed by one loop
            for a, origin in workers.pending_attempts(self):
                self.console.event(f"resume: experiment {a.n} was in flight ({a.commit[:7]}): running it again")
                gitops.reset_hard(self.worktree, a.commit)
                workers.take_over(self, a, origin)
                self.check_space()
                run_experiment(self, a, committed=True)
        if self.best is None and self.config.reviewer == "hierarchy":
            steps = os.environ.get("AUTORESEARCH_STEPS")
            self.console.event(smoke.eta_note(
                baseline_repeats=self.baseline_repeats, max_experiments=self.config.max_experiments,
                budget=self.budget, eval_tokens=self.eval_tokens, steps=int(steps) if steps else None,
                done=self.next_n() - 1))
        if self.config.parallel:
            from agent import workers   # N experiments in flight; same guarantees per worker
            self.stop_reason = workers.run_parallel(self, deadline)   # the baseline first, on the executor
            return
        first_n, session_at = self.next_n(), time.time()
        self.ensure_baseline()                                        # 1. baseline
        while True:
            n = self.next_n()                                         # 2. stop?
            eta = smoke.eta_line(n=n, max_experiments=self.config.max_experiments, first_n=first_n,
                                 elapsed_s=time.time() - session_at)
            if eta:
                self.console.event(eta)
            if self.config.max_experiments is not None and n > self.config.max_experiments:
                self.stop_reason = f"reached --max-experiments {self.config.max_experiments}"
                break
            if deadline is not None and time.time() >= deadline:
                self.stop_reason = f"reached --until {self.config.until}"
                break
            if self.config.max_runs is not None and budget.runs_done(self.history) >= self.config.max_runs:
                self.stop_reason = (f"reached --max-runs {self.config.max_runs} "
                                    f"({budget.runs_done(self.history)} training runs)")
                break
            between.apply(self)                                       # 3. the human queue's decisions
            self.check_space()                                        # 3. disk
            run_experiment(self, self.next_attempt(n))                # 4. propose; 5-10 in run_experiment

    def ensure_baseline(self) -> None:
        """The tag's first keep is its unmodified train.py, never an experiment: a baseline that is
        not kept (a crash, an integrity failure) is run again, and after BASELINE_TRIES the tag
        stops with the reason, before any experiment could take its place."""
        while self.best is None:
            tries = [r for r in self.history if r.proposer == "baseline"]
            if len(tries) >= BASELINE_TRIES:
                why = tries[-1].decision_reason or tries[-1].crash_class
                raise workspace.SetupError(
                    f"the baseline (unmodified train.py) failed {len(tries)} times; the tag stops rather "
                    f"than measure experiments against nothing. Last reason: {why}. Logs: "
                    f"{self.run_dir / 'logs'}")
            if tries:
                self.console.event(f"baseline try {len(tries)} was not kept ({tries[-1].decision_reason}); "
                                   "running it again")
            self.check_space()
            run_experiment(self, self.baseline())

    @property
    def runs(self) -> RunSite:
        """How this loop's runs are assembled (agent/experiment.py run_commit), as they stand."""
        return RunSite(files=self.files, run_info=self.run_info, budget=self.budget, timeout=self.timeout,
                       seal=self.seal, sealed=self.sealed, executor=self.executor,
                       clock_reference=self.clock_reference)

    def clock_reference(self) -> ClockReference:
        """The baseline's startup and post by the harness clock (the median over its runs): what
        later runs are not charged for (harness/clock.py)."""
        return reference_of(self.history)

    def check_space(self) -> None:
        """Prune old artifacts, then refuse to start an experiment that would not fit on disk."""
        diskspace.prune_artifacts(self.run_dir, self.history, busy=set(self.coord.in_flight))
        short = diskspace.shortfall(self.run_dir, diskspace.git_dir(self.repo))
        if short is not None:
            need, free, where = short
            raise OutOfSpaceStop(diskspace.out_of_space_message(where, need, free))
        self.check_environment()

    def check_after_run(self, run) -> None:
        """A crashed run: is the environment to blame? (EnvironmentStop: it stays pending.)"""
        if run.crash_class is not None:
            self.check_environment()

    def check_environment(self) -> None:
        """EnvironmentStop when data, tokenizer or a fixed file is missing or corrupt (agent/envcheck.py):
        before each experiment, and after a crashed run before the crash is recorded."""
        envcheck.check(self.tag, self.worktree, self.data_view, self.run_info.inventory,
                       self.run_info.profile, self.run_info.source)

    def next_n(self) -> int:
        return self.coord.next_n()

    def check_stop(self) -> None:
        """The single loop is stopped by its signal handler (KeyboardInterrupt), never polled."""

    def baseline(self) -> Attempt:
        source = gitops.show_file(self.repo, self.last_kept, "train.py")
        p = Proposal(description="baseline (unmodified train.py)", hypothesis="reference point for the tag",
                     source=source, proposer="baseline")
        return Attempt(n=self.next_n(), parent=None, proposal=p, commit=self.last_kept)

    def next_attempt(self, n: int) -> Attempt:
        source = gitops.show_file(self.repo, self.last_kept, "train.py")
        got = None if self.feedback else self.prefetch.take(n, self.last_kept, source)
        if got is not None and got[0].proposer != "offline" and budget.handover(self.config, self.history):
            self.prefetch.dropped.append(got[0])   # made before the hand-over began: the offline turn
            got = None
        if got is None:
            self.prefetch.wait()
            self.set_phase("proposing", n)
            got = call_proposer(self.proposers, self.request(n, source, feedback=self.feedback))
        got = with_dropped(*got, self.prefetch.dropped)
        self.feedback = ""
        if self.config.screen > 1:
            screen = screening.Screen(
                k=int(self.config.screen), seed=self.config.seed, files=self.files, seal=self.seal,
                profile=self.run_info.profile, parent=self.last_kept, history=list(self.history),
                best=self.best, proposers=self.proposers, request=self.request, guard=self.reviewer.guard,
                say=self.console.event, set_phase=self.set_phase, tracer=self.tracer)
            got = screening.pick(screen, n, source, got)
        proposal, info = got
        return Attempt(n=n, parent=self.last_kept, proposal=proposal, info=info)

    def request(self, n, source, feedback="", fix_of=None, pending=()) -> ProposalRequest:
        """`pending`: experiments in flight (agent/pending.py InFlight) the proposer must not repeat."""
        return ProposalRequest(n=n, worktree=self.worktree, train_source=source, program=self.program(),
                               history=list(self.history), pending=list(pending), best=self.best,
                               feedback=feedback, fix_of=fix_of, seed=self.config.seed)

    def program(self) -> str:
        """program.md, re-read every time: the human's checkout first (they edit it there)."""
        for path in (self.repo / "program.md", self.worktree / "program.md"):
            if path.exists():
                return path.read_text(errors="replace")
        return ""

    def prefetch_next(self, a: Attempt, new_source: str) -> None:
        """While `a` trains, propose n+1 on top of it (see agent/proposing.py)."""
        n = a.n + 1
        if self.config.parallel:
            return   # workers overlap proposing with each other's runs; none is prefetched here
        if self.prefetch.n == n or (self.config.max_experiments is not None and n > self.config.max_experiments):
            return
        pending = InFlight.of(a.n, a.parent, replace(a.proposal, source=new_source), commit=a.commit,
                              handover=a.info.handover)
        if self.proposers.llm:
            if budget.streak_reason(list(self.history) + [pending.as_crash()], self.config.crash_streak):
                return   # if n crashes, a streak hands over: no LLM proposal made (and paid) ahead of it
            cap = self.config.max_cost
            if cap is not None and budget.spent(self.history) + a.proposal.cost_usd >= cap:
                return   # n's proposal reaches the cap: n + 1 is the offline proposer's
        self.prefetch.start(self.proposers, self.request(n, new_source, pending=[pending]), a.commit)

    def after_record(self, rec: ExperimentRecord, bpb) -> None:
        self.note_decision(rec, bpb)
        self.set_phase("idle", rec.n)

    def note_decision(self, rec: ExperimentRecord, bpb) -> None:
        """A recorded decision into the tag's state (under the coordinator's lock)."""
        self.history.append(rec)
        if rec.status == "keep":
            self.best = best_of(rec.commit, bpb)
        counts = rec.token_counts()
        for k in self.tokens:
            self.tokens[k] += counts.get(k, 0)
        self.cost_usd += rec.cost()
        self.last_decision = f"exp {rec.n} {rec.status}: {rec.decision_reason}"
        self.idea, self.run_of = None, None   # decided: the panel no longer shows it as in flight
        self.console.decision(rec)
        self.notify.record(rec, self.history, self.coord.in_flight)
        capped = budget.cap_reason(self.history, self.config.max_cost)
        if capped and self.proposers.llm:
            self.proposers.announce(capped, rec.n + 1)   # the judge stops calling the LLM at once

    # ---- status, signals -----------------------------------------------------------------------
    @contextlib.contextmanager
    def critical(self):
        """Signals wait while a record and its git step are written (they must go together);
        the coordinator's lock makes it the only decision being written."""
        with self.coord.lock:
            self._critical = True
            try:
                yield
            finally:
                self._critical = False
        if self._stop_pending:
            raise KeyboardInterrupt

    def on_signal(self, signum, frame) -> None:
        if self._critical:
            self._stop_pending = True
            return
        raise KeyboardInterrupt

    def stop(self) -> None:
        """After Ctrl-C or an error: an unrecorded commit is parked under a ref (pending.json
        stays, so --resume re-runs it) and the branch goes back to the last kept commit.
        A loop that never got the tag's lock (refused: another loop runs it) touches nothing."""
        if self._lock is None:
            self.console.close()
            return
        with contextlib.suppress(Exception):
            head = gitops.head(self.worktree)
            if self.last_kept and head != self.last_kept:
                pending = PendingFile.read(self.files.pending_path)
                label = pending.n if pending else f"unrecorded-{int(time.time())}"
                gitops.update_ref(self.repo, f"{gitops.REF_PREFIX}{self.tag}/interrupted/{label}", head)
                gitops.reset_hard(self.worktree, self.last_kept)
        if self.executor is not None:   # the single loop's slot: a run still going is ended, its files go
            with contextlib.suppress(Exception):
                self.executor.close()
            self.executor = None
            shutil.rmtree(self.run_dir / RUN_SRC / "slots", ignore_errors=True)
        with contextlib.suppress(Exception):
            self.set_phase("stopped")
        with contextlib.suppress(Exception):
            self.tracer.flush()
        if self.history:   # the morning report (no ablations: `agent/report.py --ablate` runs those)
            try:
                from agent import report
                report.report(self.run_dir)
                self.console.event(f"report: {self.run_dir / 'report' / 'report.html'}")
            except Exception as exc:   # a report must never turn a clean stop into a crash
                self.console.event(f"report not written: {type(exc).__name__}: {exc}")
        self.notify.stopped(self)
        self.console.close()


def main(argv=None) -> int:
    config = parse_args(argv)
    sdk_logs.install()   # SDK failures: one scrubbed, rate-limited console line each
    try:
        config = cli.resumed_config(config, argv)   # --resume: run.json's settings are the defaults
        smoke.apply_environment(config.smoke)
        loop = Loop(config)
        loop.tag_lock = workspace.tag_lock(loop.worktree.parent, loop.tag)   # before any state of the tag
        left = kill_leftover(loop.worktree) if loop.worktree.is_dir() else None
        if left:   # the tag is ours now: what a killed loop left running goes first
            print(f"{'resume' if config.resume else 'start'}: {left}", flush=True)
        if not config.resume and cli.discard_unstarted(loop.repo, loop.tag, loop.worktree):
            print(f"tag {loop.tag}: it was made before but never ran an experiment (setup was stopped); "
                  f"removed it to start afresh", flush=True)
    except (gitops.GitError, workspace.SetupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, loop.on_signal)
    signal.signal(signal.SIGTERM, loop.on_signal)
    try:
        loop.run()
    except KeyboardInterrupt:
        loop.stop()
        if not cli.forget_unstarted(loop):
            reason = summary.interrupted_reason(getattr(loop, "interim", None), [r.n for r in loop.history])
            print(summary.render(summary.build(loop.run_dir, loop.tag, reason, time.time() - loop.started_at,
                                               cap=config.max_cost)), flush=True)
        return 130
    except OutOfSpaceStop as exc:
        loop.stop()
        print(str(exc), file=sys.stderr)
        return EXIT_OUT_OF_SPACE
    except EnvironmentStop as exc:   # data or tokenizer gone: stop, keep the experiment pending
        loop.stop()
        print(str(exc), file=sys.stderr)
        return envcheck.EXIT_ENVIRONMENT
    except Exception as exc:
        if is_out_of_space(exc):   # a write failed for space: the same clean stop, one message
            loop.stop()
            where = getattr(exc, "filename", None) or loop.run_dir
            free = None
            with contextlib.suppress(OSError):
                free = diskspace.free_bytes(Path(where).parent if Path(where).is_file() else where)
            print(diskspace.out_of_space_message(where, diskspace.bytes_needed(loop.run_dir), free),
                  file=sys.stderr)
            return EXIT_OUT_OF_SPACE
        if not isinstance(exc, (gitops.GitError, workspace.SetupError, ProposalError, SealError,
                                PinnedError)):
            raise
        loop.stop()
        print(f"error: {exc}", file=sys.stderr)
        cli.forget_unstarted(loop)
        return 2
    loop.stop()
    print(summary.render(summary.build(loop.run_dir, loop.tag, loop.stop_reason or "done",
                                       time.time() - loop.started_at, cap=config.max_cost)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
