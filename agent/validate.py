"""A winner checked at a longer budget: does the final best's gain over the base hold at K x the budget?

    uv run agent/report.py --run DIR --validate K

Screen-then-validate: the loop's budget is short so that many ideas are tried; a change that wins
at 5 minutes may win by less, or lose, at 50. This re-runs the tag's final best and its base at K
times the budget, DEFAULT_SEEDS (3) fresh seeds each (the same seeds on both sides, none the loop used), through
the loop's own path: a sealed run and the trusted evaluation for a run the judge hierarchy judged
(agent/experiment.run_commit, JudgeHierarchy.measure), the printed val_bpb for one the simple
reviewer judged. It says whether the gain HOLDS (at least HOLD_FRACTION of the run's gain, and
clear of its standard error), SHRINKS (positive but less, or within noise), or REVERSES (the base
is better), and writes report/validation.json, which the report and the dashboard show.

A --smoke tag trained a fixed number of steps: its runs are validated at K x those steps, on its
profile. Runs happen in a scratch worktree (never the run's own); the run must be stopped. Experiment
numbers VALIDATE_N0 and up name their logs and artifacts, far from the loop's.
"""
from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from agent import gitops
from runfiles.journal import Measurement
from runfiles.run import RunInfo
from harness.experiment_record import experiment_records
from harness.results import read_journal
from runfiles.state import write_json_atomic
from runfiles.shared_results import VALIDATION_JSON

# Experiment numbers of validation runs (logs/validate-*.log, artifacts/exp-95NNN/).
VALIDATE_N0 = 95000
# The validation runs' seeds: a stream of their own under the run folder's key (agent/seeds.py).
SEED_STREAM = "validate"
DEFAULT_SEEDS = 3
# The gain holds when the longer runs keep at least this fraction of the run's gain (and it is
# more than its standard error): half a gain is still a gain worth keeping; less is a finding.
HOLD_FRACTION = 0.5


class ValidateError(Exception):
    """Nothing to validate, or it cannot be measured here: the message says why."""


def terms(run_dir: Path) -> dict:
    """The tag's base and final best (its own experiments; imported ones left out) and the run's gain."""
    run_dir = Path(run_dir)
    records = experiment_records(read_journal(run_dir / "journal.jsonl")[0])
    info = RunInfo.read(run_dir / "run.json")
    if info is None or info.budget is None or not info.base_commit:
        raise ValidateError(f"{run_dir}: no run.json with a budget and a base commit (has the loop run here?)")
    own = [r for r in records if not r.imported]
    keeps = [r for r in own if r.status == "keep" and r.commit]
    base_rec = next((r for r in keeps if r.commit == info.base_commit), None)
    final_rec = keeps[-1] if keeps else None
    if final_rec is None or base_rec is None:
        raise ValidateError(f"{run_dir}: no kept baseline yet")
    gain = (base_rec.decision_bpb - final_rec.decision_bpb) \
        if base_rec.decision_bpb is not None and final_rec.decision_bpb is not None else None
    steps = base_rec.summary_figure("num_steps") if info.smoke else None
    return {"run": run_dir, "info": info, "records": records, "base": info.base_commit, "final": final_rec.commit,
            "gain_short": gain, "sealed": any(r.trusted_bpb is not None for r in own),
            "steps": int(steps) if steps else None}


def verdict(gain_short: float | None, gain_long: float | None, se: float | None) -> tuple[str, str]:
    if gain_long is None:
        return "unmeasured", "a side has no figure at the longer budget"
    noise = se or 0.0
    if gain_long < 0 and -gain_long > noise:
        return "reverses", "the base is better at the longer budget"
    if gain_long <= noise:
        return "shrinks", "the gain is within the noise of the longer runs"
    if gain_short is not None and gain_short > 0 and gain_long < HOLD_FRACTION * gain_short:
        return "shrinks", f"less than {HOLD_FRACTION:g} of the run's gain is left"
    return "holds", "the final best is still better, by at least half the run's gain"


def _slot(scratch: Path, t: dict, budget: float, seal):
    """Where a validation run goes: the scratch worktree and the run folder, one local slot, the
    run's clock reference (agent/experiment.py Slot)."""
    from agent.experiment import Slot, one_slot
    from agent.workspace import RunFiles
    from agent.experiment import reference_of
    from harness.runner import timeout_for
    info, records = t["info"], t["records"]
    return Slot(files=RunFiles(scratch, info.tag or "", scratch, t["run"]), run_info=info, budget=budget,
                timeout=timeout_for(budget), seal=seal, sealed=seal is not None, executor=one_slot(t["run"]),
                clock_reference=lambda recipe=None: reference_of(records, recipe))


def until_evidence(one: Callable[[str], Measurement], stem: str, tries: int | None = None) -> Measurement:
    """`one(log_name)`'s measurement, run again on the same seed while the harness's clock calls
    it disturbed ("no evidence": slowed past what its load explains), as the judge and
    agent/remeasure.py do; each try keeps its own log. A cheat, a crash or a failed evaluation is
    final (the tries: agent/remeasure.py DISTURBED_TRIES)."""
    if tries is None:
        from agent.remeasure import DISTURBED_TRIES as tries
    out = Measurement(False, "not measured")
    for attempt in range(tries):
        out = one(stem + (f".rerun{attempt}" if attempt else "") + ".log")
        if out.clock != "over":
            break
    return out


def sealed_measure(t: dict, scratch: Path, budget: float):
    """measure(commit, n, seed) -> Measurement: the loop's sealed run + the trusted evaluation."""
    from agent import workspace
    from agent.experiment import run_commit
    from agent.judges.hierarchy import JudgeHierarchy
    from agent.workspace import make_seal
    info = t["info"]
    env = dict(os.environ, AUTORESEARCH_TIME_BUDGET=f"{budget:g}")
    described = workspace.describe_data(scratch, env, t["run"] / "report" / "prepare.log")
    judge = JudgeHierarchy(budget=budget)
    mode = "none" if info.sandbox_kind == "none" else "auto"
    seal = make_seal(t["run"], described, RunInfo.from_dict(info.to_dict()), mode, print)
    slot = _slot(scratch, t, budget, seal)

    def measure(commit: str, n: int, seed: int) -> Measurement:
        gitops.git(scratch, "checkout", "-q", "--detach", commit)
        return until_evidence(lambda log: Measurement.of(judge.measure(
            commit, worktree=scratch, run_dir=t["run"], train=lambda c: run_commit(
                slot, n, c, log, env={"AUTORESEARCH_SEED": str(seed)}))), f"validate-{commit[:7]}-s{seed}")
    measure.close = slot.executor.close
    return measure


def printed_measure(t: dict, scratch: Path, budget: float):
    """measure(commit, n, seed) -> Measurement: an unsealed run, its printed val_bpb (simple reviewer)."""
    from harness.runner import RunPlace, RunSpec, run_train

    def measure(commit: str, n: int, seed: int) -> Measurement:
        gitops.git(scratch, "checkout", "-q", "--detach", commit)
        run = run_train(RunSpec(scratch, t["run"], n, budget, env={"AUTORESEARCH_SEED": str(seed)},
                                place=RunPlace(log_name=f"validate-{commit[:7]}-s{seed}.log")))
        if run.crash_class is not None:
            return Measurement(False, f"crashed: {run.crash_class}", None, str(run.log_path))
        bpb = run.printed("val_bpb")
        ok = isinstance(bpb, (int, float)) and math.isfinite(bpb)
        return Measurement(ok, "printed val_bpb", float(bpb) if ok else None, str(run.log_path))
    measure.close = lambda: None
    return measure


def validate(run_dir: Path, k: float, seeds: int = DEFAULT_SEEDS, say=print, make_measure=None) -> dict:
    """Re-run the final best and the base at k x the budget; write and return report/validation.json's object."""
    if not (k > 0 and math.isfinite(k)):
        raise ValidateError(f"--validate wants a positive factor of the budget, got {k}")
    if os.environ.get("AUTORESEARCH_STEPS"):
        raise ValidateError("AUTORESEARCH_STEPS is set: runs train a fixed number of steps, so a longer "
                            "budget changes nothing; unset it to validate")
    t = terms(run_dir)
    env = tag_environment(t, k)
    os.environ.update(env)
    try:
        return _validate(run_dir, t, k, seeds, say, make_measure)
    finally:
        for key in env:
            os.environ.pop(key, None)


def tag_environment(t: dict, k: float = 1.0) -> dict:
    """What runs of the tag after the fact need in the environment: its profile (its data, its
    shapes; not this machine's default) and, for a --smoke tag, k x its steps and its threads."""
    profile, given = t["info"].profile, os.environ.get("AUTORESEARCH_PROFILE")
    if profile and given and given != profile:
        raise ValidateError(f"AUTORESEARCH_PROFILE is {given}, the tag ran on the {profile} profile; unset it "
                            "to measure on the tag's")
    env = {}
    if profile and not given:
        env["AUTORESEARCH_PROFILE"] = profile
    steps = t["steps"]
    if steps:   # a --smoke tag trained a fixed number of steps: K x the budget is K x its steps
        env["AUTORESEARCH_STEPS"] = str(max(1, round(k * steps)))
        if not os.environ.get("AUTORESEARCH_THREADS"):
            from agent.cli import SMOKE_THREADS
            env["AUTORESEARCH_THREADS"] = str(SMOKE_THREADS)
    return env


def _validate(run_dir: Path, t: dict, k: float, seeds: int, say, make_measure) -> dict:
    (Path(run_dir) / "report").mkdir(exist_ok=True)
    budget = float(t["info"].budget) * k
    from agent.remeasure import fresh_seeds, loop_seeds
    max_n = max([r.n for r in t["records"] if r.n is not None] + [0]) + 1
    drawn = fresh_seeds(run_dir, seeds, loop_seeds(run_dir, max_n), SEED_STREAM)
    out = {"k": k, "budget": budget, "steps": max(1, round(k * t["steps"])) if t["steps"] else None, "seeds": drawn, "made_at": time.time(),
           "gain_short": t["gain_short"], "sealed": t["sealed"],
           "final": {"commit": t["final"], "runs": [], "failed": []},
           "base": {"commit": t["base"], "runs": [], "failed": []}}
    if t["final"] == t["base"]:
        out.update(verdict="unmeasured", reason="nothing was kept beyond the base: no gain to validate",
                   gain_long=None, se_long=None)
        write_json_atomic(Path(run_dir) / VALIDATION_JSON, out)
        return out
    scratch_root = Path(tempfile.mkdtemp(prefix="autoresearch-validate-"))
    scratch = scratch_root / "wt"
    gitops.git(t["run"], "worktree", "add", "--detach", str(scratch), t["final"])
    measure = None
    try:
        measure = (make_measure or (sealed_measure if t["sealed"] else printed_measure))(t, scratch, budget)
        for i, seed in enumerate(out["seeds"]):
            for j, side in enumerate(("base", "final")):
                m = measure(out[side]["commit"], VALIDATE_N0 + 2 * i + j, seed)
                at = f"{out['steps']} steps" if out["steps"] else f"{budget:g} s"
                say(f"validate: {side} {out[side]['commit'][:7]} seed {seed} at {at}: "
                    + (f"{m.bpb:.6f}" if m.ok and m.bpb is not None else f"no figure ({m.reason})"))
                if m.ok and m.bpb is not None:
                    out[side]["runs"].append(m.bpb)
                else:
                    out[side]["failed"].append(m.reason or "no figure")
    finally:
        if measure is not None:
            measure.close()
        gitops.git(t["run"], "worktree", "remove", "--force", str(scratch), check=False)
        shutil.rmtree(scratch_root, ignore_errors=True)
    f, b = out["final"]["runs"], out["base"]["runs"]
    gain = statistics.fmean(b) - statistics.fmean(f) if f and b else None
    se = math.sqrt(statistics.variance(f) / len(f) + statistics.variance(b) / len(b)) \
        if len(f) > 1 and len(b) > 1 else None
    out["gain_long"], out["se_long"] = gain, se
    out["verdict"], out["reason"] = verdict(t["gain_short"], gain, se)
    write_json_atomic(Path(run_dir) / VALIDATION_JSON, out)
    return out



def confirm_run(run_dir: Path, n: int | None = None, runs: int = 2, say=print, make_measure=None) -> dict:
    """`report --confirm [N]`: experiment N's kept commit (default: the final) run again on `runs`
    fresh seeds, sealed and evaluated as the loop's runs are, and tested against its parent's runs
    (agent/judges/confirm.py); the claim is appended to the journal and returned. The run must be
    stopped (its journal is written here)."""
    from agent.remeasure import claim_seeds
    t = terms(run_dir)
    keeps = [r for r in t["records"] if not r.imported and r.status == "keep" and r.commit and not r.is_baseline]
    rec = next((r for r in keeps if r.n == n), None) if n is not None else (keeps[-1] if keeps else None)
    if rec is None:
        raise ValidateError(f"{run_dir}: " + (f"experiment {n} is not a keep of this tag" if n is not None
                                               else "nothing was kept beyond the baseline: nothing to confirm"))
    seeds = claim_seeds(run_dir, Path(run_dir) / "journal.jsonl", runs,
                        max(r.n for r in t["records"] if r.n is not None) + 1)
    env = tag_environment(t)
    os.environ.update(env)
    try:
        return _confirm(run_dir, t, rec, seeds, say, make_measure)
    finally:
        for key in env:
            os.environ.pop(key, None)


def _confirm(run_dir: Path, t: dict, rec, seeds: list[int], say, make_measure) -> dict:
    from agent.judges import confirm
    from harness.results import append_journal
    scratch_root = Path(tempfile.mkdtemp(prefix="autoresearch-confirm-"))
    scratch = scratch_root / "wt"
    gitops.git(t["run"], "worktree", "add", "--detach", str(scratch), rec.commit)
    values, failed, measure = [], [], None
    try:
        measure = (make_measure or sealed_measure)(t, scratch, float(t["info"].budget))
        for i, seed in enumerate(seeds):
            m = measure(rec.commit, VALIDATE_N0 + 500 + i, seed)
            say(f"confirm: exp {rec.n} {rec.commit[:7]} seed {seed}: "
                + (f"{m.bpb:.6f}" if m.ok and m.bpb is not None else f"no figure ({m.reason})"))
            (values.append(m.bpb) if m.ok and m.bpb is not None else failed.append(f"seed {seed}: {m.reason}"))
    finally:
        if measure is not None:
            measure.close()
        gitops.git(t["run"], "worktree", "remove", "--force", str(scratch), check=False)
        shutil.rmtree(scratch_root, ignore_errors=True)
    out = confirm.claim(rec.commit, t["records"], values, failed=failed)
    out["seeds"] = seeds[:len(values) + len(failed)]
    append_journal(Path(run_dir) / "journal.jsonl", out)
    say(f"confirm: exp {rec.n} {rec.commit[:7]} is " + ("CONFIRMED" if out["confirmed"] else "NOT confirmed")
        + f": {out['why']}")
    return out
