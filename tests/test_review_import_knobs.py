"""An imported run's knob moves survive into its candidate, even a move back to the repository's
own value; the tag's baseline is the project's train.py with the profile's values. A tiny-profile
run that had moved ASPECT_RATIO 32 -> 64 (the repository's value) and kept it was once continued
from ASPECT_RATIO 32, its best change undone (seen importing a smoke tag): the profile's values are
written only where the imported run left a knob at its first value."""
import shutil
import subprocess
import sys

from agent import import_run, workspace
from search import knobs
from harness.job import RUN_SOURCES
from harness.experiment_record import experiment_records
from harness.results import read_journal
from tests.loop_fixtures import REPO, git

TINY_ASPECT = 32      # runtime.PROFILE_KNOBS["ASPECT_RATIO"]: (64, 32)


def made_repo(tmp):
    repo = tmp / "repo"
    repo.mkdir()
    for f in RUN_SOURCES:
        shutil.copy(REPO / f, repo / f)
    git(repo, "init", "-q", "-b", "master")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    return repo


def commit(repo, source, message):
    (repo / "train.py").write_text(source)
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", message)
    return git(repo, "rev-parse", "--short", "HEAD")


def test_a_knob_moved_back_to_the_repository_value_survives_into_the_candidate(tmp_path):
    repo = made_repo(tmp_path)
    src = (repo / "train.py").read_text()
    assert knobs.values(src)["ASPECT_RATIO"] == 64
    git(repo, "checkout", "-q", "-b", "autoresearch/orig")
    tiny = knobs.for_profile(src, "tiny", (repo / "runtime.py").read_text())[0]
    assert knobs.values(tiny)["ASPECT_RATIO"] == TINY_ASPECT
    base = commit(repo, tiny, "baseline: the tiny profile's knob values")
    wide = commit(repo, knobs.set_knobs(tiny, {"ASPECT_RATIO": 64}), "ASPECT_RATIO 32 -> 64")
    git(repo, "checkout", "-q", "master")
    results = tmp_path / "results.tsv"
    results.write_text("commit\tval_bpb\tmemory_gb\tstatus\tdescription\n"
                       f"{base}\t2.708876\t0.7\tkeep\tbaseline\n{wide}\t2.680050\t0.7\tkeep\tASPECT_RATIO 32 -> 64\n")
    p = subprocess.run([sys.executable, str(REPO / "agent" / "import_run.py"), "--repo", str(repo), "--branch",
                        "autoresearch/orig", "--results", str(results), "--tag", "imp"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    wt = repo / ".autoresearch" / "imp"
    head = git(wt, "rev-parse", "HEAD")
    tag_base = workspace.commit_profile_knobs(wt, "tiny", head)   # what the first --resume does
    assert knobs.values((wt / "train.py").read_text()) == knobs.values(tiny), \
        "the baseline: the project's own train.py in the profile's values"
    history = experiment_records(read_journal(wt / "journal.jsonl")[0])
    p = import_run.tip_proposal(repo, wt, history, "tiny", tag_base)
    now = knobs.values(p.source)
    assert now["ASPECT_RATIO"] == 64, "the imported keep was undone"
    assert now["DEPTH"] == knobs.values(tiny)["DEPTH"]      # the profile's other knobs, as before
    assert p.proposer == import_run.TIP_PROPOSER and p.description == "imported tip of autoresearch/orig"


def test_a_tag_that_was_not_imported_has_no_imported_candidate(tmp_path):
    repo = made_repo(tmp_path)
    head = git(repo, "rev-parse", "HEAD")
    assert import_run.tip_proposal(repo, repo, [], "tiny", head) is None
    assert import_run.moved_knobs(repo, None, (repo / "train.py").read_text()) == \
        set(knobs.values((repo / "train.py").read_text())), "an unreadable first row: every knob is the run's"
