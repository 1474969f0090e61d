"""A cheap surrogate prior over train.py's knobs: a small Gaussian process, ranked by LCB.

Before any step is spent, candidates sampled from the space are ranked by a lower confidence
bound on their predicted val_bpb at the full step budget (lower is better), so Hyperband's
brackets start from the promising region instead of uniformly at random.

Features are the space's [0, 1]-scaled knobs (log-scaled where the knob is) plus the log of the
step count the result was measured at, so the GP learns from every evaluated candidate at every
rung, not only from winners: a rung-1 result is a (noisier, shifted) view of the same surface.
Crashes are learned too, as a value worse than anything seen, so the prior steers away from them.

Observations persist as JSON (`--warm-prior FILE`), tagged with the data fingerprint and profile;
a later run loads only observations made under the same settings.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import numpy as np

# Exploration weight of the LCB: mu - KAPPA * sigma (in standardized units).
KAPPA = 1.0
# Candidate length scales for the RBF kernel (features live in [0, 1]); picked by marginal likelihood.
LENGTHSCALES = (0.15, 0.3, 0.6, 1.2)
# Observation noise variance on the standardized scale (runs are near-deterministic; rungs are not).
NOISE = 0.05
# A crash is recorded as worst-seen + CRASH_MARGIN * std, so the prior avoids crashing regions.
CRASH_MARGIN = 1.0
# Store format version, bumped when the JSON layout changes.
STORE_VERSION = 1


class CheapPrior:
    def __init__(self, space, max_steps: int, *, kappa: float = KAPPA, fingerprint: str = "",
                 profile: str = ""):
        self.space, self.max_steps, self.kappa = space, max_steps, kappa
        self.fingerprint, self.profile = fingerprint, profile
        self.obs: list[dict] = []            # {"config", "steps", "val_bpb" (None = crash)}
        self._fit = None

    # ---- data ----
    def observe(self, config: dict, steps: int, val_bpb: float | None) -> None:
        if val_bpb is not None and not math.isfinite(val_bpb):
            val_bpb = None
        self.obs.append({"config": dict(config), "steps": int(steps), "val_bpb": val_bpb})
        self._fit = None

    def _x(self, config: dict, steps: int) -> np.ndarray:
        s = math.log(max(steps, 1)) / math.log(max(self.max_steps, 2))
        return np.append(self.space.features(config), s)

    def _xy(self) -> tuple[np.ndarray, np.ndarray]:
        good = [o["val_bpb"] for o in self.obs if o["val_bpb"] is not None]
        if not good:
            return np.zeros((0, len(self.space.names) + 1)), np.zeros(0)
        worst = max(good) + CRASH_MARGIN * (float(np.std(good)) if len(good) > 1 else 0.1)
        X = np.array([self._x(o["config"], o["steps"]) for o in self.obs])
        y = np.array([worst if o["val_bpb"] is None else o["val_bpb"] for o in self.obs])
        return X, y

    # ---- the GP ----
    def fit(self):
        X, y = self._xy()
        if len(y) == 0:
            self._fit = None
            return None
        mu, sd = float(y.mean()), float(y.std()) or 1.0
        z = (y - mu) / sd
        best = None
        for ls in LENGTHSCALES:                    # pick the length scale by marginal likelihood
            K = _rbf(X, X, ls) + NOISE * np.eye(len(z))
            try:
                L = np.linalg.cholesky(K)
            except np.linalg.LinAlgError:
                continue
            alpha = np.linalg.solve(L.T, np.linalg.solve(L, z))
            nll = 0.5 * z @ alpha + np.log(np.diag(L)).sum()
            if best is None or nll < best[0]:
                best = (nll, ls, L, alpha)
        if best is None:
            return None
        self._fit = {"X": X, "mu": mu, "sd": sd, "ls": best[1], "L": best[2], "alpha": best[3]}
        return self._fit

    def predict(self, configs: list[dict], steps: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and std of val_bpb (original units) at `steps` (default: the full budget)."""
        steps = self.max_steps if steps is None else steps
        fit = self._fit or self.fit()
        if fit is None:
            return np.zeros(len(configs)), np.ones(len(configs))
        Xs = np.array([self._x(c, steps) for c in configs])
        Ks = _rbf(Xs, fit["X"], fit["ls"])
        mean = Ks @ fit["alpha"]
        v = np.linalg.solve(fit["L"], Ks.T)
        var = np.clip(1.0 - (v * v).sum(0), 1e-12, None)
        return fit["mu"] + fit["sd"] * mean, fit["sd"] * np.sqrt(var)

    def lcb(self, configs: list[dict], steps: int | None = None) -> np.ndarray:
        mean, std = self.predict(configs, steps)
        return mean - self.kappa * std

    def select(self, pool: list[dict], n: int) -> list[int]:
        """Indices of n pool members by LCB, greedily, with a 'believer' update after each pick.

        After picking a point we pretend we observed its predicted mean, which shrinks the
        uncertainty around it, so the next pick is not its near-duplicate.
        """
        if not self.obs:
            return list(range(min(n, len(pool))))   # nothing learned yet: keep sampling order
        chosen: list[int] = []
        saved, fit = list(self.obs), self._fit
        try:
            for _ in range(min(n, len(pool))):
                scores = self.lcb(pool)
                for i in chosen:
                    scores[i] = np.inf
                pick = int(np.argmin(scores))
                chosen.append(pick)
                mean, _ = self.predict([pool[pick]])
                self.obs.append({"config": pool[pick], "steps": self.max_steps,
                                 "val_bpb": float(mean[0])})
                self._fit = None
        finally:
            self.obs, self._fit = saved, fit
        return chosen

    # ---- the store ----
    def save(self, path: Path) -> None:
        """Merge our observations into the store at `path` (atomic rewrite)."""
        path = Path(path)
        store = _read_store(path)
        store["observations"].extend(
            dict(o, fingerprint=self.fingerprint, profile=self.profile) for o in self.obs
            if not o.get("warm"))
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(store, f)
        os.replace(tmp, path)

    def warm_start(self, path: Path) -> int:
        """Load observations made under the same data fingerprint and profile; returns how many."""
        store = _read_store(Path(path))
        n = 0
        for o in store["observations"]:
            if o.get("fingerprint") != self.fingerprint or o.get("profile") != self.profile:
                continue
            if not set(self.space.names) <= set(o.get("config", {})):
                continue                               # a different search space: not comparable
            self.obs.append({"config": o["config"], "steps": int(o["steps"]),
                             "val_bpb": o.get("val_bpb"), "warm": True})
            n += 1
        self._fit = None
        return n


def _rbf(A: np.ndarray, B: np.ndarray, ls: float) -> np.ndarray:
    d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return np.exp(-0.5 * d2 / ls ** 2)


def _read_store(path: Path) -> dict:
    if not path.exists():
        return {"version": STORE_VERSION, "observations": []}
    try:
        store = json.loads(path.read_text())
        if not isinstance(store.get("observations"), list):
            raise ValueError("no 'observations' list")
        return store
    except (ValueError, AttributeError) as e:
        raise ValueError(f"prior store {path} is not a valid store ({e}); "
                         f"move it aside or pass another --warm-prior file") from e
