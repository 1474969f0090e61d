"""The Optuna arms: a real black-box optimiser over the same knobs, at the arms' step budget.

Arm `optuna` is a TPE study (optuna.samplers.TPESampler, seeded by the arm's seed); `optuna-cmaes`
is CMA-ES over the numeric knobs (TPE for any categorical one, as agent/proposers/offline.py does).
Each trial is one full-budget evaluation (R steps + the cool-down branch), exactly what a random
search candidate costs, dispatched through search/hyperband.run_schedule on the same
pool with the same budget rule (a run starts only if it fits), so at equal budgets the Optuna
arms and random search run the same number of configurations and spend the same steps; the only
difference is who picks them. Ask/tell: a configuration is asked when a worker frees up, and
its val_bpb (a crash: a failed trial) is told when it finishes; with two workers in flight
TPE's constant liar keeps the two asks apart.

Common random numbers: the first STARTUP trials are the seed's random stream (the very
configurations the random arm starts with, enqueued into the study), so the arms differ only
from the first model-based ask on.

The hybrid arm (search/hybrid.py) uses the same study with one more, categorical
parameter: which code idea (or none) the candidate's train.py carries.
"""
from __future__ import annotations

import json
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from search import knobs
from search.hyperband import Bracket, Candidate, Rung, run_schedule
from search.space import Space, config_id

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

# Arm name -> sampler.
ARM_SAMPLERS = {"optuna": "tpe", "optuna-cmaes": "cmaes"}
# Random trials before the model takes over. Optuna's default (10) is the whole quick budget
# (113 steps = 10 full evaluations), which would make TPE random search; 4 leaves 6 model-based
# asks there while still giving the model a spread of points to start from.
STARTUP = 4
# The parameter that names the hybrid's code idea ("none" = train.py as is).
IDEA_PARAM = "IDEA"


def distributions(space: Space) -> dict:
    """Optuna distributions for the space's specs (log knobs on a log scale, as space.Spec samples)."""
    out = {}
    for name, s in space.specs.items():
        if s.kind == "log":
            out[name] = FloatDistribution(float(s.low), float(s.high), log=True)
        elif s.kind == "lin":
            out[name] = FloatDistribution(float(s.low), float(s.high))
        elif s.kind == "int":
            out[name] = IntDistribution(int(s.low), int(s.high))
        else:
            out[name] = CategoricalDistribution(list(s.choices))
    return out


def make_sampler(kind: str, seed: int, startup: int = STARTUP):
    tpe = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)
    if kind == "tpe":
        return tpe
    if kind == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=startup, independent_sampler=tpe,
                                            warn_independent_sampling=False)
    raise ValueError(f"sampler must be tpe or cmaes, got {kind!r}")


@dataclass
class KnobSampler:
    """An in-memory Optuna study over a Space (plus optional extra categorical parameters)."""
    space: Space
    seed: int
    kind: str = "tpe"
    startup: int = STARTUP
    extra: dict = field(default_factory=dict)      # name -> list of choices (the hybrid's IDEA)

    def __post_init__(self):
        self.dists = distributions(self.space)
        self.dists.update({k: CategoricalDistribution(list(v)) for k, v in self.extra.items()})
        self.study = optuna.create_study(direction="minimize",
                                         sampler=make_sampler(self.kind, self.seed, self.startup))
        rng = np.random.default_rng(self.seed)     # the random arm's stream (common random numbers)
        for i in range(self.startup):
            params = self.space.sample(rng)
            params.update({k: v[i % len(v)] for k, v in self.extra.items()})   # every choice early
            self.study.enqueue_trial(params)

    def ask(self) -> tuple[optuna.trial.Trial, dict]:
        trial = self.study.ask(self.dists)
        config = {n: knobs.normalize(v) if isinstance(v, float) else v for n, v in trial.params.items()}
        return trial, config

    def tell(self, trial, val_bpb: float | None) -> None:
        if val_bpb is None:
            self.study.tell(trial, state=TrialState.FAIL)
        else:
            self.study.tell(trial, val_bpb)

    def summary(self) -> dict:
        done = [t for t in self.study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
        best = min(done, key=lambda t: t.value) if done else None
        return {"sampler": self.kind, "startup": self.startup, "trials": len(self.study.trials),
                "complete": len(done), "best": None if best is None else
                {"number": best.number, "value": best.value, "params": best.params}}


def run_optuna_arm(source: str, space: Space, pool, out: Path, *, seed: int, max_steps: int,
                   decay_steps: int, budget_steps: int, sampler: str = "tpe",
                   extra: dict | None = None, source_for: Callable[[dict], str] | None = None,
                   log=print, **_ignored) -> tuple[list[dict], dict]:
    """Run one Optuna arm; returns (records in dispatch order, the study's summary).

    `extra` adds categorical parameters to the study; `source_for(config)` then builds the
    candidate's train.py before the space's knobs are written in (the hybrid's code ideas).
    Records are run_schedule records with the config (extra parameters included) and `trial`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cand_dir, ckpt_dir = out / "candidates", out / "ckpt"
    cand_dir.mkdir(parents=True, exist_ok=True)
    ks = KnobSampler(space, seed, sampler, extra=extra or {})
    trials: dict[int, optuna.trial.Trial] = {}            # bracket index -> its one trial
    numbers: dict[int, int] = {}                           # bracket index -> trial number
    plan = [Bracket(0, (Rung(1, max_steps),))]             # random search's shape: one full run
    journal = open(out / "sweep.jsonl", "a")

    def make_candidates(index: int, bracket: Bracket) -> list[Candidate]:
        trial, config = ks.ask()
        trials[index], numbers[index] = trial, trial.number
        base = source_for(config) if source_for else source
        path = cand_dir / f"cand_{config_id(config)}.py"
        path.write_text(space.apply(base, config))
        log(f"trial {trial.number}: " + ", ".join(f"{k}={v}" for k, v in config.items()))
        return [Candidate(config_id(config), config, path)]

    def on_result(res, cum_steps: int) -> None:
        t = res.task
        trial = trials.pop(t.bracket)
        ks.tell(trial, res.val_bpb)
        rec = {"kind": "optuna_arm_task", "task": t.id, "cand": t.cand, "trial": trial.number,
               "steps": t.steps, "cost": t.cost, "cum_steps": cum_steps, "val_bpb": res.val_bpb,
               "config": t.meta.get("config"), "error": res.error, "wall": round(res.wall, 3),
               "at": time.time()}
        journal.write(json.dumps(rec) + "\n")
        journal.flush()
        shown = f"{res.val_bpb:.4f}" if res.val_bpb is not None else f"crash ({res.error})"
        log(f"  {t.id} (trial {trial.number}): {t.steps} steps (+{t.cost}) -> {shown}")

    try:
        records = run_schedule(pool, plan, make_candidates, repeat=True, decay_steps=decay_steps,
                               ckpt_dir=ckpt_dir, seed=seed, promotion=True, budget_steps=budget_steps,
                               overlap=True, on_result=on_result)
    finally:
        journal.close()
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    for r in records:
        r["trial"] = numbers[r["bracket"]]
    return records, ks.summary()
