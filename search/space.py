"""The search space over train.py's knobs: ranges, sampling, [0, 1] features, and writing a config.

A candidate is a dict {KNOB: value} over some of train.py's CAPS constants (search/knobs.py
reads and rewrites them). Learning rates and other scale-like knobs are searched on a log scale,
so "twice as large" is the same distance everywhere; the prior sees the same log-scaled features.

The default space holds optimization knobs plus depth. Batch-size knobs are left out on purpose:
the resource is optimizer steps, and a knob that changes the tokens per step would make a step
budget mean different compute for different candidates.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from search import knobs

# The curated ranges (kind, low, high) live with the knobs (search/knobs.py DEFAULT_SPECS): the
# loop's offline proposer reads them without this package.
DEFAULT_SPECS = knobs.DEFAULT_SPECS

# A model small enough for tests, `bench` and quick arms on CPU (seconds per run, not minutes):
# applied to train.py as the base before a candidate's knobs. ~0.2M parameters, 256 tokens/step.
SMALL_BASE = {"DEPTH": 2, "ASPECT_RATIO": 32, "DEVICE_BATCH_SIZE": 4, "TOTAL_BATCH_SIZE": 256}


@dataclass(frozen=True)
class Spec:
    name: str
    kind: str
    low: float = 0.0
    high: float = 1.0
    choices: tuple = ()

    def sample(self, rng: np.random.Generator):
        u = float(rng.random())
        if self.kind == "log":
            return knobs.normalize(math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low))))
        if self.kind == "lin":
            return knobs.normalize(self.low + u * (self.high - self.low))
        if self.kind == "int":
            return int(self.low + math.floor(u * (self.high - self.low + 1)))
        return self.choices[int(math.floor(u * len(self.choices)))]

    def feature(self, value) -> float:
        """The value's position in the range, in [0, 1] (log position for log knobs)."""
        if self.kind == "choice":
            return self.choices.index(value) / max(1, len(self.choices) - 1) if value in self.choices else 0.5
        lo, hi, v = float(self.low), float(self.high), float(value)
        if self.kind == "log":
            lo, hi, v = math.log(lo), math.log(hi), math.log(max(v, 1e-30))
        return min(1.0, max(0.0, (v - lo) / (hi - lo))) if hi > lo else 0.5


def around(spec: tuple, value) -> tuple:
    """The spec itself when the committed value lies inside its range; else a range of the same
    width (a log range: the same ratio) centred on the value, so the search brackets what the
    file runs (the gpu profile's DEPTH 8 lies above the cpu-sized DEFAULT_SPECS range)."""
    kind = spec[0]
    if kind == "choice" or isinstance(value, bool) or not isinstance(value, (int, float)):
        return spec
    lo, hi = spec[1], spec[2]
    if lo <= value <= hi:
        return spec
    if kind == "log" and value > 0:
        r = math.sqrt(hi / lo)
        return (kind, knobs.normalize(value / r), knobs.normalize(value * r))
    if kind == "int":
        half = (hi - lo) // 2
        return (kind, max(1, value - half), value + half)
    half = (hi - lo) / 2
    return (kind, knobs.normalize(max(0.0, value - half) if lo >= 0 else value - half), knobs.normalize(value + half))


class Space:
    def __init__(self, specs: dict[str, tuple]):
        self.specs = {}
        for name, spec in specs.items():
            kind = spec[0]
            if kind == "choice":
                self.specs[name] = Spec(name, kind, choices=tuple(spec[1]))
            elif kind in ("log", "lin", "int"):
                if kind == "log" and spec[1] <= 0:
                    raise ValueError(f"{name}: a log range needs low > 0")
                self.specs[name] = Spec(name, kind, spec[1], spec[2])
            else:
                raise ValueError(f"{name}: unknown kind {kind!r} (log, lin, int, choice)")
        self.names = list(self.specs)

    @classmethod
    def for_source(cls, source: str, specs: dict | None = None, only: list[str] | None = None) -> "Space":
        """The space restricted to knobs this train.py actually has (with matching types)."""
        specs = DEFAULT_SPECS if specs is None else specs
        have = knobs.values(source)
        picked = {}
        for name, spec in specs.items():
            if only and name not in only:
                continue
            if name not in have:
                continue                                   # an edited train.py may drop a knob
            want_int = spec[0] == "int"
            if want_int != (type(have[name]) is int) and spec[0] != "choice":
                continue
            picked[name] = around(spec, have[name])
        if only:
            unknown = [n for n in only if n not in picked]
            if unknown:
                raise ValueError(f"knobs not searchable in this train.py: {', '.join(unknown)} "
                                 f"(searchable: {', '.join(n for n in specs if n in have)})")
        if not picked:
            raise ValueError("none of the search space's knobs are in this train.py")
        return cls(picked)

    def sample(self, rng: np.random.Generator) -> dict:
        return {n: s.sample(rng) for n, s in self.specs.items()}

    def features(self, config: dict) -> np.ndarray:
        return np.array([self.specs[n].feature(config[n]) for n in self.names], dtype=float)

    def apply(self, source: str, config: dict) -> str:
        return knobs.set_knobs(source, {n: config[n] for n in self.names if n in config})

    def to_json(self) -> dict:
        return {n: ([s.kind, list(s.choices)] if s.kind == "choice" else [s.kind, s.low, s.high])
                for n, s in self.specs.items()}


def config_id(config: dict) -> str:
    """A short stable id for a config (same knobs -> same id, across runs)."""
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha1(blob).hexdigest()[:8]


def write_candidate(base_source: str, space: Space, config: dict, folder: Path) -> Path:
    """Write train.py with `config` applied to folder/<id>.py and return the path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"cand_{config_id(config)}.py"
    path.write_text(space.apply(base_source, config))
    return path
