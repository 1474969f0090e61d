"""A run cannot tell what it is run for: the seeds it gets (agent/seeds.py) and the output folder it
sees (harness/runner.py) are the same kind for a loop's run, a re-measurement and a claim."""
import json
import os

import pytest

from agent import seeds
from agent.remeasure import JOB_N_BASE, claim_seeds, fresh_seeds, loop_seeds
from harness.runner import ARTIFACT_INSIDE, RunPlace, RunSpec, RunView, run_train
from harness.sandbox import detect


def test_a_run_folder_gets_one_random_key_kept_for_its_resume(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    key = seeds.key_of(a)
    assert seeds.key_of(a) == key and len(key) == seeds.KEY_BYTES
    assert (a / seeds.KEY_FILE).stat().st_mode & 0o077 == 0, "the key is the harness's alone"
    assert seeds.key_of(b) != key
    # without the key, a run's seed cannot be worked out from its experiment and run number
    assert [seeds.loop_seed(key, 5, r) for r in range(3)] != [seeds.loop_seed(seeds.key_of(b), 5, r) for r in range(3)]
    assert seeds.loop_seed(key, 1, 0) is None, "the baseline's first run keeps train.py's SEED"


def test_processes_that_make_the_key_at_once_all_get_the_one_published(tmp_path):
    import multiprocessing
    with multiprocessing.get_context("fork").Pool(4) as pool:
        keys = pool.map(seeds.key_of, [tmp_path] * 8)
    assert len(set(keys)) == 1 and keys[0] == seeds.key_of(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [seeds.KEY_FILE], "no half-written or temporary file left"


def test_a_corrupt_key_is_refused_with_a_message_and_left_alone(tmp_path):
    (tmp_path / seeds.KEY_FILE).write_text("not hex at all\n")
    with pytest.raises(seeds.SeedKeyError, match="not a seed key"):
        seeds.key_of(tmp_path)
    assert (tmp_path / seeds.KEY_FILE).read_text() == "not hex at all\n"
    with pytest.raises(seeds.SeedKeyError):
        seeds.set_key(tmp_path, b"short")


def test_fresh_and_claim_seeds_are_never_a_loop_seed_nor_each_other(tmp_path):
    seeds.set_key(tmp_path, seeds.named_key("test"))   # a fixed key: 3,900 random draws may share one
    used = loop_seeds(tmp_path, 300, own_seed=42)
    assert len(used) == 300 * 13, "every run of every experiment a seed of its own"
    fresh = fresh_seeds(tmp_path, 6, used)
    assert len(set(fresh)) == 6 and not set(fresh) & used
    assert fresh_seeds(tmp_path, 6, used) == fresh, "the same draws for the same folder"
    forced = fresh_seeds(tmp_path, 2, used | {fresh[0]})
    assert fresh[0] not in forced and forced[0] == fresh[1]
    journal = tmp_path / "journal.jsonl"
    first = claim_seeds(tmp_path, journal, 2, 300)
    journal.write_text(json.dumps({"kind": "claim", "commit": "a" * 40, "seeds": first, "runs": [2.0, 2.1]}) + "\n")
    second = claim_seeds(tmp_path, journal, 2, 300)
    assert not set(first) & set(second) and not set(first + second) & (used | set(fresh))


def test_no_threshold_on_the_seed_tells_a_loop_run_from_a_re_measurement():
    """The tell seeds counted from fixed bases gave (loop runs from 1,000, re-measurements from
    1,000,000): the best cut on the seed's value separated them perfectly. Drawn with a key, the
    best cut does little better than a coin."""
    key = seeds.named_key("test")
    loop = sorted(seeds.loop_seeds(key, 40, 12))[:500]
    fresh = seeds.fresh(key, 500, set(loop))
    claims = seeds.fresh(key, 500, set(loop), seeds.CLAIM)
    for other in (fresh, claims):
        marked = sorted([(s, 0) for s in loop] + [(s, 1) for s in other])
        below = [0, 0]
        best = 0.5
        for _, kind in marked:   # a cut after each seed: "below the cut is a loop run", or the other way
            below[kind] += 1
            right = below[0] + (len(other) - below[1])
            best = max(best, right / len(marked), 1 - right / len(marked))
        assert best < 0.56, best
    assert min(loop + fresh) >= 0 and max(loop + fresh) <= seeds.SEED_MASK


PROBE = """import json, os
a = os.environ["AUTORESEARCH_ARTIFACT"]
seen = {"artifact": a, "cwd": os.getcwd(), "near": sorted(os.listdir(os.path.dirname(a))),
        "env": sorted(k for k in os.environ if k.startswith("AUTORESEARCH_") and k not in ("AUTORESEARCH_SEED",
                                                                                          "AUTORESEARCH_CLOCK")),
        "key": os.path.exists(KEY_PATH)}
open(a, "w").write("weights")
print("PROBE " + json.dumps(seen))
print("---")
print("val_bpb: 1.0")
"""


@pytest.mark.skipif(not detect().sealed and not os.environ.get("CI"), reason="needs bubblewrap (apt-get install bubblewrap)")
def test_a_sandboxed_run_sees_one_output_folder_whatever_its_number(tmp_path):
    """A loop's experiment 3 and a re-measurement's job (numbered from JOB_N_BASE) see the same
    artifact path, the same folder around it and the same variables; neither sees the seed key.
    What each wrote lands in its own numbered folder outside."""
    run_dir, work = tmp_path / "run", tmp_path / "run" / ".runs" / "slot-0"
    work.mkdir(parents=True)
    key = seeds.key_of(run_dir)
    (work / "probe.py").write_text(f"KEY_PATH = {str(run_dir / seeds.KEY_FILE)!r}\n" + PROBE)
    seen = {}
    for n in (3, JOB_N_BASE + 3):
        spec = RunSpec(work, run_dir, n, 30, timeout=120, script="probe.py", view=RunView(sandbox=detect()),
                       env={"AUTORESEARCH_SEED": str(seeds.draw(key, f"x {n}"))},
                       place=RunPlace(log_name=f"probe-{n}.log"))
        run = run_train(spec)
        assert run.crash_class is None, run.log_tail
        line = next(x for x in (run_dir / "logs" / f"probe-{n}.log").read_text().splitlines() if "PROBE " in x)
        seen[n] = json.loads(line.split("PROBE ", 1)[1])
        assert (run_dir / "artifacts" / f"exp-{n:04d}" / "model.pt").read_text() == "weights"
    loop_view, job_view = seen.values()
    assert loop_view == job_view, seen
    assert loop_view["artifact"] == str(ARTIFACT_INSIDE / "model.pt") and loop_view["key"] is False



def test_a_corrupt_key_stops_a_resume_with_its_message_and_loses_nothing(tmp_path):
    """The loop checks its run folder's key at setup: a resume that finds it corrupt stops before any
    run (exit 2, the file named), and the night's records are as they were."""
    from tests.loop_fixtures import fake_env, fake_repo, run_loop
    repo, env = fake_repo(tmp_path / "repo"), fake_env(tmp_path)
    p = run_loop(repo, env, "--tag", "k", "--max-experiments", "1", "--budget", "30")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    run_dir = repo / ".autoresearch" / "k"
    key = seeds.key_of(run_dir)
    assert len(key) == seeds.KEY_BYTES and "seed-key" not in p.stdout
    before = {name: (run_dir / name).read_bytes() for name in ("results.tsv", "journal.jsonl")}
    (run_dir / seeds.KEY_FILE).write_text("0123\n")
    p = run_loop(repo, env, "--tag", "k", "--resume", "--max-experiments", "2", "--budget", "30")
    assert p.returncode == 2 and "not a seed key" in p.stderr and str(run_dir / seeds.KEY_FILE) in p.stderr, p.stderr
    assert {name: (run_dir / name).read_bytes() for name in before} == before
    assert (run_dir / seeds.KEY_FILE).read_text() == "0123\n"
