"""harness/runner.py: each crash class from a stand-in train.py, timeouts kill the whole group."""
import subprocess
import textwrap
import time

import pytest

from harness import runner
from tests.loop_fixtures import pid_alive

SUMMARY = textwrap.dedent('''
    print("---")
    for k, v in [("val_bpb", "1.234567"), ("training_seconds", "1.0"), ("total_seconds", "1.5"),
                 ("peak_vram_mb", "2048.0"), ("mfu_percent", "0.00"), ("total_tokens_M", "0.1"),
                 ("num_steps", 5), ("num_params_M", "0.1"), ("depth", 2)]:
        print(f"{k + ':':<18}{v}")
''')


def run_script(tmp_path, body, budget=1.0, timeout=None, on_tick=None, **kw):
    work = tmp_path / "wt"
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text(textwrap.dedent(body))
    return runner.run_train(runner.RunSpec(work, tmp_path / "run", 7, budget, timeout=timeout, **kw), on_tick=on_tick)


def test_success_parses_summary_and_passes_env(tmp_path):
    body = ('import os\nprint("budget", os.environ["AUTORESEARCH_TIME_BUDGET"])\n'
            'open(os.environ["AUTORESEARCH_ARTIFACT"], "w").write("x")\n' + SUMMARY)
    r = run_script(tmp_path, body, budget=2.5)
    assert r.crash_class is None and r.ok and r.returncode == 0
    assert r.summary["val_bpb"] == pytest.approx(1.234567) and r.summary["num_steps"] == 5
    assert r.log_path == tmp_path / "run" / "logs" / "exp-0007.log"
    assert "budget 2.5" in r.log_path.read_text()
    assert r.artifact == tmp_path / "run" / "artifacts" / "exp-0007" / "model.pt"
    assert not (tmp_path / "run" / runner.PID_FILE).exists()


@pytest.mark.parametrize("body, expected", [
    ("raise ValueError('boom')\n", runner.EXCEPTION),
    ("def f(:\n    pass\n", runner.SYNTAX),
    ("print('FAIL: loss is nan at step 3')\nimport sys; sys.exit(1)\n", runner.NAN),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", runner.KILLED),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", runner.SEGFAULT),
    # faulthandler prints a Python stack ("Traceback"-like) before the process dies of the signal
    ("import ctypes, faulthandler\nfaulthandler.enable()\nctypes.string_at(0)\n", runner.SEGFAULT),
    ("print('training done, forgot the summary')\n", runner.MISSING),
    ("raise MemoryError('out of memory allocating 9 GiB')\n", runner.OOM),
    (SUMMARY.replace('"1.234567"', '"nan"'), runner.NAN),
])
def test_crash_classes(tmp_path, body, expected):
    r = run_script(tmp_path, body)
    assert r.crash_class == expected, r.log_path.read_text()
    assert not r.ok
    assert r.log_tail.strip(), "the proposer gets the log tail"


def test_tail_is_last_50_lines(tmp_path):
    r = run_script(tmp_path, "for i in range(200):\n    print('line', i)\nraise SystemExit(3)\n")
    lines = r.log_tail.splitlines()
    assert len(lines) == runner.TAIL_LINES and lines[-1] == "line 199"
    assert r.crash_class == runner.EXCEPTION and r.returncode == 3


def test_timeout_kills_the_whole_process_group(tmp_path):
    pids = tmp_path / "pids"
    body = f'''
        import os, subprocess, time
        child = subprocess.Popen(["sleep", "300"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(300)
    '''
    r = run_script(tmp_path, body, budget=1.0, timeout=2.0)
    assert r.timed_out and r.crash_class == runner.TIMEOUT and r.returncode is None
    leader, child = (int(x) for x in pids.read_text().split())
    deadline = time.time() + 5
    while (pid_alive(child) or pid_alive(leader)) and time.time() < deadline:
        time.sleep(0.05)
    assert not pid_alive(leader) and not pid_alive(child), "timeout must kill the child's children"
    assert "timeout" in r.log_path.read_text()


def test_children_left_behind_by_a_finished_run_are_killed(tmp_path):
    pids = tmp_path / "pids"
    body = (f'import subprocess\nc = subprocess.Popen(["sleep", "300"])\n'
            f'open({str(pids)!r}, "w").write(str(c.pid))\n' + SUMMARY)
    r = run_script(tmp_path, body)
    assert r.ok
    child = int(pids.read_text())
    deadline = time.time() + 5
    while pid_alive(child) and time.time() < deadline:
        time.sleep(0.05)
    assert not pid_alive(child)


def test_interrupt_while_waiting_kills_the_group(tmp_path):
    pids = tmp_path / "pids"
    body = f'''
        import os, time
        open({str(pids)!r}, "w").write(str(os.getpid()))
        time.sleep(300)
    '''

    def tick(elapsed, log):
        if pids.exists():
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_script(tmp_path, body, timeout=60, on_tick=tick)
    leader = int(pids.read_text())
    assert not pid_alive(leader)
    assert not (tmp_path / "run" / runner.PID_FILE).exists()


def test_kill_leftover_kills_an_orphaned_group(tmp_path):
    work, run_dir = tmp_path / "wt", tmp_path / "run"
    work.mkdir()
    run_dir.mkdir()
    proc = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300"], cwd=work, start_new_session=True)
    (run_dir / runner.PID_FILE).write_text(f'{{"pgid": {proc.pid}, "n": 2, "cwd": "{work}"}}')
    note = runner.kill_leftover(run_dir)
    proc.wait(timeout=10)
    assert note and "killed" in note
    assert not (run_dir / runner.PID_FILE).exists()


def test_kill_leftover_spares_a_group_in_another_folder(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    proc = subprocess.Popen(["sleep", "300"], cwd=tmp_path, start_new_session=True)
    try:
        (run_dir / runner.PID_FILE).write_text(f'{{"pgid": {proc.pid}, "n": 2, "cwd": "{run_dir}"}}')
        assert runner.kill_leftover(run_dir) is None
        assert proc.poll() is None, "a recycled group id of someone else's must not be killed"
    finally:
        proc.kill()
        proc.wait()


def test_timeout_for_defaults():
    assert runner.timeout_for(300) == 600
    assert runner.timeout_for(3) == 3 + runner.MIN_GRACE_SECONDS
