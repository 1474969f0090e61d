"""The trust boundary (docs/contracts.md): what a sandboxed run can see, what it can do as root,
what leaves it, and where its figure comes from. Each test plants what a cheat would want and
looks from inside with a real bubblewrap sandbox (the suite runs as root in CI)."""
import json
import os
import re
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from harness import output, runner, secrets
from harness.runner import RunSpec, RunView, run_train
from harness.sandbox import DataView, Sandbox, View, data_view, detect, gpu_devices, gpus_of
from tests.fake_anthropic import FakeAnthropic, fake_anthropic  # noqa: F401  (fixture)
from tests.test_cheats import SRC, commit, ctx_for, repo  # noqa: F401  (fixture)
from tests.test_sealed import propose, run_sealed, sealed_setup

pytestmark = pytest.mark.skipif(not detect().sealed and not os.environ.get("CI"),
                                reason="needs bubblewrap (apt-get install bubblewrap)")

KEY = "sk-ant-api03-boundaryTEST0123456789abcdef"

# Runs inside the sandbox: reports what it sees and what it may do, as JSON on its last line.
PROBE = textwrap.dedent(r'''
    import ctypes, json, os, socket, sys
    out = {"argv": sys.argv[1:]}
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    out.update({k: status[k].strip() for k in ("Uid", "CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp")})
    libc = ctypes.CDLL(None, use_errno=True)
    def call(name, *args):
        r = getattr(libc, name)(*args)
        return [r, ctypes.get_errno()]
    out["umount_proc"] = call("umount2", b"/proc", 2)
    out["mount_root"] = call("mount", b"/", b"/tmp/x", None, 4096 | 16384, None)   # MS_BIND | MS_REC
    out["unshare_user"] = call("unshare", 0x10000000)
    out["unshare_mount"] = call("unshare", 0x00020000)
    out["ptrace"] = call("ptrace", 0, 0, 0, 0)
    fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    out["setns"] = call("setns", fd, 0)
    out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    out["pid1_environ"] = open("/proc/1/environ", "rb").read().decode(errors="replace")
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2); out["net"] = "connected"
    except OSError as e:
        out["net"] = type(e).__name__
    seen = []
    for root, dirs, files in os.walk("/", topdown=True):
        if root.startswith(("/proc", "/sys", "/dev")):
            dirs[:] = []
            continue
        seen += [os.path.join(root, f) for f in files]
    out["files"] = seen
    out["dev"] = sorted(os.listdir("/dev"))
    out["env"] = dict(os.environ)
    for path in sys.argv[3:]:
        try:
            open(path, "w").write("left by the probe"); out.setdefault("wrote", []).append(path)
        except OSError:
            out.setdefault("refused", []).append(path)
    print(json.dumps(out))
''')


@pytest.fixture
def listener():
    s = socket_listener()
    yield s.getsockname()[1]
    s.close()


def socket_listener():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s


def probe(tmp_path, view: View, env: dict, port: int, write=()):
    (view.cwd / "probe.py").write_text(PROBE)
    box = detect()
    res = box.run([sys.executable, str(view.cwd / "probe.py"), "x", str(port), *map(str, write)], view, env,
                  capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def allowed_roots(view: View) -> list[str]:
    """Everything a run may see, by the contract: the system, the interpreter, its own files."""
    from harness import sandbox as sb
    roots = ["/usr", "/etc/", "/tmp/", "/bin", "/lib", "/sbin"]
    roots += [str(p) for p in sb._interpreter_paths()]
    roots += [str(Path(p).resolve()) for p in [view.cwd, *view.readonly, *view.writable]]
    roots += [str(Path(dst)) for _, dst in view.binds]
    return roots


def test_a_run_sees_the_allowlist_and_nothing_else(tiny_cache, tmp_path, listener, monkeypatch):
    """Plant what a cheat would look for (another run's weights and logs, the pinned validation
    copy, another tag, a Ray job folder, credentials at home, the --source corpus, the stdlib's
    test suite); from inside the sandbox none of it exists, and nothing but the allowlist does."""
    import prepare
    view_data = DataView.from_describe({"paths": prepare.data_paths()})
    home = Path.home()
    run_dir = tmp_path / "tags" / "t1"
    planted = [run_dir / "artifacts" / "exp-0001" / "model.pt", run_dir / "logs" / "exp-0001.log",
               run_dir / ".sealed" / "cache" / "val.parquet", tmp_path / "tags" / "t2" / "artifacts" / "m.pt",
               Path("/tmp") / f"autoresearch-job-{os.getpid()}" / "model.pt"]
    for p in planted:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("secret weights")
    out_dir = run_dir / "artifacts" / "exp-0002"
    src = run_dir / ".runs" / "src"
    src.mkdir(parents=True)
    readonly, binds, hide = data_view(view_data, "train")
    view = View(cwd=src, readonly=readonly, writable=[out_dir], binds=binds, hide=hide + [run_dir], gpus=None)
    env = dict(os.environ, ANTHROPIC_API_KEY=KEY, MY_INNOCENT_VAR=KEY, HF_TOKEN="hf_" + "a" * 30)
    secrets.remember(KEY)
    try:
        seen = probe(tmp_path, view, env, listener, write=[out_dir / "ok.txt", src / "x.py", "/tmp/t.txt",
                                                             "/dev/shm/carry", str(home / "x")])
    finally:
        shutil.rmtree(planted[-1].parent, ignore_errors=True)
    files = seen["files"]
    roots = allowed_roots(view)
    outside = [f for f in files if not any(f == r or f.startswith(r.rstrip("/") + "/") for r in roots)]
    assert outside == [], outside[:20]
    for p in planted:
        assert str(p) not in files
    assert not any(f.startswith(str(home) + "/") and "/.venv/" not in f and "pyenv" not in f and "/uv/" not in f
                   for f in files), "the home folder is visible"
    stdlib_tests = [f for f in files if re.search(r"/lib/python3\.\d+/test/", f)]
    assert stdlib_tests == []                                  # the offline fallback's validation docs
    corpus = prepare.data_paths()["hide"][0]                   # the --source corpus of the tiny cache
    assert not any(f.startswith(corpus) for f in files)
    assert str(view_data.val) in files                         # its path is there (an empty file)
    assert not any(f.startswith(("/run/", "/var/", "/root/.ssh", "/srv/", "/mnt/", "/media/")) for f in files)
    # what it may write: its own output folder and its private /tmp and /dev/shm
    assert sorted(seen["wrote"]) == sorted([str(out_dir / "ok.txt"), "/tmp/t.txt", "/dev/shm/carry"])
    assert (out_dir / "ok.txt").read_text() == "left by the probe"
    assert not (src / "x.py").exists() and not Path("/tmp/t.txt").exists() and not (home / "x").exists()
    # no network, no secrets by name, value or shape
    assert seen["net"] != "connected"
    assert "ANTHROPIC_API_KEY" not in seen["env"] and "MY_INNOCENT_VAR" not in seen["env"]
    assert "HF_TOKEN" not in seen["env"] and KEY not in json.dumps(seen)
    # /dev is its own: nothing a run leaves there reaches the next one
    again = probe(tmp_path, view, env, listener)
    assert "/dev/shm/carry" not in again["files"] and "carry" not in again["dev"]
    assert set(seen["dev"]) <= {"console", "core", "fd", "full", "null", "ptmx", "pts", "random", "shm",
                                "stderr", "stdin", "stdout", "tty", "urandom", "zero"}


def test_root_inside_is_nobody(tiny_cache, tmp_path, listener):
    """Run as root (CI is root) or not: the sandboxed process has no capabilities, cannot gain any,
    cannot mount, unmount, unshare, setns or ptrace, and sees only its own processes."""
    src = tmp_path / "src"
    src.mkdir()
    seen = probe(tmp_path, View(cwd=src), dict(os.environ, ANTHROPIC_API_KEY=KEY), listener)
    assert seen["Uid"].split()[0] == "65534"
    assert int(seen["CapEff"], 16) == 0 and int(seen["CapPrm"], 16) == 0 and int(seen["CapBnd"], 16) == 0
    assert seen["NoNewPrivs"] == "1" and seen["Seccomp"] == "2"
    for call in ("umount_proc", "mount_root", "unshare_user", "unshare_mount", "ptrace", "setns"):
        assert seen[call][0] == -1 and seen[call][1] == 1, (call, seen[call])   # EPERM
    assert max(seen["pids"]) < 10, seen["pids"]              # its own pid namespace: a handful of pids
    assert KEY not in seen["pid1_environ"]
    if os.getuid() == 0:
        assert all(int(p) < 10 for p in seen["pids"])


def test_gpu_nodes_are_the_run_s_own(tmp_path):
    """Only the run's GPUs' device nodes are bound (indices in PCI bus order, from the driver's map)."""
    dev, driver = tmp_path / "dev", tmp_path / "gpus"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm"):
        (dev / name).write_text("")
    for bus, minor in (("0000:81:00.0", 0), ("0000:01:00.0", 2), ("0000:41:00.0", 1)):
        (driver / bus).mkdir(parents=True)
        (driver / bus / "information").write_text(f"Model: H200\nDevice Minor: {minor}\n")
    assert gpu_devices(["0"], dev, driver) == [str(dev / "nvidia2"), str(dev / "nvidiactl"), str(dev / "nvidia-uvm")]
    assert gpu_devices(["1", "2"], dev, driver)[:2] == [str(dev / "nvidia1"), str(dev / "nvidia0")]
    assert len(gpu_devices(None, dev, driver)) == 5            # CUDA_VISIBLE_DEVICES unset: every GPU
    assert gpu_devices(["0"], tmp_path / "nodev", driver) == []   # a machine without NVIDIA GPUs
    assert gpu_devices([], dev, driver) == [] and gpus_of({"CUDA_VISIBLE_DEVICES": ""}) == []   # none asked
    assert gpus_of({"CUDA_VISIBLE_DEVICES": "2,0"}) == ["2", "0"] and gpus_of({}) is None


def test_the_default_data_cache_is_found_from_inside(monkeypatch, tmp_path):
    """HOME is another folder inside the sandbox: a run of a machine that never set
    AUTORESEARCH_CACHE still reads the cache the loop prepared under the caller's home."""
    from harness.sandbox import child_env
    monkeypatch.setenv("HOME", str(tmp_path))
    env = child_env({"PATH": "/usr/bin"}, View(cwd=tmp_path))
    assert env["AUTORESEARCH_CACHE"] == str(tmp_path / ".cache" / "autoresearch") and env["HOME"] != str(tmp_path)
    assert child_env({"AUTORESEARCH_CACHE": "/data/c"}, View(cwd=tmp_path))["AUTORESEARCH_CACHE"] == "/data/c"


def test_without_a_sandbox_secrets_still_stay_out(tmp_path):
    """--sandbox none: no isolation, but every child's environment is scrubbed all the same."""
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "train.py").write_text("import os, json\nprint(json.dumps(dict(os.environ)))\n")
    os.environ["MY_SERVICE_PASSWORD"] = "hunter2hunter2"
    try:
        run = run_train(RunSpec(wt, tmp_path / "run", 1, 5, env={"ANTHROPIC_API_KEY": KEY, "PLAIN": "visible",
                                                                    "COPIED": KEY},
                                view=RunView(sandbox=Sandbox("none", "test"))))
    finally:
        del os.environ["MY_SERVICE_PASSWORD"]
    printed = json.loads(run.log_path.read_text().splitlines()[0])
    assert printed["PLAIN"] == "visible"
    assert not {"ANTHROPIC_API_KEY", "MY_SERVICE_PASSWORD", "COPIED"} & set(printed)


def test_the_loop_refuses_to_start_without_a_sandbox(tmp_path, monkeypatch):
    from agent.workspace import SealError, make_seal
    from harness import sandbox as sb
    monkeypatch.setattr(sb, "_DETECTED", {})
    monkeypatch.setattr(sb.shutil, "which", lambda name: None)
    with pytest.raises(SealError, match="pass --sandbox none"):
        make_seal(tmp_path, {}, {}, "auto", say=print)
    said = []
    seal = make_seal(tmp_path, {}, {}, "none", say=said.append)
    assert not seal.sealed and "UNSEALED" in said[0]


@pytest.mark.parametrize("body, why", [
    ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536 + '\\n')\n", "output passed"),
    ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", "output passed"),            # one endless line
    ("import os\nwhile True:\n    open(os.environ['AUTORESEARCH_ARTIFACT'] + str(os.urandom(4).hex()), 'w').close()\n",
     "more than"),
])
def test_a_flood_ends_the_run_and_the_loop_lives_on(tmp_path, monkeypatch, body, why):
    monkeypatch.setattr(output, "LOG_CAP_BYTES", 4 << 20)
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "train.py").write_text(body)
    run = run_train(RunSpec(wt, tmp_path / "run", 1, 5, timeout=120))
    assert run.crash_class == runner.FLOOD, run.log_tail
    assert why in run.log_tail
    assert run.log_path.stat().st_size < (4 << 20) + 70_000
    assert max(len(line) for line in run.log_path.read_text().splitlines()) <= output.LINE_CAP_BYTES + 64


def test_log_lines_lose_secrets_as_they_are_read(tmp_path):
    secrets.remember(KEY)
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "train.py").write_text(f"print('key {KEY} and a shape sk-ant-api03-' + 'Z' * 30)\n")
    run = run_train(RunSpec(wt, tmp_path / "run", 1, 5))
    text = run.log_path.read_text()
    assert KEY not in text and "ZZZZZZ" not in text and text.count("[redacted]") == 2


def test_a_cheat_that_patches_everything_at_import_cannot_move_the_figure(fake_anthropic, repo, tiny_cache):
    """json.dump and json.dumps through an alias, a builtin, math.log, prepare's evaluation and
    its byte counts, all patched at import: the recorded val_bpb is the trusted evaluator's, who
    imports none of it, and equals an independent evaluation of the run's own weights."""
    wt, base = repo
    patches = ("import json as _j, builtins as _b\n"
               "_d = _j\nsetattr(_d, 'dump', lambda *a, **k: None)\n"
               "prepare.evaluate_bpb = lambda *a, **k: 0.01\n"
               "prepare.get_token_bytes = lambda *a, **k: torch.full((prepare.VOCAB_SIZE,), 100)\n")
    # late, since imports need them (a patched json.dumps only corrupts its own graph: refused)
    late = "    _b.round = lambda *a, **k: 0\n    math.log = lambda *a: 100.0\n"
    anchor, end = "import runtime\n", '    artifact = os.environ.get("AUTORESEARCH_ARTIFACT")\n'
    cheat = propose(fake_anthropic, wt, anchor, anchor + patches, "tidier imports")
    cheat = cheat.replace(end, late + end, 1)
    assert "prepare.evaluate_bpb = " in cheat and "math.log = " in cheat
    # (the guard refuses these monkeypatches; here the evaluator is shown to be the backstop)
    seal, h = sealed_setup(wt)
    sha = commit(wt, cheat)
    run = run_sealed(wt, seal, 2, 5, env={"AUTORESEARCH_STEPS": "3"})
    assert run.crash_class is None, run.log_tail
    d = h.judge(ctx_for(wt, base, cheat, commit=sha), run)
    assert d.verdicts["verify"]["ok"], d.verdicts["verify"]["reason"]
    trusted = d.verdicts["verify"]["trusted_bpb"]
    import prepare
    from tests.test_verify import load_module
    art = torch.load(run.artifact, weights_only=True)
    honest = load_module(SRC, wt / ".runs", "honest_train")
    model = honest.build_model(art["config"])
    model.load_state_dict(art["state_dict"])
    with torch.no_grad():
        independent = prepare.evaluate_bpb(model.eval(), prepare.Tokenizer.from_directory(), 8)
    assert trusted == pytest.approx(independent, abs=1e-5) and trusted > 1.0


def test_screening_scores_are_the_trusted_evaluator_s_on_a_split_no_candidate_saw(tiny_cache, tmp_path):
    """A --screen candidate that prints a fantastic val_bpb and tries to read the proxy split:
    its score is the trusted evaluation of its saved model on the held-out tail, which it never saw."""
    import prepare
    from search.proxy import make_proxy
    from search.hyperband import Task, TaskState
    from search.pool import Pool, run_tasks
    view = DataView.from_describe({"paths": prepare.data_paths()})
    proxy = make_proxy(view, tmp_path / "proxy")
    shard = view.training_shards()[-1]
    (tail_doc,) = __import__("pyarrow.parquet", fromlist=["x"]).read_table(
        next(proxy.cache.rglob("shard_06542.parquet"))).column("text").to_pylist()[:1]
    src = tmp_path / "c0.py"
    src.write_text(SRC.replace("    tokenizer = prepare.Tokenizer.from_directory()\n",
                               "    tokenizer = prepare.Tokenizer.from_directory()\n"
                               "    import pyarrow.parquet as pq\n"
                               f"    print('sees the tail', {tail_doc!r} in pq.read_table({str(shard)!r}).column('text').to_pylist())\n", 1)
                   .replace('"val_bpb": "sealed" if val_bpb is None else f"{val_bpb:.6f}"', '"val_bpb": "0.000001"', 1))
    ckpt = tmp_path / "ckpt" / "b0-c0"
    ckpt.mkdir(parents=True)
    task = Task(id="t0", cand="c0", source=src, steps=3, decay_steps=1, state=TaskState(save=ckpt / "s3.pt"))
    with Pool(1, prepare_dir=Path(prepare.__file__).parent, log_dir=tmp_path / "logs", sandbox=detect(),
              data=view, sealed_tasks=True, proxy=proxy, rows=8) as pool:
        assert pool.launch.mode == "subprocess"
        (res,) = run_tasks(pool, [task])
    log = res.log.read_text()
    assert "sees the tail False" in log, log[-2000:]
    assert "val_bpb:          0.000001" in log                     # what it claims...
    assert res.val_bpb is not None and res.val_bpb > 1.0, log[-2000:]   # ...is not its score
    assert "trusted evaluation on the proxy split" in log
    assert any(ckpt.iterdir())                                   # its own checkpoint folder: writable
