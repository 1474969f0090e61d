"""The hybrid arm: code ideas from an LLM, knob values from the Optuna sampler.

The published comparison this answers found a code-editing agent for ideas plus a classical
sampler for the hyperparameters better than either alone. Here, per arm run (one seed):

1. `ideas(source, space, n)` returns up to n code ideas for train.py: each a list of exact
   replacements (old -> new) and optional knob overrides for knobs outside the searched space
   (inside it the sampler decides: that is the division of labour). An idea whose edits do not
   apply exactly once, whose result does not compile, or that drops a searched knob is left out,
   with the reason recorded.
2. One Optuna study (search/optuna_arm.py, TPE seeded by the arm's seed) searches the
   knobs plus one categorical parameter, IDEA: "none" (train.py as is) or one of the ideas. The
   first trials cover every choice once, on the random arm's configurations; from then on the
   sampler learns which idea goes with which knob values.
3. Every trial is a full-budget evaluation at the same cost as a random-search candidate, so the
   hybrid spends the identical step budget; the LLM's tokens and dollars are recorded beside it.

harness/ may not import agent/, so the ideas come through this small callable interface; the
default (`search.arms_llm.LLMIdeas`) asks Claude through llm/client.py and is used when
ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL is set. Without either, the arm is skipped with a line
saying so (as the claude arm is).
"""
from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from llm import client as llm
from search import knobs
from search.ideas import Idea, IdeaBatch, Ideas  # noqa: F401  (re-exported)
from search.optuna_arm import ARM_SAMPLERS, IDEA_PARAM, run_optuna_arm
from search.space import Space

# What an idea may not touch, in the text it replaces, the text it writes or a knob it sets: the
# evaluation, the seed, the budget, the environment, files, processes, the network. The arms
# score candidates with train.py's own evaluation and run them unsandboxed (like every arm's
# harness-made knob variants), so a static refusal is the only check here; see docs/hyperband.md.
FORBIDDEN_RE = re.compile(r"evaluate_bpb|\bprepare\b|EVAL|SEED|TIME_BUDGET|AUTORESEARCH_|environ|"
                          r"subprocess|socket|\bopen\(|__import__|\bexec\(|\beval\(|\bimport\b|sys\.")
HYBRID_ARM = "hybrid"
OPTUNA_ARMS = tuple(ARM_SAMPLERS)
# Ideas asked per run: with "none" that is 4 choices, which optuna_arm.STARTUP (4) covers once each
# before the model takes over; more would leave ideas never tried within a quick budget.
IDEAS = 3
NO_IDEA = "none"


def usable(batch: IdeaBatch, source: str, space: Space) -> tuple[list[Idea], list[str]]:
    """The ideas that make a runnable train.py with every searched knob still in it."""
    good, errors, names = [], [], set()
    for idea in batch.ideas:
        touched = [t for old, new in idea.edits for t in (old, new)] + list(map(str, idea.knobs))
        bad = next((m.group(0) for t in touched for m in [FORBIDDEN_RE.search(t)] if m), None)
        if bad:
            errors.append(f"{idea.name} left out: it touches {bad!r} (evaluation, seed, budget, "
                          f"environment, files or imports are off limits)")
            continue
        try:
            new = idea.apply(source, space)
            compile(new, "train.py", "exec")
        except (ValueError, SyntaxError, KeyError, TypeError) as e:
            errors.append(f"{idea.name} left out: {type(e).__name__}: {e}")
            continue
        missing = [n for n in space.names if n not in knobs.values(new)]
        if missing:
            errors.append(f"{idea.name} left out: it removes searched knob(s) {', '.join(missing)}")
        elif new == source:
            errors.append(f"{idea.name} left out: it changes nothing")
        elif idea.name in names or idea.name == NO_IDEA:
            errors.append(f"{idea.name} left out: duplicate name")
        else:
            good.append(idea)
            names.add(idea.name)
    return good, errors


def hybrid_setup(arms: list[str], ideas: Ideas | None, log: Callable[[str], None]) -> tuple[list[str], Ideas | None]:
    """The arms to run and the ideas callable: the hybrid is skipped, saying why, when it has none."""
    if HYBRID_ARM not in arms or ideas is not None:
        return arms, ideas
    if not llm.available():
        log("arms: hybrid arm skipped: its code ideas come from Claude and neither ANTHROPIC_API_KEY "
            "nor ANTHROPIC_BASE_URL is set")
        return [a for a in arms if a != HYBRID_ARM], None
    from search.arms_llm import LLMIdeas
    return arms, LLMIdeas()


def run_sampler_arm(arm: str, source: str, space: Space, pool, out: Path, *, seed: int, decay_steps: int,
                    ideas: Ideas | None = None, log=print, **settings) -> tuple[list[dict], dict]:
    """Run an Optuna arm or the hybrid; returns (records, what to keep in the report's extras)."""
    if arm in OPTUNA_ARMS:
        recs, study = run_optuna_arm(source, space, pool, out, seed=seed, decay_steps=decay_steps,
                                     sampler=ARM_SAMPLERS[arm], log=log, **settings)
        return recs, {"study": study}
    if arm != HYBRID_ARM or ideas is None:
        raise ValueError(f"{arm}: not an Optuna arm, or the hybrid without an ideas callable")
    batch = ideas(source, space, IDEAS)
    good, errors = usable(batch, source, space)
    by_name = {i.name: i for i in good}
    log(f"hybrid: {len(good)} usable idea(s) of {len(batch.ideas)}: "
        + ("; ".join(f"{i.name}: {i.description}" for i in good) or "none (the sampler alone)"))

    def source_for(config: dict) -> str:
        name = config.get(IDEA_PARAM, NO_IDEA)
        return source if name == NO_IDEA else by_name[name].apply(source, space)

    recs, study = run_optuna_arm(source, space, pool, out, seed=seed, decay_steps=decay_steps,
                                 sampler="tpe", extra={IDEA_PARAM: [NO_IDEA] + list(by_name)},
                                 source_for=source_for, log=log, **settings)
    return recs, {"study": study, "ideas": [asdict(i) for i in good], "tokens": batch.tokens,
                  "cost_usd": batch.cost_usd, "model": batch.model,
                  "errors": (batch.errors + errors)[:10]}
