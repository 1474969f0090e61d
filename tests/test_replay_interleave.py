"""The causality check cannot be told from the metric: its calls are drawn at random per
evaluation, interleaved with the metric's own (the spliced batch before or after the metric's,
at random), there is no second pass to count, and the spliced rows are scored like metric rows.

The guarantee against a graph that compares one call with the previous one is the replay's
purity (tests/test_replay_pure.py): a replayed graph keeps nothing between calls. What is left to
a pure graph is its input; these tests show a pure cheat that recognises a check batch by its
input is caught by the very difference it makes.
"""
import torch

from harness.eval_worker import Checked
from tests.replay_fixtures import Causal, load, run_checked


class Recorder:
    """A stand-in graph that records every batch it is called on and answers honestly."""

    rows = 8

    def __init__(self):
        self.inputs = []

    def parameters(self):
        return iter([torch.zeros(1)])

    def buffers(self):
        return iter(())

    def __call__(self, x):
        self.inputs.append(x.clone())
        return (x[..., None] * 0.01 + torch.arange(512) * 0.001).float()


def evaluate(seed):
    import prepare
    steps = max(1, prepare.EVAL_TOKENS // (8 * prepare.MAX_SEQ_LEN))
    g = Recorder()
    checked = Checked(torch, g, seed, steps)
    loader = prepare.make_dataloader(prepare.Tokenizer.from_directory(), 8, prepare.MAX_SEQ_LEN, "val", device="cpu")
    batches = [next(loader)[0] for _ in range(steps)]
    with torch.no_grad():
        prepare.evaluate_bpb(checked, prepare.Tokenizer.from_directory(), 8)
        checked.finish()
    return g.inputs, batches, checked


def schedule(inputs, batches):
    """Per call: (the metric batch it belongs to, 'metric' | 'spliced' | 'again')."""
    out = []
    for x in inputs:
        exact = [i for i, b in enumerate(batches) if torch.equal(x, b)]
        if exact:
            out.append((exact[0], "again" if (exact[0], "metric") in out else "metric"))
        else:      # a spliced batch keeps each row's text before its cut: most positions agree
            out.append((max(range(len(batches)), key=lambda i: int((x == batches[i]).sum())), "spliced"))
    return out


def test_checks_are_interleaved_random_per_evaluation_and_scored(tiny_cache):
    runs = [evaluate(seed) for seed in (11, 12, 13, 14)]
    orders, chosen = set(), []
    for inputs, batches, checked in runs:
        sched = schedule(inputs, batches)
        assert [s for s in sched if s[1] == "metric"] == [(i, "metric") for i in range(len(batches))]
        # every spliced call sits next to its own metric call: no separate pass after the metric
        for k, (i, kind) in enumerate(sched):
            if kind == "spliced":
                neighbours = {sched[k - 1] if k else None, sched[k + 1] if k + 1 < len(sched) else None}
                assert (i, "metric") in neighbours
                orders.add("before" if k + 1 < len(sched) and sched[k + 1] == (i, "metric") else "after")
        report = checked.report()
        assert report["causal"] is True and report["checked_batches"] == sum(s[1] == "spliced" for s in sched)
        # the text after each cut is scored (a cut at the last position leaves no target in the batch)
        assert 0 < report["spliced_tokens"] <= report["checked_rows"] * (batches[0].shape[1] - 1)
        assert report["splice_excess"] <= report["splice_limit"]
        chosen.append(tuple(sched))
    assert orders == {"before", "after"}
    assert len(set(chosen)) == len(chosen)          # each evaluation its own schedule
    # on a profile with more batches than checks, which batches are checked is drawn too
    drawn = {frozenset(Checked(torch, Recorder(), seed, steps=64).chosen) for seed in range(4)}
    assert len(drawn) == 4 and all(len(c) == 32 for c in drawn)


class SuffixSpotter(Causal):
    """A pure cheat that knows how the check splices: rows of a check batch share a suffix with
    another row (the donor's future). It peeks at the next token unless its batch looks spliced."""

    def forward(self, idx):
        logits = super().forward(idx)
        tail = idx[:, -4:]
        same = (tail[:, None, :] == tail[None, :, :]).all(-1)
        others = same & ~torch.eye(idx.size(0), dtype=torch.bool, device=idx.device)
        honest = others.any().to(logits.dtype)
        nxt = torch.roll(idx, -1, dims=1)
        hit = (nxt[..., None] == torch.arange(logits.size(-1), device=idx.device)).to(logits.dtype)
        return logits + 6.0 * (1 - honest) * hit


def test_a_pure_graph_that_spots_the_check_batch_is_caught_by_its_own_difference(tiny_cache):
    import prepare
    V, T = prepare.VOCAB_SIZE, prepare.MAX_SEQ_LEN
    try:
        run_checked(load(SuffixSpotter(V, T), T))
    except RuntimeError as e:
        assert "before the cut" in str(e)
    else:
        raise AssertionError("a graph that behaves differently on check batches passed")
