"""The knob space the offline searches move in: which CAPS knobs of train.py may move and over
what range, fixed when a tag's first proposal is made and kept in the run folder (SPACE_FILE), so
`--resume` or a new process searches the same space. Plain JSON: the step search (local.py) reads
it without loading Optuna, which only the samplers (offline.py) need.

A range is JSON: ["log"|"lin", lo, hi], ["int", lo, hi, step], ["choice", [values]].
"""
from __future__ import annotations

import json
import math
import re
import sqlite3
from pathlib import Path

from agent.proposers.base import ProposalError
from runfiles.state import write_json_atomic
from search import knobs

# Knob names we never touch: the seed (fishing in noise), what counts as training time or as a
# divergence (moving those games the metric), and runtime plumbing (kernels, threads, compile,
# precision on CPU, micro-batch size, the gpu profile's scaling) that does not change what is learnt.
FROZEN_RE = re.compile(r"SEED|EVAL|TIME_BUDGET|STARTUP_STEPS|EXPLODE|FA3_|KERNEL|THREADS|COMPILE|"
                       r"^GPU_|^CPU_|DEVICE_BATCH|HEAD_DIM|KV_HEAD|VE_GATE|LOG_EVERY|PRINT")
# Samplers the proposer can be built with: TPE (the default; learns from every trial, the journal's
# included), CMA-ES over the numeric knobs (TPE for the categorical ones; it models only the draws
# it made itself), and random (the baseline the tests compare against).
SAMPLERS = ("tpe", "cmaes", "random")
# Ranges derived from a baseline value (for knobs search/knobs.py does not list): a float scale
# is searched over [v / FLOAT_SPAN, v * FLOAT_SPAN] on a log scale; a decay rate near 1 over
# 1 - (1 - v) x [1/3, 3]; a fraction over [v / 3, min(1, 3 v)]; a float at 0 over [0, ZERO_SPAN].
FLOAT_SPAN = 4.0
ZERO_SPAN = 0.2
FRACTION_SPAN = 3.0
# Ints: powers of two >= 16 move by octaves (v/2, v, 2v); other ints >= 16 over [v/2, 2v] on a grid
# of 8 when v is a multiple of 8; small ints over v +/- SMALL_INT_SPAN (never below 1).
SMALL_INT_SPAN = 2
# The curated knobs whose range brackets the reference's value on every profile (train.py's own and
# runtime.PROFILE_KNOBS'): a start outside that range is searched over it and the start's own
# neighbourhood together, and the local search takes such a knob back to the range first. DEPTH
# is not one: it is a size, 8 on a GPU, outside the small models' 2-6, so its range follows it.
PRIOR_KNOBS = tuple(k for k in knobs.DEFAULT_SPECS if k != "DEPTH")

# The space's file, at the top of the run folder (git-ignored: agent/gitops.py RUN_FILES); a tag
# begun before it existed kept its space in the Optuna study (LEGACY_STUDY), read once from there.
SPACE_FILE = "knob_space.json"
LEGACY_STUDY = "optuna.sqlite"


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def neighbors(name: str, value, comment: str = "") -> list:
    """Values one step away from `value` (used for the choices of string knobs; [] = not moved)."""
    if FROZEN_RE.search(name):
        return []
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        if value <= 0:
            return []
        if value >= 16 and _is_pow2(value):
            return [value // 2, value * 2]
        return [v for v in (value - 1, value + 1) if v >= 1]
    if isinstance(value, float):
        if re.search(r"BETA|MOMENTUM", name) and 0 < value < 1:
            return [knobs.normalize(1 - (1 - value) * 2), knobs.normalize(1 - (1 - value) / 2)]
        if value == 0.0:
            return [ZERO_SPAN / 4]
        return [knobs.normalize(value / math.sqrt(2)), knobs.normalize(value * math.sqrt(2))]
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


def knob_spec(name: str, value, comment: str = "") -> list | None:
    """The search range of one knob, as JSON: ["log"|"lin", lo, hi], ["int", lo, hi, step],
    ["choice", [values]]; None for a knob the sampler leaves alone."""
    if FROZEN_RE.search(name):
        return None
    if isinstance(value, bool):
        return ["choice", [False, True]]
    if isinstance(value, str):
        others = neighbors(name, value, comment)
        return ["choice", [value, *others]] if others else None
    known = knobs.DEFAULT_SPECS.get(name)
    if known and (known[0] == "int") == (type(value) is int) and known[1] <= value <= known[2]:
        return [known[0], known[1], known[2]] + ([1] if known[0] == "int" else [])
    own = _around(name, value)
    if known and name in PRIOR_KNOBS and own and own[0] in ("log", "lin") and type(value) is not int:
        lo, hi = min(known[1], own[1]), max(known[2], own[2])
        if known[0] == "lin" or lo > 0:      # a start outside the curated range: both, so the
            return [known[0], lo, hi]        # search can reach the values known to train
    return own


def _around(name: str, value) -> list | None:
    """A range around a value that search/knobs.py has no range for (or lies outside)."""
    if isinstance(value, int):
        if value <= 0:
            return None
        if value >= 16 and _is_pow2(value):
            return ["choice", [value // 2, value, value * 2]]
        if value >= 16:
            q = 8 if value % 8 == 0 else 1
            return ["int", max(q, value // 2 // q * q), 2 * value, q]
        return ["int", max(1, value - SMALL_INT_SPAN), value + SMALL_INT_SPAN, 1]
    if isinstance(value, float):
        if value < 0 or not math.isfinite(value):
            return None
        if value == 0.0:
            return ["lin", 0.0, ZERO_SPAN]
        if re.search(r"BETA|MOMENTUM", name) and value < 1:
            gap = 1 - value
            return ["lin", max(0.0, 1 - gap * FRACTION_SPAN), 1 - gap / FRACTION_SPAN]
        if re.search(r"RATIO|FRAC|DROPOUT|PROB", name) and value <= 1:
            return ["lin", value / FRACTION_SPAN, min(1.0, value * FRACTION_SPAN)]
        return ["log", value / FLOAT_SPAN, value * FLOAT_SPAN]
    return None


def load(folder: Path) -> dict[str, list]:
    """The tag's stored space ({} before its first proposal)."""
    path = Path(folder) / SPACE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return _legacy(Path(folder) / LEGACY_STUDY)
    except (OSError, ValueError) as exc:
        raise ProposalError(f"{path} is unreadable ({exc}): remove it to search the space of the current "
                            "train.py") from exc
    if not isinstance(data, dict):
        raise ProposalError(f"{path} is not a JSON object: remove it to search the space of the current train.py")
    return data


def _legacy(study: Path) -> dict[str, list]:
    """The space an older tag stored in its Optuna study's attributes (read with sqlite3)."""
    if not study.is_file():
        return {}
    try:
        with sqlite3.connect(f"file:{study}?mode=ro", uri=True) as conn:
            row = conn.execute("SELECT value_json FROM study_user_attributes WHERE key = 'space'").fetchone()
    except sqlite3.Error:
        return {}
    space = json.loads(row[0]) if row else {}
    return space if isinstance(space, dict) else {}


def extend(folder: Path, source: str) -> dict[str, list]:
    """The tag's space, extended by any knob of `source` it does not have yet (a code edit may add
    one) and stored; only the knobs `source` has are returned."""
    stored = load(folder)
    current = knobs.read_knobs(source)
    added = False
    for name, k in current.items():
        if name not in stored:
            spec = knob_spec(name, k.value, k.comment)
            if spec is not None:
                stored[name], added = spec, True
    if added or not (Path(folder) / SPACE_FILE).exists():
        Path(folder).mkdir(parents=True, exist_ok=True)
        write_json_atomic(Path(folder) / SPACE_FILE, stored)
    return {n: s for n, s in stored.items() if n in current and s is not None}
