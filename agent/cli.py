"""The loop's command line, checked before anything exists, and the clean-up of a tag that never ran;
at the end, the --smoke preset and the startup estimate of a tag's first rows.

Every argument is validated in `validate(parser, args)`, called from agent/loop.py's parse_args,
so a bad `--tag`, `--budget` or `--until` ends with a one-line message (argparse's exit 2) before
any branch, worktree or state.json is made.

A tag is *unstarted* while its folder holds no journal record, no results row and no pending
experiment (a pending journal line is written before the baseline's first run; an earlier
version's pending.json counts too). Ctrl-C (or any failure)
during the first data preparation leaves such a tag; rather than demand `--resume` for a tag that
has nothing to resume, the loop removes it (branch, worktree, refs) so the README's command just
works again.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fcntl
import os
import re
import shutil
import subprocess
from pathlib import Path

from agent import budget
from agent.config import NOTIFY_ENV, LoopConfig
from agent.console import clock
from agent.judges import stats
from agent.judges.advance import RULES
from agent.proposers.local import SEARCHES
from agent import gitops

DESCRIPTION = "The research loop: propose an edit of train.py, commit it, train, judge, keep or reset. Forever."
DEFAULT_BUDGET = 300.0  # seconds of training per experiment (the seed's 5 minutes)

# A tag is one path component: it names the branch autoresearch/<tag>, refs under
# refs/autoresearch/<tag>/ and the worktree folder <root>/<tag>. Letters, digits and . _ - only:
# no slash (the folder would nest), no spaces or shell/ref specials, and not starting with a
# '.' or '-' (hidden folder, looks like an option).
TAG_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Longest accepted tag: a branch name and folder name, comfortably inside any filesystem limit.
MAX_TAG_LEN = 100


def deadline_of(until: str | None) -> float | None:
    """--until HH:MM as a unix time: the next such local time (tomorrow if already past)."""
    if not until:
        return None
    hh, mm = (int(x) for x in until.split(":"))
    now = dt.datetime.now()
    when = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    if when <= now:
        when += dt.timedelta(days=1)
    return when.timestamp()


def tag_problem(tag: str) -> str | None:
    """Why `tag` cannot name a run, or None. git check-ref-format has the last word."""
    if tag == "":
        return "the tag is empty"
    if len(tag) > MAX_TAG_LEN:
        return f"the tag is longer than {MAX_TAG_LEN} characters"
    if not TAG_RE.fullmatch(tag):
        bad = sorted({c for c in tag if not re.fullmatch(r"[A-Za-z0-9._-]", c)})
        if bad:
            shown = ", ".join(repr(c) for c in bad)
            return f"the tag may contain only letters, digits, '.', '_' and '-' (found {shown})"
        return "the tag must start with a letter or a digit"
    if ".." in tag or tag.endswith(".") or tag.endswith(".lock"):
        return "the tag may not contain '..' nor end with '.' or '.lock' (git ref rules)"
    proc = subprocess.run(["git", "check-ref-format", f"refs/heads/{gitops.BRANCH_PREFIX}{tag}"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return f"git check-ref-format rejects branch {gitops.BRANCH_PREFIX}{tag}"
    return None


def validate(parser, args) -> None:
    """Check every argument that would otherwise reach git or the records; parser.error() on a bad one."""
    problem = tag_problem(args.tag)
    if problem:
        parser.error(f"--tag {args.tag!r}: {problem}")
    if args.until is not None:
        try:
            dt.datetime.strptime(args.until, "%H:%M")
        except ValueError:
            parser.error(f"--until wants HH:MM (24-hour local time), got {args.until!r}")
    positive = {"--budget": args.budget, "--timeout": args.timeout, "--api-patience": args.api_patience,
                "--max-run-seconds": getattr(args, "max_run_seconds", None)}
    for flag, value in positive.items():
        if value is not None and not (value > 0 and value != float("inf")):
            parser.error(f"{flag} must be a positive number of seconds, got {value:g}")
    cap = getattr(args, "max_cost", None)
    if cap is not None and not (cap >= 0 and cap != float("inf")):
        parser.error(f"--max-cost must be a number of dollars >= 0, got {cap:g}")
    at_least = {"--max-experiments": (args.max_experiments, 1), "--max-runs": (getattr(args, "max_runs", None), 1),
                "--baseline-repeats": (args.baseline_repeats, 1), "--final-runs": (getattr(args, "final_runs", 0), 0),
                "--screen": (args.screen, 1), "--fix-tries": (args.fix_tries, 0),
                "--workers": (getattr(args, "workers", 1), 1), "--crash-streak": (getattr(args, "crash_streak", 0), 0)}
    for flag, (value, low) in at_least.items():
        if value is not None and value < low:
            parser.error(f"{flag} must be at least {low}, got {value}")
    if getattr(args, "max_runs", None) is not None and (getattr(args, "workers", 1) > 1 or getattr(args, "screen", 1) > 1
                                                        or getattr(args, "executor", "local") != "local"):
        parser.error("--max-runs counts the full runs of one experiment at a time: use it with --workers 1, no --screen")
    if getattr(args, "workers", 1) > 1 and getattr(args, "screen", 1) > 1:
        parser.error("--screen K runs one experiment at a time: use it with --workers 1")
    gpus = getattr(args, "gpus", None)
    if gpus is not None and not all(g.strip() for g in gpus.split(",")):
        parser.error(f"--gpus wants comma-separated GPU ids such as 0,1,2, got {gpus!r}")
    if getattr(args, "notify", None):
        from agent.notify import check_url  # only a loop that posts loads the notifier
        if check_url(args.notify):
            parser.error(check_url(args.notify))
    if getattr(args, "ray_address", None) and getattr(args, "executor", "local") != "ray":
        parser.error("--ray-address needs --executor ray")


def budget_from_env(parser, raw: str | None, default: float) -> float:
    """AUTORESEARCH_TIME_BUDGET as the default --budget, checked like --budget."""
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        parser.error(f"AUTORESEARCH_TIME_BUDGET must be a number of seconds, got {raw!r}")
    if not (value > 0 and value != float("inf")):
        parser.error(f"AUTORESEARCH_TIME_BUDGET must be a positive number of seconds, got {raw!r}")
    return value


# ---- a tag that never ran an experiment --------------------------------------------------------
def unstarted(run_dir: Path) -> bool:
    """True when the tag's folder holds nothing a --resume would continue."""
    if (run_dir / "pending.json").exists():
        return False
    journal = run_dir / "journal.jsonl"
    if journal.exists() and journal.read_text(errors="replace").strip():
        return False
    results = run_dir / "results.tsv"
    if results.exists() and len(results.read_text(errors="replace").strip().splitlines()) > 1:
        return False
    return True


def _locked(run_dir: Path) -> bool:
    """Is a live loop holding this tag's lock (it may be preparing data right now)?"""
    path = run_dir / "loop.lock"
    if not path.exists():
        return False
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def discard_unstarted(repo: Path, tag: str, worktree: Path) -> bool:
    """Remove branch, worktree and refs of a tag that never ran an experiment; True if removed.

    Safe by construction: refuses when the worktree is missing, holds any record, a live loop holds
    its lock, experiments left refs, or the branch has commits the checkout's HEAD lacks; never
    touches anything outside autoresearch/<tag>, refs/autoresearch/<tag>/ and the folder.
    """
    if not gitops.branch_exists(repo, tag) or not (worktree / ".git").exists():
        return False   # a missing worktree may have held records: that is --resume's to repair
    if not unstarted(worktree) or _locked(worktree) or gitops.list_refs(repo, f"{gitops.REF_PREFIX}{tag}/"):
        return False   # discarded/interrupted refs mean experiments ran
    tip = gitops.rev_parse(repo, "refs/heads/" + gitops.branch_name(tag))
    if not gitops.is_ancestor(repo, tip, "HEAD"):
        return False   # the branch has commits of its own (kept experiments): never thrown away
    if (worktree / ".git").exists():
        gitops.git(repo, "worktree", "remove", "--force", str(worktree), check=False)
    shutil.rmtree(worktree, ignore_errors=True)
    gitops.git(repo, "worktree", "prune", check=False)
    gitops.git(repo, "branch", "-D", gitops.branch_name(tag), check=False)
    return not gitops.branch_exists(repo, tag)


def given_options(argv=None) -> set[str]:
    """The dests of the options written on the command line (not left to their defaults)."""
    p = parser()
    p._defaults.clear()   # no option counts as given by a default
    for action in p._actions:
        action.default = argparse.SUPPRESS
    args, _ = p.parse_known_args(argv)
    return set(vars(args))


# The options a tag records in run.json ("settings") when it starts; --resume takes them as its
# defaults, so `--resume` alone continues the tag as it was started (an option given wins, and
# the budget is still refused if it differs: one tag never mixes budgets). Not --until: a stop
# time belongs to one night, and the next such time could be tomorrow's.
REMEMBERED = ("budget", "max_experiments", "proposer", "model", "max_cost", "crash_streak",
              "fix_tries", "api_patience", "seed", "offline_search", "baseline_repeats", "reviewer", "rule", "final_runs",
              "early_stop",
              "timeout", "sandbox", "screen", "smoke")


def settings_of(config: LoopConfig) -> dict:
    """What run.json records of the command line (REMEMBERED), and whether it posted to a webhook
    ("notified": the URL itself is a secret, never written; a --resume without one says so)."""
    return {name: config.value(name) for name in REMEMBERED} | {"notified": bool(config.notify)}


def resumed(config: LoopConfig, given: set[str], saved: dict | None) -> LoopConfig:
    """--resume's configuration: run.json's settings where the option was not given."""
    if not config.resume or not saved:
        return config
    known = set(LoopConfig.option_names())
    take = {k: v for k, v in saved.items() if k in REMEMBERED and k in known and k not in given}
    return config.with_values(**take)


def resumed_config(config: LoopConfig, argv=None) -> LoopConfig:
    """The configuration a --resume runs with: the tag's run.json settings (its budget at least)
    where the command line gave no value; a fresh start is returned as it is."""
    if not config.resume:
        return config
    from agent import workspace  # the tag's folder, as the loop will find it
    from runfiles.run import RunInfo
    try:
        repo = gitops.toplevel(Path(config.repo).resolve())
    except gitops.GitError:
        return config
    saved = RunInfo.read(workspace.worktree_path(repo, config.tag, config.place.worktree_root) / "run.json")
    if saved is None:
        return config
    settings = dict(saved.settings or {})
    if saved.budget is not None:
        settings["budget"] = saved.budget
    return resumed(config, given_options(argv), settings)


def forget_unstarted(loop) -> bool:
    """A tag this process made that never started an experiment is removed, so a plain rerun
    of the same command starts it again (instead of demanding --resume for nothing)."""
    if not getattr(loop, "created", False):
        return False
    with contextlib.suppress(Exception):
        loop.run_lock.close()   # our own lock would read as "a live loop holds this tag"
    try:
        removed = discard_unstarted(loop.repo, loop.tag, loop.worktree)
    except gitops.GitError:
        return False
    if removed:
        print(f"stopped before the first experiment started: removed tag {loop.tag} "
              f"(branch {gitops.branch_name(loop.tag)} and its worktree); the same command starts it again",
              flush=True)
    return removed


def parse_args(argv=None) -> LoopConfig:
    """The checked command line as a frozen LoopConfig (argparse exits 2 on a bad argument)."""
    p = parser()
    args = p.parse_args(argv)
    if args.smoke:   # the preset's values where the option was not given (the preset at the end of this file)
        given = given_options(argv)
        for name, value in SMOKE_DEFAULTS.items():
            if name not in given:
                setattr(args, name, value)
    if args.budget is None:
        args.budget = budget_from_env(p, os.environ.get("AUTORESEARCH_TIME_BUDGET"), DEFAULT_BUDGET)
    if args.notify is None:
        args.notify = os.environ.get(NOTIFY_ENV) or None
    validate(p, args)   # before anything exists: a bad argument creates nothing
    if args.proposer is None:
        args.proposer = "claude" if os.environ.get("ANTHROPIC_API_KEY") else "offline"
    return LoopConfig.of(args)


def parser() -> argparse.ArgumentParser:
    """The loop's options; each one's dest is a LoopConfig field (tests/test_cli_args.py checks)."""
    p = argparse.ArgumentParser(description=DESCRIPTION, allow_abbrev=False)
    # The defaults are LoopConfig's (one table), set below; --budget and --proposer stay None here so
    # parse_args can tell "not given" (the environment decides) from a value.
    p.add_argument("--tag", required=True, help="run name; branch autoresearch/<tag>")
    p.add_argument("--budget", type=float, default=None,
                   help="training seconds per run (default: AUTORESEARCH_TIME_BUDGET or 300)")
    p.add_argument("--max-experiments", type=int, help="stop after N experiments (baseline included)")
    p.add_argument("--max-run-seconds", type=float, metavar="S",
                   help="stop after S seconds of training runs, every run of every decision counted "
                        "(device-seconds; the final's re-measurement kept inside)")
    p.add_argument("--early-stop", action="store_true",
                   help="end a candidate's run once the loss it prints is far behind the incumbent's at the same "
                        "point of its budget (by the baseline's own spread there): it is discarded and the time "
                        "goes to the next idea; a printed curve never keeps anything")
    p.add_argument("--final-runs", type=int, metavar="N",
                   help="when the night ends (--until, --max-runs, --max-experiments, Ctrl-C), re-measure the final "
                        "on N fresh seeds against the baseline's runs: the morning report's headline and its "
                        "confirmation (default 2, counted inside --max-runs and --until; 0: none)")
    p.add_argument("--max-runs", type=int, metavar="N",
                   help="start no experiment once N training runs are done (the baseline's repeats, confirming "
                        "runs, incumbent reruns and crashed tries count): arms compared at equal compute")
    p.add_argument("--until", help="start no experiment after this local time, HH:MM")
    p.add_argument("--proposer", choices=("claude", "offline"), default=None,
                   help="default: claude when ANTHROPIC_API_KEY is set, else offline")
    p.add_argument("--model", help="Claude model id (claude proposer)")
    p.add_argument("--max-cost", type=float, metavar="USD",
                   help="LLM spend cap in dollars: past it the offline proposer proposes and the judge stops "
                        "calling the LLM; the loop goes on (default: no cap)")
    p.add_argument("--crash-streak", type=int, metavar="N",
                   help=f"N crashes in a row of the LLM's hand {budget.HANDOVER_EXPERIMENTS} experiments to the "
                        "offline proposer (default %(default)s; 0: never)")
    p.add_argument("--resume", action="store_true", help="continue an existing tag")
    p.add_argument("--fix-tries", type=int, help="times the proposer may fix a crash")
    p.add_argument("--api-patience", type=float,
                   help="seconds of API outage before the offline proposer stands in")
    p.add_argument("--seed", type=int, help="seed of the offline search")
    p.add_argument("--offline-search", choices=SEARCHES,
                   help="the offline proposer: local (default: one resolvable step of one knob from the "
                        "incumbent, chosen from the evidence) or an Optuna sampler over every knob (tpe, cmaes, random)")
    p.add_argument("--worktree-root", help="where worktrees go (default <repo>/.autoresearch)")
    p.add_argument("--baseline-repeats", type=int,
                   help="baseline runs that measure the noise (default: the rule's, 3 / 1 / 5)")
    p.add_argument("--rule", choices=RULES,
                   help="when a candidate becomes the incumbent, every rule sealed and on the trusted figure: "
                        "default: advance on one run that beats the incumbent's shrunk value (a keep is the better "
                        "bet; 'confirmed' is a claim made on runs of its own); reference: karpathy/autoresearch's "
                        "one run, keep if lower; strict: confirm every keep (P(better) >= 0.99 on 2+ runs)")
    p.add_argument("--reviewer", choices=("hierarchy", "simple"),
                   help="hierarchy: guard + trusted metric + judges + human queue (default); simple: keep "
                   "iff the printed val_bpb beats the best, unsealed (only for stand-in train.py files that "
                   "save no model: tests of the loop itself)")
    p.add_argument("--timeout", type=float, help="kill a run after this many seconds "
                   "(default max(2x budget, budget + 300 s))")
    p.add_argument("--repo", help="the repository (default: the current one)")
    p.add_argument("--sandbox", choices=("auto", "bwrap", "none"),
                   help="seal train.py runs with bubblewrap: auto or bwrap (default auto; either refuses to "
                        "start without it) or none (no sandbox: every surface says the results are unsealed)")
    p.add_argument("--screen", type=int, metavar="K",
                   help="propose K candidates per experiment, screen them with short successive-halving "
                        "runs, give only the winner the full run (default 1: no screen)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="experiments in flight at once, each in its own worktree and on its own GPU "
                        "(default 1)")
    p.add_argument("--executor", choices=("local", "ray"),
                   help="where --workers run: local subprocesses (default) or Ray tasks")
    p.add_argument("--ray-address",
                   help="join this Ray cluster (default: start a local Ray runtime)")
    p.add_argument("--gpus",
                   help="GPU ids for local workers, comma-separated (default: CUDA_VISIBLE_DEVICES, "
                        "else every GPU nvidia-smi lists, else none: CPU)")
    p.add_argument("--smoke", action="store_true",
                   help=f"the smoke preset: the {SMOKE_PROFILE} profile, {SMOKE_STEPS} optimizer steps per run, "
                        f"--baseline-repeats {SMOKE_DEFAULTS['baseline_repeats']}, --max-experiments "
                        f"{SMOKE_DEFAULTS['max_experiments']}, the offline proposer: a baseline and two judged "
                        "experiments in minutes on a laptop (options given explicitly win)")
    p.add_argument("--notify", metavar="URL",
                   help=f"post a short JSON message (Slack/Discord webhook shape) on a new best, a stop, a crash "
                        f"streak, a human-queue item and an hourly digest (default: {NOTIFY_ENV})")
    defaults = LoopConfig(tag="", budget=0.0)   # one table of defaults: the configuration's own
    p.set_defaults(**{name: defaults.value(name) for name in LoopConfig.option_names()
                      if name not in ("tag", "budget", "proposer")})
    return p


# ---- The smoke preset (--smoke) and the startup estimate of a tag's first rows.
#
# `--smoke` is the shortest loop that does everything a night does, sized for a laptop: the tiny
# profile (a 1M-parameter model on a 64-token context), a fixed number of optimizer steps instead
# of a wall-clock budget (so a busy machine makes it slower, never different), two baseline runs,
# the offline proposer, one torch thread per run, and three experiments in all (the baseline and two
# judged ones). Every value it sets is a default: an option (or AUTORESEARCH_STEPS,
# AUTORESEARCH_THREADS) given explicitly wins.
#
# The estimate said at startup counts what the first rows really cost: each run's training, its
# startup (imports, model build) and its trusted evaluation, times the runs the judge needs (the
# baseline repeats, and for each experiment one run when it is discarded at once, up to
# stats.MAX_RUNS plus the incumbent's reruns when it looks like a gain).

# The profile the preset runs (prepare.py PROFILES): everything in seconds on a CPU.
SMOKE_PROFILE = "tiny"
# Optimizer steps per run: ~6 s of training on 2 idle cores (0.2 s a step, measured), enough
# for the knobs the offline search moves to show in val_bpb (~2.7 bpb after 30 steps).
SMOKE_STEPS = 30
# Torch threads per run. One: on a busy 2-core machine two threads wait on each other at every
# operation (measured under load 10: 30 tiny steps took 277 s with 2 threads, 30 s with 1), and the
# tiny model's matrices are too small to gain much from a second core on an idle one.
SMOKE_THREADS = 1
# The preset's option values; each one only where the option was not given.
SMOKE_DEFAULTS = {"budget": 10.0,            # nominal: steps mode ends a run, not the clock
                  "max_experiments": 3,      # the baseline and two judged experiments
                  "proposer": "offline",     # no key, no network
                  "baseline_repeats": 2}     # the fewest that measure a noise at all
# Seconds of one smoke run besides its training, on 2 idle cores: the sandboxed train.py's
# imports and model build (~4 s) and the trusted evaluation's own process (~6 s), measured.
SMOKE_OVERHEAD_S = 10.0
# Seconds per training step of the tiny profile on one thread of an idle-ish core (measured: 50
# steps in 10.5 s on 2 threads at load 2; one thread is somewhat slower when the machine is idle).
SMOKE_STEP_S = 0.3
# A run on a time budget: its wall time per budget second (startup and the harness's slack).
RUN_WALL_PER_BUDGET = 1.1
# The trusted evaluation's rate on a CPU, in tokens per second on one thread, plus its own process
# start; more threads help it little (docs/first-run.md, the cpu profile: 80,300 tokens in 43-45 s
# on one thread beside a busy core, ~2.2K tok/s once started; 99,000 in 47 s on two threads of an
# idle machine, ~2.5K). prepare.py's older note (7.3K on 2 cores) was 3x too fast. A GPU evaluates
# far faster (then this overestimates).
EVAL_TOKENS_PER_S = 2250.0
EVAL_THREAD_GAIN = 0.2     # the rate grows as threads ** this (x1.13 from one thread to two, measured)
EVAL_START_S = 8.0
# The most of a CPU run's budget its trusted evaluation may take (fewer tokens on fewer free cores):
# at 300 s the cpu profile evaluates ~50K of its 128K tokens on one free core, ~57K on two, in ~30 s.
EVAL_SHARE = 0.10
# Tokens of the trusted evaluation at the reference budget; shorter budgets evaluate on a share of
# them (eval_tokens_for), never fewer than EVAL_TOKENS_MIN: a 30 s run is not measured for 3 minutes.
REFERENCE_BUDGET = 300.0
EVAL_TOKENS_MIN = 8192


def apply_environment(smoke: bool) -> None:
    """The preset's environment, in this process before anything reads it (prepare.py reads the
    profile at import; the runs inherit the steps: AUTORESEARCH_STEPS, if set, is kept)."""
    if smoke:
        os.environ["AUTORESEARCH_PROFILE"] = SMOKE_PROFILE
        os.environ.setdefault("AUTORESEARCH_STEPS", str(SMOKE_STEPS))   # a step count already set wins
        os.environ.setdefault("AUTORESEARCH_THREADS", str(SMOKE_THREADS))


def eval_tokens_for(profile_tokens: int | None, budget: float, threads: int | None = None) -> int | None:
    """Tokens of a tag's trusted evaluation: the profile's EVAL_TOKENS at the reference budget,
    a proportional share below it (at least EVAL_TOKENS_MIN); on a CPU (`threads`: its runs' torch
    threads) no more than EVAL_SHARE of the budget takes at EVAL_TOKENS_PER_S; None: the profile's own."""
    if not profile_tokens:
        return None
    tokens = profile_tokens if budget >= REFERENCE_BUDGET else max(EVAL_TOKENS_MIN, int(profile_tokens * budget / REFERENCE_BUDGET))
    if threads:
        rate = eval_rate(threads)
        tokens = min(tokens, max(EVAL_TOKENS_MIN, int((EVAL_SHARE * budget - EVAL_START_S) * rate)))
    return None if tokens >= profile_tokens else tokens


def eval_rate(threads: int) -> float:
    """Tokens a second the trusted evaluation measures on a CPU at `threads` torch threads."""
    return EVAL_TOKENS_PER_S * max(1, threads) ** EVAL_THREAD_GAIN


def run_seconds(budget: float, eval_tokens: int | None, steps: int | None = None,
                threads: int | None = None) -> float:
    """The wall time of one run with its evaluation, as estimated before any was measured. A CPU
    tag (`threads`: its runs' torch threads) evaluates at eval_rate; on a GPU (threads None) the
    evaluation's tokens are not guessed at a CPU's rate: its process start is counted, and the first
    run's `eta:` line gives the measured time."""
    if steps:
        return steps * SMOKE_STEP_S + SMOKE_OVERHEAD_S
    evaluation = (eval_tokens or 0) / eval_rate(threads) if threads else 0.0
    return budget * RUN_WALL_PER_BUDGET + EVAL_START_S + evaluation


def runs_needed(baseline_repeats: int, experiments: int | None) -> tuple[int, int]:
    """(fewest, most) runs for the baseline and `experiments` judged ones: every experiment
    discarded after its first run, or every one run MAX_RUNS times with the incumbent rerun to
    INCUMBENT_RUNS once."""
    n = max(0, (experiments or 0))
    low = baseline_repeats + n
    high = baseline_repeats + n * stats.MAX_RUNS + (max(0, stats.INCUMBENT_RUNS - baseline_repeats) if n else 0)
    return low, high


def eta_note(*, baseline_repeats: int, max_experiments: int | None, budget: float,
             eval_tokens: int | None, steps: int | None, done: int = 0, threads: int | None = None,
             machine: str | None = None) -> str:
    """The startup line: what the first row costs, and (with --max-experiments) the whole session,
    on `machine` (the state it assumes: agent/hardware.py MachineNow.said; None: an idle one).
    `done`: experiments the tag already has (an imported tag's rows): --max-experiments counts them."""
    per = run_seconds(budget, eval_tokens, steps, threads)
    what = f"{steps} steps" if steps else f"{budget:g}s of training"
    first = (f"estimate: one run is about {clock(per)} ({what}, startup and the trusted evaluation); the "
             f"first row of results.tsv needs {baseline_repeats} baseline run(s), about {clock(per * baseline_repeats)}")
    where = f" on {machine}" if machine else " on an idle machine"
    if max_experiments is None:
        return first + where
    low, high = runs_needed(baseline_repeats, max(0, max_experiments - done - 1))
    had = f" ({done} already recorded)" if done else ""
    return (f"{first}; --max-experiments {max_experiments}{had}: {low} to {high} runs as the judge asks for "
            f"reruns, about {clock(per * low)} to {clock(per * high)}{where}")


def eta_line(*, n: int, max_experiments: int | None, first_n: int, elapsed_s: float,
             run_s: float = 0.0) -> str | None:
    """Before experiment `n` with --max-experiments: how many are left and about how long they
    take: at this session's pace once it decided one (`first_n`: its first experiment after the
    baseline, whose repeats are no experiment's pace), before that at one measured run each
    (`run_s`: training, the trusted evaluation and the judge, as the eta lines after each run
    measure it), the default rule's common case (None without --max-experiments)."""
    if max_experiments is None or n > max_experiments:
        return None
    left = max_experiments - n + 1
    done = n - first_n
    head = f"eta: experiment {n} of {max_experiments} next, {left} to go"
    if (done < 1 or elapsed_s <= 0) and run_s > 0:
        return (f"{head}; about {clock(left * run_s)} if each is decided on one run ({clock(run_s)} a run "
                "here); reruns the judge asks for add to it")
    if done < 1 or elapsed_s <= 0:
        return head
    return f"{head}; about {clock(left * elapsed_s / done)} at this session's pace ({done} decided in {clock(elapsed_s)})"
