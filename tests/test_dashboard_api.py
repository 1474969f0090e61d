"""The dashboard's JSON API, its event stream, decisions and the token, through Flask's test client
against real run folders (tests/dashboard_fixtures.py). The pages: tests/test_dashboard.py."""

import json
import shutil
import threading

import pytest

from dashboard import data
from dashboard.app import TOKEN_HEADER, create_app
from runfiles.queue_store import QueueStore
from tests.dashboard_fixtures import HEADER, TOKEN, stream_events, client, demo, fresh, repo_of, rows_of  # noqa: F401  (fixtures)


def test_api_results_matches_the_tsv(demo):
    _, c = client(demo)
    r = c.get("/api/results?tag=demo")
    assert r.status_code == 200
    body = r.get_json()
    rows = rows_of(demo)
    assert body["count"] == len(rows) == body["complete"]
    for got, (commit, bpb, mem, status, desc) in zip(body["rows"], rows):
        assert (got["commit"], got["status"], got["description"]) == (commit, status, desc)
        assert got["val_bpb"] == pytest.approx(float(bpb)) and got["problem"] is None
    sliced = c.get("/api/results?tag=demo&offset=3&limit=2").get_json()["rows"]
    assert [x["n"] for x in sliced] == [4, 5]


def test_state_queue_tags_endpoints(demo):
    _, c = client(demo)
    st = c.get("/api/state?tag=demo").get_json()
    assert st["phase"] == "training" and st["experiments"] == 12
    assert st["remaining"] is not None and 0 < st["duty_cycle"] <= 1 and st["per_hour"] > 0
    q = c.get("/api/queue?tag=demo").get_json()
    assert len(q["pending"]) == 2 and all(i["kind"] == "contested" for i in q["pending"])
    tags = c.get("/api/tags").get_json()["tags"]
    assert [t["tag"] for t in tags] == ["demo"]


def test_decide_refused_without_token_recorded_with_it(fresh):
    _, c = client(fresh)
    store = QueueStore(fresh / "queue.sqlite")
    item = store.list("pending")[0]
    body = {"tag": "demo", "id": item.id, "decision": "approve", "note": "looks real"}
    assert c.post("/api/queue/decide", json=body).status_code == 403
    assert c.post("/api/queue/decide", json=body, headers={TOKEN_HEADER: "wrong"}).status_code == 403
    assert store.get(item.id).status == "pending"
    r = c.post("/api/queue/decide", json=body, headers={TOKEN_HEADER: TOKEN})
    assert r.status_code == 200 and r.get_json()["item"]["status"] == "approved"
    assert r.get_json()["item"]["decided_by"] == "dashboard"      # the row's flat columns
    assert "by dashboard: “looks real”" in r.get_json()["html"]       # the decided list names who and why
    got = store.get(item.id)
    assert (got.status, got.decision.by, got.decision.note) == ("approved", "dashboard", "looks real")
    # Once only; unknown items, other tags and bad ids are refused with a reason.
    assert c.post("/api/queue/decide", json=body, headers={TOKEN_HEADER: TOKEN}).status_code == 409
    for bad, code in (({**body, "id": 999}, 409), ({**body, "tag": "nope"}, 404),
                      ({**body, "id": "x"}, 400), ({**body, "decision": "maybe"}, 409)):
        assert c.post("/api/queue/decide", json=bad, headers={TOKEN_HEADER: TOKEN}).status_code == code
    # A form post carrying the token works too (no JS needed).
    other = store.list("pending")[0]
    r = c.post("/api/queue/decide", data={"tag": "demo", "id": other.id, "decision": "reject", "token": TOKEN})
    assert r.status_code == 200 and store.get(other.id).status == "rejected"
    # The page shows the decisions.
    assert "approved" in c.get("/t/demo/").get_data(as_text=True)


def test_env_token_and_foreign_host_header(demo, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_DASHBOARD_TOKEN", "from-the-env-123456")
    app = create_app(repo=repo_of(demo))
    assert app.config["TOKEN"] == "from-the-env-123456"
    c = app.test_client()
    assert c.get("/t/demo/", headers={"Host": "evil.example:8000"}).status_code == 403
    assert c.get("/t/demo/", headers={"Host": "127.0.0.1:8000"}).status_code == 200


def test_stream_pushes_appended_rows_and_queue_changes(fresh):
    app, c = client(fresh)
    n = len(rows_of(fresh))

    def append():
        with open(fresh / "results.tsv", "a") as f:
            f.write("7777777\t1.01\t44.0\tkeep\tpushed by the stream test\n")

    got = b"".join(stream_events(c, f"/api/stream?tag=demo&since={n}", b"event: rows", action=append)).decode()
    assert "pushed by the stream test" in got and f"id: {n + 1}" in got
    payload = json.loads(got.split("event: rows\n", 1)[1].split("data: ", 1)[1].split("\n", 1)[0])
    assert payload["count"] == n + 1 and 'data-n="7"' in payload["html"] and "<svg" in payload["chart"]
    # A reconnect with Last-Event-ID resumes after what the page already has.
    got = b"".join(stream_events(c, "/api/stream?tag=demo", b"event: rows",
                                  headers={"Last-Event-ID": str(n)})).decode()
    assert "pushed by the stream test" in got
    # A decision made elsewhere (the review CLI) reaches the page.
    store = QueueStore(fresh / "queue.sqlite")
    item = store.list("pending")[0]
    t = threading.Timer(0.5, lambda: store.decide(item.id, "reject", who="cli"))
    t.start()
    got = b""
    for _ in range(3):        # the first queue event is the initial one; wait for the rejection
        got += b"".join(stream_events(c, f"/api/stream?tag=demo&since={n + 1}", b"by cli"))
        if b"by cli" in got:
            break
    t.join()
    assert b"rejected" in got and b"by cli" in got


def test_runs_dir_finds_every_folder_with_results(demo, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(demo, runs / "a", ignore=shutil.ignore_patterns(".git"))
    shutil.copytree(demo, runs / "nested" / "b", ignore=shutil.ignore_patterns(".git"))
    (runs / "b-run.json-only").mkdir()
    app = create_app(runs_dir=runs, token=TOKEN)
    c = app.test_client()
    tags = c.get("/api/tags").get_json()["tags"]
    assert sorted(t["key"] for t in tags) == ["demo", "demo~2"]       # both copies, distinct keys
    page = c.get("/t/demo~2/e/2").get_data(as_text=True)
    assert "no git repository for this run" in page and "the journal&#39;s copy" in page


def test_jsonl_reader_is_incremental_and_waits_for_whole_lines(tmp_path):
    p = tmp_path / "j.jsonl"
    p.write_text('{"a": 1}\n{"a": 2')
    assert [r["a"] for r in data.read_jsonl(p).records] == [1]
    with open(p, "a") as f:
        f.write('}\n{"a": 3}\n')
    assert [r["a"] for r in data.read_jsonl(p).records] == [1, 2, 3]
    p.write_text('{"a": 9}\n')          # rewritten (smaller): read afresh
    assert [r["a"] for r in data.read_jsonl(p).records] == [9]
    p.write_text('{"a": 8}\n')          # rewritten, same size: noticed too
    assert [r["a"] for r in data.read_jsonl(p).records] == [8]


# ---------------------------------------------------------------- honest figures on screen
