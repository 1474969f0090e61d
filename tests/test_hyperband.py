"""Bracket arithmetic, promotion accounting, and the scheduler's successive-halving decisions.

The scheduler tests use a synthetic executor (a deterministic function of config and steps in
place of training) so the decisions can be checked exactly; real training through the pool is
in test_throughput.py.
"""
from pathlib import Path

import pytest

from search.hyperband import (Candidate, Rung, TaskResult, bracket_cost, hyperband_brackets,
                               path_cost, run_schedule)


def test_brackets_match_the_hyperband_paper():
    # Li et al. (2018), Table 1: R = 81, eta = 3 -> five brackets.
    bs = hyperband_brackets(81, 1, 3)
    assert [b.s for b in bs] == [4, 3, 2, 1, 0]
    assert [(r.n, r.steps) for r in bs[0].rungs] == [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)]
    assert [(r.n, r.steps) for r in bs[1].rungs] == [(34, 3), (11, 9), (3, 27), (1, 81)]
    assert [(r.n, r.steps) for r in bs[2].rungs] == [(15, 9), (5, 27), (1, 81)]
    assert [(r.n, r.steps) for r in bs[3].rungs] == [(8, 27), (2, 81)]
    assert [(r.n, r.steps) for r in bs[4].rungs] == [(5, 81)]


def test_brackets_scale_with_min_steps_and_eta():
    bs = hyperband_brackets(32, 4, 2)            # R/r = 8 -> s_max = 3
    assert len(bs) == 4
    assert [r.steps for r in bs[0].rungs] == [4, 8, 16, 32]
    assert bs[0].rungs[0].n == 8 and bs[-1].rungs == (Rung(4, 32),)
    with pytest.raises(ValueError):
        hyperband_brackets(10, 20, 3)
    with pytest.raises(ValueError):
        hyperband_brackets(10, 1, 1)


def test_promotion_costs_r_plus_r_plus_2r():
    r = 10
    assert path_cost([r, 2 * r, 4 * r], promotion=True) == r + r + 2 * r
    assert path_cost([r, 2 * r, 4 * r], promotion=False) == r + 2 * r + 4 * r
    # each evaluation adds its decay branch, in both schemes
    assert path_cost([r, 2 * r, 4 * r], decay_steps=2, promotion=True) == 4 * r + 3 * 2
    b = hyperband_brackets(9, 1, 3)[0]           # 9x1, 3x3, 1x9
    assert bracket_cost(b, promotion=False) == 9 * 1 + 3 * 3 + 1 * 9
    assert bracket_cost(b, promotion=True) == 9 * 1 + 3 * (3 - 1) + 1 * (9 - 3)
    assert bracket_cost(b, decay_steps=1, promotion=True) == 21 + 13


class SyntheticExecutor:
    """Runs tasks instantly: val = quality(config) + 1/steps; tracks what was resumed."""

    def __init__(self, slots=2, crash=()):
        self.slots, self.queue, self.crash = slots, [], set(crash)
        self.seen = []

    def free_slots(self):
        return self.slots - len(self.queue)

    def submit(self, task):
        self.queue.append(task)
        self.seen.append(task)
        if task.state.save:
            Path(task.state.save).write_text(f"{task.cand}@{task.steps}")  # the pre-decay state

    def next_result(self):
        task = self.queue.pop(0)
        if task.state.resume is not None:
            assert Path(task.state.resume).read_text() == f"{task.cand}@{task.state.start_steps}"
        if task.cand in self.crash:
            return TaskResult(task, None, None, 0.0, error="FAIL: loss exploded")
        return TaskResult(task, task.meta["config"]["q"] + 1.0 / task.steps, {}, 0.0)


def _cands(tmp_path, qs):
    return [Candidate(f"c{i}", {"q": q}, tmp_path / f"c{i}.py") for i, q in enumerate(qs)]


def test_successive_halving_keeps_the_best_and_promotes_from_checkpoints(tmp_path):
    qs = [0.9, 0.1, 0.5, 0.3, 0.8, 0.2, 0.7, 0.6, 0.4]    # c1 best, then c5, c3
    ex = SyntheticExecutor()
    b = hyperband_brackets(9, 1, 3)[0]
    recs = run_schedule(ex, [b], lambda i, br: _cands(tmp_path, qs), decay_steps=1,
                        ckpt_dir=tmp_path / "ck")
    rung1 = sorted(r["cand"] for r in recs if r["rung"] == 1)
    assert rung1 == ["c1", "c3", "c5"]
    assert [r["cand"] for r in recs if r["rung"] == 2] == ["c1"]
    promoted = [t for t in ex.seen if t.rung > 0]
    assert all(t.state.resume is not None for t in promoted)
    # steps charged = the promotion accounting, decay branches included
    assert recs[-1]["cum_steps"] == bracket_cost(b, 1, promotion=True)
    assert not any((tmp_path / "ck").glob("*.pt"))     # every state was consumed or discarded


def test_crashed_candidates_are_not_promoted(tmp_path):
    qs = [0.9, 0.1, 0.5, 0.3, 0.8, 0.2, 0.7, 0.6, 0.4]
    ex = SyntheticExecutor(crash={"c1"})
    recs = run_schedule(ex, [hyperband_brackets(9, 1, 3)[0]], lambda i, br: _cands(tmp_path, qs),
                        decay_steps=0, ckpt_dir=tmp_path / "ck")
    assert sorted(r["cand"] for r in recs if r["rung"] == 1) == ["c3", "c5", "c8"]


def test_budget_cycles_brackets_and_never_overspends(tmp_path):
    import itertools
    counter = itertools.count()
    brackets = hyperband_brackets(9, 1, 3)

    def make(i, br):
        return [Candidate(f"b{i}c{k}", {"q": (next(counter) * 0.37) % 1}, tmp_path / "x.py")
                for k in range(br.rungs[0].n)]

    costs = [bracket_cost(b, 1) for b in brackets]            # [34, 27, 30]
    budget = sum(costs) + costs[1] + 5                         # a 2nd cycle: bracket 0 won't fit, 1 will
    recs = run_schedule(SyntheticExecutor(slots=3), brackets, make, decay_steps=1,
                        ckpt_dir=tmp_path / "ck", budget_steps=budget, repeat=True)
    assert recs[-1]["cum_steps"] <= budget
    assert [r["cum_steps"] for r in recs] == sorted(r["cum_steps"] for r in recs)
    started = sorted({r["bracket"] for r in recs})
    assert started == [0, 1, 2, 3]                             # a 4th bracket started...
    fourth = [r for r in recs if r["bracket"] == 3]
    assert max(r["rung"] for r in fourth) == 1                 # ...the cheaper s=1 one, run to its end
    assert sum(r["cost"] for r in fourth) == costs[1]


def test_overlap_starts_the_next_bracket_while_one_waits(tmp_path):
    brackets = hyperband_brackets(9, 1, 3)[:2]   # 9x1,3x3,1x9 then 5x3,1x9
    ex = SyntheticExecutor(slots=2)
    order = []

    def make(i, br):
        order.append(i)
        return [Candidate(f"b{i}c{k}", {"q": k / 10}, tmp_path / "x.py") for k in range(br.rungs[0].n)]

    recs = run_schedule(ex, brackets, make, decay_steps=0, ckpt_dir=tmp_path / "ck", overlap=True)
    # the last rung of bracket 0 has one task; with 2 slots bracket 1 starts before it finishes
    first_b1 = next(k for k, r in enumerate(recs) if r["bracket"] == 1)
    last_b0 = max(k for k, r in enumerate(recs) if r["bracket"] == 0)
    assert first_b1 < last_b0
    strict = run_schedule(SyntheticExecutor(slots=2), brackets, make, decay_steps=0,
                          ckpt_dir=tmp_path / "ck2", overlap=False)
    assert [r["bracket"] for r in strict] == sorted(r["bracket"] for r in strict)
    # the same decisions either way: overlap changes timing, not successive halving
    key = lambda rs: sorted((r["bracket"], r["rung"], r["cand"]) for r in rs)
    assert key(recs) == key(strict)
