"""agent/gitops.py against real git repos in tmp: worktree, commit one file, refs, reset, notes."""
import pytest

from agent import gitops
from tests.loop_fixtures import git, make_repo


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo", {"train.py": "DEPTH = 4  # layers\n", "other.py": "x = 1\n"})


def test_worktree_commit_discard_reset(repo, tmp_path):
    user_head = git(repo, "rev-parse", "HEAD")
    wt = repo / ".autoresearch" / "t"
    base = gitops.create_worktree(repo, "t", wt)
    assert base == user_head and gitops.branch_exists(repo, "t")
    (wt / "train.py").write_text("DEPTH = 5  # layers\n")
    (wt / "other.py").write_text("x = 2\n")          # must NOT be committed
    (wt / "results.tsv").write_text("junk\n")         # untracked run file, never committed
    c1 = gitops.commit_file(wt, "train.py", "deeper\n\nHypothesis: more layers")
    assert git(repo, "show", "--name-only", "--format=", c1) == "train.py"
    assert gitops.parent_of(repo, c1) == base
    assert "-DEPTH = 4" in gitops.diff(repo, base, c1) and "+DEPTH = 5" in gitops.diff(repo, base, c1)

    ref = gitops.discarded_ref("t", 2)
    gitops.update_ref(repo, ref, c1)
    gitops.reset_hard(wt, base)
    assert gitops.head(wt) == base and (wt / "train.py").read_text() == "DEPTH = 4  # layers\n"
    assert gitops.show_file(repo, ref, "train.py") == "DEPTH = 5  # layers\n"
    assert gitops.list_refs(repo, "refs/autoresearch/t/") == {ref: c1}
    assert (wt / "results.tsv").exists(), "reset --hard leaves untracked run files alone"

    # the user's checkout: same HEAD, same branch, uncommitted edits intact
    assert git(repo, "rev-parse", "HEAD") == user_head
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "master"
    assert "with an uncommitted edit" in (repo / "notes.txt").read_text()
    assert (repo / "train.py").read_text() == "DEPTH = 4  # layers\n"


def test_existing_branch_refused_by_git(repo):
    gitops.create_worktree(repo, "t", repo / ".autoresearch" / "t")
    with pytest.raises(gitops.GitError):
        gitops.create_worktree(repo, "t", repo / ".autoresearch" / "t2")


def test_notes_and_ancestry(repo):
    wt = repo / ".autoresearch" / "t"
    base = gitops.create_worktree(repo, "t", wt)
    (wt / "train.py").write_text("DEPTH = 6  # layers\n")
    c = gitops.commit_file(wt, "train.py", "deeper")
    gitops.add_note(repo, c, "keep val_bpb=1.0")
    gitops.add_note(repo, c, "keep val_bpb=0.9")   # replaced, not duplicated
    assert gitops.read_note(repo, c) == "keep val_bpb=0.9"
    assert gitops.is_ancestor(repo, base, c) and not gitops.is_ancestor(repo, c, base)
    assert gitops.rev_list(repo, "autoresearch/t") == [c, base]
    assert gitops.rev_parse(repo, "refs/heads/nope") is None


def test_merge_file_rebases_or_reports_conflict():
    base = "A = 1\nB = 2\nC = 3\n"
    ours = "A = 10\nB = 2\nC = 3\n"
    theirs = "A = 1\nB = 2\nC = 30\n"
    assert gitops.merge_file(ours, base, theirs) == "A = 10\nB = 2\nC = 30\n"
    assert gitops.merge_file(ours, base, "A = 99\nB = 2\nC = 3\n") is None
