"""Re-measure a commit after the fact: its train.py through the loop's own run path, on fresh seeds.

What a loop recorded as its best is the figure its decisions rested on (for the simple rule, the
one run that happened to come out lowest); what a commit is really worth is what new runs of it
give. `remeasure(loop, commit, seeds)` runs `commit`'s train.py through agent/experiment.py
run_commit (the one way a run is assembled: the tag's seal, the sandbox, the loop's executor) with
the trusted evaluation always on, whatever the loop's reviewer (the simple rule's loop runs
unsealed and believes the printed figure; a re-measurement never does), once per seed, and returns
the trusted val_bpb's mean and standard error.

The seeds must be fresh: `fresh_seeds(run_dir, k, used)` draws k seeds with the run folder's key
(agent/seeds.py: from the same range as the loop's, so train.py cannot tell a re-measurement from a
loop run), and remeasure refuses any seed the loop can have used (every experiment number and
rerun, and train.py's own SEED): a re-measurement on a loop seed would replay the very draw a keep
may have been lucky on. scripts/bench_research.py uses it after each night, for the night's final
incumbent and the base.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field, replace

from agent.experiment import MAX_RERUNS, run_commit
from agent.judges.evidence import over_budget
from agent import budget, gitops, seeds as seedkeys
from search import knobs

# Experiment numbers the re-measurement jobs take (their log folders; train.py sees its artifact
# folder at one path whatever the number, harness/runner.py): above any night's experiments, so no
# run of the loop's is overwritten.
JOB_N_BASE = 90_000
# Steps back the night's end takes at most (each re-measures the commit it steps back to on
# --final-runs fresh seeds, past the night's budget): a night whose last advances were all luck
# goes back that far, no further.
MAX_STEPS_BACK = 3
# Runs of one seed: a run the harness's clock finds slowed past what its load explains ("over", as
# the judge reruns a disturbed run) is run again on the same seed; a cheat, a crash or a failed
# evaluation is never retried.
DISTURBED_TRIES = 3


class SeedClash(ValueError):
    """A re-measurement seed the loop may have used."""


@dataclass
class Remeasured:
    commit: str
    values: list[float] = field(default_factory=list)   # trusted val_bpb, one per seed that ran clean
    seeds: list[int] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)     # why a run gave no trusted figure
    seconds: float = 0.0                                # wall time of the runs, evaluations included

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def sd(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None

    @property
    def se(self) -> float | None:
        return self.sd / math.sqrt(len(self.values)) if self.sd is not None else None

    def as_dict(self) -> dict:
        return {"commit": self.commit, "values": self.values, "seeds": self.seeds, "failed": self.failed,
                "mean": self.mean, "sd": self.sd, "se": self.se, "seconds": round(self.seconds, 1)}


def loop_seeds(run_dir, max_n: int, own_seed: int | None = None) -> set[int]:
    """Every AUTORESEARCH_SEED a loop of `max_n` experiments in `run_dir` can give a run, and train.py's SEED."""
    return seedkeys.loop_seeds(seedkeys.key_of(run_dir), max_n, MAX_RERUNS, own_seed)


def fresh_seeds(run_dir, k: int, used: set[int], stream: str = seedkeys.FRESH) -> list[int]:
    """k seeds of `stream` under `run_dir`'s key, none of them in `used`."""
    return seedkeys.fresh(seedkeys.key_of(run_dir), k, used, stream)


def claim_seeds(run_dir, journal, k: int, max_n: int) -> list[int]:
    """k seeds for a claim: none a loop of `max_n` experiments or an earlier claim in `journal` used."""
    from agent.judges import confirm
    taken = {s for c in confirm.read_claims(journal) for s in c.seeds}
    return fresh_seeds(run_dir, k, loop_seeds(run_dir, max_n) | taken, seedkeys.CLAIM)


def remeasure(loop, commit: str, seeds: list[int], *, say=None) -> Remeasured:
    """`commit`'s train.py run once per seed through the loop's run path, sealed and evaluated by
    the trusted evaluator. `loop`: a set-up agent/loop.py Loop (its seal, run info and executor;
    its history says which seeds it used)."""
    max_n = max([r.n for r in loop.history if r.n is not None] + [loop.coord.next_n()])
    own = knobs.values(gitops.show_file(loop.files.repo, commit, "train.py")).pop("SEED", None)
    clash = set(seeds) & loop_seeds(loop.files.run_dir, max_n + 1, own if isinstance(own, int) else None)
    if clash:
        raise SeedClash(f"re-measurement seeds {sorted(clash)} may be the loop's own")
    slot, out = replace(loop.slot, sealed=True), Remeasured(commit)   # the trusted evaluation always on
    t0 = time.monotonic()
    for i, seed in enumerate(seeds):
        for attempt in range(DISTURBED_TRIES):   # a run the load disturbed is no evidence: run it again
            n = JOB_N_BASE + i
            log = f"remeasure-{commit[:7]}-{seed}" + (f".rerun{attempt}" if attempt else "") + ".log"
            run = run_commit(slot, n, commit, log, {"AUTORESEARCH_SEED": str(seed)})
            v = run.verified
            kind, over = over_budget(run, slot.budget) if run.crash_class is None else (None, "")
            if kind == "over" and attempt + 1 < DISTURBED_TRIES and v is not None and v.ok:
                if say is not None:
                    say(f"re-measure {commit[:7]} seed {seed}: no evidence ({over}); running it again")
                continue
            break
        if run.crash_class is not None or kind is not None or v is None or not v.ok or v.trusted_bpb is None:
            why = run.crash_class or (f"the harness's clock: {over}" if kind else None) \
                or (v.reason if v is not None else "no trusted evaluation")
            out.failed.append(f"seed {seed}: {why}")
        else:
            out.values.append(float(v.trusted_bpb))
            out.seeds.append(seed)
        if say is not None:
            say(f"re-measure {commit[:7]} seed {seed}: "
                + (f"{out.values[-1]:.6f}" if out.seeds and out.seeds[-1] == seed else out.failed[-1]))
    out.seconds = time.monotonic() - t0
    return out


def night_end(loop, runs: int, *, say=print, deadline: float | None = None) -> dict | None:
    """The night's headline and the final's confirmation: the final incumbent re-measured on `runs`
    fresh seeds against the baseline's runs and its parent's (agent/judges/confirm.py), written to
    the journal as a "claim"; None when there is nothing beyond the baseline to claim. Under the
    default rule a final its fresh runs do not confirm and no longer put below its parent
    (confirm.holds) is stepped back from: a commit restores the parent's train.py on the branch,
    and the parent, re-measured on `runs` fresh seeds of its own, is weighed the same way, up to
    MAX_STEPS_BACK steps; the last one re-measured is the headline's final (`deadline`, --until:
    no re-measurement that would run past it; the headline then says why it has no figure)."""
    from agent.judges import confirm
    from harness.results import append_journal
    history = [r for r in loop.history if r.is_experiment]
    base = next((r for r in history if r.is_baseline and r.status == "keep"), None)
    final = loop.best["commit"] if loop.best else None
    if runs <= 0 or base is None or not final or final == base.commit:
        return None
    came_from = None
    for steps in range(MAX_STEPS_BACK + 1):
        need = runs * budget.run_seconds(loop.history)
        if came_from is not None and deadline is not None and time.time() + need > deadline:
            out = confirm.claim(final, loop.history, [], baseline=base.commit, final=True, failed=[
                f"not re-measured: --until leaves {max(deadline - time.time(), 0) / 60:.0f} min, its {runs} "
                f"run(s) take about {need / 60:.0f}"])
            held = None
        else:
            out = _claim(loop, final, runs, base.commit, say)
            held = confirm.holds(loop.history, final, out["runs"]) \
                if loop.config.rule == "default" and not out["confirmed"] and steps < MAX_STEPS_BACK else None
        if came_from is not None:
            out["stepped_back_from"] = came_from
        if held is not None:
            out["holds"], out["holds_p"], out["holds_why"] = held
            say(f"night end: {final[:7]} " + ("holds" if held[0] else "does not hold") + f": {held[2]}")
        append_journal(loop.files.journal_path, out)
        if held is None or held[0]:
            break
        parent = confirm.keep_record(loop.history, final).parent
        step_back(loop, final, parent, held[2], say=say)
        came_from, final = final, parent
    line = confirm.headline(confirm.claims_of([out]))
    if line:
        say(f"headline: {line}")
    return out


def _claim(loop, commit: str, runs: int, baseline: str, say) -> dict:
    """`commit` re-measured on `runs` seeds no run or claim of the tag used: its final claim."""
    from agent.judges import confirm
    history = [r for r in loop.history if r.is_experiment]
    max_n = max([r.n for r in history if r.n is not None] + [loop.coord.next_n()]) + 1
    seeds = claim_seeds(loop.files.run_dir, loop.files.journal_path, runs, max_n)
    say(f"night end: re-measuring {commit[:7]} on {runs} fresh seed(s) against the baseline "
        f"{baseline[:7]}'s runs (the headline); Ctrl-C again to skip it")
    got = remeasure(loop, commit, seeds, say=say)
    out = confirm.claim(commit, loop.history, got.values, failed=got.failed, baseline=baseline, final=True)
    out["seeds"], out["seconds"] = got.seeds, round(got.seconds, 1)
    return out


def step_back(loop, final: str, parent: str, why: str, *, say=print) -> str:
    """The branch steps back from `final` to `parent`: a commit that restores the parent's train.py
    on top of the branch's tip (the final stays in the branch's history, its step back after it), then a
    journal record of kind "step_back" (agent/recovery.py reads it as a branch move, as it reads a
    human decision applied). Returns the new commit."""
    from harness.results import append_journal
    from runfiles.run import best_of
    wt = loop.worktree
    gitops.reset_hard(wt, loop.coord.last_kept)   # the branch's tip: the final, or the step back before this one
    message = f"Step back from {final[:7]} to {parent[:7]} at the night's end\n\nIts fresh runs did not hold it " \
              f"below its parent: {why}\n"
    gitops.git(wt, "checkout", parent, "--", "train.py")   # byte-exact, from git's own objects
    if gitops.git(wt, "status", "--porcelain", "--untracked-files=no"):
        new = gitops.commit_file(wt, "train.py", message)
    else:   # a keep that changed nothing: its step back still gets a commit of its own
        new = gitops.commit_empty(wt, message)
    value = next((r.decision_bpb for r in reversed(loop.history)
                  if r.is_experiment and r.status == "keep" and r.commit == parent), None)
    append_journal(loop.files.journal_path, {
        "kind": "step_back", "action": "revert", "item": None, "commit": new, "source_commit": final,
        "parent": parent, "trusted_bpb": value, "at": time.time(),
        "result": f"stepped back from {final[:7]} to {parent[:7]}'s train.py as {new[:7]}: {why}"})
    loop.coord.moved(new, best_of(new, value) if value is not None else None)
    say(f"night end: stepped back from {final[:7]} to {parent[:7]}'s train.py as {new[:7]}")
    return new
