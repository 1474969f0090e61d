"""Hyperband over train.py: bracket arithmetic, successive halving, and the scheduling loop.

The resource is optimizer steps (reproducible, unlike seconds). A bracket starts n candidates at
r steps and keeps the best 1/eta at every rung; Hyperband runs all brackets, from the most
aggressive (many candidates, few steps) to plain full-budget evaluation (Li et al., 2018).

Honesty under promotion (docs/hyperband.md): a rung evaluation at k steps trains k stable-LR steps,
saves the *pre-decay* state, then runs a short cool-down branch of `decay` steps and evaluates.
A promoted survivor resumes from the pre-decay state, so it never carries an already-decayed LR,
and pays only the extra steps: r + r + 2r stable steps instead of r + 2r + 4r from scratch
(plus one decay branch per evaluation, in both cases).

This module knows nothing of processes: `run_schedule` drives any executor with
`submit(task)`, `free_slots()` and `next_result()` (search/pool.py provides real ones).
Brackets overlap: when a bracket waits at a rung barrier, idle workers start the next bracket,
so no worker idles while work exists, and each bracket's decisions stay exactly those of
synchronous successive halving (they depend only on its own results, never on timing).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# Default downsampling rate: keep the best 1/ETA at each rung (Hyperband paper's choice).
ETA = 3


@dataclass(frozen=True)
class Rung:
    n: int          # candidates evaluated at this rung
    steps: int      # total stable steps each has trained when evaluated here


@dataclass(frozen=True)
class Bracket:
    s: int                  # bracket index: s+1 rungs, s = 0 is plain full-budget evaluation
    rungs: tuple[Rung, ...]


def hyperband_brackets(max_steps: int, min_steps: int, eta: int = ETA) -> list[Bracket]:
    """All brackets for resources in [min_steps, max_steps], most aggressive first.

    s_max = floor(log_eta(R)) with R = max_steps / min_steps; bracket s starts
    n = ceil((s_max + 1) / (s + 1) * eta^s) candidates at max_steps * eta^-s steps.
    """
    if eta < 2:
        raise ValueError(f"eta must be >= 2, got {eta}")
    if not 1 <= min_steps <= max_steps:
        raise ValueError(f"need 1 <= min_steps <= max_steps, got {min_steps}, {max_steps}")
    ratio = max_steps / min_steps
    s_max = int(math.floor(math.log(ratio, eta) + 1e-9))
    brackets = []
    for s in range(s_max, -1, -1):
        n = int(math.ceil((s_max + 1) / (s + 1) * eta ** s - 1e-9))
        rungs = []
        for i in range(s + 1):
            n_i = max(1, int(math.floor(n * eta ** (-i) + 1e-9)))
            steps_i = max(1, int(round(max_steps * eta ** (i - s))))
            rungs.append(Rung(n_i, steps_i))
        brackets.append(Bracket(s, tuple(rungs)))
    return brackets


def bracket_cost(bracket: Bracket, decay_steps: int = 0, promotion: bool = True) -> int:
    """Steps a bracket trains. With promotion a survivor pays only the extra stable steps."""
    total, prev = 0, 0
    for rung in bracket.rungs:
        stable = rung.steps - prev if promotion else rung.steps
        total += rung.n * (stable + decay_steps)
        prev = rung.steps
    return total


def path_cost(rung_steps: list[int], decay_steps: int = 0, promotion: bool = True) -> int:
    """Steps spent on one survivor's path through the rungs (r, 2r, 4r -> r+r+2r vs r+2r+4r)."""
    total, prev = 0, 0
    for steps in rung_steps:
        total += (steps - prev if promotion else steps) + decay_steps
        prev = steps
    return total


@dataclass
class TaskState:
    """The training state a task starts from and leaves for the next rung (promotion): the stable
    steps already in the state it resumes (0 = from scratch), the file it resumes from and the file
    it saves its pre-decay state to (None: none)."""
    start_steps: int = 0
    resume: Path | None = None
    save: Path | None = None


@dataclass
class Task:
    """One training run: bring candidate `cand` to `steps` stable steps, decay, evaluate."""
    id: str
    cand: str                   # candidate id
    source: Path                # the candidate's train.py
    steps: int                  # total stable steps after this task
    decay_steps: int
    state: TaskState = field(default_factory=TaskState)
    seed: int = 0
    threads: int = 1            # set by the executor at dispatch
    bracket: int = -1
    rung: int = -1
    meta: dict = field(default_factory=dict)

    @property
    def cost(self) -> int:
        return self.steps - self.state.start_steps + self.decay_steps


@dataclass
class TaskResult:
    task: Task
    val_bpb: float | None       # None when the run crashed
    summary: dict | None
    wall: float
    error: str | None = None
    log: Path | None = None
    worker: int = -1


@dataclass
class Candidate:
    id: str
    config: dict
    source: Path


class SuccessiveHalving:
    """One bracket's state machine. Synchronous SH decisions, dispatched task by task."""

    def __init__(self, index: int, bracket: Bracket, candidates: list[Candidate], *,
                 decay_steps: int, ckpt_dir: Path, seed: int = 0, promotion: bool = True):
        if len(candidates) != bracket.rungs[0].n:
            raise ValueError(f"bracket {index} needs {bracket.rungs[0].n} candidates, "
                             f"got {len(candidates)}")
        self.index, self.bracket, self.decay, self.seed = index, bracket, decay_steps, seed
        self.ckpt_dir, self.promotion = Path(ckpt_dir), promotion
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        self.cands = {c.id: c for c in candidates}
        self.rung = 0
        self.alive = [c.id for c in candidates]          # ids entering the current rung
        self.queue = self._tasks_for_rung()              # not yet dispatched
        self.results: dict[int, dict[str, float | None]] = {0: {}}
        self.done = False

    def _ckpt(self, cid: str, steps: int) -> Path:
        folder = self.ckpt_dir / f"b{self.index}-{cid}"   # one per candidate: a sandboxed task
        folder.mkdir(parents=True, exist_ok=True)          # may write its own folder only
        return folder / f"s{steps}.pt"

    def _tasks_for_rung(self) -> list[Task]:
        rung = self.bracket.rungs[self.rung]
        prev = self.bracket.rungs[self.rung - 1].steps if self.rung else 0
        last = self.rung == len(self.bracket.rungs) - 1
        tasks = []
        for cid in self.alive:
            resume = self._ckpt(cid, prev) if (self.promotion and prev) else None
            tasks.append(Task(
                id=f"b{self.index}-r{self.rung}-{cid}", cand=cid, source=self.cands[cid].source,
                steps=rung.steps, decay_steps=self.decay,
                state=TaskState(start_steps=prev if resume else 0, resume=resume,
                                save=None if (last or not self.promotion) else self._ckpt(cid, rung.steps)),
                seed=self.seed, bracket=self.index, rung=self.rung,
                meta={"config": self.cands[cid].config}))
        return tasks

    def take(self) -> Task | None:
        return self.queue.pop(0) if self.queue else None

    def record(self, res: TaskResult) -> None:
        t = res.task
        self.results.setdefault(t.rung, {})[t.cand] = res.val_bpb
        if t.state.resume is not None:                # the lower rung's state is spent
            t.state.resume.unlink(missing_ok=True)
        if len(self.results[self.rung]) < len(self.alive):
            return                                    # rung barrier not reached yet
        if self.rung == len(self.bracket.rungs) - 1:
            self.done = True
            return
        scored = self.results[self.rung]
        order = sorted(self.alive, key=lambda c: (math.inf if scored[c] is None else scored[c], c))
        keep = self.bracket.rungs[self.rung + 1].n
        survivors = [c for c in order[:keep] if scored[c] is not None]
        for cid in self.alive:                        # eliminated candidates free their state
            if cid not in survivors:
                self._ckpt(cid, self.bracket.rungs[self.rung].steps).unlink(missing_ok=True)
        if not survivors:
            self.done = True
            return
        self.rung += 1
        self.alive = survivors
        self.results[self.rung] = {}
        self.queue = self._tasks_for_rung()

    def winner(self) -> tuple[str, float] | None:
        """Best candidate at the highest rung reached with a result."""
        for rung in sorted(self.results, reverse=True):
            ok = {c: v for c, v in self.results[rung].items() if v is not None}
            if ok:
                cid = min(ok, key=lambda c: (ok[c], c))
                return cid, ok[cid]
        return None


def run_schedule(executor, plan: list[Bracket],
                 make_candidates: Callable[[int, Bracket], list[Candidate]], *,
                 decay_steps: int, ckpt_dir: Path, seed: int = 0, promotion: bool = True,
                 budget_steps: int | None = None, repeat: bool = False, overlap: bool = True,
                 on_result: Callable[[TaskResult, int], None] | None = None) -> list[dict]:
    """Run the brackets of `plan` (cycling if `repeat`) through `executor`.

    With a step budget, a bracket starts only if its whole cost fits next to what the brackets
    already started may still spend, so the budget never cuts a bracket short (overlapping
    brackets would otherwise eat the budget that promotions need). When the next bracket of the
    cycle does not fit, a cheaper one of the plan that does is run instead; when none fits, the
    search ends. `make_candidates(i, bracket)` is called lazily when bracket i starts, so a prior
    sees every result that has arrived by then. `on_result(result, cum_steps)` gets each result
    with the steps charged up to its dispatch. Returns one record per task, in dispatch order.
    """
    active: list[SuccessiveHalving] = []
    spent, committed, index, pos, exhausted, stop = 0, 0, 0, 0, False, False
    records: dict[str, dict] = {}
    order: list[str] = []
    in_flight = 0

    def pick_bracket() -> Bracket | None:
        nonlocal pos, committed
        left = len(plan) - pos if not repeat else len(plan)
        for j in range(max(0, left)):
            b = plan[(pos + j) % len(plan)]
            cost = bracket_cost(b, decay_steps, promotion)
            if budget_steps is None or committed + cost <= budget_steps:
                pos, committed = pos + j + 1, committed + cost
                return b
        return None

    def next_task() -> Task | None:
        nonlocal index, exhausted
        for sh in active:
            task = sh.take()
            if task is not None:
                return task
            if not overlap and not sh.done:
                return None                          # strict mode: finish this bracket first
        if exhausted:
            return None
        bracket = pick_bracket()
        if bracket is None:
            exhausted = True
            return None
        sh = SuccessiveHalving(index, bracket, make_candidates(index, bracket),
                               decay_steps=decay_steps, ckpt_dir=ckpt_dir, seed=seed,
                               promotion=promotion)
        index += 1
        active.append(sh)
        return sh.take()

    while True:
        while not stop and executor.free_slots() > 0:
            task = next_task()
            if task is None:
                break
            if budget_steps is not None and spent + task.cost > budget_steps:
                stop = True                          # the budget is spent: no partial tasks
                break
            spent += task.cost
            records[task.id] = {"task": task.id, "cand": task.cand, "bracket": task.bracket,
                                "rung": task.rung, "steps": task.steps, "cost": task.cost,
                                "cum_steps": spent, "config": task.meta.get("config")}
            order.append(task.id)
            executor.submit(task)
            in_flight += 1
        if in_flight == 0:
            break
        res = executor.next_result()
        in_flight -= 1
        rec = records[res.task.id]
        rec.update(val_bpb=res.val_bpb, wall=res.wall, error=res.error, threads=res.task.threads,
                   log=str(res.log) if getattr(res, "log", None) else None)
        for sh in active:
            if sh.index == res.task.bracket:
                sh.record(res)
        active = [sh for sh in active if not sh.done]
        if on_result is not None:
            on_result(res, rec["cum_steps"])
    return [records[t] for t in order]

