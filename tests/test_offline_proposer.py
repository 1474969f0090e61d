"""agent/proposers/offline.py: the Optuna (TPE) sampler over the knob block, persisted in the run folder."""
import difflib
import json
import fnmatch
import math
import os
import signal
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from agent.coordinator import InFlight
from agent.proposers.base import Proposal, ProposalError, ProposalRequest, Proposer
from agent.proposers import space as knob_space
from agent.proposers.offline import FROZEN_RE, STUDY_FILE, KnobStudy, OfflineProposer, knob_spec, neighbors
from agent import gitops
from search import knobs
from harness.experiment_record import ExperimentRecord
from tests.loop_fixtures import FAKE_TRAIN, REPO

REAL = (REPO / "train.py").read_text()


def request(folder, source, history=(), n=2, seed=0, **kw):
    return ProposalRequest(n=n, worktree=folder, train_source=source, program="", history=list(history),
                           best=None, seed=seed, **kw)


def record(n, source, status, bpb, parent=None, commit=None):
    return ExperimentRecord.from_dict({"n": n, "parent": parent, "commit": commit or f"c{n}", "status": status,
                                       "summary": {"val_bpb": bpb} if bpb is not None else None,
                                       "config": knobs.values(source), "code": knobs.code_fingerprint(source)})


def in_flight(n, source=None, description="(being proposed)"):
    """An experiment in flight as the loop hands it to a proposer (agent/coordinator.py)."""
    return InFlight(n=n, parent=None, description=description,
                    config=knobs.values(source) if source else None,
                    code=knobs.code_fingerprint(source) if source else None)


def changed_lines(a, b):
    return [l for l in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
            if l[:1] in "+-" and not l.startswith(("+++", "---"))]


def trials(folder):
    return optuna.load_study(study_name="knobs", storage=f"sqlite:///{folder / STUDY_FILE}").get_trials()


def test_protocol_and_an_honest_knob_only_diff(tmp_path):
    p = OfflineProposer()
    assert isinstance(p, Proposer) and p.name == "offline"
    prop = p.propose(request(tmp_path, REAL))
    assert isinstance(prop, Proposal) and prop.proposer == "offline" and prop.model is None
    before, after = knobs.values(REAL), knobs.values(prop.source)
    moved = [k for k in before if before[k] != after[k]]
    assert moved and len(changed_lines(REAL, prop.source)) == 2 * len(moved), "only knob lines change"
    assert len(prop.description) <= 200, "results.tsv keeps 200 characters"
    shown = prop.hypothesis if "more knobs)" in prop.description else prop.description
    for name in moved:
        assert not FROZEN_RE.search(name)
        assert f"{name} {knobs.format_literal(before[name])} -> {knobs.format_literal(after[name])}" in shown
    assert prop.description.startswith("optuna tpe: ") and "random draw" in prop.hypothesis
    small = OfflineProposer().propose(request(tmp_path / "small", FAKE_TRAIN))
    assert "more knobs" not in small.description and "All changes" not in small.hypothesis
    assert (tmp_path / STUDY_FILE).exists() and "trial 0" in prop.notes
    compile(prop.source, "train.py", "exec")
    # the study file is a run file: the worktree cleaner and the seal leave it alone
    assert any(fnmatch.fnmatch(STUDY_FILE, pat) for pat in gitops.RUN_FILES)


def test_deterministic_for_a_seed(tmp_path):
    a = OfflineProposer().propose(request(tmp_path / "a", FAKE_TRAIN, seed=3))
    b = OfflineProposer().propose(request(tmp_path / "b", FAKE_TRAIN, seed=3))
    assert a.source == b.source and a.description == b.description
    seen = {OfflineProposer().propose(request(tmp_path / f"s{s}", FAKE_TRAIN, seed=s)).source for s in range(3)}
    assert len(seen) > 1, "different seeds explore differently"


def test_seeded_from_the_whole_history(tmp_path):
    deeper = knobs.set_knobs(FAKE_TRAIN, {"DEPTH": 5})
    wide = knobs.set_knobs(FAKE_TRAIN, {"WIDTH": 128})
    biased = knobs.set_knobs(FAKE_TRAIN, {"USE_BIAS": True})
    history = [record(1, FAKE_TRAIN, "keep", 1.02), record(2, deeper, "keep", 1.01),
               record(3, wide, "crash", None), record(4, biased, "discard", None)]   # 4: refused, never ran
    history[1].trusted_bpb = 1.005                                                    # the trusted figure wins
    history[1].summary["val_bpb"] = "sealed"
    p = OfflineProposer()
    p.propose(request(tmp_path, deeper, history, n=5))
    got = {t.user_attrs.get("n"): t for t in trials(tmp_path)}
    assert got[1].state == TrialState.COMPLETE and got[1].value == 1.02 and got[1].params["DEPTH"] == 4
    assert got[2].value == 1.005 and got[2].params["DEPTH"] == 5
    assert got[3].state == TrialState.FAIL and got[3].params["WIDTH"] == 128
    assert 4 not in got, "nothing was measured for a refused proposal"
    asked = [t for t in trials(tmp_path) if t.user_attrs.get("asked_for") == 5]
    assert len(asked) == 1 and asked[0].state == TrialState.RUNNING
    # the experiment it proposed finishes: the sampled trial is told its result, nothing is added twice
    prop = p.propose(request(tmp_path, deeper, history, n=5))     # a redo of n=5 supersedes the first draw
    history.append(record(5, prop.source, "discard", 1.04))
    OfflineProposer().propose(request(tmp_path, deeper, history, n=6))
    all_trials = trials(tmp_path)
    mine = [t for t in all_trials if t.user_attrs.get("asked_for") == 5]
    assert sorted(t.state for t in mine) == sorted([TrialState.FAIL, TrialState.COMPLETE])
    assert [t.value for t in mine if t.state == TrialState.COMPLETE] == [1.04]
    assert sum(1 for t in all_trials if t.user_attrs.get("n") is not None) == 3


RESUME_SCRIPT = """
import sys
from pathlib import Path
from agent.proposers.base import ProposalRequest
from agent.proposers.offline import OfflineProposer
from search import knobs
from harness.experiment_record import ExperimentRecord
from tests.loop_fixtures import FAKE_TRAIN
folder = Path(sys.argv[1])
p = OfflineProposer()
history = [ExperimentRecord.of(n=1, status="keep", summary={"val_bpb": 1.0}, config=knobs.values(FAKE_TRAIN),
                            code=knobs.code_fingerprint(FAKE_TRAIN))]
for n in range(2, 5):
    prop = p.propose(ProposalRequest(n=n, worktree=folder, train_source=FAKE_TRAIN, program="",
                                     history=history, best=None))
    history.append(ExperimentRecord.of(n=n, status="discard", summary={"val_bpb": 1.0 + n / 100},
                                    config=knobs.values(prop.source), code=knobs.code_fingerprint(prop.source)))
    print(repr(history[-1].to_dict()), flush=True)
print("READY", flush=True)
import time
time.sleep(60)
"""


def test_resumes_its_study_after_kill_9(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", RESUME_SCRIPT, str(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:
        if line.strip() == "READY":
            break
        lines.append(line)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL and len(lines) == 3
    history = [record(1, FAKE_TRAIN, "keep", 1.0)] + [ExperimentRecord.from_dict(eval(l)) for l in lines]
    before = trials(tmp_path)
    assert len([t for t in before if t.user_attrs.get("asked_for")]) == 3, "the killed process's draws persisted"
    prop = OfflineProposer().propose(request(tmp_path, FAKE_TRAIN, history, n=5))
    after = trials(tmp_path)
    assert len(after) == len(before) + 1, "one new draw: the study continued where the killed process left it"
    done = {t.user_attrs.get("asked_for"): t.value for t in after if t.state == TrialState.COMPLETE}
    assert done == {None: 1.0, 2: 1.02, 3: 1.03, 4: 1.04}
    assert knobs.values(prop.source) not in [h.config for h in history]


def test_refuses_a_duplicate_and_names_it(tmp_path):
    src = "USE_A = False  # a switch\nUSE_B = False  # another\n"
    combos = [knobs.set_knobs(src, {"USE_A": a, "USE_B": b}) for a, b in ((False, False), (True, False), (False, True))]
    history = [record(i + 1, s, "discard", 1.0 + i / 10) for i, s in enumerate(combos)]
    prop = OfflineProposer().propose(request(tmp_path, src, history, n=4))
    assert knobs.values(prop.source) == {"USE_A": True, "USE_B": True}, "the one untried configuration"
    dups = [t for t in trials(tmp_path) if "duplicate_of" in t.user_attrs]
    assert all(t.state == TrialState.FAIL and t.user_attrs["duplicate_of"] in (1, 2, 3) for t in dups)
    with pytest.raises(ProposalError, match="all tried"):
        OfflineProposer().propose(request(tmp_path / "again", src, history, n=5, pending=[in_flight(4, prop.source)]))


def test_pending_experiment_counts_as_tried(tmp_path):
    src = "USE_A = False  # a switch\nDEPTH = 2  # layers\n"
    base, pending = [record(1, src, "keep", 1.0)], []
    seen = set()
    for n in range(2, 7):
        prop = OfflineProposer().propose(request(tmp_path, src, base, n=n, pending=pending))
        key = tuple(sorted(knobs.values(prop.source).items()))
        assert key not in seen
        seen.add(key)
        pending.append(in_flight(n, prop.source))


SYNTHETIC = """A_LR = 0.01  # a learning rate
B_RATIO = 0.3  # a fraction
C_BETA = 0.9  # a decay rate
N_LAYERS = 3  # layers
USE_X = False  # a switch
"""
# Known optimum: A_LR 0.03, B_RATIO 0.75, C_BETA 0.95, N_LAYERS 5, USE_X True -> 0.
OPTIMUM = {"A_LR": 0.03, "B_RATIO": 0.75, "C_BETA": 0.95, "N_LAYERS": 5, "USE_X": True}


def synthetic(v):
    return (math.log(v["A_LR"] / 0.03)) ** 2 + 4 * (v["B_RATIO"] - 0.75) ** 2 + 40 * (v["C_BETA"] - 0.95) ** 2 \
        + 0.05 * (v["N_LAYERS"] - 5) ** 2 + 0.1 * (not v["USE_X"])


def search(folder, sampler, seed, trials_n):
    """The loop's use of the proposer: each draw measured and recorded in the history it reads."""
    p = OfflineProposer(sampler)
    history = [record(1, SYNTHETIC, "keep", synthetic(knobs.values(SYNTHETIC)))]
    for n in range(2, trials_n + 2):
        prop = p.propose(request(folder, SYNTHETIC, history, n=n, seed=seed))
        history.append(record(n, prop.source, "discard", synthetic(knobs.values(prop.source))))
    return min(h.summary["val_bpb"] for h in history)


def test_tpe_beats_random_search_at_equal_trials(tmp_path):
    assert synthetic(OPTIMUM) == 0.0
    tpe = [search(tmp_path / f"tpe{s}", "tpe", s, 20) for s in range(2)]
    rnd = [search(tmp_path / f"rnd{s}", "random", s, 20) for s in range(2)]
    assert sum(tpe) < 0.5 * sum(rnd), (tpe, rnd)
    assert min(tpe) < 0.1, "TPE gets near the known optimum"


def test_refuses_to_fix_and_to_search_nothing(tmp_path):
    with pytest.raises(ProposalError):
        OfflineProposer().propose(request(tmp_path, REAL, fix_of=Proposal("d", "h", REAL, "offline")))
    with pytest.raises(ProposalError, match="no CAPS knob"):
        OfflineProposer().propose(request(tmp_path, "def build_model(c):\n    pass\n"))
    with pytest.raises(ValueError):
        OfflineProposer("grid")


def test_knob_ranges():
    assert knob_spec("MATRIX_LR", 0.02) == ["log", 0.003, 0.12], "search/knobs.py's range where it has one"
    assert knob_spec("DEPTH", 4) == ["int", 2, 6, 1]
    # a curated knob that starts outside its range is searched over the range and its own x4 both;
    # DEPTH, a size, follows its value (8 on a GPU)
    assert knob_spec("LOGIT_SOFTCAP", 3.0) == ["log", 0.75, 50.0]
    assert knob_spec("WEIGHT_DECAY", 0.5) == ["lin", 0.0, 2.0] and knob_spec("DEPTH", 8) == ["int", 6, 10, 1]
    assert knob_spec("TOTAL_BATCH_SIZE", 8192) == ["choice", [4096, 8192, 16384]]
    assert knob_spec("SEED", 42) is None and knob_spec("DEVICE_BATCH_SIZE", 8) is None
    assert knob_spec("LR", 0.04) == ["log", 0.01, 0.16]
    assert knob_spec("ADAM_BETA2", 0.95)[0] == "lin" and knob_spec("ADAM_BETA2", 0.95)[2] < 1
    assert knob_spec("WARMUP_RATIO", 0.0) == ["lin", 0.0, 0.2]
    assert knob_spec("USE_BIAS", False) == ["choice", [False, True]]
    assert knob_spec("ACT", "relu", "# one of relu|gelu|silu") == ["choice", ["relu", "gelu", "silu"]]
    assert set(neighbors("WINDOW_PATTERN", "SSSL")) == {"SSSS", "LLLL"}
    assert knob_spec("WIDTH", 96) == ["int", 48, 192, 8]


def test_space_grows_with_a_new_knob(tmp_path):
    ks = KnobStudy(tmp_path)
    assert set(ks.space(FAKE_TRAIN)) == {"DEPTH", "LR", "WIDTH", "USE_BIAS"}
    edited = FAKE_TRAIN.replace("USE_BIAS = False", "USE_BIAS = False\nDROPOUT = 0.1  # dropout")
    assert "DROPOUT" in KnobStudy(tmp_path).space(edited)
    assert knob_space.load(tmp_path)["LR"] == ["log", 0.01, 0.16], "the range is fixed"


def test_a_tag_that_kept_its_space_in_the_study_keeps_that_space(tmp_path):
    """A tag begun before knob_space.json existed: its space is read from the Optuna study's user
    attribute (with sqlite3, no Optuna), written to the JSON file, and its ranges are kept even
    where the current train.py would give others."""
    import optuna
    study = optuna.create_study(study_name="knobs", storage=f"sqlite:///{tmp_path / STUDY_FILE}")
    study.set_user_attr("space", {"LR": ["log", 0.001, 0.5]})
    del study
    space = knob_space.extend(tmp_path, FAKE_TRAIN)
    assert space["LR"] == ["log", 0.001, 0.5] and "DEPTH" in space
    assert json.loads((tmp_path / knob_space.SPACE_FILE).read_text())["LR"] == ["log", 0.001, 0.5]


def test_an_unreadable_space_file_is_said_not_replaced(tmp_path):
    (tmp_path / knob_space.SPACE_FILE).write_text("{not json")
    with pytest.raises(ProposalError, match="unreadable"):
        knob_space.extend(tmp_path, FAKE_TRAIN)
    assert (tmp_path / knob_space.SPACE_FILE).read_text() == "{not json"


def test_cmaes_sampler_is_offered(tmp_path):
    p = OfflineProposer("cmaes")
    prop = p.propose(request(tmp_path / "one", SYNTHETIC, [record(1, SYNTHETIC, "keep", 2.42)]))
    assert prop.description.startswith("optuna cmaes: ")
    start = synthetic(knobs.values(SYNTHETIC))
    assert search(tmp_path / "cma", "cmaes", 0, 12) < start, "it finds something better than the start"


def test_a_full_disk_under_the_study_is_an_out_of_space_error(tmp_path):
    """A real full filesystem (a small tmpfs, as in test_nothing_lost.py): SQLite's "database or disk
    is full" reaches the loop as an out-of-space error, so it stops cleanly (exit 75) for --resume."""
    from harness.results import is_out_of_space
    from tests.test_nothing_lost import small_tmpfs
    with small_tmpfs(tmp_path / "fs", "1m") as fs:
        if fs is None:
            pytest.skip("cannot mount a tmpfs here (not root)")
        p = OfflineProposer()
        p.propose(request(fs, FAKE_TRAIN))
        with open(fs / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"0" * 4096)
            except OSError:
                pass
        history = [ExperimentRecord.from_dict(record(n, knobs.set_knobs(FAKE_TRAIN, {"DEPTH": 2 + n % 5,
                                                                                     "LR": 0.01 + n / 10000}),
                                                     "discard", 1 + n / 1000).to_dict() | {"description": "x" * 2000})
                   for n in range(3, 300)]
        with pytest.raises(OSError) as got:
            p.propose(request(fs, FAKE_TRAIN, history, n=300))
        assert is_out_of_space(got.value) and STUDY_FILE in str(got.value)


def test_other_workers_trials_are_not_failed_while_they_run(tmp_path):
    """--workers 2 with the offline sampler: worker 1's proposal is still training when worker 2
    asks for one. The in-flight entry worker 2's request carries must keep worker 1's trial
    RUNNING (not told FAIL as 'superseded'), so its result reaches the study as a value."""
    from agent.coordinator import Coordinator, LockedProposer
    coord = Coordinator("c1")
    coord.history.append(record(1, SYNTHETIC, "keep", 1.0))
    shared = LockedProposer(OfflineProposer(), coord.proposer_lock)

    def propose_for(worker):
        n = coord.claim(worker, "c1")
        req = request(tmp_path, SYNTHETIC, list(coord.history), n=n, pending=coord.pending_for_proposer(exclude=n))
        prop = shared.propose(req)
        coord.proposed(n, prop)            # what agent/workers.py tells the coordinator
        return n, prop

    n2, p2 = propose_for(1)
    assert coord.pending_for_proposer()[0].config == knobs.values(p2.source)   # not proposed again
    n3, p3 = propose_for(2)                # worker 1's experiment is in flight meanwhile
    by_n = {t.user_attrs.get("asked_for"): t for t in trials(tmp_path)}
    assert by_n[n2].state == TrialState.RUNNING, "worker 1's running experiment was told FAIL"
    for n, prop, bpb in ((n2, p2, 0.9), (n3, p3, 1.2)):
        coord.finish(n)
        coord.history.append(record(n, prop.source, "discard", bpb))
    propose_for(1)                         # the next request syncs both results
    done = {t.user_attrs.get("asked_for"): t for t in trials(tmp_path)}
    assert (done[n2].state, done[n2].value) == (TrialState.COMPLETE, 0.9)
    assert (done[n3].state, done[n3].value) == (TrialState.COMPLETE, 1.2)
    assert sum(t.state == TrialState.FAIL for t in trials(tmp_path)) == 0


def test_an_adopted_experiment_without_a_config_stays_running(tmp_path):
    """An experiment resumed from a pending file is in flight with a description only: the study
    cannot tell its config, so its trial is left running rather than failed."""
    p = OfflineProposer()
    prop = p.propose(request(tmp_path, SYNTHETIC, [record(1, SYNTHETIC, "keep", 1.0)], n=2))
    p.propose(request(tmp_path, SYNTHETIC, [record(1, SYNTHETIC, "keep", 1.0)], n=3,
                      pending=[in_flight(2, description="resumed")]))
    states = {t.user_attrs.get("asked_for"): t.state for t in trials(tmp_path)}
    assert states[2] == TrialState.RUNNING and prop.source != SYNTHETIC
