"""The fixed files beside train.py (harness/job.py FIXED_SOURCES) are all treated alike:
the guard refuses an edit to any of them, and a sealed run sees each one from its own commit and
nothing else of the project. graph_export.py (the model-graph recorder, save_model) is one of them,
exactly like runtime.py, which re-exports it."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from agent.judges.guard import guard
from agent.gitops import sources_at
from harness.job import FIXED_SOURCES, RUN_SOURCES
from harness.job import materialise
from harness.sandbox import View, detect

REPO = Path(__file__).resolve().parent.parent
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}

# A train.py for the sealed run: saves a tiny model through runtime.save_model (graph_export's, as
# train.py's own save does) and says where the recorder came from.
PROBE = textwrap.dedent('''
    import json, sys
    import graph_export   # first: a folder without it fails here, before torch is imported
    import torch
    import runtime
    model = torch.nn.Sequential(torch.nn.Embedding(16, 4), torch.nn.Linear(4, 16))
    runtime.save_model(model, sys.argv[1], {"d": 4}, "sha", 16, 8)
    print(json.dumps({"graph_export": graph_export.__file__, "runtime": runtime.__file__,
                      "same": runtime.save_model is graph_export.save_model}))
''')


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=GIT_ENV).stdout


@pytest.fixture
def project(tmp_path):
    """A git worktree holding the real train.py and fixed files, committed."""
    wt = tmp_path / "wt"
    wt.mkdir()
    for name in RUN_SOURCES:
        (wt / name).write_text((REPO / name).read_text())
    (wt / ".gitignore").write_text("__pycache__/\n")
    git(wt, "init", "-q")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    return wt


def test_graph_export_is_a_fixed_source_like_runtime():
    assert {"runtime.py", "graph_export.py", "attention.py", "prepare.py"} <= set(FIXED_SOURCES)
    assert set(RUN_SOURCES) == {"train.py", *FIXED_SOURCES}
    for name in FIXED_SOURCES:
        assert (REPO / name).is_file(), f"{name} is named fixed but is not in the repository"


@pytest.mark.parametrize("name", FIXED_SOURCES)
def test_the_guard_refuses_an_edit_to_each_fixed_file(project, name):
    src = (project / "train.py").read_text()
    new = src.replace("DEPTH = 8", "DEPTH = 6", 1)
    assert new != src, "anchor DEPTH = 8 vanished from train.py; update the test"
    ctx = SimpleNamespace(worktree=project, old_source=src, new_source=new,
                          diff="--- a\n+++ b\n-DEPTH = 8\n+DEPTH = 6\n")
    (project / "train.py").write_text(new)
    honest = guard(ctx)
    assert honest.ok, honest.reason              # the train.py edit alone passes
    with open(project / name, "a") as f:
        f.write("\n# an edit of a fixed file\n")
    v = guard(ctx)
    assert not v.ok and v.details["stray"] == [name] and name in v.reason


@pytest.mark.skipif(not detect().sealed and not os.environ.get("CI"),
                    reason="needs bubblewrap (apt-get install bubblewrap)")
def test_a_sealed_run_imports_graph_export_from_its_own_commit(project, tmp_path):
    box = detect()
    files = sources_at(project, "HEAD")
    assert set(files) == set(RUN_SOURCES) and files["graph_export.py"] == (REPO / "graph_export.py").read_text()
    files["train.py"] = PROBE
    out = tmp_path / "out"

    def run(folder):
        view = View(cwd=folder, writable=[out])
        return box.run([sys.executable, "train.py", str(out / "model.pt")], view, dict(os.environ),
                       capture_output=True, text=True, timeout=300)

    folder = materialise(files, tmp_path / "run")
    res = run(folder)
    assert res.returncode == 0, res.stderr[-3000:]
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    assert seen["same"] is True
    assert Path(seen["graph_export"]).parent == folder.resolve() == Path(seen["runtime"]).parent
    art = torch.load(out / "model.pt", weights_only=True)
    assert json.loads(art["graph"])["format"] == "autoresearch-graph/1" and art["config"] == {"d": 4}
    # without graph_export.py in its folder the run has no recorder: nothing else of the project shows
    bare = materialise({k: v for k, v in files.items() if k != "graph_export.py"}, tmp_path / "bare")
    res = run(bare)
    assert res.returncode != 0 and "No module named 'graph_export'" in res.stderr
