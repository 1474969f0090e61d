"""The morning report's re-runs (`agent/report.py --ablate`, `--branches`): the final best re-run
without each kept change (leave-one-out), measured the way the run measured (sealed training and
the trusted evaluation for the judge hierarchy, the printed val_bpb for the simple reviewer) and
cached in <run>/report/ablations.json; and one branch per kept change on the tag's base. Both
work in a scratch worktree of their own, never in the run's.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from agent import gitops
from runfiles.state import write_json_atomic
from harness.results_table import fnum
from runfiles.journal import Measurement
from runfiles.run import RunInfo
from runfiles.shared_results import ABLATIONS, REPORT_DIR

# Experiment numbers of ablation runs (logs/ablate-*.log, artifacts/exp-9NNNN/): far from the loop's.
ABLATE_N0 = 90000


# ---- ablation ------------------------------------------------------------------------------------

def without(repo: Path, final: str, change: dict) -> str | None:
    """train.py of the final commit with one kept change reverted (3-way); None if it conflicts."""
    final_src = gitops.show_file(repo, final, "train.py")
    mine = gitops.show_file(repo, change["commit"], "train.py")
    before = gitops.show_file(repo, change["parent"], "train.py")
    return gitops.merge_file(final_src, mine, before)


def measured_by_judge(data: dict) -> bool:
    """Was the run judged on the trusted (sealed) evaluation? Then ablations are measured so too."""
    return any(r.trusted_bpb is not None for r in data["records"])


class Scratch:
    """A detached git worktree of the run's repository (outside the run folder), for ablation runs."""

    def __init__(self, repo: Path, commit: str):
        self.repo = Path(repo)
        self.path = Path(tempfile.mkdtemp(prefix="autoresearch-ablate-")) / "wt"
        gitops.git(self.repo, "worktree", "add", "--detach", str(self.path), commit)

    def commit(self, source: str, message: str) -> str:
        (self.path / "train.py").write_text(source)
        return gitops.commit_file(self.path, "train.py", message)

    def close(self) -> None:
        gitops.git(self.repo, "worktree", "remove", "--force", str(self.path), check=False)
        shutil.rmtree(self.path.parent, ignore_errors=True)


def seed_env(run_dir: Path) -> dict:
    """The ablations' one seed (paired runs), drawn with the run folder's key (agent/seeds.py): an
    ablation's run looks like any other to train.py."""
    from agent import seeds
    return {"AUTORESEARCH_SEED": str(seeds.draw(seeds.key_of(run_dir), seeds.ABLATE))}


def measure_printed(data: dict, scratch: Scratch, commit: str, n: int) -> dict:
    """Simple-reviewer semantics: train unsealed, the printed val_bpb is the figure."""
    from harness.runner import RunPlace, RunSpec, run_train
    budget = RunInfo.from_dict(data["info"]).budget or 300.0
    gitops.git(scratch.path, "checkout", "-q", "--detach", commit)
    run = run_train(RunSpec(scratch.path, data["run"], n, budget, env=seed_env(data["run"]),
                            place=RunPlace(log_name=f"ablate-{commit[:7]}.log")))
    if run.crash_class is not None:
        return {"ok": False, "reason": f"crashed: {run.crash_class}", "log": str(run.log_path)}
    bpb = fnum(run.printed("val_bpb"))
    return {"ok": bpb is not None, "bpb": bpb, "reason": "printed val_bpb", "log": str(run.log_path)}


def measure_sealed(data: dict, scratch: Scratch, commit: str, n: int) -> dict:
    """The loop's own path for a re-measurement: sealed run + trusted evaluation (agent/judges/hierarchy.py)."""
    import os

    from agent import workspace
    from agent.experiment import run_commit
    from agent.judges.hierarchy import JudgeHierarchy
    from agent.workspace import make_seal
    gitops.git(scratch.path, "checkout", "-q", "--detach", commit)
    run_info = RunInfo.from_dict(data["info"])
    budget = run_info.budget or 300.0
    env = dict(os.environ, AUTORESEARCH_TIME_BUDGET=f"{budget:g}")
    info = workspace.describe_data(scratch.path, env, data["run"] / REPORT_DIR / "prepare.log")
    judge = JudgeHierarchy(budget=budget)
    mode = "none" if run_info.sandbox_kind == "none" else "auto"
    seal = make_seal(data["run"], info, RunInfo.from_dict(run_info.to_dict()), mode, print)
    slot = _slot(scratch.path, data["run"], budget, seal, data)
    try:
        out = judge.measure(commit, worktree=scratch.path, run_dir=data["run"],
                            train=lambda c: run_commit(slot, n, c, f"queue-{c[:7]}.log", seed_env(data["run"])))
    finally:
        slot.executor.close()
    m = Measurement.of(out)
    return {"ok": m.ok, "bpb": m.bpb, "reason": m.reason, "log": m.log}


def _slot(worktree: Path, run_dir: Path, budget: float, seal=None, data=None):
    """Where an ablation's sealed run goes: the scratch worktree, the run folder, one local slot,
    the tag's clock reference (agent/experiment.py Slot)."""
    from agent.experiment import Slot, one_slot
    from agent.workspace import RunFiles
    from agent.experiment import reference_of
    from harness.runner import timeout_for
    run_info = RunInfo.from_dict(data["info"]) if data else RunInfo()
    records = list(data["records"]) if data else []
    return Slot(files=RunFiles(worktree, run_info.tag or "", worktree, run_dir), run_info=run_info, budget=budget,
                timeout=timeout_for(budget), seal=seal, sealed=True, executor=one_slot(run_dir),
                clock_reference=lambda recipe=None: reference_of(records, recipe))


def ablate(data: dict, summary: dict, measure=None) -> dict:
    """Leave-one-out on the final best: {"final": m, "<commit>": m, ...}, cached per final commit."""
    run, final = data["run"], summary["final"]
    path = run / REPORT_DIR / ABLATIONS
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    mine = cache.setdefault(final, {})
    todo = [c for c in summary["changes"] if c["commit"] not in mine]
    if "final" in mine and not todo:
        return mine
    measure = measure or (measure_sealed if measured_by_judge(data) else measure_printed)
    scratch = Scratch(run, final)
    try:
        if "final" not in mine:
            mine["final"] = measure(data, scratch, final, ABLATE_N0)
            write_json_atomic(path, cache)
        for c in todo:
            source = without(run, final, c)
            if source is None:
                mine[c["commit"]] = {"ok": False, "reason": "does not revert cleanly from the final best"}
            else:
                commit = scratch.commit(source, f"ablation: final best without experiment {c['n']}")
                mine[c["commit"]] = measure(data, scratch, commit, ABLATE_N0 + c["k"])
            write_json_atomic(path, cache)   # each result is kept even if a later one is interrupted
    finally:
        scratch.close()
    return mine


# ---- branches ------------------------------------------------------------------------------------

def make_branches(data: dict, summary: dict) -> list[dict]:
    """One branch per kept change: the tag's base plus that change's commit, cherry-picked alone."""
    run, out = data["run"], []
    scratch = Scratch(run, data["base"])
    try:
        for c in summary["changes"]:
            name = f"{gitops.branch_name(data['tag'])}-change-{c['k']}"
            gitops.git(scratch.path, "checkout", "-q", "--detach", data["base"])
            picked = gitops.git(scratch.path, *gitops._identity_args(scratch.path), "cherry-pick", c["commit"],
                                check=False)
            head = gitops.head(scratch.path)
            if head == data["base"]:
                gitops.git(scratch.path, "cherry-pick", "--abort", check=False)
                out.append({"k": c["k"], "n": c["n"], "branch": None,
                            "note": "does not apply alone on the base (it builds on an earlier kept change)"})
                continue
            gitops.git(run, "branch", "-f", name, head)
            out.append({"k": c["k"], "n": c["n"], "branch": name, "commit": head, "note": picked.strip()[:200]})
    finally:
        scratch.close()
    return out
