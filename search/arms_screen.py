"""The screen arm: does screening K candidates before the full run pay, at the same step budget?

This is `agent/loop.py --screen K` transplanted into the arms, where it can be measured: each
round draws K candidates from the seed's stream (the random arm's stream, so round 1 sees random
search's first K configurations), runs search/halving.py's successive halving over them (K at r
steps, floor(K/eta) at eta*r, ... down to one, each evaluation a pre-decay checkpoint plus the
same short cool-down branch as every other arm), and then trains the screen's winner on, from
its pre-decay checkpoint, to the full R steps. As in the loop, only the full run's result is
recorded as the arm's quality; the screen's evaluations cost steps but never count as results.
Every step (screen + full run, cool-down branches included) is charged to the arm's budget.

A round is one Hyperband-style bracket, rungs = screen_bracket(K, r, eta) + (1 x R), run through
search/hyperband.run_schedule like every other arm (same pool, overlap, promotion, budget rule:
a round starts only if its whole cost fits).
"""
from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import numpy as np

from search.hyperband import Bracket, Candidate, Rung, bracket_cost, run_schedule
from search.halving import ETA as SCREEN_ETA, screen_bracket
from search.space import Space, config_id, write_candidate

# Candidates per screen round (the loop's --screen K); --screen-k overrides it.
SCREEN_K = 3
# Arm names: "screen" (K = the default or --screen-k) or "screen-K".
ARM_RE = re.compile(r"^screen(?:-(\d+))?$")


def screen_k(arm: str, default_k: int = SCREEN_K) -> int | None:
    """K of a screen arm name ("screen" -> default_k, "screen-5" -> 5); None for other arms."""
    m = ARM_RE.match(arm)
    if not m:
        return None
    return int(m.group(1)) if m.group(1) else default_k


def round_bracket(k: int, min_steps: int, max_steps: int, eta: int = SCREEN_ETA) -> Bracket:
    """One round: the screen's rungs, then the winner's full run to max_steps."""
    if k < 2:
        raise ValueError(f"a screen needs K >= 2 candidates, got {k}")
    screen = screen_bracket(k, min_steps, eta)
    if screen.rungs[-1].steps >= max_steps:
        raise ValueError(f"the screen's last rung ({screen.rungs[-1].steps} steps) must be shorter "
                         f"than the full run ({max_steps}); lower --min-steps or raise --max-steps")
    return Bracket(len(screen.rungs), screen.rungs + (Rung(1, max_steps),))


def describe(bracket: Bracket) -> str:
    rungs = bracket.rungs
    return " ".join(f"{r.n}x{r.steps}" for r in rungs[:-1]) + f" -> full run 1x{rungs[-1].steps}"


def run_screen_arm(source: str, space: Space, pool, out: Path, *, seed: int, k: int,
                   max_steps: int, min_steps: int, eta: int, decay_steps: int, budget_steps: int,
                   log=print) -> tuple[list[dict], dict]:
    """Run the screen arm; returns (records in dispatch order, accounting summary).

    Each record is a run_schedule record plus `screen` (True for a screen evaluation) and
    `counts` (True only for a full run: what the arm's quality curve is made of).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cand_dir, ckpt_dir = out / "candidates", out / "ckpt"
    plan = round_bracket(k, min_steps, max_steps, eta)
    full_rung = len(plan.rungs) - 1
    rng = np.random.default_rng(seed)               # the same stream run_sweep's random arm draws
    journal = open(out / "sweep.jsonl", "a")

    def make_candidates(index: int, bracket: Bracket) -> list[Candidate]:
        cands, seen = [], set()
        for _ in range(k):
            cfg = space.sample(rng)
            cid = config_id(cfg)
            while cid in seen:                       # as run_sweep: no twin inside a round
                cfg = space.sample(rng)
                cid = config_id(cfg)
            seen.add(cid)
            cands.append(Candidate(cid, cfg, write_candidate(source, space, cfg, cand_dir)))
        log(f"round {index}: {k} candidates, {describe(bracket)}")
        return cands

    def on_result(res, cum_steps: int) -> None:
        t = res.task
        rec = {"kind": "screen_arm_task", "task": t.id, "cand": t.cand, "bracket": t.bracket,
               "rung": t.rung, "steps": t.steps, "cost": t.cost, "cum_steps": cum_steps,
               "val_bpb": res.val_bpb, "screen": t.rung < full_rung, "error": res.error,
               "wall": round(res.wall, 3), "at": time.time()}
        journal.write(json.dumps(rec) + "\n")
        journal.flush()
        shown = f"{res.val_bpb:.4f}" if res.val_bpb is not None else f"crash ({res.error})"
        what = "screen" if t.rung < full_rung else "full run"
        log(f"  {t.id}: {what} {t.steps} steps (+{t.cost}) -> {shown}")

    try:
        records = run_schedule(pool, [plan], make_candidates, repeat=True, decay_steps=decay_steps,
                               ckpt_dir=ckpt_dir, seed=seed, promotion=True,
                               budget_steps=budget_steps, overlap=True, on_result=on_result)
    finally:
        journal.close()
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    for r in records:
        r["screen"] = r["rung"] < full_rung
        r["counts"] = not r["screen"]
    return records, accounting(records, plan, decay_steps)


def accounting(records: list[dict], plan: Bracket, decay_steps: int) -> dict:
    """Where the arm's steps went: screen evaluations vs the winners' full runs."""
    screen_steps = sum(r["cost"] for r in records if r["screen"])
    full_steps = sum(r["cost"] for r in records if not r["screen"])
    rounds = len({r["bracket"] for r in records})
    full_runs = [r for r in records if not r["screen"]]
    return {"rounds": rounds, "full_runs": len(full_runs),
            "candidates_screened": sum(1 for r in records if r["rung"] == 0),
            "screen_steps": screen_steps, "full_steps": full_steps,
            "total_steps": screen_steps + full_steps,
            "round_cost": bracket_cost(plan, decay_steps), "shape": describe(plan)}


def pick_fidelity(screen_records: list[dict], full_records: list[dict]) -> dict:
    """How often the screen picked the candidate a full run would have picked.

    The random arm draws from the same stream, so for rounds whose K candidates it also trained
    in full, we know each one's full-budget val_bpb: a round is a hit when the screen's winner
    is the best of them, and `regret` is how much worse the pick was than that best."""
    full_val = {r["cand"]: r["val_bpb"] for r in full_records if r.get("val_bpb") is not None}
    rounds: dict[int, dict] = {}
    for r in screen_records:
        rd = rounds.setdefault(r["bracket"], {"cands": [], "winner": None})
        if r["rung"] == 0:
            rd["cands"].append(r["cand"])
        if r.get("counts"):
            rd["winner"] = r["cand"]
    checked = []
    for b, rd in sorted(rounds.items()):
        if rd["winner"] is None or not rd["cands"] or not all(c in full_val for c in rd["cands"]):
            continue
        best = min(full_val[c] for c in rd["cands"])
        checked.append({"round": b, "hit": full_val[rd["winner"]] == best,
                        "regret": round(full_val[rd["winner"]] - best, 6)})
    return {"rounds_checked": len(checked), "hits": sum(c["hit"] for c in checked),
            "mean_regret": round(sum(c["regret"] for c in checked) / len(checked), 6) if checked else None,
            "rounds": checked}
