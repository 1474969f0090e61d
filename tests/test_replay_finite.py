"""Every check of the trusted evaluation fails closed: non-finite logits, a tolerance a graph could
stretch with its own values, a figure that is NaN or missing, an exception inside a check.

The models are real torch modules recorded as runtime.save_model records train.py's model and
replayed by harness/graph.py; the evaluation is prepare.evaluate_bpb on the tiny validation data
through the worker's Checked (in-process), or the whole clean worker process (harness.verify).
-inf for token ids a model never predicts is allowed (the checks compare log-probabilities
clipped at -LOGP_FLOOR, which stay finite); NaN and +inf anywhere are refused.
"""
import math

import pytest
import torch

from harness.eval_worker import LEAK_TOL, Checked, IntegrityError
from harness.verify import judge_worker_output
from tests.replay_fixtures import Causal, Peek, Unused, load, run_checked, save_artifact, unused_ids, verify_artifact

NAN, INF = float("nan"), float("inf")


def vt():
    import prepare
    return prepare.VOCAB_SIZE, prepare.MAX_SEQ_LEN


@pytest.fixture(scope="module")
def honest_bpb(tiny_cache):
    """The honest model's checked figure (deterministic): computed once for the module's tests."""
    V, T = vt()
    bpb, checked = run_checked(load(Causal(V, T), T))
    report = checked.report()
    assert report["causal"] is True and report["max_leak"] == 0.0 and report["noise"] == 0.0
    assert report["checked_rows"] >= 64 and report["spliced_tokens"] > 0
    assert math.isfinite(report["spliced_nats"]) and report["spliced_nats"] > 0   # the spliced rows are scored
    return bpb


def test_ruling_out_unused_ids_with_minus_inf_is_legal_and_measured(honest_bpb):
    """A model may put -inf on token ids it never predicts: the figure is its own (better) one."""
    V, T = vt()
    unused = unused_ids()
    assert 0 < int(unused.sum()) < V
    bpb, checked = run_checked(load(Unused(Causal(V, T), unused, -INF), T))
    assert checked.report()["causal"] is True and checked.tally.max_leak == 0.0
    assert math.isfinite(bpb) and bpb < honest_bpb


# name -> (model factory (V, T, unused mask) -> module, what the refusal says)
REFUSED = {
    "NaN on unused ids": (lambda V, T, u: Unused(Causal(V, T), u, NAN), "NaN or \\+inf"),
    "+inf on unused ids": (lambda V, T, u: Unused(Causal(V, T), u, INF), "NaN or \\+inf"),
    "a NaN column beyond the vocabulary": (
        lambda V, T, u: Unused(Causal(V, T), torch.zeros(V, dtype=torch.bool), NAN, extra=1), "NaN or \\+inf"),
    "float64 logits beyond float32": (
        lambda V, T, u: Unused(Causal(V, T), u, 1e300, dtype=torch.float64), "beyond float32"),
    "every id -inf": (lambda V, T, u: Unused(Causal(V, T), torch.ones(V, dtype=torch.bool), -INF),
                      "no finite logit"),
    "-inf on unused ids with a next-token peek": (lambda V, T, u: Unused(Peek(V, T), u, -INF), "before the cut"),
    "-inf on unused ids with a peek at 1 position in 8": (
        lambda V, T, u: Unused(Peek(V, T, every=8), u, -INF), "before the cut"),
    "a huge negative finite sentinel with a peek": (lambda V, T, u: Unused(Peek(V, T), u, -1e30), "before the cut"),
    "a moderate finite sentinel with a peek": (lambda V, T, u: Unused(Peek(V, T), u, 60.0), "before the cut"),
    "-inf and a peek as float16": (lambda V, T, u: Unused(Peek(V, T), u, -INF, dtype=torch.float16),
                                   "before the cut"),
}


@pytest.mark.parametrize("how", list(REFUSED))
def test_non_finite_tricks_are_integrity_failures(tiny_cache, how):
    V, T = vt()
    make, why = REFUSED[how]
    with pytest.raises(IntegrityError, match=why):
        run_checked(load(make(V, T, unused_ids()), T))


def test_a_huge_finite_sentinel_hides_a_peek_only_where_it_costs_more_than_the_peek_gains(honest_bpb):
    """1e30 on unused ids pushes every used token below the floor, where a peek is invisible, and
    the metric pays ~1e30 nats a token for it: refused or far worse, never a gain."""
    V, T = vt()
    try:
        bpb, _ = run_checked(load(Unused(Peek(V, T), unused_ids(), 1e30), T))
    except IntegrityError:
        return
    assert bpb > 1e6 * honest_bpb


def test_the_tolerances_do_not_stretch_with_the_graph_s_values(tiny_cache):
    """-1e30 on unused ids once stretched a tolerance relative to the logits' scale to ~1e24, so
    any peek passed; the limit is now absolute (LEAK_TOL)."""
    V, T = vt()
    unused = unused_ids()
    _, checked = run_checked(load(Unused(Causal(V, T), unused, -1e30), T))
    assert checked.report()["causal"] is True and checked.limit() == LEAK_TOL
    with pytest.raises(IntegrityError, match="before the cut"):
        run_checked(load(Unused(Peek(V, T, boost=0.05), unused, -1e30), T))


class Fake:
    """A stand-in graph (the replay's interface) whose outputs a test scripts call by call."""

    rows = 8

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def parameters(self):
        return iter([torch.zeros(1)])

    def buffers(self):
        return iter(())

    def __call__(self, x):
        self.calls += 1
        return self.fn(x, self.calls)


def _logits(x, V=512):
    return (x[..., None] * 0.01 + torch.arange(V) * 0.001).float()


FAKES = {
    "drifts by 1e-2 a call (noise, or a leak it could hide)": (
        lambda x, k: _logits(x) + 1e-2 * k * torch.arange(512) / 512, "not deterministic|before the cut"),
    "NaN on its 5th call only": (lambda x, k: _logits(x) * (NAN if k == 5 else 1.0), "NaN"),
    "integer logits": (lambda x, k: x[..., None].expand(*x.shape, 512), "not floating-point"),
    "wrong shape on a later call": (lambda x, k: _logits(x)[:, :-1] if k > 3 else _logits(x), "not logits|must return"),
    "writes into its input": (lambda x, k: (x.add_(1), _logits(x))[1], "changed its input"),
}


@pytest.mark.parametrize("how", list(FAKES))
def test_checked_fails_closed_on_scripted_misbehaviour(tiny_cache, how):
    fn, why = FAKES[how]
    with pytest.raises((IntegrityError, ValueError), match=why):
        run_checked(Fake(fn))


def _noisy_peek(x, k, V=512, noise=4e-4, peek=3e-4):
    """Nondeterministic on purpose (a ramp that alternates call by call, under NOISE_MAX) and
    peeking a little at the next token (less than that noise)."""
    ramp = noise * (k % 2) * torch.arange(V) / V
    nxt = torch.roll(x, -1, dims=1)
    boost = peek * torch.nn.functional.one_hot(nxt, V).float()
    return _logits(x, V) + ramp + boost


def test_a_graph_s_own_noise_never_widens_the_leak_limit(tiny_cache):
    """A graph that makes itself nondeterministic below the determinism bound must not buy a leak
    of that size: the limit is the device's constant, not the measured noise. Noise alone above
    that constant cannot be told from a leak, so it is refused too; the same graph made
    deterministic, without the peek, passes."""
    from harness.eval_worker import NOISE_MAX
    assert LEAK_TOL < 3e-4 < 4e-4 < NOISE_MAX
    with pytest.raises(IntegrityError, match="before the cut"):
        run_checked(Fake(_noisy_peek))
    with pytest.raises(IntegrityError, match="before the cut"):
        run_checked(Fake(lambda x, k: _noisy_peek(x, k, peek=0.0)))
    _, checked = run_checked(Fake(lambda x, k: _noisy_peek(x, k, noise=0.0, peek=0.0)))
    assert checked.report()["causal"] is True and checked.limit() == LEAK_TOL


def test_a_check_that_never_ran_is_a_failure(tiny_cache):
    checked = Checked(torch, Fake(lambda x, k: _logits(x)), 3, steps=16)
    with pytest.raises(IntegrityError, match="never ran"):
        checked.finish()
    assert checked.report()["causal"] is False


GOOD = {"ok": True, "trusted_bpb": 1.5, "sha_match": True,
        "causality": {"causal": True, "checked_rows": 8, "max_leak": 0.0, "limit": 1e-5,
                      "splice_excess": 0.05, "splice_limit": 1.0}}
BAD_VERDICTS = {
    "NaN largest change": {"max_leak": NAN},
    "NaN written as text": {"max_leak": "nan"},
    "infinite limit": {"limit": INF},
    "change above the limit": {"max_leak": 1.0},
    "no figures": {"max_leak": None, "limit": None},
    "causal as a string": {"causal": "yes"},
    "nothing checked": {"checked_rows": 0},
    "rows as a bool": {"checked_rows": True},
    "spliced text far dearer than its own row": {"splice_excess": 14.0},
    "splice excess NaN": {"splice_excess": NAN},
    "splice excess missing": {"splice_excess": None},
    "splice limit stretched to infinity": {"splice_limit": INF},
}


@pytest.mark.parametrize("how", list(BAD_VERDICTS))
def test_the_harness_re_checks_the_figures_and_fails_closed(how):
    assert judge_worker_output(GOOD, None, 1.0, sealed=True).ok
    bad = dict(GOOD, causality=dict(GOOD["causality"], **BAD_VERDICTS[how]))
    r = judge_worker_output(bad, None, 1.0, sealed=True)
    assert not r.ok and r.reason


@pytest.mark.parametrize("change", [{"ok": "true"}, {"sha_match": 1}, {"trusted_bpb": NAN}, {"trusted_bpb": INF},
                                    {"causality": [True]}, {"causality": None}])
def test_other_malformed_verdicts_fail(change):
    assert not judge_worker_output(dict(GOOD, **change), None, 1.0, sealed=True).ok


def test_the_worker_refuses_the_incident_and_keeps_the_legal_model(tiny_cache, tmp_path):
    """End to end in the clean worker process: -inf on unused ids plus a next-token peek (the model
    that was once recorded at 0.04 against a 2.84 baseline) is an integrity failure; NaN on unused
    ids too; the same -inf without the peek is measured."""
    from pathlib import Path
    prepare_source = (Path(__file__).resolve().parent.parent / "prepare.py").read_text()
    V, T = vt()
    unused = unused_ids()
    r = verify_artifact(save_artifact(Unused(Peek(V, T), unused, -INF), tmp_path, "peek"), prepare_source)
    assert not r.ok and r.causal is False and r.reason.startswith("causality check failed"), r.reason
    assert r.trusted_bpb is None
    r = verify_artifact(save_artifact(Unused(Causal(V, T), unused, NAN), tmp_path, "nan"), prepare_source)
    assert not r.ok and "integrity check failed" in r.reason and "NaN" in r.reason, r.reason
    r = verify_artifact(save_artifact(Unused(Causal(V, T), unused, -INF), tmp_path, "legal"), prepare_source)
    assert r.ok and r.causal is True and math.isfinite(r.trusted_bpb), r.reason
    assert r.details["causality"]["max_leak"] == 0.0
