"""Nothing lost: torn record files, a full disk, a refused second loop, ignored run files.

The full-disk tests use a REAL small filesystem: a tmpfs mounted for the test (needs root, as in
this project's CI container). Where mounting is not allowed they fall back to RLIMIT_FSIZE (the
kernel refuses writes past a file size with EFBIG, which the harness treats like ENOSPC) for the
unit test, and skip the end-to-end test, saying so.
"""
import contextlib
import errno
import fcntl
import json
import resource
import subprocess
from pathlib import Path

import pytest

from agent.coordinator import undecided
from agent import envcheck
from harness.experiment_record import ExperimentRecord
from harness.results import (OutOfSpace, append_journal, append_line, append_result, init_results, is_json_object,
                             read_journal, read_results, repair_torn)
from tests.loop_fixtures import (FAKE_PREPARE, FAKE_TRAIN, REPO, fake_env, fake_repo, git, make_repo,
                                 run_loop)


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str):
    """A tmpfs of `size` mounted at `where` for the duration; None when mounting is not allowed."""
    where.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(path: Path) -> None:
    """Write zeros to `path` until the filesystem refuses (ENOSPC)."""
    with open(path, "wb", buffering=0) as f:
        chunk = b"\0" * 65536
        while True:
            try:
                f.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return
                chunk = chunk[: len(chunk) // 2]


# ---- torn lines ---------------------------------------------------------------------------------

def test_append_never_glues_onto_a_torn_results_line(tmp_path, capfd):
    path = tmp_path / "results.tsv"
    init_results(path)
    append_result(path, "a" * 40, 1.0, 1.0, "keep", "first")
    append_result(path, "b" * 40, 0.99, 1.0, "keep", "second experiment")
    whole = path.read_bytes()
    path.write_bytes(whole[:-4])   # torn: no newline, still 5 fields
    append_result(path, "c" * 40, 0.98, 1.0, "discard", "third")
    table = read_results(path)
    assert table.problems == []
    assert [r.description for r in table.rows] == ["first", "third"]
    torn = list(tmp_path.glob("results.tsv.torn-*"))
    assert len(torn) == 1 and torn[0].read_bytes() == whole[:-4].split(b"\n")[-1]
    assert "torn last line" in capfd.readouterr().err


def test_journal_tail_whole_record_gets_its_newline_partial_is_quarantined(tmp_path):
    path = tmp_path / "journal.jsonl"
    append_journal(path, {"n": 1})
    path.write_bytes(path.read_bytes()[:-1])          # a whole record without its newline
    assert "added the newline" in repair_torn(path, is_json_object)
    assert read_journal(path)[0] == [{"n": 1}]
    with open(path, "ab") as f:
        f.write(b'{"n": 2, "desc')                    # half a record
    append_journal(path, {"n": 3})
    records, problems = read_journal(path)
    assert [r["n"] for r in records] == [1, 3] and problems == []
    assert list(tmp_path.glob("journal.jsonl.torn-*"))[0].read_bytes() == b'{"n": 2, "desc'


def test_a_failed_append_leaves_no_partial_line_on_a_full_filesystem(tmp_path):
    big = json.dumps({"n": 2, "diff": "x" * 20000}) + "\n"
    with small_tmpfs(tmp_path / "fs", "256k") as fs:
        if fs is not None:   # a real full disk: ENOSPC after a partial write of the record
            path = fs / "journal.jsonl"
            append_line(path, json.dumps({"n": 1}))
            fill(fs / "filler")
            before = path.read_bytes()
            with pytest.raises(OutOfSpace) as info:
                append_line(path, big, complete=is_json_object)
            assert info.value.errno == errno.ENOSPC
            assert path.read_bytes() == before, "the partial record was cut back off"
            return
    # no mount allowed: RLIMIT_FSIZE stands in (EFBIG past the limit; Python ignores SIGXFSZ)
    path = tmp_path / "journal.jsonl"
    append_line(path, json.dumps({"n": 1}))
    before = path.read_bytes()
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 100, old[1]))
    try:
        with pytest.raises(OutOfSpace):
            append_line(path, big, complete=is_json_object)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
    assert path.read_bytes() == before


def _two_experiments(tmp_path, tag):
    repo = fake_repo(tmp_path / "repo")
    env = fake_env(tmp_path)
    p = run_loop(repo, env, "--tag", tag, "--budget", "1", "--max-experiments", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    return repo, env, repo / ".autoresearch" / tag


def _agree(wt: Path, n: int):
    """results.tsv and journal.jsonl hold the same n experiments, one to one, and nothing torn."""
    table = read_results(wt / "results.tsv")
    records, problems = read_journal(wt / "journal.jsonl")
    assert table.problems == [] and problems == []
    assert [r["n"] for r in records] == list(range(1, n + 1))
    assert len(table.rows) == n
    for rec, row in zip(records, table.rows):
        assert (row.commit, row.status, row.description) == \
               (rec["commit"][:7], rec["status"], rec["description"])
    for name in ("results.tsv", "journal.jsonl", "traces.jsonl"):
        assert (wt / name).read_bytes().endswith(b"\n")
    return records, table.rows


def test_resume_rebuilds_a_torn_results_row_from_the_journal(tmp_path):
    repo, env, wt = _two_experiments(tmp_path, "tr")
    whole = (wt / "results.tsv").read_bytes()
    (wt / "results.tsv").write_bytes(whole[:-3])   # a cut seen in practice: 5 fields, description shortened
    p = run_loop(repo, env, "--tag", "tr", "--budget", "1", "--max-experiments", "3", "--resume")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "results.tsv: cut a torn last line" in p.stdout
    assert "results.tsv: rebuilt the missing row of experiment 2 from the journal" in p.stdout
    _agree(wt, 3)
    assert (wt / "results.tsv").read_bytes().startswith(whole), "row 2 rebuilt whole, at its place"


def test_resume_recovers_a_torn_journal_record_from_results(tmp_path):
    repo, env, wt = _two_experiments(tmp_path, "tj")
    journal = (wt / "journal.jsonl").read_bytes()
    (wt / "journal.jsonl").write_bytes(journal[:-40])
    p = run_loop(repo, env, "--tag", "tj", "--budget", "1", "--max-experiments", "3", "--resume")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "journal.jsonl: cut a torn last line" in p.stdout
    assert "journal: recovered a minimal record of experiment 2 from results.tsv" in p.stdout
    records, _ = _agree(wt, 3)
    assert records[1].get("recovered") is True


def test_resume_inserts_a_row_lost_in_the_middle(tmp_path):
    repo, env, wt = _two_experiments(tmp_path, "mid")
    lines = (wt / "results.tsv").read_text().splitlines(True)
    (wt / "results.tsv").write_text(lines[0] + lines[2])    # row of experiment 1 lost
    p = run_loop(repo, env, "--tag", "mid", "--budget", "1", "--max-experiments", "2", "--resume")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rebuilt the missing row of experiment 1" in p.stdout
    _agree(wt, 2)


# ---- a full disk --------------------------------------------------------------------------------

# train.py that fills its filesystem right after printing its summary (experiment FAKE_FILL_AT).
FILLING_TRAIN = FAKE_TRAIN.replace('''if __name__ == "__main__":
    main()
''', '''if __name__ == "__main__":
    main()
    fill = os.environ.get("FAKE_FILL_FILE")
    if fill and (os.environ["FAKE_FILL_AT"] + os.sep) in os.environ.get("AUTORESEARCH_ARTIFACT", ""):
        if os.environ.get("FAKE_BIG_SUMMARY"):   # a journal record larger than a page: its append fails
            print(f"{'note:':<18}" + "n" * 9000)
        sys.stdout.flush()
        with open(fill, "wb", buffering=0) as f:
            block = b"0" * 4096
            while True:
                try:
                    f.write(block)
                except OSError:
                    if len(block) == 1:
                        break
                    block = block[:len(block) // 2]
        leave = int(os.environ.get("FAKE_FILL_LEAVE", "0"))   # bytes handed back: nearly full
        if leave:
            os.truncate(fill, max(0, os.path.getsize(fill) - leave))
''')


@pytest.mark.parametrize("when", ["before_next", "in_record"])
def test_full_disk_stops_cleanly_and_resume_loses_nothing(tmp_path, when):
    """The disk fills while experiment 3 trains. before_next: its small records still fit in the
    files' last pages and the free-space check refuses experiment 4. in_record: its journal record
    (9 KB) needs new pages, so append_journal itself hits ENOSPC part-way through the line."""
    with small_tmpfs(tmp_path / "fs", "16m") as fs:
        if fs is None:
            pytest.skip("cannot mount a tmpfs here (not root); the unit test above covers the "
                        "partial write with RLIMIT_FSIZE")
        program = (REPO / "program.md").read_text()
        repo = make_repo(tmp_path / "repo", {"prepare.py": FAKE_PREPARE, "train.py": FILLING_TRAIN,
                                             "program.md": program})
        filler = fs / "filler"
        # before_next: the disk is left nearly full (256 KB free), so experiment 3's records and the
        # offline sampler's study writes fit whatever their size, and the free-space check
        # (several MB) refuses experiment 4
        env = fake_env(tmp_path, FAKE_FILL_FILE=filler, FAKE_FILL_AT="exp-0003",
                       **({"FAKE_BIG_SUMMARY": "1"} if when == "in_record" else {"FAKE_FILL_LEAVE": "262144"}))
        args = ("--tag", "full", "--budget", "1", "--worktree-root", str(fs), "--max-experiments", "4")
        p = run_loop(repo, env, *args)
        out = p.stdout + p.stderr
        assert p.returncode == 75, out
        stops = [l for l in out.splitlines() if "out of disk space" in l]
        assert len(stops) == 1 and "--resume" in stops[0] and "MB" in stops[0], out
        assert "Traceback" not in out
        wt = fs / "full"
        table = read_results(wt / "results.tsv")
        records, _ = read_journal(wt / "journal.jsonl")
        assert len(table.rows) == len(records), "whole records only, in both files"
        for name in ("results.tsv", "journal.jsonl"):
            data = (wt / name).read_bytes()
            assert data.endswith(b"\n"), f"{name} was left torn"
        assert len(records) == (3 if when == "before_next" else 2)
        if when == "in_record":   # the unrecorded experiment is parked for --resume
            assert git(repo, "for-each-ref", "refs/autoresearch/full/interrupted/3")
            assert [p.n for p in undecided(read_journal(wt / "journal.jsonl", kind=None)[0])] == [3]
        kept = [r["commit"] for r in records if r["status"] == "keep"]
        assert git(repo, "rev-parse", "autoresearch/full") == (kept[-1] if kept else git(repo, "rev-parse", "master"))

        # still full: --resume refuses to start the next experiment, says what it needs, changes nothing
        again = run_loop(repo, env, *args, "--resume")
        assert again.returncode == 75 and "needs about" in again.stderr, again.stdout + again.stderr
        assert len(read_journal(wt / "journal.jsonl")[0]) == len(records)

        filler.unlink()   # space returns
        done = run_loop(repo, dict(env, FAKE_FILL_AT="never"), *args, "--resume")
        assert done.returncode == 0, done.stdout + done.stderr
        _agree(wt, 4)


def test_prune_keeps_kept_and_recent_artifacts(tmp_path):
    art = tmp_path / "artifacts"
    art.mkdir()
    for n in range(1, 8):   # each run's output folder (harness/runner.py): artifacts/exp-NNNN/model.pt
        (art / f"exp-{n:04d}").mkdir()
        (art / f"exp-{n:04d}" / "model.pt").write_bytes(b"x" * 1000 * n)
    history = [ExperimentRecord.of(n=n, status="keep" if n in (1, 3) else "discard") for n in range(1, 8)]
    removed = envcheck.prune_artifacts(tmp_path, history, keep_last=2)
    assert sorted(removed) == ["exp-0002", "exp-0004", "exp-0005"]
    assert sorted(p.name for p in art.iterdir()) == ["exp-0001", "exp-0003", "exp-0006", "exp-0007"]
    # the need estimate grows with the largest artifact seen
    assert envcheck.bytes_needed(tmp_path) == int(envcheck.GROWTH_FACTOR * 7000) + envcheck.RECORDS_MARGIN_BYTES


# ---- a refused second loop, git-ignored run files -----------------------------------------------

def test_refused_second_loop_touches_nothing(tmp_path):
    repo, env, wt = _two_experiments(tmp_path, "busy")
    state = json.loads((wt / "state.json").read_text())
    state.update(phase="training", pid=424242)   # as a live loop would show it
    (wt / "state.json").write_text(json.dumps(state))
    with open(wt / "loop.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.truncate(0)
        held.write("424242")
        held.flush()
        files = {p.name: p.read_bytes() for p in wt.iterdir() if p.is_file()}
        refs = git(repo, "for-each-ref")
        p = run_loop(repo, env, "--tag", "busy", "--budget", "1", "--max-experiments", "3", "--resume")
        assert p.returncode == 2 and "loop.lock is held" in p.stderr
        assert {p.name: p.read_bytes() for p in wt.iterdir() if p.is_file()} == files
        assert git(repo, "for-each-ref") == refs
        assert json.loads((wt / "state.json").read_text())["phase"] == "training"


def test_run_files_and_bookkeeping_are_ignored_by_git_in_the_worktree(tmp_path):
    repo, env, wt = _two_experiments(tmp_path, "ign")
    assert not (repo / ".gitignore").exists(), "the base commit ignores nothing itself"
    for name in ("pending.json", "child.pid", "state.json.abc123.tmp", "results.tsv.torn-20260101T000000"):
        (wt / name).write_text("x")
    assert (wt / "loop.lock").exists()
    assert git(wt, "status", "--porcelain", "--untracked-files=all") == ""
