"""The offline proposer: an Optuna sampler (TPE) over train.py's knob block, seeded by the history.

No LLM. The CAPS knobs (search/knobs.py) form a search space, fixed when the study is created
(search/knobs.py's ranges where they apply, otherwise a range around the baseline value) and
stored with the study in the run folder (`optuna.sqlite`), so `--resume` or a new process goes on
with the same study. Before every proposal the study is brought up to date with the journal: every
finished experiment's knob values become a trial (trusted val_bpb as its value, a crash as a failed
trial), whoever proposed it, so the sampler learns from the Claude proposer's runs too. A sampled
configuration that was already tried (same code, same knob values) is refused and sampled again;
what is proposed is the parent train.py with the sampled knob values written in. The choice is
deterministic for a given --seed, experiment number and study.
"""
from __future__ import annotations

import errno
import hashlib
import math
from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState
import sqlalchemy.exc
from sqlalchemy import event

from agent.proposers import space as knob_space
from agent.proposers.base import Proposal, ProposalError, ProposalRequest
from agent.proposers.space import FROZEN_RE, SAMPLERS, knob_spec, neighbors  # noqa: F401  (re-exported)
from search import knobs
from harness.experiment_record import ExperimentRecord
from harness.results_table import MAX_DESCRIPTION

# The study's file, at the top of the run folder (git-ignored: agent/gitops.py RUN_FILES).
STUDY_FILE = "optuna.sqlite"
STUDY_NAME = "knobs"
# TPE's random start: fewer than Optuna's 10, because the journal usually seeds the study.
TPE_STARTUP = 8
# Samples drawn before giving up when every one repeats an experiment already tried.
MAX_ASKS = 30
optuna.logging.set_verbosity(optuna.logging.WARNING)


def distribution(spec: list):
    kind = spec[0]
    if kind == "choice":
        return CategoricalDistribution(spec[1])
    if kind == "int":
        return IntDistribution(int(spec[1]), int(spec[2]), step=int(spec[3]))
    return FloatDistribution(float(spec[1]), float(spec[2]), log=kind == "log")


def fit(dist, value):
    """`value` as a parameter of `dist` (clipped into a numeric range); None if it can't be one."""
    if isinstance(dist, CategoricalDistribution):
        return value if value in dist.choices else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    if isinstance(dist, IntDistribution):
        v = min(dist.high, max(dist.low, int(round(value))))
        return dist.low + (v - dist.low) // dist.step * dist.step
    return min(dist.high, max(dist.low, float(value)))


def measured_bpb(rec: ExperimentRecord) -> float | None:
    """The trusted val_bpb of a journal record (the summary's figure when no trusted one is stored)."""
    return rec.decision_bpb


def _key(code: str, config: dict) -> tuple:
    return (code, tuple(sorted((k, repr(v)) for k, v in config.items())))


def _matches(params: dict, config: dict) -> bool:
    return all(knobs.normalize(v) == config.get(k) for k, v in params.items())


def _storage(path: Path) -> optuna.storages.RDBStorage:
    """SQLite storage in WAL mode with synchronous=NORMAL: every commit survives a kill -9 of the
    loop (only a power cut can drop the last ones), without an fsync per suggested parameter."""
    storage = optuna.storages.RDBStorage(f"sqlite:///{path}")
    event.listen(storage.engine, "connect", _sqlite_pragmas)
    storage.engine.dispose()   # connections opened before the listener reconnect with the pragmas
    return storage


def _sqlite_pragmas(conn, _record) -> None:
    cur = conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _disk_full(exc: BaseException | None) -> bool:
    """SQLite's "database or disk is full" anywhere in the chain (Optuna wraps the driver's error)."""
    seen = 0
    while exc is not None and seen < 8:
        if "disk is full" in str(exc) or "No space left" in str(exc):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class KnobStudy:
    """The persisted Optuna study of one run folder, kept in step with the journal."""

    def __init__(self, folder: Path, sampler: str = "tpe", seed: int = 0):
        if sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
        self.path = Path(folder).resolve() / STUDY_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.kind = sampler
        self.storage = _storage(self.path)
        self.study = optuna.create_study(study_name=STUDY_NAME, storage=self.storage, direction="minimize",
                                         load_if_exists=True, sampler=self._sampler(seed))

    def _sampler(self, seed: int):
        tpe = optuna.samplers.TPESampler(seed=seed, n_startup_trials=TPE_STARTUP)
        if self.kind == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if self.kind == "cmaes":
            return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=TPE_STARTUP, independent_sampler=tpe,
                                                warn_independent_sampling=False)
        return tpe

    def reseed(self, seed: int) -> None:
        self.study.sampler = self._sampler(seed)

    def space(self, source: str) -> dict[str, list]:
        """The tag's knob space (agent/proposers/space.py), extended by the knobs of `source`."""
        return knob_space.extend(self.path.parent, source)

    def sync(self, history: list[ExperimentRecord], pending: list = ()) -> int:
        """Add every finished journal experiment not yet in the study; settle sampled trials whose
        experiment has finished (or was replaced); `pending`: the experiments in flight (InFlight).
        Returns how many trials were added or told."""
        dists = {n: distribution(s) for n, s in knob_space.load(self.path.parent).items() if s is not None}
        finished = {r.number: r for r in history if r.knob_values is not None and r.number is not None
                    and r.status in ("keep", "discard", "crash") and r.is_experiment}
        changed = 0
        covered = set()
        for t in self.study.get_trials(deepcopy=False):
            n = t.user_attrs.get("n", t.user_attrs.get("asked_for"))
            rec = finished.get(n)
            if t.state == TrialState.RUNNING:
                if rec is not None and _matches(t.params, rec.knob_values):
                    bpb = measured_bpb(rec)
                    if rec.status == "crash" or bpb is not None:
                        self.study.tell(t.number, bpb if rec.status != "crash" else None,
                                        state=TrialState.FAIL if rec.status == "crash" else TrialState.COMPLETE)
                        covered.add(n)
                    else:   # refused before it ran: nothing was measured
                        self.study.tell(t.number, state=TrialState.FAIL)
                    changed += 1
                elif not any(p.n == n and (p.knob_values is None   # in flight, config unknown
                                           or _matches(t.params, p.knob_values)) for p in pending):
                    self.study.tell(t.number, state=TrialState.FAIL)   # superseded by another proposal
                    changed += 1
            elif "n" in t.user_attrs or (rec is not None and _matches(t.params, rec.knob_values)
                                          and t.state in (TrialState.COMPLETE, TrialState.FAIL)):
                covered.add(n)
        for n, rec in sorted(finished.items()):
            if n in covered:
                continue
            bpb = measured_bpb(rec)
            crashed = rec.status == "crash"
            if bpb is None and not crashed:
                continue   # refused by the guard or measured nowhere: nothing to learn
            params = {k: fit(dists[k], v) for k, v in rec.knob_values.items() if k in dists}
            params = {k: v for k, v in params.items() if v is not None}
            trial = optuna.trial.create_trial(
                params=params, distributions={k: dists[k] for k in params},
                value=None if crashed else bpb, state=TrialState.FAIL if crashed else TrialState.COMPLETE,
                user_attrs={"n": n, "proposer": rec.proposer, "status": rec.status})
            self.study.add_trial(trial)
            changed += 1
        return changed


class OfflineProposer:
    name = "offline"
    cheap_redo = True   # re-proposing costs milliseconds, so a stale prefetch is redone, not rebased

    def __init__(self, sampler: str = "tpe"):
        if sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
        self.sampler = sampler
        self._studies: dict[Path, KnobStudy] = {}   # per run folder: one engine, not one per proposal

    def study(self, folder: Path) -> KnobStudy:
        folder = Path(folder).resolve()
        if folder not in self._studies:
            self._studies[folder] = KnobStudy(folder, self.sampler)
        return self._studies[folder]

    def propose(self, req: ProposalRequest) -> Proposal:
        try:
            return self._propose(req)
        except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as exc:
            if not _disk_full(exc):
                raise
            # the loop stops cleanly for space (agent/loop.py is_out_of_space) instead of retrying
            path = Path(req.worktree).resolve() / STUDY_FILE
            raise OSError(errno.ENOSPC, f"No space left on device for the sampler's study {path}", str(path)) from exc

    def _propose(self, req: ProposalRequest) -> Proposal:
        if req.fix_of is not None:
            raise ProposalError("the offline proposer does not repair crashed code; "
                                "recording the crash and moving on")
        current = knobs.read_knobs(req.train_source)
        if not current:
            raise ProposalError("train.py has no CAPS knob lines (NAME = literal  # comment) to search")
        ks = self.study(req.worktree)
        space = ks.space(req.train_source)
        if not space:
            raise ProposalError("train.py has no knob the sampler may move")
        ks.sync(req.history, req.pending)
        base = {k.name: k.value for k in current.values()}
        code = knobs.code_fingerprint(req.train_source)
        tried = {_key(r.code_id, r.knob_values): r.n for r in req.tried()
                 if r.knob_values is not None and r.code_id}
        tried.setdefault(_key(code, base), "the parent")
        n_trials = len(ks.study.get_trials(deepcopy=False))
        digest = hashlib.sha256(f"{req.seed}:{req.n}:{n_trials}".encode()).digest()
        ks.reseed(int.from_bytes(digest[:4], "little"))
        dists = {n: distribution(s) for n, s in space.items()}
        for _ in range(MAX_ASKS):
            trial = ks.study.ask(dists)
            change = {n: knobs.normalize(v) for n, v in trial.params.items() if knobs.normalize(v) != base[n]}
            source = knobs.set_knobs(req.train_source, change) if change else req.train_source
            earlier = tried.get(_key(code, knobs.values(source)))
            if earlier is None:
                trial.set_user_attr("asked_for", req.n)
                return self._make(req, ks, trial.number, change, base, source)
            trial.set_user_attr("duplicate_of", earlier)
            ks.study.tell(trial, state=TrialState.FAIL)
        raise ProposalError(f"the {self.sampler} sampler drew {MAX_ASKS} configurations that were all tried already")

    def _make(self, req: ProposalRequest, ks: KnobStudy, number: int, change: dict, base: dict,
              source: str) -> Proposal:
        parts = [f"{name} {knobs.format_literal(base[name])} -> {knobs.format_literal(new)}"
                 for name, new in change.items()]
        description = f"optuna {self.sampler}: " + ", ".join(parts)
        for keep in range(len(parts) - 1, 0, -1):   # results.tsv holds MAX_DESCRIPTION characters
            if len(description) <= MAX_DESCRIPTION:
                break
            description = (f"optuna {self.sampler}: " + ", ".join(parts[:keep])
                           + f" (+{len(parts) - keep} more knobs)")
        done = [t for t in ks.study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
        best = min(done, key=lambda t: t.value) if done else None
        if self.sampler == "random" or len(done) < TPE_STARTUP:
            why = f"random draw over {len(knob_space.load(ks.path.parent))} knobs ({len(done)} measured so far)"
        elif self.sampler == "cmaes":
            why = f"CMA-ES step over the numeric knobs ({len(done)} measured, best {best.value:.6f})"
        else:
            why = (f"TPE on {len(done)} measured configurations (best {best.value:.6f}"
                   f"{', exp ' + str(best.user_attrs['n']) if 'n' in best.user_attrs else ''}): "
                   f"denser in good configurations than in poor ones")
        hypothesis = f"{why}; untried with this code, and later draws centre here if val_bpb drops."
        if "more knobs)" in description:
            hypothesis += f" All changes: {'; '.join(parts)}."
        return Proposal(description=description, hypothesis=hypothesis, source=source,
                        proposer="offline", model=None,
                        notes=f"optuna trial {number} ({self.sampler}) in {STUDY_FILE}; "
                              f"changed: {', '.join(change)}; seed {req.seed}")
