"""The cheap prior: ranks a known good region first, learns from every rung, persists and warms."""
import json

import numpy as np
import pytest

from search.prior import CheapPrior
from search.space import Space

SPACE = Space({"MATRIX_LR": ("log", 0.001, 0.1), "EMBEDDING_LR": ("log", 0.01, 1.0),
               "ADAM_BETA1": ("lin", 0.6, 0.95)})
GOOD = {"MATRIX_LR": 0.02, "EMBEDDING_LR": 0.3, "ADAM_BETA1": 0.8}   # the synthetic optimum
MAX_STEPS = 81


def objective(cfg, steps=MAX_STEPS):
    """A bowl in log-lr space; fewer steps shift the value up (a learning curve), as in real rungs."""
    d = np.log(cfg["MATRIX_LR"] / GOOD["MATRIX_LR"]) ** 2 + np.log(cfg["EMBEDDING_LR"] / GOOD["EMBEDDING_LR"]) ** 2
    return 1.0 + 0.1 * d + 3.0 * (cfg["ADAM_BETA1"] - 0.8) ** 2 + 2.0 / steps


def test_prior_ranks_the_known_good_region_first():
    rng = np.random.default_rng(0)
    prior = CheapPrior(SPACE, MAX_STEPS)
    for k in range(40):                       # results at several rungs, like a Hyperband run
        cfg = SPACE.sample(rng)
        steps = [3, 9, 27, 81][k % 4]
        prior.observe(cfg, steps, objective(cfg, steps))
    pool = [SPACE.sample(rng) for _ in range(300)]
    truth = np.array([objective(c) for c in pool])
    picks = prior.select(pool, 5)
    assert len(set(picks)) == 5
    rank_of = {i: r for r, i in enumerate(np.argsort(truth))}
    # the first pick is in the best 5% of the pool; all picks beat the pool's median
    assert rank_of[picks[0]] < 15, (rank_of[picks[0]], truth[picks[0]])
    assert all(truth[i] < np.median(truth) for i in picks)
    # and the prediction at the full budget ranks the optimum above a far corner
    far = {"MATRIX_LR": 0.001, "EMBEDDING_LR": 1.0, "ADAM_BETA1": 0.6}
    mean, _ = prior.predict([GOOD, far])
    assert mean[0] < mean[1]


def test_prior_learns_from_low_rungs_and_crashes():
    prior = CheapPrior(SPACE, MAX_STEPS)
    bad = {"MATRIX_LR": 0.1, "EMBEDDING_LR": 1.0, "ADAM_BETA1": 0.95}
    prior.observe(GOOD, 3, objective(GOOD, 3))        # only a rung-0 result of the good config
    prior.observe(bad, 3, None)                       # a crash: learned as worse than anything
    prior.observe({"MATRIX_LR": 0.005, "EMBEDDING_LR": 0.05, "ADAM_BETA1": 0.7}, 3, 1.9)
    mean, std = prior.predict([GOOD, bad])
    assert mean[0] < mean[1]
    assert prior.select([bad, GOOD], 1) == [1]


def test_no_observations_keeps_sampling_order():
    prior = CheapPrior(SPACE, MAX_STEPS)
    assert prior.select([GOOD, GOOD, GOOD], 2) == [0, 1]


def test_store_round_trip_and_warm_start_filters_settings(tmp_path):
    store = tmp_path / "prior.json"
    rng = np.random.default_rng(1)
    a = CheapPrior(SPACE, MAX_STEPS, fingerprint="abc", profile="cpu")
    for _ in range(6):
        cfg = SPACE.sample(rng)
        a.observe(cfg, 27, objective(cfg, 27))
    a.save(store)
    other = CheapPrior(SPACE, MAX_STEPS, fingerprint="zzz", profile="cpu")
    other.observe(GOOD, 9, 1.5)
    other.save(store)                                 # merged, not overwritten
    assert len(json.loads(store.read_text())["observations"]) == 7
    b = CheapPrior(SPACE, MAX_STEPS, fingerprint="abc", profile="cpu")
    assert b.warm_start(store) == 6                   # the other data's results are not comparable
    b.save(store)                                     # warm observations are not written twice
    assert len(json.loads(store.read_text())["observations"]) == 7
    np.testing.assert_allclose(b.predict([GOOD])[0], a.predict([GOOD])[0])


def test_corrupt_store_is_a_clear_error(tmp_path):
    store = tmp_path / "prior.json"
    store.write_text("{not json")
    with pytest.raises(ValueError, match="not a valid store"):
        CheapPrior(SPACE, MAX_STEPS).warm_start(store)
    assert store.read_text() == "{not json"           # nothing lost
