"""Tracing: the local JSONL, the Braintrust path (SDK's memory logger), secret scrubbing, failures."""

import json
import logging
import threading

import pytest
from braintrust import logger as bt_logger_mod
from braintrust.logger import ObjectMetadata, OrgProjectMetadata
from braintrust.test_helpers import simulate_logout, with_memory_logger  # noqa: F401  (fixture)

from agent.tracing import REDACTED, Tracer, scrub

KEYS = ["id", "parent", "trace", "name", "start", "end", "input", "output", "tokens", "cost", "error"]
PLANTED = "sk-ant-api03-PLANTEDplantedPLANTED0123456789"
OTHER_TOKEN = "ghp_plantedGithubToken42"
STRAY = "sk-proj-abcdefghijklmnopqrstuvwxyz012345"       # key-shaped, not in the environment


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_local_file_complete_and_nested(tmp_path):
    path = tmp_path / "run" / "traces.jsonl"          # parent folder created on first write
    tracer = Tracer(path)
    with tracer.span("experiment", input={"n": 1}) as exp:
        with tracer.span("propose", input={"proposer": "claude"}) as prop:     # implicit parent
            prop.log(output={"description": "depth 6"}, tokens={"input": 10, "output": 5}, cost=0.25)
            prop.log(tokens={"input": 1}, cost=0.5)                            # sums up
        with tracer.span("run", parent=exp) as run:
            with pytest.raises(ValueError):
                with tracer.span("evaluate"):
                    raise ValueError("boom")
            run.log(output={"val_bpb": 1.1})
        # A span made in another thread, parented by id, lands in the same trace.
        def in_thread():
            with tracer.span("judge", parent=exp.id) as j:
                j.log(output="keep")
            with tracer.span("orphan"):                # no context carried over: a new trace
                pass
        t = threading.Thread(target=in_thread)
        t.start()
        t.join()
    with tracer.span("experiment", input={"n": 2}) as exp2:
        pass

    spans = read(path)
    by_name = {s["name"]: s for s in spans if s["name"] != "experiment"}
    assert all(list(s) == KEYS for s in spans)
    exps = [s for s in spans if s["name"] == "experiment"]
    assert [e["input"]["n"] for e in exps] == [1, 2]
    assert exps[0]["id"] == exp.id and exps[0]["parent"] is None and exps[0]["trace"] == exp.id
    assert exps[1]["trace"] == exp2.id != exp.id
    assert by_name["propose"]["parent"] == exp.id and by_name["propose"]["trace"] == exp.id
    assert by_name["propose"]["tokens"] == {"input": 11, "output": 5}
    assert by_name["propose"]["cost"] == pytest.approx(0.75)
    assert by_name["propose"]["output"] == {"description": "depth 6"}
    assert by_name["run"]["parent"] == exp.id and by_name["run"]["output"] == {"val_bpb": 1.1}
    assert by_name["evaluate"]["parent"] == by_name["run"]["id"]
    assert by_name["evaluate"]["error"] == "ValueError: boom"
    assert by_name["judge"]["parent"] == exp.id and by_name["judge"]["trace"] == exp.id
    assert by_name["judge"]["output"] == "keep"
    assert by_name["orphan"]["parent"] is None and by_name["orphan"]["trace"] == by_name["orphan"]["id"]
    assert all(s["start"] <= s["end"] for s in spans)
    # Children are written when they finish, before their parent.
    names = [s["name"] for s in spans]
    assert names.index("evaluate") < names.index("run") < names.index("experiment")


def test_planted_secrets_never_written(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", PLANTED)
    monkeypatch.setenv("GITHUB_TOKEN", OTHER_TOKEN)
    path = tmp_path / "traces.jsonl"
    tracer = Tracer(path)
    with pytest.raises(RuntimeError):
        with tracer.span("call", input={"headers": {"x-api-key": PLANTED}, "args": [OTHER_TOKEN, (STRAY,)],
                                        PLANTED: "key as a dict key"}) as sp:
            sp.log(output=f"echo {PLANTED} and {STRAY}")
            raise RuntimeError(f"auth failed for key {PLANTED}")
    text = path.read_text()
    for secret in (PLANTED, OTHER_TOKEN, STRAY, "PLANTEDplanted"):
        assert secret not in text
    (rec,) = read(path)
    assert rec["input"]["headers"]["x-api-key"] == REDACTED
    assert rec["input"]["args"] == [REDACTED, [REDACTED]]
    assert rec["error"] == f"RuntimeError: auth failed for key {REDACTED}"
    assert rec["output"] == f"echo {REDACTED} and {REDACTED}"


def test_scrub_keeps_ordinary_values(monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")     # too short to be a secret
    monkeypatch.setenv("MY_SECRET", "hunter2hunter2")
    data = {"a": [1, 2.5, None, True, "false", "sk-short"], "b": "pw=hunter2hunter2"}
    assert scrub(data) == {"a": [1, 2.5, None, True, "false", "sk-short"], "b": f"pw={REDACTED}"}
    assert scrub("x" * 50, limit=10) == "x" * 10 + "...[40 chars cut]"


def test_unwritable_file_does_not_raise(tmp_path, caplog):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder should be")
    tracer = Tracer(blocker / "traces.jsonl")
    ran = []
    with caplog.at_level(logging.WARNING, logger="agent.tracing"):
        for i in range(3):
            with tracer.span("step", input={"i": i}) as sp:
                sp.log(output={"ok": True})
                ran.append(i)
        with pytest.raises(KeyError):                         # the caller's own errors still propagate
            with tracer.span("bad"):
                raise KeyError("mine")
    assert ran == [0, 1, 2]
    warnings = [r for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(warnings) == 1


class _BrokenBraintrust:
    def start_span(self, **kw):
        raise ConnectionError("braintrust is down")

    def flush(self):
        raise ConnectionError("still down")


def test_broken_braintrust_warns_once_and_local_file_still_written(tmp_path, caplog):
    path = tmp_path / "traces.jsonl"
    tracer = Tracer(path, braintrust_logger=_BrokenBraintrust())
    with caplog.at_level(logging.WARNING, logger="agent.tracing"):
        for _ in range(3):
            with tracer.span("step"):
                pass
        tracer.flush()
    assert len(read(path)) == 3
    assert len([r for r in caplog.records if "Braintrust" in r.getMessage()]) == 1


@pytest.fixture
def braintrust_test_login(monkeypatch):
    """BRAINTRUST_API_KEY set to the SDK's test key; project lookup answered locally, as the SDK's
    own init_test_logger does, so the real init_logger/start_span/log/end path runs offline."""
    monkeypatch.setenv("BRAINTRUST_API_KEY", bt_logger_mod.TEST_API_KEY)

    def fake_metadata(project_name=None, project_id=None, state=None, project_group_name=None):
        return OrgProjectMetadata(org_id="test-org-id", project=ObjectMetadata(
            id=project_id or project_name, name=project_name, full_info={}))

    monkeypatch.setattr(bt_logger_mod, "_compute_logger_metadata", fake_metadata)
    yield
    simulate_logout()


def test_braintrust_spans_arrive(tmp_path, monkeypatch, braintrust_test_login, with_memory_logger):
    monkeypatch.setenv("ANTHROPIC_API_KEY", PLANTED)
    tracer = Tracer(tmp_path / "traces.jsonl", braintrust_project="autoresearch-test")
    with tracer.span("experiment", input={"n": 7}) as exp:
        with tracer.span("claude.messages", input={"key": PLANTED}) as call:
            call.log(output={"stop_reason": "tool_use"}, tokens={"input": 120, "output": 30, "cache_read": 50},
                     cost=0.002)
        with pytest.raises(ZeroDivisionError):
            with tracer.span("evaluate"):
                1 / 0
    tracer.flush()
    rows = with_memory_logger.pop()

    by_name = {r["span_attributes"]["name"]: r for r in rows}
    assert set(by_name) == {"experiment", "claude.messages", "evaluate"}
    root = by_name["experiment"]
    assert root["span_id"] == exp.id and root["root_span_id"] == exp.id
    assert root["project_id"] == "autoresearch-test"
    assert root["input"] == {"n": 7}
    msg = by_name["claude.messages"]
    assert msg["span_parents"] == [exp.id] and msg["root_span_id"] == exp.id
    assert msg["metadata"]["span_id"] == call.id and msg["metadata"]["cost_usd"] == pytest.approx(0.002)
    assert msg["metrics"]["prompt_tokens"] == 120 and msg["metrics"]["completion_tokens"] == 30
    assert msg["metrics"]["prompt_cached_tokens"] == 50
    assert msg["output"] == {"stop_reason": "tool_use"}
    assert msg["input"] == {"key": REDACTED}
    assert "ZeroDivisionError" in by_name["evaluate"]["error"]
    assert all(r["metrics"]["start"] <= r["metrics"]["end"] for r in rows)
    assert PLANTED not in json.dumps(rows, default=str)
    # The local file got the same spans.
    assert [s["name"] for s in read(tmp_path / "traces.jsonl")] == ["claude.messages", "evaluate", "experiment"]
