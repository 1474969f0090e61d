"""The guard: a deterministic check of a proposed train.py before it costs a training run.

It rejects an edit that touches anything but train.py, does not parse, drops what the harness
needs (build_model, the AUTORESEARCH_ hooks), or adds a violation of the static rules in
agent/judges/guard_rules.py: rebinding prepare's constants, monkeypatching prepare/time/torch, training
on the validation split, network, subprocesses, dynamic code, writes outside the run's directory,
a changed seed, a stretched budget. The loop records a rejection (journal + results.tsv discard)
and shows the reason to the proposer on its next turn; no training run is spent.
"""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from agent.judges.guard_rules import new_violations, scan, seed_constants
from agent.judges.judge import near_duplicates
from agent.judges.reviewer import REQUIRED_DEFS, GuardVerdict, _defines
from search.knobs import PROFILE_CALL, code_fingerprint, read_knobs, values
from harness.experiment_record import ExperimentRecord

# The one file the loop may change.
EDITABLE = "train.py"
# Untracked files in the worktree matter only if Python could pick them up: a stray time.py or
# torch/__init__.py beside train.py shadows the real module in the next run. Other untracked files
# (the loop's loop.lock, pending.json, child.pid) are not edits. Bytecode in __pycache__ is Python's.
CODE_SUFFIXES = (".py", ".pyc", ".pyd", ".so", ".pth")
BYTECODE_DIR = "__pycache__"
# Harness hooks train.py must keep honouring once the baseline has them (docs/contracts.md).
HARNESS_HOOKS = ("AUTORESEARCH_ARTIFACT", "AUTORESEARCH_SEED", "AUTORESEARCH_STEPS",
                 "AUTORESEARCH_DECAY_STEPS", "AUTORESEARCH_SAVE_STATE", "AUTORESEARCH_RESUME_STATE")
# Knobs that decide how much of the run is *not* counted as training time: raising them buys
# untimed training, so they may only go down.
UNTIMED_KNOBS = ("STARTUP_STEPS", "GPU_STARTUP_STEPS")
# Most violations listed in a rejection (the proposer reads this; keep it short).
MAX_LISTED = 6
# Journal statuses of an experiment that was decided (a "pending" one is still training).
FINISHED = ("keep", "discard", "crash")
GIT_TIMEOUT_S = 30


def check_source(old_source: str, new_source: str) -> GuardVerdict:
    """The static part: only the two sources, no filesystem."""
    if new_source == old_source:
        return GuardVerdict(False, "the proposal does not change train.py", {"rule": "unchanged"})
    if not new_source.strip():
        return GuardVerdict(False, "the proposal empties train.py", {"rule": "empty"})
    try:
        new_tree, new_v, new_budget_refs = scan(new_source)
    except SyntaxError as e:
        return GuardVerdict(False, f"train.py does not parse: {e.msg} at line {e.lineno}",
                            {"rule": "syntax", "line": e.lineno})
    try:
        old_tree, old_v, old_budget_refs = scan(old_source)
    except SyntaxError:
        old_tree, old_v, old_budget_refs = None, [], 0  # a broken parent holds nothing against the fix
    if old_tree is not None and ast.dump(new_tree) == ast.dump(old_tree):
        # comments, blank lines or layout only: the commit would run its parent's program again
        return GuardVerdict(False, "the proposal changes only comments or layout: the program that runs "
                                   "is its parent's", {"rule": "unchanged"})

    problems = [f"{v.rule}: {v.message} (line {v.line}: {v.code[:80]})" for v in new_violations(old_v, new_v)]
    rules = sorted({v.rule for v in new_violations(old_v, new_v)})

    missing = _defines(new_source, REQUIRED_DEFS)
    if missing:
        problems.append(f"harness: train.py must keep {', '.join(missing)}() (the trusted re-evaluation uses it)")
        rules.append("harness")
    # by count, not presence: a hook still named in help text or a comment is not a hook honoured
    dropped = [h for h in HARNESS_HOOKS if new_source.count(h) < old_source.count(h)]
    if dropped:
        problems.append(f"harness: train.py no longer reads {', '.join(dropped)}")
        rules.append("harness")
    if new_source.count(PROFILE_CALL) > old_source.count(PROFILE_CALL):
        problems.append("harness: a tag's train.py carries its profile's knob values; runtime.use_profile_knobs "
                        "would make a run by hand differ from the loop's")
        rules.append("harness")
    if old_budget_refs and not new_budget_refs:
        problems.append("budget: train.py no longer uses prepare.TIME_BUDGET to end training")
        rules.append("budget")
    if old_tree is not None:
        old_seeds, new_seeds = seed_constants(old_tree), seed_constants(new_tree)
        changed = sorted(k for k in old_seeds.keys() | new_seeds.keys() if old_seeds.get(k) != new_seeds.get(k))
        if changed:
            desc = ", ".join(f"{k}: {old_seeds.get(k)} -> {new_seeds.get(k)}" for k in changed)
            problems.append(f"seed: the seed changed ({desc}); a different seed is noise, not an improvement")
            rules.append("seed")
    old_knobs, new_knobs = read_knobs(old_source), read_knobs(new_source)
    for name in UNTIMED_KNOBS:
        if name in old_knobs and name in new_knobs and _num(new_knobs[name].value) > _num(old_knobs[name].value):
            problems.append(f"budget: raising {name} ({old_knobs[name].value} -> {new_knobs[name].value}) "
                            "trains outside the timed budget")
            rules.append("budget")
        elif name in old_knobs and _untimed_bindings(new_tree, name) != ([new_knobs[name].value]
                                                                         if name in new_knobs else []):
            # fails closed: a value the guard cannot read (an expression, a second or augmented
            # assignment, one inside a function) might be larger
            problems.append(f"budget: {name} must stay one plain number at the top of train.py (it decides "
                            "how much training is not timed)")
            rules.append("budget")

    if problems:
        shown = problems[:MAX_LISTED] + ([f"... and {len(problems) - MAX_LISTED} more"]
                                         if len(problems) > MAX_LISTED else [])
        return GuardVerdict(False, "guard: " + "; ".join(shown),
                            {"rules": sorted(set(rules)), "violations": problems})
    return GuardVerdict(True, "ok", {"violations_tolerated": len(old_v)})


def _untimed_bindings(tree: ast.AST, name: str) -> list:
    """Every value bound to `name` anywhere in the module: a module-level `NAME = <number>` gives
    the number; any other binding (an expression, `+=`, a walrus, a loop target, one inside a
    function or class, an import, a `global` declaration) gives None, which no knob value equals."""
    top = {id(n) for n in getattr(tree, "body", [])}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Global) and name in node.names:
            out.append(None)
        elif isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.append(None)
        elif isinstance(node, ast.alias) and (node.asname or node.name) == name:
            out.append(None)
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id == name and id(node) in top:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[out.index(None)] = value
    return out


def _num(v):
    return float(v) if isinstance(v, (int, float)) else 0.0


def stray_changes(worktree: Path) -> list[str]:
    """Tracked files changed in the worktree other than train.py, and untracked code files."""
    try:
        out = subprocess.run(["git", "status", "--porcelain=v1", "-z", "--untracked-files=all"],
                             cwd=worktree, capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [f"<git status failed: {e}>"]
    if out.returncode != 0:
        return [f"<git status failed: {out.stderr.strip()[:200]}>"]
    paths = []
    entries = out.stdout.split("\0")
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if "R" in code or "C" in code:
            i += 1  # a rename's source path follows as its own entry
        if path == EDITABLE:
            continue
        if code == "??" and (not path.endswith(CODE_SUFFIXES) or BYTECODE_DIR in Path(path).parts):
            continue
        paths.append(path)
    return paths


def guard(ctx) -> GuardVerdict:
    """The full guard for an ExperimentContext: stray files in the worktree, then the source."""
    stray = stray_changes(Path(ctx.worktree))
    if stray:
        return GuardVerdict(False, f"guard: only train.py may change; the worktree also has "
                                   f"{', '.join(stray[:5])}", {"rules": ["files"], "stray": stray})
    verdict = check_source(ctx.old_source, ctx.new_source)
    if verdict.ok:
        verdict = repeat_of(ctx) or verdict
    verdict.details["lines"] = diff_lines(ctx.diff)
    return verdict


def repeat_of(ctx) -> GuardVerdict | None:
    """A proposal already tried, refused before it costs a run: the same code with the same knob
    values as an earlier experiment (whatever edits led there), or a diff that normalises to one
    already run from the same parent (agent/judges/judge.py near_duplicates). The same idea from another
    parent is allowed: a keep since then changed its premise, so it may be revisited."""
    history = getattr(ctx, "history", None) or []
    code, config = code_fingerprint(ctx.new_source), values(ctx.new_source)
    for rec in reversed(history):
        if rec.code == code and rec.config == config and rec.status in FINISHED:
            return GuardVerdict(False, f"guard: a repeat of experiment {rec.n} ({_said(rec)}): the same "
                                       f"code and knob values were already tried; propose something else",
                                {"rule": "repeat", "repeat_of": rec.n})
    parent = getattr(ctx, "parent", None)
    same_start = [r for r in history if parent and r.parent == parent and r.status in FINISHED]
    dups = near_duplicates(ctx.diff, same_start)
    if dups:
        rec = next(r for r in same_start if r.n == dups[0])
        return GuardVerdict(False, f"guard: near-identical to experiment {dups[0]} ({_said(rec)}), tried from "
                                   f"this same parent; a different idea, or the same one after a new keep, may "
                                   f"be tried", {"rule": "near_duplicate", "repeat_of": dups[0], "similar_to": dups})
    return None


def _said(rec: ExperimentRecord) -> str:
    bpb = rec.decision_bpb
    figure = f" at {bpb:.6f}" if bpb is not None else ""
    return f"{rec.status}{figure}: {str(rec.description)[:80]}"


def diff_lines(diff: str) -> dict:
    """Added/removed code lines of a unified diff (blank lines and comments do not count)."""
    added = removed = 0
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            continue
        body = line[1:].strip()
        if not body or body.startswith("#"):
            continue
        if line.startswith("+"):
            added += 1
        elif line.startswith("-"):
            removed += 1
    return {"added": added, "removed": removed, "net": added - removed}
