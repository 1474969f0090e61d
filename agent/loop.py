"""The research loop: propose an edit of train.py, commit it, train, judge, keep or reset. Forever.

    uv run agent/loop.py --tag may29 [--budget S] [--max-experiments N] [--max-runs N] [--until HH:MM]
        [--proposer claude|offline] [--offline-search local|tpe|cmaes|random] [--model M] [--resume]
        [--fix-tries 2] [--api-patience 600]
        [--seed 0] [--worktree-root DIR] [--baseline-repeats 5] [--screen K]
        [--workers N] [--executor local|ray] [--ray-address ADDR] [--gpus 0,1,...]

THE PROTOCOL. Set up once (Loop.setup), then LOOP FOREVER; one experiment is steps 4-10
(Loop.step proposes; agent/experiment.py run_experiment carries it through 5-10, top to bottom):

 0. set up: the tag's worktree on branch autoresearch/<tag>, its lock, the data's description,
    run.json, the seal (agent/workspace.py make_seal), the trusted compile cache; with --resume, reconcile
    what a stop left half done (agent/recovery.py)
 1. baseline: the unmodified train.py, run until it is kept (Loop.ensure_baseline)
 2. stop? --max-experiments, --max-runs, --until, a signal (Ctrl-C, SIGTERM), a full disk (Loop.run)
 3. between experiments: the human queue's decisions applied to the branch (reviewer.boundary),
    old artifacts pruned, the disk checked (Loop.check_space)
 4. propose: Claude or the offline search edits train.py (agent/proposing.py; --screen K picks
    among K in agent/screening.py; the next proposal is prefetched while this one trains)
 5. guard: the diff is checked before anything runs (agent/judges/guard.py)
 6. commit on autoresearch/<tag>; a "pending" journal line marks it committed-but-unrecorded
 7. run: train.py trains in the sandbox for the budget, by the harness's clock (harness/runner.py,
    harness/sandbox.py); a crash may be sent back to the proposer to fix (--fix-tries)
 8. evaluate: the trusted evaluator replays the saved model graph on the pinned validation data
    (harness/verify.py, harness/eval_worker.py); the model crosses as data, never as code
 9. judge: keep, discard, run again, or escalate to the human queue (agent/judges/hierarchy.py:
    the sequential test of agent/judges/stats.py, the LLM judge, the MetaJudge)
10. record: the journal, then results.tsv (both fsynced), then git: a keep advances the branch,
    anything else is preserved under refs/autoresearch/<tag>/discarded/<n> and reset; the record
    supersedes the pending line
    (agent/experiment.py record)

run_experiment is handed a few values, never the loop: the tag's state and decision lock
(agent/coordinator.py), a slot (worktree, executor, the run terms: agent/experiment.py Slot), the
proposer side (agent/proposing.py Ideas), the reviewer, and a status sink (agent/status.py). Control flow
by exception lives in agent/errors.py. Ctrl-C (or SIGTERM)
ends the running child and leaves a consistent state; --resume continues after any stop. With
--workers N, N experiments are in flight at once, each in its own worktree and on its own GPU
(agent/workers.py: the same run_experiment, one slot per worker); the tag's state and its
decisions stay with one coordinator (agent/coordinator.py).
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

from agent import budget, cli, envcheck, hardware, seeds
from agent.cli import DEFAULT_BUDGET, deadline_of, parse_args  # noqa: F401  (callers and tests use them from here)
from agent.config import LoopConfig, NOTIFY_ENV
from agent.coordinator import Coordinator, undecided
from agent.console import Console, data_warning
from agent.status import Panel, notifier
from agent.experiment import RUN_SRC, Attempt, Slot, one_slot, run_experiment, write_pending
from agent.errors import EnvironmentStop, OutOfSpaceStop, ProposalError
from agent.proposers.base import Proposal
from agent.proposing import Ideas, Prefetch, Proposers, make_offline, make_proposer
from agent.judges.hierarchy import JudgeHierarchy
from agent.judges.reviewer import Reviewer, SimpleReviewer
from agent.tracing import Tracer
from agent import workspace
from harness.procs import threads_of
from agent.workspace import SealError, clear_leftovers, make_seal
from harness.verify import PinnedError
from agent import gitops
from harness.results import is_out_of_space, read_journal
from agent.experiment import reference_of
from harness.clock import ClockReference
from runfiles.run import DataInfo
from runfiles.shared_results import ImportedInfo
from harness.experiment_record import ExperimentRecord
from harness.sandbox import DataView
from harness.runner import kill_leftover, timeout_for
from harness.job import clear_staging

BASELINE_DESCRIPTION = "baseline (unmodified train.py)"   # the baseline's description in every record
BASELINE_CONTINUED = "baseline (continued: the repeats an interrupt cut short)"
BASELINE_TRIES = 2      # runs of the unmodified train.py before a tag whose baseline fails stops
CPU_PROFILES = ("cpu", "tiny")   # profiles whose runs train on the CPU: their threads follow the free cores
# Exit status of a stop for disk space (EX_TEMPFAIL: try again later, with --resume).
EXIT_OUT_OF_SPACE = 75


def build_reviewer(kind: str, baseline_repeats: int, tracer=None, budget: float | None = None,
                   rule: str = "default") -> Reviewer:
    """The reviewer the loop uses: the judge hierarchy with its keep rule (--rule; an LLM judge
    only with ANTHROPIC_API_KEY), or SimpleReviewer with --reviewer simple (stand-in files)."""
    if kind == "simple":
        return SimpleReviewer()
    return JudgeHierarchy.build(baseline_repeats, rule=rule, tracer=tracer, budget=budget)


class Loop:
    def __init__(self, config: LoopConfig):
        config = self.config = LoopConfig.of(config)   # frozen: what the loop was asked to do
        self.coord = Coordinator()   # the tag's decided state and the decision lock
        repo = gitops.toplevel(Path(config.repo).resolve())
        worktree = workspace.worktree_path(repo, config.tag, config.place.worktree_root)
        self.files = workspace.RunFiles(repo, config.tag, worktree, worktree)
        self.panel = Panel(self.files, float(config.budget), self.coord, Console(config.tag, float(config.budget)),
                           notifier(config.notify, config.tag, lambda text: self.panel.event(text)),
                           config.repeats)
        self.slot: Slot | None = None     # set in setup(): where runs go, and their fixed terms
        self.ideas: Ideas | None = None   # set in setup(): who proposes, and what they are told
        self.reviewer: Reviewer | None = None
        self.machine: str | None = None   # the machine's state the opening estimate assumes (setup)
        self.eval_tokens: int | None = None   # tokens of one trusted evaluation (setup)
        self.stop_reason: str | None = None
        self.deadline: float | None = None      # --until as a unix time, from the night's start
        self.run_lock = None   # held once setup took the tag's lock; until then stop() touches nothing
        self.tag_lock = None   # the tag's own lock (workspace.tag_lock), taken by main before anything exists
        self.created = False   # this process made the tag (cli.forget_unstarted)

    # What callers read of the loop (the scripts, the tests, cli, notify, summary): views of its parts.
    @property
    def tag(self) -> str:
        return self.files.tag

    @property
    def repo(self) -> Path:
        return self.files.repo

    @property
    def worktree(self) -> Path:
        return self.files.worktree

    @property
    def run_dir(self) -> Path:
        return self.files.run_dir

    @property
    def budget(self) -> float:
        return float(self.config.budget)

    @property
    def history(self) -> list[ExperimentRecord]:
        return self.coord.history

    @property
    def best(self):
        return self.coord.best

    @property
    def last_kept(self) -> str | None:
        return self.coord.last_kept

    @property
    def started_at(self) -> float:
        return self.panel.started_at

    @property
    def run_info(self):
        return self.slot.run_info

    # ---- setup -------------------------------------------------------------------------------
    def setup(self) -> Attempt | None:
        c, files = self.config, self.files
        base, self.created = workspace.open_worktree(files.repo, self.tag, files.worktree, c.resume)
        self.run_lock = workspace.lock(files.run_dir)
        workspace.ignore_run_files(files.worktree)
        seeds.key_of(files.run_dir)   # every run's seed is drawn with it: made now, or checked (SeedKeyError)
        tracer = self.panel.tracer = Tracer(files.run_dir / "traces.jsonl")
        proposer = make_proposer(c.ideas.proposer, c.ideas.offline_search, model=c.ideas.model, api_patience=c.ideas.api_patience,
                                 tracer=tracer)
        self.reviewer = build_reviewer(c.reviewer, c.repeats, tracer, self.budget, rule=c.rule)
        proposers = Proposers(proposer, proposer if c.ideas.proposer == "offline" else make_offline(c.ideas.offline_search),
                              tracer, c.ideas.max_cost, c.ideas.crash_streak,
                              budget.Handovers(self.panel.event, self.reviewer.stop_llm).announce)
        self.ideas = Ideas(proposers, self.coord, files.repo, files.worktree, c.ideas,
                           last_n=c.stops.max_experiments, prefetch=None if c.parallel else Prefetch())
        (files.run_dir / "logs").mkdir(exist_ok=True)
        env = dict(os.environ, AUTORESEARCH_TIME_BUDGET=f"{self.budget:g}")
        info = workspace.describe_data(files.worktree, env, files.run_dir / "logs" / "prepare.log")
        data, view = DataInfo.of(info), DataView.from_describe(info)
        if not base:   # resuming: the base commit is in run.json (or the branch tip if never written)
            base = "" if (files.run_dir / "run.json").exists() else gitops.head(files.worktree)
        if base:   # run.json not written yet: on cpu/tiny the tag's base writes in that profile's knobs
            if ImportedInfo.read(files.worktree) is not None:   # an imported tag's base is this project's own code
                from agent import import_run
                import_run.check_resumable(files.worktree)
            base = workspace.commit_profile_knobs(files.worktree, data.profile, base)
        # a CPU tag's runs get the cores other work leaves free (agent/hardware.py), fixed in run.json
        given = threads_of(os.environ)
        now = hardware.machine_now(given=given) if data.profile in CPU_PROFILES else None
        threads = now.threads if now is not None and not given else None
        run_info = workspace.write_or_check_run_json(
            files.run_dir / "run.json", tag=self.tag, budget=self.budget, info=info,
            base_commit=base, resume=c.resume, settings=cli.settings_of(c),
            inventory=envcheck.inventory(files.worktree, view),
            eval_tokens=cli.eval_tokens_for(data.eval_tokens, self.budget, threads or given if now is not None else None),
            threads=threads)
        if c.resume and run_info.notified and not c.notify:
            self.panel.event(f"resume: this tag posted to a webhook when it began; its URL is a secret run.json does "
                             f"not keep, so this night posts nothing: give --notify URL (or {NOTIFY_ENV}) again to post")
        if run_info.threads and not os.environ.get("AUTORESEARCH_THREADS"):
            os.environ["AUTORESEARCH_THREADS"] = str(run_info.threads)   # every run and evaluation inherits it
        self.machine = now.said(threads_of(os.environ) or now.cores) if now is not None else None
        self.eval_tokens = run_info.eval_tokens or data.eval_tokens   # what one evaluation takes (the estimate)

        def check_environment() -> None:
            """EnvironmentStop when data, tokenizer or a fixed file is missing or corrupt
            (agent/envcheck.py): at start, before each experiment, and after a crashed run."""
            envcheck.check(self.tag, files.worktree, view, run_info.inventory, run_info.profile, run_info.source)
        check_environment()   # at start and on --resume: a broken environment costs no idea
        seal = make_seal(files.run_dir, info, run_info, c.place.sandbox, self.panel.event)
        workspace.warm_compile_cache(files.repo, files.run_dir, run_info, seal, self.budget, self.panel.event)
        sealed = self.reviewer.evaluates
        workspace.start_results(files.results_path)
        self.panel.event(f"tag {self.tag}: worktree {files.worktree}, budget {self.budget:g}s, "
                         f"data {data.fingerprint} ({data.source or '?'}), proposer {proposer.name}")
        if data_warning(data):
            self.panel.event(data_warning(data))
        self.coord.base = run_info.base_commit
        rerun = None
        if c.resume:
            from agent.recovery import reconcile   # only a resumed tag has a state to reconcile
            found = reconcile(files, run_info.base_commit)   # the tag's state, as recorded
            self.coord.history[:], self.coord.moves[:] = found.history, found.moves   # the tip and best derive from them
            notes = found.notes + [f"removed the leftover folder {name} of a run or an evaluation"
                                   for name in clear_leftovers(files.run_dir) + clear_staging(files.run_dir)]
            for note in notes:
                self.panel.event(f"resume: {note}")
            rerun = found.rerun
        # one local slot, after the leftovers went (agent/workers.py opens the --workers' slots)
        self.slot = Slot(files=files, run_info=run_info, budget=self.budget,
                         timeout=c.place.timeout or timeout_for(self.budget), seal=seal, sealed=sealed,
                         executor=None if c.parallel else one_slot(files.run_dir),
                         clock_reference=self.clock_reference, check_environment=check_environment,
                         early_stop=self.early_stop_limits if c.ideas.early_stop else None)
        return rerun

    def clock_reference(self, recipe: str | None = None) -> ClockReference:
        """The baseline's startup and post by the harness clock: what later runs are not charged
        for (harness/clock.py); the pace of the kept `recipe` a run descends from (reference_of)."""
        return reference_of(self.history, recipe)

    # ---- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        rerun = self.setup()                                          # 0. set up (and reconcile)
        deadline = self.deadline = deadline_of(self.config.stops.until)
        if rerun is not None:
            self.check_space()
            self.experiment(rerun, committed=True)
        if not self.config.parallel and self.config.resume:
            from agent import workers   # a parallel run's experiments in flight, resumed by one loop
            for a in workers.pending_attempts(self):
                self.panel.event(f"resume: experiment {a.n} was in flight ({a.commit[:7]}): running it again")
                gitops.reset_hard(self.worktree, a.commit)
                write_pending(self.slot, a)   # the single loop carries it now
                self.check_space()
                self.experiment(a, committed=True)
        if self.best is None and self.config.reviewer == "hierarchy":
            steps = os.environ.get("AUTORESEARCH_STEPS")
            note = dict(baseline_repeats=self.config.repeats, budget=self.budget, eval_tokens=self.eval_tokens,
                        steps=int(steps) if steps else None, threads=threads_of(os.environ) if self.machine else None)
            self.panel.pace.estimate_s = cli.run_seconds(note["budget"], note["eval_tokens"], note["steps"], note["threads"])
            self.panel.event(cli.eta_note(max_experiments=self.config.stops.max_experiments,
                                          done=self.coord.next_n() - 1, machine=self.machine, **note))
        if self.config.parallel:
            from agent import workers   # N experiments in flight; same guarantees per worker
            self.stop_reason = workers.run_parallel(self, deadline)   # the baseline first, on the executor
            return
        self.ensure_baseline(deadline)                                # 1. baseline
        first_n, session_at = self.coord.next_n(), time.time()        # the experiments' pace, the baseline apart
        while True:
            n = self.coord.next_n()                                   # 2. stop?
            eta = cli.eta_line(n=n, max_experiments=self.config.stops.max_experiments, first_n=first_n,
                               elapsed_s=time.time() - session_at, run_s=self.panel.pace.per_run())
            if eta:
                self.panel.event(eta)
            self.stop_reason = self.stop_due(n, deadline)
            if self.stop_reason:
                break
            self.between()                                            # 3. the human queue's decisions
            self.check_space()                                        # 3. disk
            self.step(n)                                              # 4. propose; 5-10 in run_experiment

    def stop_due(self, n: int, deadline: float | None) -> str | None:
        """Why the loop stops before experiment n (agent/budget.py stop_due), or None."""
        return budget.stop_due(self.config.stops, self.history, n, deadline, self.final_runs())

    def early_stop_limits(self) -> list | None:
        """--early-stop: the curve limits a candidate of the incumbent runs under (agent/judges/curves.py)."""
        from agent.judges import curves
        return curves.limits(self.history, self.last_kept)

    def final_runs(self) -> int:
        """Runs the night's end re-measures its final on (0: none, or no trusted evaluation to make them)."""
        return self.config.stops.final_runs if self.config.reviewer == "hierarchy" else 0

    def finish_night(self) -> None:
        """The night's end: the final re-measured on fresh seeds (agent/remeasure.py night_end), the
        headline and the final's confirmation. A second Ctrl-C skips it; a failure only says so."""
        if self.slot is None or self.slot.executor is None or not self.history:
            return
        from agent.remeasure import night_end
        try:
            night_end(self, self.final_runs(), say=self.panel.event, deadline=self.deadline)
        except KeyboardInterrupt:
            self.panel.event("night end: skipped (Ctrl-C); the headline is the recorded best's")
        except Exception as exc:   # the night's results are recorded already: never lose them here
            self.panel.event(f"night end: the final could not be re-measured ({type(exc).__name__}: {exc})")

    def step(self, n: int) -> ExperimentRecord:
        """One experiment: propose (4), then steps 5-10."""
        return self.experiment(self.next_attempt(n))

    def experiment(self, a: Attempt, *, committed: bool = False) -> ExperimentRecord:
        rec = run_experiment(a, self.coord, self.slot, self.ideas, self.reviewer, self.panel, committed=committed)
        self.ideas.decided(rec)
        return rec

    def between(self) -> None:
        """Step 3: the reviewer's boundary step (the human queue's decisions applied)."""
        from agent import between
        between.apply(self.reviewer, self.coord, self.slot, self.panel)

    def ensure_baseline(self, deadline: float | None = None) -> None:
        """The tag's first keep is its unmodified train.py, never an experiment: a baseline that is
        not kept (a crash, an integrity failure) is run again, and after BASELINE_TRIES the tag
        stops with the reason, before any experiment could take its place. An imported tag then
        judges the imported tip (agent/import_run.py tip_proposal)."""
        while self.best is None:
            tries = [r for r in self.history if r.proposer == "baseline"]
            if len(tries) >= BASELINE_TRIES:
                why = tries[-1].decision_reason or tries[-1].crash_class
                raise workspace.SetupError(
                    f"the baseline (unmodified train.py) failed {len(tries)} times; the tag stops rather "
                    f"than measure experiments against nothing. Last reason: {why}. Logs: "
                    f"{self.run_dir / 'logs'}")
            if tries:
                self.panel.event(f"baseline try {len(tries)} was not kept ({tries[-1].decision_reason}); "
                                 "running it again")
            self.check_space()
            self.experiment(self.baseline())
        cut = self.cut_baseline()
        if cut is not None and not self.stop_due(self.coord.next_n(), deadline):
            counted, planned = len(cut.judge_values("baseline_values") or []), int(cut.judge_figure("repeats") or 0)
            self.panel.event(f"resume: the baseline (experiment {cut.n}) was interrupted with {counted} of its "
                             f"{planned} runs counted; its repeats go on as experiment {self.coord.next_n()}")
            self.check_space()
            self.experiment(self.baseline(BASELINE_CONTINUED))   # judged as the baseline: its runs join the earlier ones
        # An imported tag's first experiment, once: the imported tip's train.py, a candidate like any
        # proposal (guarded, sealed, on the clock, judged against this baseline), never the baseline
        p = None
        if ImportedInfo.read(self.worktree) is not None:
            from agent import import_run
            p = import_run.tip_proposal(self.repo, self.worktree, self.history, self.run_info.profile,
                                        self.run_info.base_commit)
        if p is not None and not self.stop_due(self.coord.next_n(), deadline):
            self.check_space()
            self.experiment(Attempt(n=self.coord.next_n(), parent=self.last_kept, proposal=p))

    def check_space(self) -> None:
        """Prune old artifacts, then refuse to start an experiment that would not fit on disk."""
        envcheck.prune_artifacts(self.run_dir, self.history, busy=set(self.coord.in_flight))
        short = envcheck.shortfall(self.run_dir, envcheck.git_dir(self.repo))
        if short is not None:
            need, free, where = short
            raise OutOfSpaceStop(envcheck.out_of_space_message(where, need, free))
        self.slot.check_environment()

    def cut_baseline(self) -> ExperimentRecord | None:
        """The tag's baseline record when an interrupt cut its repeats short (Ctrl-C records it on
        the runs that finished) and nothing was decided since: --resume continues its repeats."""
        last = next((r for r in reversed(self.history) if r.is_experiment), None)
        if last is None or not last.is_baseline or last.status != "keep" or not last.cut_short:
            return None
        planned, counted = last.judge_figure("repeats"), len(last.judge_values("baseline_values") or [])
        return last if planned and counted < planned and last.commit == self.last_kept else None

    def baseline(self, description: str = BASELINE_DESCRIPTION) -> Attempt:
        source = gitops.show_file(self.repo, self.last_kept, "train.py")
        p = Proposal(description=description, hypothesis="reference point for the tag",
                     source=source, proposer="baseline")
        return Attempt(n=self.coord.next_n(), parent=None, proposal=p, commit=self.last_kept)

    def next_attempt(self, n: int) -> Attempt:
        """Step 4: experiment n's proposal on the last kept commit (--screen K: the best of K)."""
        parent = self.last_kept
        if self.ideas.prefetch is None or self.ideas.prefetch.n != n or self.ideas.feedback:
            self.panel.phase("proposing", n)
        got = self.ideas.propose(n, parent)
        if self.config.ideas.screen > 1:
            from agent import screening   # only with --screen K
            got = screening.pick(screening.Screen(
                k=int(self.config.ideas.screen), seed=self.config.ideas.seed, files=self.files, seal=self.slot.seal,
                profile=self.run_info.profile,
                standing=screening.Standing(parent=parent, history=list(self.history), best=self.best), proposers=self.ideas.proposers, request=self.ideas.request,
                guard=self.reviewer.guard, say=self.panel.event, set_phase=self.panel.phase,
                tracer=self.panel.tracer), n, gitops.show_file(self.repo, parent, "train.py"), got)
        proposal, info = got
        return Attempt(n=n, parent=parent, proposal=proposal, info=info)

    # ---- signals, stop -------------------------------------------------------------------------
    def on_signal(self, signum, frame) -> None:
        self.coord.signals.handle(signum, frame)

    def stop(self, final: bool = False) -> None:
        """After the night, Ctrl-C or an error: an unrecorded commit is parked under a ref
        (its pending line stays, so --resume re-runs it) and the branch goes back to the last kept
        commit; with `final` (the night ended, or a first Ctrl-C) the final is re-measured
        (finish_night). A loop that never got the tag's lock (refused: another loop runs it)
        touches nothing."""
        if self.run_lock is None:
            self.panel.console.close()
            return
        with contextlib.suppress(Exception):
            head = gitops.head(self.worktree)
            if self.last_kept and head != self.last_kept:
                journal, _ = read_journal(self.files.journal_path, kind=None)
                carried = [p for p in undecided(journal) if p.worker is None]
                label = carried[-1].n if carried else f"unrecorded-{int(time.time())}"
                gitops.update_ref(self.repo, f"{gitops.REF_PREFIX}{self.tag}/interrupted/{label}", head)
                gitops.reset_hard(self.worktree, self.last_kept)
        if final and self.final_runs() and not self.config.parallel:
            self.finish_night()
        if self.slot is not None and self.slot.executor is not None:   # a run still going is ended
            with contextlib.suppress(Exception):
                self.slot.executor.close()
            self.slot = replace(self.slot, executor=None)
            shutil.rmtree(self.run_dir / RUN_SRC / "slots", ignore_errors=True)
        with contextlib.suppress(Exception):
            self.panel.phase("stopped")
        with contextlib.suppress(Exception):
            self.panel.tracer.flush()
        if self.history:   # the morning report (no ablations: `agent/report.py --ablate` runs those)
            try:
                from agent import report
                report.report(self.run_dir)
                self.panel.event(f"report: {self.run_dir / 'report' / 'report.html'}")
            except Exception as exc:   # a report must never turn a clean stop into a crash
                self.panel.event(f"report not written: {type(exc).__name__}: {exc}")
        self.panel.notify.stopped(self)
        self.panel.console.close()


def main(argv=None) -> int:
    config = parse_args(argv)
    from agent import sdk_logs, summary   # the SDKs' log lines; the end summary
    sdk_logs.install()   # SDK failures: one scrubbed, rate-limited console line each
    try:
        config = cli.resumed_config(config, argv)   # --resume: run.json's settings are the defaults
        cli.apply_environment(config.smoke)
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
        loop.stop(final=True)   # the night's end too: a second Ctrl-C skips the final's re-measurement
        if not cli.forget_unstarted(loop):
            reason = summary.interrupted_reason(loop.panel.shown.interim, [r.n for r in loop.history])
            print(summary.render(summary.build(loop.run_dir, loop.tag, reason, time.time() - loop.started_at,
                                               cap=config.ideas.max_cost)), flush=True)
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
            print(envcheck.failed_write_message(exc, loop.run_dir), file=sys.stderr)
            return EXIT_OUT_OF_SPACE
        if not isinstance(exc, (gitops.GitError, workspace.SetupError, ProposalError, SealError,
                                PinnedError, seeds.SeedKeyError)):
            raise
        loop.stop()
        print(f"error: {exc}", file=sys.stderr)
        cli.forget_unstarted(loop)
        return 2
    loop.stop(final=True)
    print(summary.render(summary.build(loop.run_dir, loop.tag, loop.stop_reason or "done",
                                       time.time() - loop.started_at, cap=config.ideas.max_cost)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
