"""The dashboard under hostile input: every request gets a valid page or a clear 4xx.

Run files are written by a loop that may crash mid-line, by models, or by hand; requests may come
from any page the browser has open. Each test loops over routes and values and asserts that no
answer is a 500, that JSON answers are strict JSON (no NaN/Infinity), and that write routes
refuse other origins even with the token.
"""

import copy
import itertools
import json
import os
import shutil

import pytest

from dashboard.app import MAX_INT_DIGITS, TOKEN_HEADER, create_app
from dashboard.demo import build
from runfiles.queue_store import QueueStore

TOKEN = "hostile-token-0123456789"
HEADER = "commit\tval_bpb\tmemory_gb\tstatus\tdescription\n"
# Values a field, a parameter or a header may hold when someone means harm (or a file is torn).
HOSTILE = [None, True, False, 0, -1, 10 ** 400, 1e308, -1e308, float("inf"), float("-inf"), float("nan"),
           "", "x", "inf", "<script>alert(1)</script>", "../../etc/passwd", "\x00", [], [1, [2]], {}, {"a": {"b": 1}}]
# The few that reach different code paths, for loops that multiply fields by values (keeps it fast).
SHARP = [None, True, 10 ** 400, float("inf"), float("nan"), "x", [1, [2]], {"a": {"b": 1}}]
# Parameter strings: huge, negative, fractional, not ASCII digits ("²".isdigit() is True, int() fails).
PARAMS = ["", "-1", "0", "1e309", "9" * 5000, "x", "nan", "inf", "1.5", "²", "٣", "%00", "0x10", " 1", "1" * 13]
JSON_ROUTES = ("/api/results?tag=demo", "/api/state?tag=demo", "/api/queue?tag=demo", "/api/experiment?tag=demo&n=1",
               "/api/tags")


def _strict(text: str):
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return build(tmp_path_factory.mktemp("hostile"), "demo", n=5, seed=7)


@pytest.fixture
def copy_run(base, tmp_path):
    """A copy of the demo run folder without git (found by --runs): fast pages, no git calls."""
    dst = tmp_path / "runs" / "demo"
    shutil.copytree(base, dst, ignore=shutil.ignore_patterns(".git"))
    return dst


class Writer:
    """Rewrites a run file with a fresh mtime each time (one clock for all tests), so the
    readers' (size, mtime) caches never serve an old copy of a same-sized rewrite."""
    ticks = itertools.count(1)

    def __init__(self, run):
        self.run = run

    def write(self, name, content):
        path = self.run / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
        t = next(self.ticks) * 10 ** 9
        os.utime(path, ns=(t, t))


def _get_all(c, n_rows, extra=()):
    """GET every read route; returns {url: response}; asserts none is a 500 and JSON is strict."""
    urls = ["/t/demo/", "/t/demo/chart.svg", *JSON_ROUTES,
            *(f"/t/demo/e/{n}" for n in range(1, n_rows + 1)),
            *(f"/api/experiment?tag=demo&n={n}" for n in range(1, n_rows + 1)), *extra]
    got = {}
    for url in urls:
        r = c.get(url)
        assert r.status_code < 500, (url, r.status_code, r.get_data(as_text=True)[:400])
        if r.mimetype == "application/json":
            _strict(r.get_data(as_text=True))
        got[url] = r
    return got


# ---------------------------------------------------------------- results.tsv

ROWS = [
    "abc1230\tinf\t44.0\tkeep\tplus infinity",
    "abc1231\t-inf\t44.0\tkeep\tminus infinity",
    "abc1232\tnan\t44.0\tkeep\tnot a number (a kept row needs a figure)",
    "abc1233\tNaN\tinf\tkeep\tNaN and inf memory",
    "abc1234\t\t44.0\tkeep\tempty value",
    "abc1235\tgarbage\t44.0\tkeep\tgarbage value",
    "abc1236\t1e308\t44.0\tkeep\thuge",
    "abc1237\t-1e308\t44.0\tkeep\thuge negative",
    "abc1238\t-3.5\t44.0\tkeep\tnegative",
    "abc1239\t1e999\t1e999\tkeep\toverflows to inf",
    "abc123a\t1.05\tdiscard",
    "\t\t\t\t",
    "abc123b\t1.04\t44.0\tkeep\textra\ttabs\there",
    "abc123c\t" + "9" * 5000 + "\t44.0\tkeep\tfive thousand digits",
]


@pytest.mark.parametrize("row", ROWS)
def test_one_bad_row_never_breaks_a_page(base, row):
    """Each bad row alone after a good one (the chart's scale is computed around it)."""
    run = base
    good = (run / "results.tsv").read_text().splitlines()[1]
    saved = (run / "results.tsv").read_bytes()
    try:
        Writer(run).write("results.tsv", HEADER + good + "\n" + row + "\n")
        c = create_app(repo=run.parent.parent, token=TOKEN).test_client()
        got = _get_all(c, 2)
        page = got["/t/demo/"].get_data(as_text=True)
        assert got["/t/demo/"].status_code == 200 and got["/t/demo/chart.svg"].status_code == 200
        assert got["/t/demo/chart.svg"].get_data(as_text=True).startswith("<svg")
        body = got["/api/results?tag=demo"].get_json()
        assert body["count"] == (2 if row.strip() else 1)     # a line of only tabs is blank
        if row.split("\t")[1:2] in (["inf"], ["-inf"], ["nan"], ["NaN"], ["1e999"]):
            # Shown as such on the page, never as a number in JSON, and flagged.
            word = {"NaN": "nan", "1e999": "inf"}.get(row.split("\t")[1], row.split("\t")[1])
            assert f'<td class="num mono">{word}</td>' in page
            assert body["rows"][1]["val_bpb"] is None and body["rows"][1]["val_text"] == word
            assert "is not finite" in body["rows"][1]["problem"]
    finally:
        Writer(run).write("results.tsv", saved)


def test_all_bad_rows_together_and_binary_garbage(copy_run):
    w = Writer(copy_run)
    good = (copy_run / "results.tsv").read_text()
    w.write("results.tsv", good + "\n".join(ROWS) + "\n")
    c = create_app(runs_dir=copy_run.parent, token=TOKEN).test_client()
    _get_all(c, 5 + len(ROWS))
    svg = c.get("/t/demo/chart.svg").get_data(as_text=True)
    # The good points still get a readable scale: ticks are ordinary numbers, not 1e+307.
    assert "e+" not in "".join(t.split(">")[-1] for t in svg.split("</text>") if 'class="tick"' in t)
    for blob in (os.urandom(4096), b"\xff\xfe" + "\t".join(["x"] * 9).encode("utf-16"), b"\x00" * 100,
                 HEADER.encode() + b"\x80\x81\t\xff\t\t\n"):
        w.write("results.tsv", blob)
        _get_all(c, 1)


def test_single_point_and_only_non_finite_points(copy_run):
    w = Writer(copy_run)
    first = (copy_run / "results.tsv").read_text().splitlines()[1]
    w.write("results.tsv", HEADER + first + "\n")
    c = create_app(runs_dir=copy_run.parent, token=TOKEN).test_client()
    svg = c.get("/t/demo/chart.svg").get_data(as_text=True)
    ticks = [t.rsplit(">", 1)[-1] for t in svg.split("</text>") if 'class="tick"' in t and 'text-anchor="middle"' in t]
    assert ticks == ["1"]                       # one x tick, not "1" and "2" on top of each other
    w.write("results.tsv", HEADER + "abc1230\tinf\t44.0\tkeep\tonly inf\n")
    r = c.get("/t/demo/chart.svg")
    assert r.status_code == 200 and "no finite val_bpb to plot yet (1 result(s) not finite" in r.get_data(as_text=True)


# ---------------------------------------------------------------- journal.jsonl, state.json, traces

def _mutations(rec, top_level=True):
    """(path, value) pairs: every top-level field and the verdict fields the pages read."""
    paths = [(k,) for k in rec] if top_level else [("trusted_bpb",), ("proposer",), ("verdicts",)]
    # The baseline record matters for what sets the band (its judge verdict); the rest is covered
    # on the experiment's record.
    for name in ("guard", "verify", "judge", "metajudge") if top_level else ("judge",):
        paths.append(("verdicts", name))
        for k in (rec.get("verdicts", {}).get(name) or {}):
            paths.append(("verdicts", name, k))
    paths += [("verdicts", "judge", "band", "values"), ("summary", "val_bpb"), ("timings", "run"),
              ("tokens", "input")]
    for path in paths:
        for value in SHARP:
            yield path, value


def _set(rec, path, value):
    out = copy.deepcopy(rec)
    d = out
    for k in path[:-1]:
        if not isinstance(d.get(k), dict):
            d[k] = {}
        d = d[k]
    d[path[-1]] = value
    return out


def test_journal_fields_with_hostile_values(copy_run):
    lines = (copy_run / "journal.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    w = Writer(copy_run)
    c = create_app(runs_dir=copy_run.parent, token=TOKEN).test_client()
    n = 0
    for target in (0, 1):                        # the baseline record (its verdicts) and an experiment's
        for path, value in _mutations(recs[target], top_level=target == 1):
            mutated = list(recs)
            mutated[target] = _set(recs[target], path, value)
            w.write("journal.jsonl", "".join(json.dumps(r) + "\n" for r in mutated))
            urls = [f"/t/demo/e/{target + 1}", "/t/demo/chart.svg" if target == 0 else "/api/state?tag=demo"]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                urls.append(f"/api/experiment?tag=demo&n={target + 1}")   # JSON stays strict
            for url in urls:
                r = c.get(url)
                assert r.status_code < 500, (path, value, url, r.get_data(as_text=True)[:300])
                if r.mimetype == "application/json":
                    _strict(r.get_data(as_text=True))
            n += 1
    assert n > 400                               # the loop really covered the fields
    # The run page (rows, Now panel, band) with everything mutated at once, field by field.
    for value in HOSTILE:
        w.write("journal.jsonl", "".join(json.dumps({k: value for k in r}) + "\n" for r in recs))
        assert c.get("/t/demo/").status_code == 200, value


def test_journal_lines_that_are_not_records(copy_run):
    w = Writer(copy_run)
    c = create_app(runs_dir=copy_run.parent, token=TOKEN).test_client()
    good = (copy_run / "journal.jsonl").read_text()
    for line in ("[1, 2, 3]", '"a string"', "42", "null", "true", "NaN", '{"n": 1, "verdicts": [1]}',
                 '{"n": 1, "summary": [1, 2]}', '{"n": 1, "summary": {"val_bpb": "x"}}', '{"n": 1, "summary": {}}',
                 '{"n": [1], "kind": "experiment"}', '{"n": {"x": 1}, "kind": "audit"}', '{"kind": 5}',
                 '{"n": 1, "log": "../../../../etc/passwd"}', '{"n": 1, "log": 7}', '{"n": 1, "log": "\\u0000"}',
                 '{"n": 1e999, "trusted_bpb": 1e999}', '{"n": 1, "verdicts": {"verify": {"ok": "yes", "seconds": "s"}}}',
                 '{"n": 1, "verdicts": {"judge": {"basis": "baseline", "baseline_values": "x"}}}',
                 '{"n": 1, "verdicts": {"judge": {"basis": "baseline", "baseline_values": [1e999, "x"]}}}',
                 "\x00\x01\x02"):
        w.write("journal.jsonl", line + "\n" + good)
        _get_all(c, 5)
        w.write("journal.jsonl", good + line + "\n")
        _get_all(c, 5)


def test_state_and_traces_with_hostile_values(copy_run):
    w = Writer(copy_run)
    c = create_app(runs_dir=copy_run.parent, token=TOKEN).test_client()
    state = json.loads((copy_run / "state.json").read_text())
    for key in [*state, "pid", "run_started_at"]:
        for value in SHARP + [-1, 1e308]:
            w.write("state.json", json.dumps({**state, "phase": "training", key: value}))
            for url in ("/t/demo/", "/api/state?tag=demo"):
                r = c.get(url)
                assert r.status_code < 500, (key, value, url)
    for text in ("[]", '"x"', "1e999", "{"):
        w.write("state.json", text)
        assert c.get("/t/demo/").status_code == 200
    spans = [json.loads(x) for x in (copy_run / "traces.jsonl").read_text().splitlines()]
    for key in ("id", "parent", "trace", "name", "start", "end", "input", "tokens", "cost", "error"):
        for value in SHARP:
            w.write("traces.jsonl", "".join(json.dumps({**s, key: value}) + "\n" for s in spans))
            r = c.get("/t/demo/e/2")
            assert r.status_code < 500, (key, value)


def test_run_json_hostile_and_summary_without_val_bpb(copy_run):
    w = Writer(copy_run)
    c = create_app(runs_dir=copy_run.parent, token=TOKEN).test_client()
    run_json = json.loads((copy_run / "run.json").read_text())
    for key in ("tag", "budget", "source", "fingerprint", "profile"):
        for value in SHARP:
            w.write("run.json", json.dumps({**run_json, key: value}))
            assert c.get("/t/demo/").status_code < 500, (key, value)
            assert c.get("/api/tags").status_code == 200
    # The loop in loop mode: train.py no longer prints val_bpb, the trusted figure is the result.
    w.write("run.json", json.dumps(run_json))
    recs = [json.loads(x) for x in (copy_run / "journal.jsonl").read_text().splitlines()]
    for r in recs:
        if isinstance(r.get("summary"), dict):
            r["summary"].pop("val_bpb", None)
        if isinstance(r.get("verdicts", {}).get("verify"), dict):
            r["verdicts"]["verify"]["printed_bpb"] = None
    w.write("journal.jsonl", "".join(json.dumps(r) + "\n" for r in recs))
    page = c.get("/t/demo/e/2").get_data(as_text=True)
    trusted = recs[1]["trusted_bpb"]
    assert f'<td class="mono trusted">{trusted:.6f}' in page
    assert "<th>val_bpb</th>" not in page                     # no printed figure posing as the result


# ---------------------------------------------------------------- request parameters and headers

def test_every_read_route_with_hostile_parameters(base):
    c = create_app(repo=base.parent.parent, token=TOKEN).test_client()
    for v in PARAMS:
        for url in (f"/t/demo/?page={v}", f"/t/demo/e/{v}", f"/api/results?tag=demo&offset={v}&limit={v}",
                    f"/api/experiment?tag=demo&n={v}", f"/api/results?tag={v}", f"/t/{v}/", f"/t/{v}/chart.svg",
                    f"/api/state?tag={v}", f"/api/queue?tag={v}"):
            r = c.get(url)
            assert r.status_code < 500, (url[:80], r.status_code)


def test_stream_parameters_are_bounded(base):
    app = create_app(repo=base.parent.parent, token=TOKEN)
    app.config["STREAM_MAX_S"] = 0.2
    c = app.test_client()
    for v in PARAMS:
        for kw in ({"query_string": {"tag": "demo", "since": v}},
                   {"query_string": {"tag": "demo"}, "headers": {"Last-Event-ID": v}}):
            r = c.get("/api/stream", buffered=False, **kw)
            try:
                ok = v.isascii() and v.isdigit() and len(v) <= MAX_INT_DIGITS
                assert r.status_code == (200 if ok else 400), (v[:20], kw.get("headers"), r.status_code)
                if not ok:
                    assert "since must be a whole number" in r.get_json()["error"]
            finally:
                r.close()


@pytest.fixture
def queue_run(tmp_path):
    return build(tmp_path / "q", "demo", n=6, seed=2)


def test_decide_with_hostile_bodies_is_400_not_500(queue_run):
    c = create_app(repo=queue_run.parent.parent, token=TOKEN).test_client()
    store = QueueStore(queue_run / "queue.sqlite")
    item = store.list("pending")[0]
    auth = {TOKEN_HEADER: TOKEN}
    for value in HOSTILE:
        r = c.post("/api/queue/decide", json={"tag": "demo", "id": value, "decision": "approve"}, headers=auth)
        expected = 409 if value == 0 and value is not False else 400   # 0 is a number: no such item
        assert r.status_code == expected, (value, r.status_code)
    for raw in ('{"tag": "demo", "id": 1e309, "decision": "approve"}', '{"tag": "demo", "id": "x"}',
                '{"tag": "demo", "id": true}', '[1, 2]', '"string"', "42", "null", "{", '{"id": ' + "9" * 5000 + "}"):
        r = c.post("/api/queue/decide", data=raw, content_type="application/json", headers=auth)
        assert r.status_code in (400, 404), (raw[:40], r.status_code)
    for key in ("tag", "decision", "note"):
        for value in HOSTILE:
            body = {"tag": "demo", "id": item.id, "decision": "nope", key: value}
            r = c.post("/api/queue/decide", json=body, headers=auth)
            assert 400 <= r.status_code < 500, (key, value, r.status_code)
    r = c.post("/api/queue/decide", json={"tag": "demo", "id": item.id, "decision": "approve", "note": "n" * 5000},
               headers=auth)
    assert r.status_code == 400
    assert store.get(item.id).status == "pending"        # nothing above changed the queue
    ok = c.post("/api/queue/decide", json={"tag": "demo", "id": str(item.id), "decision": "approve"}, headers=auth)
    assert ok.status_code == 200 and store.get(item.id).status == "approved"


def test_cross_origin_writes_are_refused_even_with_the_token(queue_run):
    c = create_app(repo=queue_run.parent.parent, token=TOKEN).test_client()
    store = QueueStore(queue_run / "queue.sqlite")
    item = store.list("pending")[0]
    body = {"tag": "demo", "id": item.id, "decision": "reject"}
    host = {"Host": "127.0.0.1:8000"}
    for headers in ({"Origin": "http://evil.example"}, {"Origin": "http://127.0.0.1:9999"},
                    {"Origin": "null"}, {"Origin": "http://localhost:8000"}, {"Origin": "http://127.0.0.1:8000.evil.example"},
                    {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                    {"Origin": "http://127.0.0.1:8000", "Sec-Fetch-Site": "cross-site"}):
        r = c.post("/api/queue/decide", json=body, headers={**host, **headers, TOKEN_HEADER: TOKEN})
        assert r.status_code == 403 and "action refused" in r.get_json()["error"], headers
        # A form post from another site (no JS needed to forge one) is refused the same way.
        r = c.post("/api/queue/decide", data={**body, "token": TOKEN}, headers={**host, **headers})
        assert r.status_code == 403, headers
    assert store.get(item.id).status == "pending"
    # The page's own request (same origin, as a browser sends it) goes through.
    r = c.post("/api/queue/decide", json=body, headers={**host, "Origin": "http://127.0.0.1:8000",
                                                        "Sec-Fetch-Site": "same-origin", TOKEN_HEADER: TOKEN})
    assert r.status_code == 200 and store.get(item.id).status == "rejected"
