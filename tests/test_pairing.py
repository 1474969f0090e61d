"""The paired rule (agent/judges/pairing.py): comparable loads in either direction, runs
interleaved C I I C, and a decision on the paired differences where the load moved."""
import random

import pytest

from agent.judges import pairing, stats
from agent.judges.evidence import RunSpeed, Sample
from agent.judges.pairing import Run


def test_comparable_is_symmetric():
    assert pairing.comparable(1.0, 1.2) is None
    assert pairing.comparable(1.0, 2.0) is not None and pairing.comparable(2.0, 1.0) is not None
    assert "lighter" in pairing.comparable(1.0, 2.0) and "heavier" in pairing.comparable(2.0, 1.0)
    assert pairing.varies([2.0, 2.1, 1.0]) and not pairing.varies([1.0, 1.1, None])


def test_runs_alternate_c_i_i_c():
    runs, seq = [], []
    for k in range(8):
        side = pairing.next_side(runs)
        seq.append(side[0].upper())
        runs.append(Run(side, 1.0, float(k), 1.0))
    assert "".join(seq) == "CIICCIIC"
    pairs, dropped = pairing.pairs_of(runs)
    assert len(pairs) == 4 and not dropped
    assert all(c.side == "candidate" and i.side == "incumbent" for c, i in pairs)


def test_a_pair_whose_load_moved_between_its_runs_is_left_out():
    runs = [Run("candidate", 1.0, 0, 1.0), Run("incumbent", 1.1, 1, 2.5),
            Run("incumbent", 1.1, 2, 2.0), Run("candidate", 1.0, 3, 2.1)]
    pairs, dropped = pairing.pairs_of(runs)
    assert len(pairs) == 1 and pairs[0][1].at == 2 and len(dropped) == 1 and "apart" in dropped[0][2]
    # the sequence goes on with the last run's side: a new pair starts with the candidate
    assert pairing.next_side(runs) == "candidate"


def machine(k):   # a load that changes every pair: 0.06 bpb between a quiet and a busy spell
    return 0.06 if k % 2 else 0.0


def noise_of(sigma, df):
    return stats.Noise(sigma, df, sigma, df + 1)


@pytest.mark.parametrize("gain_sigmas, want", [(0.0, {"discard", "undecided", "more"}), (5.0, {"keep"})])
def test_paired_differences_cancel_the_machine(gain_sigmas, want):
    """Pairs made under loads that swing 12 sigma between pairs: the unpaired means would measure
    the swing; the paired differences see only the edit."""
    rng = random.Random(3)
    sigma = 0.005
    runs = []
    for k in range(5):
        base = 3.0 + machine(k)
        runs.append(Run("candidate", base - gain_sigmas * sigma + rng.gauss(0, sigma), 2 * k, 1.0 + k % 2))
        runs.append(Run("incumbent", base + rng.gauss(0, sigma), 2 * k + 1, 1.0 + k % 2))
    pairs, _ = pairing.pairs_of(runs)
    cmp = pairing.compare(pairs, noise_of(sigma, 8))
    said, why = stats.call(cmp, runs=len(pairs))
    assert said in want, (said, why, cmp.as_dict())
    assert cmp.df == len(pairs) - 1 + 8


def test_paired_null_keeps_at_most_the_false_rate():
    """Nulls under a load that swings between pairs: kept about P_KEEP's 1% (never the 12-sigma
    swing's say-so); 5-sigma gains kept nearly always."""
    rng = random.Random(11)
    sigma = 0.005

    def decide(gain):
        runs = []
        for k in range(pairing.MAX_PAIRS):
            base = 3.0 + (0.06 if rng.random() < 0.5 else 0.0)
            runs.append(Run("candidate", base - gain + rng.gauss(0, sigma), 2 * k, 1.0))
            runs.append(Run("incumbent", base + rng.gauss(0, sigma), 2 * k + 1, 1.0))
            pairs, _ = pairing.pairs_of(runs)
            said, _ = stats.call(pairing.compare(pairs, noise_of(sigma, 6)), runs=len(pairs))
            if said != "more":
                return said
        return "undecided"

    nulls = sum(decide(0.0) == "keep" for _ in range(400))
    gains = sum(decide(5 * sigma) == "keep" for _ in range(200))
    assert nulls <= 12, nulls           # ~1% of 400, with room for chance
    assert gains >= 190, gains


def test_no_pairs_no_comparison():
    cmp = pairing.compare([], noise_of(0.01, 4))
    assert cmp.t is None


def test_one_pair_discards_only_a_clearly_worse_candidate():
    noise = noise_of(0.01, 10)

    def sample(bpb, at, load, n=2, commit="c"):
        return Sample(commit, bpb, n=n, speed=RunSpeed(load=load), at=at)

    inc = [sample(1.40, 0, 1.0, n=1), sample(1.40, 1, 1.0, n=1)]          # the bar ran quiet
    first = pairing.plan([sample(1.43, 2, 2.0)], inc, 2, noise)           # worse, but under a heavier load
    assert first.said == "more" and first.next_side == "incumbent"        # paired, not discarded
    slightly = pairing.plan([sample(1.435, 2, 2.0)], inc + [sample(1.43, 3, 2.0)], 2, noise)
    assert slightly.said == "more" and slightly.next_side == "incumbent", slightly.why   # I C next
    clearly = pairing.plan([sample(1.48, 2, 2.0)], inc + [sample(1.43, 3, 2.0)], 2, noise)
    assert clearly.said == "discard", clearly.why


def test_a_faded_gain_is_called_on_three_pairs_unless_it_is_behind():
    noise = noise_of(0.01, 10)

    def sample(bpb, at, load, n=2):
        return Sample("c", bpb, n=n, speed=RunSpeed(load=load), at=at)

    inc0 = [sample(1.40, 0, 1.0, n=1), sample(1.40, 1, 1.0, n=1)]

    def plan(diffs):   # pairs C I, I C ... at load 2, incumbent 1.43, candidate 1.43 - d
        cand, inc, t = [], list(inc0), 2
        for k, d in enumerate(diffs):
            first, second = ("c", "i") if k % 2 == 0 else ("i", "c")
            for side in (first, second):
                (cand if side == "c" else inc).append(sample(1.43 - d if side == "c" else 1.43, t, 2.0))
                t += 1
        return pairing.plan(cand, inc, 2, noise)

    assert plan([0.005, 0.004]).said == "more"                 # t ~0.4 on two pairs: one more pair
    assert plan([-0.02, -0.03]).said == "discard"               # behind: called now
    assert plan([0.005, 0.004, 0.003]).said == "discard"        # faded on three pairs
