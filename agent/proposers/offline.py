"""The offline proposer: a local search over train.py's knob block, informed by the history.

No LLM: it reads the CAPS knobs (harness/knobs.py), builds one-knob moves from the parent (the
best kept commit), scores them with what the history says (a direction that helped gets pushed
further, one that hurt is avoided and its opposite tried), never proposes a configuration that
was already tried, and writes an honest one-line description and hypothesis. The choice is
deterministic for a given --seed and history.
"""
from __future__ import annotations

import itertools
import math
import random
import re

from agent.proposers.base import Proposal, ProposalError, ProposalRequest
from harness import knobs

# Knob names we never touch: the seed (fishing in noise), what counts as training time or as a
# divergence (moving those games the metric), and runtime plumbing (kernels, threads, compile,
# the gpu profile's scaling, which only repeats what the size knobs already explore).
FROZEN_RE = re.compile(r"SEED|EVAL|TIME_BUDGET|STARTUP_STEPS|EXPLODE|FA3_|KERNEL|THREADS|COMPILE|"
                       r"^GPU_|LOG_EVERY|PRINT")
# Multiplicative step for floats (learning rates, weight decay...): half an octave.
FLOAT_STEP = math.sqrt(2.0)
# Relative step for ints that are not powers of two (widths, aspect ratios).
INT_STEP = 0.25
# A float knob at 0 (no warmup, no weight decay) is moved to this value.
ZERO_START = 0.05
# Scores: a direction that improved is pushed further; untried knobs are worth exploring.
GAIN_WEIGHT = 50.0          # per unit of val_bpb improvement
UNTRIED_BONUS = 0.3
WORSE_PENALTY = 0.5         # per discarded move in this direction
CRASH_PENALTY = 1.0         # per crashed move in this direction
OPPOSITE_BONUS = 0.25       # per failed move in the other direction
NOISE = 0.2                 # seeded tie-breaking jitter
# Random multi-knob draws tried when every one- and two-knob move has been tried.
RANDOM_DRAWS = 500


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def neighbors(name: str, value, comment: str = "") -> list:
    """The values one step away from `value` for this knob ([] for knobs we don't move)."""
    if FROZEN_RE.search(name):
        return []
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        if value <= 0:
            return []
        if value >= 16 and _is_pow2(value):
            return [value // 2, value * 2]
        if value >= 16:
            q = 8 if value % 8 == 0 else 1
            lo = max(q, round(value * (1 - INT_STEP) / q) * q)
            hi = round(value * (1 + INT_STEP) / q) * q
            return sorted({lo, hi} - {value})
        return [v for v in (value - 1, value + 1) if v >= 1]
    if isinstance(value, float):
        if re.search(r"BETA|MOMENTUM", name) and 0 < value < 1:
            # decay rates live near 1: step the distance to 1, not the value
            return [knobs.normalize(1 - (1 - value) * 2), knobs.normalize(1 - (1 - value) / 2)]
        if value == 0.0:
            return [ZERO_START]
        out = [value / FLOAT_STEP, value * FLOAT_STEP]
        if re.search(r"RATIO|FRAC|DROPOUT|PROB", name) and 0 < value <= 1:
            out = [min(v, 1.0) for v in out]
        return [knobs.normalize(v) for v in out if knobs.normalize(v) != value]
    if isinstance(value, str):
        options = re.search(r"([\w\-]+(?:\s*\|\s*[\w\-]+)+)", comment or "")
        if options:
            return [o.strip() for o in options.group(1).split("|") if o.strip() != value]
        letters = sorted(set(value))
        if value.isalpha() and value.isupper() and 1 < len(letters) <= 3 and len(value) <= 12:
            # a layer pattern like "SSSL": try it all-one-kind, and the last layer flipped
            out = {c * len(value) for c in letters}
            for c in letters:
                out.add(value[:-1] + c)
            return sorted(out - {value})
    return []


def _direction(old, new) -> str:
    if isinstance(old, (int, float)) and not isinstance(old, bool):
        return "up" if new > old else "down"
    return f"={new}"


def _key(code: str, config: dict) -> tuple:
    return (code, tuple(sorted((k, repr(v)) for k, v in config.items())))


def learn(history: list[dict]) -> dict:
    """Per (knob, direction): improvements (positive = better), discards and crashes seen."""
    by_commit = {r.get("commit"): r for r in history if r.get("commit")}
    stats: dict[tuple, dict] = {}
    for rec in history:
        parent = by_commit.get(rec.get("parent"))
        if not parent or "config" not in rec or "config" not in parent or rec is parent:
            continue
        pbpb = (parent.get("summary") or {}).get("val_bpb")
        bpb = (rec.get("summary") or {}).get("val_bpb")
        for name, new in rec["config"].items():
            old = parent["config"].get(name)
            if old is None or old == new:
                continue
            s = stats.setdefault((name, _direction(old, new)),
                                 {"gains": [], "worse": 0, "crash": 0, "n": []})
            s["n"].append(rec.get("n"))
            status = rec.get("status")
            if status == "crash":
                s["crash"] += 1
            elif isinstance(bpb, (int, float)) and isinstance(pbpb, (int, float)):
                s["gains"].append(pbpb - bpb)
                if status != "keep":
                    s["worse"] += 1
    return stats


class OfflineProposer:
    name = "offline"
    cheap_redo = True   # re-proposing costs milliseconds, so a stale prefetch is redone, not rebased

    def propose(self, req: ProposalRequest) -> Proposal:
        if req.fix_of is not None:
            raise ProposalError("the offline proposer does not repair crashed code; "
                                "recording the crash and moving on")
        current = knobs.read_knobs(req.train_source)
        if not current:
            raise ProposalError("train.py has no CAPS knob lines (NAME = literal  # comment) to search")
        base = {k.name: k.value for k in current.values()}
        code = knobs.code_fingerprint(req.train_source)
        tried = {_key(r["code"], r["config"]) for r in req.history
                 if isinstance(r.get("config"), dict) and r.get("code")}
        tried.add(_key(code, base))
        stats = learn(req.history)
        rng = random.Random(f"offline:{req.seed}:{req.n}")

        moves = []   # (score, name, new, why)
        for name, k in current.items():
            for new in neighbors(name, k.value, k.comment):
                score, why = self._score(name, _direction(k.value, new), stats)
                moves.append((score + NOISE * rng.random(), name, new, why))
        moves.sort(key=lambda m: -m[0])

        for score, name, new, why in moves:
            cfg = dict(base, **{name: new})
            if _key(code, cfg) not in tried:
                return self._make(req, {name: new}, base, why)
        for (s1, n1, v1, w1), (s2, n2, v2, w2) in itertools.combinations(moves, 2):
            if n1 == n2:
                continue
            cfg = dict(base, **{n1: v1, n2: v2})
            if _key(code, cfg) not in tried:
                return self._make(req, {n1: v1, n2: v2}, base,
                                  f"every one-knob move from here was tried; combining ({w1}; {w2})")
        for _ in range(RANDOM_DRAWS):
            names = rng.sample(sorted({m[1] for m in moves}), k=min(3, len({m[1] for m in moves})))
            change = {}
            for name in names:
                opts = neighbors(name, base[name], current[name].comment)
                change[name] = opts[rng.randrange(len(opts))]
            cfg = dict(base, **change)
            if _key(code, cfg) not in tried:
                return self._make(req, change, base, "all one- and two-knob moves tried; random "
                                                     "three-knob jump to escape the neighbourhood")
        raise ProposalError("the offline search found no untried configuration near the best")

    @staticmethod
    def _score(name: str, direction: str, stats: dict) -> tuple[float, str]:
        same = stats.get((name, direction))
        opposite_dir = {"up": "down", "down": "up"}.get(direction)
        opp = stats.get((name, opposite_dir)) if opposite_dir else None
        if same is None and opp is None:
            return UNTRIED_BONUS, f"{name} not yet explored"
        score, why = 0.0, []
        if same:
            best_gain = max(same["gains"], default=0.0)
            score += GAIN_WEIGHT * max(best_gain, 0.0)
            score -= WORSE_PENALTY * same["worse"] + CRASH_PENALTY * same["crash"]
            if best_gain > 0:
                why.append(f"moving {name} {direction} lowered val_bpb by {best_gain:.4f} before "
                           f"(exp {same['n'][-1]}), so push further")
            elif same["crash"]:
                why.append(f"moving {name} {direction} crashed before")
            else:
                why.append(f"moving {name} {direction} did not help before")
        if opp:
            failed = opp["worse"] + opp["crash"]
            score += OPPOSITE_BONUS * failed
            if failed:
                why.append(f"the other direction was worse (exp {opp['n'][-1]}), so try this one")
        return score, "; ".join(why) or f"{name} {direction}"

    @staticmethod
    def _make(req: ProposalRequest, change: dict, base: dict, why: str) -> Proposal:
        source = knobs.set_knobs(req.train_source, change)
        parts = [f"{name} {knobs.format_literal(base[name])} -> {knobs.format_literal(new)}"
                 for name, new in change.items()]
        description = "offline search: " + ", ".join(parts)
        hypothesis = (f"{why}. A local step in the knob block from the best commit; if val_bpb "
                      f"drops the search continues from there.")
        return Proposal(description=description, hypothesis=hypothesis, source=source,
                        proposer="offline", model=None,
                        notes=f"changed: {', '.join(change)}; seed {req.seed}")
