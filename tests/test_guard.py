"""The guard on edits of the real train.py: honest edits pass, each kind of forbidden edit is refused."""
import difflib
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.judges.guard import check_source, diff_lines, guard, stray_changes
from harness.experiment_record import ExperimentRecord

REPO = Path(__file__).resolve().parent.parent
SRC = (REPO / "train.py").read_text()


def edit(old: str, new: str, src: str = SRC) -> str:
    assert old in src, f"anchor {old!r} vanished from train.py; update the test"
    return src.replace(old, new, 1)


def after_imports(code: str) -> str:
    return edit("import prepare\n", "import prepare\n" + code + "\n")


HONEST = {
    "learning rate": edit("MATRIX_LR = 0.04", "MATRIX_LR = 0.03"),
    "depth": edit("DEPTH = 8", "DEPTH = 6"),
    "architecture: gelu mlp": edit("F.relu(self.c_fc(x)).square()", "F.gelu(self.c_fc(x))"),
    "architecture: new module": edit("class MLP(nn.Module):", "class Scale(nn.Module):\n"
                                     "    def __init__(self, d):\n        super().__init__()\n"
                                     "        self.g = nn.Parameter(torch.ones(d))\n\n"
                                     "    def forward(self, x):\n        return x * self.g\n\n\n"
                                     "class MLP(nn.Module):"),
    "fewer startup steps": edit("STARTUP_STEPS = 10", "STARTUP_STEPS = 9"),
    "a cuda env setting": after_imports('os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"'),
    "a backend config": after_imports("torch.backends.cuda.matmul.allow_tf32 = True"),
    "a compiled helper": after_imports("from torch.nn.attention.flex_attention import flex_attention\n"
                                       "flex_attention = torch.compile(flex_attention, dynamic=False)"),
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_edits_pass(name):
    v = check_source(SRC, HONEST[name])
    assert v.ok, v.reason


CHEATS = {
    # rebinding prepare's constants / the budget
    "budget rebound": (after_imports("prepare.TIME_BUDGET = 600"), "monkeypatch"),
    "budget via from-import": (after_imports("from prepare import TIME_BUDGET\nTIME_BUDGET = 900"), "budget"),
    "budget doubled": (edit('"budget": prepare.TIME_BUDGET', '"budget": prepare.TIME_BUDGET * 2'), "budget"),
    "budget dropped": (edit('"budget": prepare.TIME_BUDGET', '"budget": 600.0'), "budget"),
    "untimed steps": (edit("STARTUP_STEPS = 10", "STARTUP_STEPS = 5000"), "budget"),
    "budget env": (edit("import prepare\n", 'os.environ["AUTORESEARCH_TIME_BUDGET"] = "900"\nimport prepare\n'), "env"),
    "seq len": (after_imports("prepare.MAX_SEQ_LEN = 16"), "monkeypatch"),
    # monkeypatching evaluation / time / torch
    "patched evaluate": (after_imports("prepare.evaluate_bpb = lambda model, tok, bs: 0.5"), "monkeypatch"),
    "setattr evaluate": (after_imports('setattr(prepare, "evaluate_bpb", lambda *a: 0.5)'), "monkeypatch"),
    "patched clock": (after_imports("time.time = lambda: 0.0"), "monkeypatch"),
    "shadowed clock": (after_imports("from time import perf_counter\nperf_counter = lambda: 0.0"), "monkeypatch"),
    "shadowed module": (after_imports("time = None"), "monkeypatch"),
    "patched loss": (after_imports("F.cross_entropy = lambda *a, **k: torch.zeros(())"), "monkeypatch"),
    "patched code": (after_imports("prepare.evaluate_bpb.__code__ = (lambda m, t, b: 0.5).__code__"), "dynamic"),
    "sys.modules": (after_imports('sys.modules["prepare"] = None'), "forbidden"),
    "private prepare": (after_imports("x = prepare.VAL_FILENAME"), "prepare_api"),
    # the validation split
    "val split": (edit('T, "train", device=device', 'T, "val", device=device'), "val_split"),
    "val split by variable": (edit('T, "train", device=device', 'T, SPLIT, device=device'), "val_split"),
    "extra evaluation": (edit("        eval_seconds = time.time() - t_eval",
                              "        eval_seconds = time.time() - t_eval\n"
                              "        again = prepare.evaluate_bpb(eval_model, tokenizer, rows)"), "eval_calls"),
    # network, processes, dynamic code
    "socket": (after_imports("import socket"), "network"),
    "urllib": (after_imports("from urllib.request import urlopen"), "network"),
    "requests": (after_imports("import requests"), "network"),
    "subprocess": (after_imports("import subprocess"), "process"),
    "os.system": (after_imports('os.system("curl example.com")'), "forbidden"),
    "exec": (after_imports('exec("x = 1")'), "dynamic"),
    "eval": (after_imports('y = eval("1 + 1")'), "dynamic"),
    "compile": (after_imports('c = compile("1", "f", "eval")'), "dynamic"),
    "__import__": (after_imports('m = __import__("socket")'), "dynamic"),
    "importlib": (after_imports("import importlib"), "dynamic"),
    "unknown module": (after_imports("import antigravity"), "import"),
    # writes outside the run's directory
    "write absolute": (after_imports('open("/tmp/leak.txt", "w").write("x")'), "write"),
    "write upwards": (after_imports('open("../prepare.py", "w")'), "write"),
    "write code": (after_imports('open("prepare.py", "a")'), "write"),
    # the seed
    "seed constant": (edit("SEED = 42", "SEED = 1337"), "seed"),
    "seed call": (edit("torch.manual_seed(seed)", "torch.manual_seed(seed + 7)"), "seed"),
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheating_edits_are_rejected(name):
    src, rule = CHEATS[name]
    v = check_source(SRC, src)
    assert not v.ok, f"{name} passed the guard"
    assert rule in v.details["rules"], (rule, v.details)
    assert v.reason.startswith("guard:")


def test_parse_failure_and_required_defs():
    v = check_source(SRC, SRC + "\ndef broken(:\n")
    assert not v.ok and v.details["rule"] == "syntax" and "does not parse" in v.reason
    v = check_source(SRC, edit("def build_model(config: dict) -> nn.Module:", "def make_model(config: dict) -> nn.Module:"))
    assert not v.ok and "build_model" in v.reason
    v = check_source(SRC, edit('os.environ.get("AUTORESEARCH_ARTIFACT")', 'os.environ.get("ARTIFACT")'))
    assert not v.ok and "AUTORESEARCH_ARTIFACT" in v.reason
    assert not check_source(SRC, SRC).ok


def test_preexisting_idioms_are_tolerated_but_not_a_second_copy():
    # train.py already reads a dtype by name (getattr: a "dynamic" idiom); a second copy is one more.
    idiom = 'getattr(torch, self.cfg["embed_dtype"])'
    assert idiom in SRC and check_source(SRC, edit("VE_GATE_CHANNELS = 32", "VE_GATE_CHANNELS = 16")).ok
    v = check_source(SRC, after_imports('DTYPE = getattr(torch, EMBED_DTYPE)'))
    assert not v.ok and "dynamic" in v.details["rules"]
    # an absolute path train.py never had (its ptxas lookup lives in runtime.py now)
    v = check_source(SRC, after_imports('found = sorted(glob.glob("/usr/local/cuda-13*/bin/ptxas"), reverse=True)'))
    assert not v.ok and "write" in v.details["rules"]


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})


def test_only_train_py_may_change(tmp_path):
    (tmp_path / "train.py").write_text(SRC)
    (tmp_path / "prepare.py").write_text("X = 1\n")
    (tmp_path / ".gitignore").write_text("results.tsv\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "base")
    ctx = SimpleNamespace(worktree=tmp_path, old_source=SRC, new_source=HONEST["depth"],
                          diff="--- a\n+++ b\n-DEPTH = 4\n+DEPTH = 6\n")
    (tmp_path / "results.tsv").write_text("ignored\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "prepare.cpython-311.pyc").write_bytes(b"x")
    (tmp_path / "loop.lock").write_text("")          # the loop's own untracked files are not edits
    (tmp_path / "child.pid").write_text("1")
    (tmp_path / "train.py").write_text(HONEST["depth"])
    assert stray_changes(tmp_path) == []
    v = guard(ctx)
    assert v.ok, v.reason
    assert v.details["lines"] == {"added": 1, "removed": 1, "net": 0}
    (tmp_path / "prepare.py").write_text("X = 2\n")
    (tmp_path / "time.py").write_text("def time(): return 0\n")
    v = guard(ctx)
    assert not v.ok and set(v.details["stray"]) == {"prepare.py", "time.py"}


def test_diff_lines_counts_code_only():
    diff = "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n+# a comment\n+\n+y = 3\n"
    assert diff_lines(diff) == {"added": 2, "removed": 1, "net": 1}


def _ctx(new, history, parent="p1", old=SRC):
    diff = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a/train.py", "b/train.py"))
    history = [ExperimentRecord.from_dict(h) if isinstance(h, dict) else h for h in history]   # as the loop holds them
    return SimpleNamespace(worktree=None, old_source=old, new_source=new, diff=diff, history=history, parent=parent)


def _rec(n, source, status="discard", parent="p1", bpb=1.1, diff=""):
    from search import knobs
    return {"n": n, "status": status, "parent": parent, "description": f"exp {n}", "diff": diff,
            "summary": {"val_bpb": bpb}, "config": knobs.values(source), "code": knobs.code_fingerprint(source)}


def test_a_repeat_is_refused_with_the_earlier_experiment_named():
    from agent.judges.guard import repeat_of
    deeper = HONEST["depth"]
    v = repeat_of(_ctx(deeper, [_rec(3, deeper, parent="elsewhere")]))
    assert v is not None and not v.ok and "experiment 3" in v.reason and v.details["repeat_of"] == 3
    assert "1.100000" in v.reason, "the earlier result is shown"
    assert repeat_of(_ctx(deeper, [_rec(3, HONEST["learning rate"])])) is None, "other knob values: not a repeat"
    assert repeat_of(_ctx(deeper, [dict(_rec(3, deeper), status="pending")])) is None, "still training"


def test_a_near_duplicate_diff_is_refused_only_from_the_same_parent():
    from agent.judges.guard import repeat_of
    block = "\n".join(f"    extra_{i} = torch.zeros({i} + 1)" for i in range(12)) + "\n"
    a = edit("def build_model(", "def _extra():\n" + block + "\n\ndef build_model(")
    b = edit("def build_model(", "def _extra():\n" + block.replace("zeros(3 + 1)", "zeros(3 + 2)") + "\n\ndef build_model(")
    earlier = _rec(4, a, diff=_ctx(a, []).diff)
    v = repeat_of(_ctx(b, [earlier]))
    assert v is not None and v.details["rule"] == "near_duplicate" and "experiment 4" in v.reason
    assert repeat_of(_ctx(b, [dict(earlier, parent="p0")])) is None, "a keep since then: may be revisited"
    assert repeat_of(_ctx(HONEST["depth"], [earlier])) is None, "a different idea"


def test_the_profile_rewrite_of_a_bare_run_may_not_come_back():
    """A tag's train.py carries its profile's values (its base commit drops runtime.use_profile_knobs):
    a proposal that calls it again would make a run by hand differ from the loop's."""
    from search import knobs
    base = knobs.for_profile((REPO / "train.py").read_text(), "tiny")[0]
    back = base.replace(knobs.PROFILE_CALL_DONE, "runtime.use_profile_knobs(__name__, prepare.PROFILE)")
    assert back != base
    v = check_source(base, back)
    assert not v.ok and "use_profile_knobs" in v.reason and "harness" in v.details["rules"]
