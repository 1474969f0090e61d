"""--notify wired into the real loop: a tiny run (stand-in train.py) posts to a local webhook; a dead
or stalled webhook neither stops nor holds the loop; the URL is written nowhere."""
import html
import re
import threading

from agent.cli import parse_args
from harness.experiment_record import experiment_records
from harness.results import read_journal
from tests.loop_fixtures import fake_env, fake_repo, run_loop
from tests.test_notify import Hook

TOKEN = "secretpath123"   # in Hook.url's path: the part of a webhook URL that is its credential


def _where(value: str, folder, streams: dict) -> list[str]:
    """Each file under `folder` (but .git) and each named stream holding `value`, with its context:
    what a failure says, so a leak names its writer."""
    texts = {str(p.relative_to(folder)): p.read_bytes().decode(errors="replace")
             for p in sorted(folder.rglob("*")) if p.is_file() and ".git" not in p.parts}
    found = []
    for name, text in (texts | streams).items():
        i = text.find(value)
        if i >= 0:
            found.append(f"{name}: ...{text[max(0, i - 300):i + len(value) + 100]!r}")
    return found


def test_flag_and_environment_give_the_url(monkeypatch):
    monkeypatch.delenv("AUTORESEARCH_NOTIFY_URL", raising=False)
    assert parse_args(["--tag", "t"]).notify is None
    assert parse_args(["--tag", "t", "--notify", "https://h.example/x"]).notify == "https://h.example/x"
    monkeypatch.setenv("AUTORESEARCH_NOTIFY_URL", "https://env.example/hook")
    assert parse_args(["--tag", "t"]).notify == "https://env.example/hook"


def test_a_bad_url_is_refused_before_anything_exists(tmp_path, capsys):
    repo = fake_repo(tmp_path / "repo")
    p = run_loop(repo, fake_env(tmp_path), "--tag", "n", "--notify", "ftp://x/y", "--max-experiments", "1")
    assert p.returncode == 2 and "--notify wants an http(s) URL" in p.stderr
    assert not (repo / ".autoresearch").exists()


def test_a_loop_posts_its_best_and_its_stop(tmp_path):
    hook = Hook()
    try:
        repo = fake_repo(tmp_path / "repo")
        env = fake_env(tmp_path, AUTORESEARCH_NOTIFY_URL=hook.url)   # the environment's way
        p = run_loop(repo, env, "--tag", "nt", "--budget", "1", "--max-experiments", "4")
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        hook.close()
    run_dir = repo / ".autoresearch" / "nt"
    records = experiment_records(read_journal(run_dir / "journal.jsonl")[0])
    events = [b["event"] for b in hook.bodies]
    assert events[0] == "baseline" and events[-1] == "stop", events
    bests = [r for r in records if r.status == "keep" and not r.is_baseline]
    assert events.count("new_best") + events.count("keep") == len(bests), (events, [r.status for r in records])
    stop = hook.bodies[-1]["text"]
    assert "stopped: reached --max-experiments 4" in stop and "nt" in stop
    # the same words for both services, each escaped its own way (Slack's entities, Discord's backslashes)
    assert all(html.unescape(b["text"]) == re.sub(r"\\(.)", r"\1", b["content"]) for b in hook.bodies)
    assert all(b["allowed_mentions"] == {"parse": []} for b in hook.bodies)
    keeps = [b["text"] for b in hook.bodies if b["event"] in ("new_best", "keep")]
    assert len(keeps) == len(bests) and all("Kept on " in t for t in keeps), "every keep says why"
    # --resume without the URL: run.json does not keep it (a secret), and the resumed night says so
    env.pop("AUTORESEARCH_NOTIFY_URL")
    posted = len(hook.bodies)
    again = run_loop(repo, env, "--tag", "nt", "--resume", "--max-experiments", "5")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resume: this tag posted to a webhook when it began" in again.stdout and "posts nothing" in again.stdout
    assert len(hook.bodies) == posted and hook.url not in (run_dir / "run.json").read_text()
    leaks = _where(TOKEN, run_dir, {"stdout": p.stdout, "stderr": p.stderr})
    assert not leaks, leaks
    # the endpoint's address neither (as host:port: a bare port number may be any five digits of a
    # timestamp or a pid)
    assert not _where(f"127.0.0.1:{hook.server.server_port}", run_dir, {})


def test_a_dead_endpoint_never_stops_the_loop(tmp_path):
    hook = Hook()
    hook.status = 404   # refuses every message at once (a 5xx is retried in the background: see below)
    try:
        repo = fake_repo(tmp_path / "repo")
        p = run_loop(repo, fake_env(tmp_path), "--tag", "nd", "--budget", "1", "--max-experiments", "3",
                     "--notify", hook.url)
    finally:
        hook.close()
    assert p.returncode == 0, p.stdout + p.stderr
    run_dir = repo / ".autoresearch" / "nd"
    assert len(experiment_records(read_journal(run_dir / "journal.jsonl")[0])) == 3
    assert hook.requests >= 1 and hook.bodies == []
    assert p.stdout.count("did not take a message") == 1, p.stdout
    assert not _where(TOKEN, run_dir, {"stdout": p.stdout, "stderr": p.stderr})


def test_a_stalled_endpoint_never_holds_the_loop(tmp_path):
    hook = Hook()
    hook.hold = threading.Event()   # answers nothing until the loop has finished
    try:
        repo = fake_repo(tmp_path / "repo")
        p = run_loop(repo, fake_env(tmp_path), "--tag", "ns", "--budget", "1", "--max-experiments", "3",
                     "--notify", hook.url, timeout=100)
        assert p.returncode == 0, p.stdout + p.stderr
        run_dir = repo / ".autoresearch" / "ns"
        assert len(experiment_records(read_journal(run_dir / "journal.jsonl")[0])) == 3
        assert hook.bodies == [] and hook.requests >= 1
    finally:
        hook.hold.set()
        hook.close()


def test_a_stop_by_an_error_says_the_error(tmp_path):
    hook = Hook()
    try:
        repo = fake_repo(tmp_path / "repo")
        env = fake_env(tmp_path)
        assert run_loop(repo, env, "--tag", "ne", "--budget", "1", "--max-experiments", "1").returncode == 0
        p = run_loop(repo, env, "--tag", "ne", "--budget", "2", "--max-experiments", "2", "--resume",
                     "--notify", hook.url)   # refused: one tag never mixes budgets
    finally:
        hook.close()
    assert p.returncode == 2 and "refusing --budget 2" in p.stderr
    assert [b["event"] for b in hook.bodies] == ["stop"]
    assert "stopped: error: SetupError: tag ne was run with --budget 1" in hook.bodies[0]["text"]


def test_a_dripping_endpoint_never_holds_the_loop_and_the_stop_says_what_was_lost(tmp_path):
    """The webhook accepts, reads the message, then drips its answer a byte at a time, for every
    message: the loop runs its experiments at its own pace, its stop waits at most CLOSE_S, and
    the console says how many messages were not sent."""
    import time

    from agent.notify import CLOSE_S
    from tests.test_notify_hostile import Raw
    hook = Raw(["drip_status"] * 100)
    try:
        repo = fake_repo(tmp_path / "repo")
        t0 = time.monotonic()
        p = run_loop(repo, fake_env(tmp_path), "--tag", "nr", "--budget", "1", "--max-experiments", "3",
                     "--notify", hook.url, timeout=300)
        took = time.monotonic() - t0
    finally:
        hook.close()
    assert p.returncode == 0, p.stdout + p.stderr
    run_dir = repo / ".autoresearch" / "nr"
    assert len(experiment_records(read_journal(run_dir / "journal.jsonl")[0])) == 3
    assert hook.conns >= 1 and hook.bodies == []
    lost = [line for line in p.stdout.splitlines() if line.startswith("notify: ")]
    assert len(lost) == 1 and "not sent at the stop" in lost[0], p.stdout
    assert took < 120, f"the loop took {took:.0f} s (its stop waits at most {CLOSE_S:g} s for the webhook)"
    assert "tokenpart" not in p.stdout + p.stderr
