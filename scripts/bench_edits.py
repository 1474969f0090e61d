"""The edits scripts/bench_judge.py proposes to the judge: nulls that change nothing a run learns
(comments, renames, reordered products, knob nudges of 0.01-0.1%), the renames that make each gain
a new edit for the guard, and the preflight that checks every planned edit passes the guard.
"""
from __future__ import annotations

import re

from agent.proposers.scripted import Edit
from harness.experiment_record import ExperimentRecord
from search import knobs


# ---- the null edits ---------------------------------------------------------------------------------
def _sub(pattern: str, repl: str, count: int = 1):
    def apply(src: str) -> str:
        out, k = re.subn(pattern, repl, src, count=count, flags=re.M)
        if not k:
            raise ValueError(f"null edit found nothing to change: {pattern!r}")
        return out
    return apply


def _nudge(name: str, factor: float = 1.001):
    def apply(src: str) -> str:
        v = knobs.values(src)[name]
        return knobs.set_knobs(src, {name: knobs.normalize(v * factor if v else 1e-6)})
    return apply


NULL_EDITS = [
    ("a comment in main()", _sub(r"^(    plan = make_plan\(\))$", "    # the plan: a time budget, or a number of steps\n\\1")),
    ("a comment line above the optimizer", _sub(r"^(class MuonAdamW)", "# Muon for matrices, AdamW for the rest.\n\\1")),
    ("rename loss_sum to loss_total", _sub(r"\bloss_sum\b", "loss_total", count=0)),
    ("reorder the tokens-per-step product", _sub(r"tokens_per_step = accum \* DEVICE_BATCH_SIZE \* T", "tokens_per_step = T * DEVICE_BATCH_SIZE * accum")),
    ("rename fail() to die()", _sub(r"\bfail\(", "die(", count=0)),
    ("split the step counter update", _sub(r"^(\s+)step, local_steps = step \+ 1, local_steps \+ 1$", r"\1step += 1\n\1local_steps += 1")),
    ("reword the training-done message", _sub(r'print\(f"training done: ', 'print(f"finished training: ')),
    ("a blank line between knob groups", _sub(r"^(# Batch)$", "\n\\1")),
    ("reorder two imports", _sub(r"^import gc\nimport hashlib$", "import hashlib\nimport gc")),
    ("name the explode limit", _sub(r"explode_at = EXPLODE_FACTOR \* math.log\(V\)", "explode_at = math.log(V) * EXPLODE_FACTOR")),
    ("MATRIX_LR +0.1%", _nudge("MATRIX_LR")),
    ("EMBEDDING_LR +0.1%", _nudge("EMBEDDING_LR")),
    ("UNEMBEDDING_LR -0.1%", _nudge("UNEMBEDDING_LR", 0.999)),
    ("SCALAR_LR +0.1%", _nudge("SCALAR_LR")),
    ("ADAM_BETA2 +0.01%", _nudge("ADAM_BETA2", 1.0001)),
    ("MUON_MOMENTUM -0.01%", _nudge("MUON_MOMENTUM", 0.9999)),
    ("WARMDOWN_RATIO +0.1%", _nudge("WARMDOWN_RATIO")),
    ("GRAD_CLIP +0.1%", _nudge("GRAD_CLIP")),
    ("NORMUON_BETA2 -0.01% (unused by the cpu Muon)", _nudge("NORMUON_BETA2", 0.9999)),
    ("ADAM_BETA1 -0.1%", _nudge("ADAM_BETA1", 0.999)),
    ("WEIGHT_DECAY 0 -> 1e-6", _nudge("WEIGHT_DECAY")),
    ("FINAL_LR_FRAC 0 -> 1e-6", _nudge("FINAL_LR_FRAC")),
    ("SHORT_WINDOW_FRAC +0.1%", _nudge("SHORT_WINDOW_FRAC")),
    ("a docstring sentence", _sub(r"^(Usage: uv run train.py)$", "Bench note: nothing here changes what is learnt.\n\\1")),
]


# Each gain also renames one local of main() (a no-op): the guard refuses an edit that repeats or
# nearly repeats one already run from the same parent, and every gain starts from the baseline.
GAIN_RENAMES = ("loss_f", "counted_steps", "t_train", "explode_at", "num_params", "eval_model", "save_path",
                "resume_path", "loader_state", "t_start", "train_loss", "loss_fn", "flops_per_step", "mfu", "accum",
                "compile_on")


def rename(name: str):
    """An edit that renames `name` throughout (a no-op for what is learnt)."""
    return _sub(rf"\b{name}\b", f"{name}_v", count=0)


def preflight(edits: dict[int, Edit], base_source: str) -> None:
    """Every planned edit must pass the guard against the ones before it (no run is spent to learn
    that the guard refuses a bench edit as a repeat)."""
    import difflib
    from types import SimpleNamespace
    from agent.judges.guard import check_source, repeat_of

    history, parent = [], "base"
    for n, e in sorted(edits.items()):
        new = e.apply(base_source)
        diff = "".join(difflib.unified_diff(base_source.splitlines(True), new.splitlines(True), "a/train.py", "b/train.py"))
        ctx = SimpleNamespace(history=history, parent=parent, diff=diff, new_source=new)
        verdict = check_source(base_source, new)
        verdict = repeat_of(ctx) or verdict if verdict.ok else verdict
        if not verdict.ok:
            raise SystemExit(f"bench edit {n} ({e.label}) would be refused: {verdict.reason}")
        history.append(ExperimentRecord.of(n=n, parent=parent, status="discard", diff=diff,
                                        code=knobs.code_fingerprint(new), config=knobs.values(new)))
