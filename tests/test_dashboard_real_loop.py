"""The dashboard on a run folder the real loop wrote (not the demo), and the Now panel's list of
experiments in flight (state.json "workers", runfiles/state.py RunState)."""

import html
import json

import pytest

from dashboard import data, runview
from dashboard.app import create_app
from dashboard.demo import build

TOKEN = "test-token-0123456789"


def client(run):
    return create_app(repo=run.parent.parent, token=TOKEN).test_client()


def rows_of(run):
    return [ln.split("\t") for ln in (run / "results.tsv").read_text().splitlines()[1:]]


def test_renders_a_run_folder_written_by_the_real_loop(loop_run):
    """Not the demo: the folder agent/loop.py wrote on the stand-in train.py (tests/conftest.py)."""
    c = client(loop_run)
    rows = rows_of(loop_run)
    journal = [r for r in map(json.loads, (loop_run / "journal.jsonl").read_text().splitlines())
               if r.get("kind", "experiment") == "experiment"]
    page = c.get("/t/rec/").get_data(as_text=True)
    for n, (commit, bpb, mem, status, desc) in enumerate(rows, 1):
        assert f'class="st-{status}" data-n="{n}"' in page and commit in page
    api = c.get("/api/results?tag=rec").get_json()
    assert api["count"] == len(rows) and all(r["problem"] is None for r in api["rows"]) and api["problems"] == []
    st = c.get("/api/state?tag=rec").get_json()
    assert st["phase"] == "stopped" and st["experiments"] == len(rows) == len(journal) and st["workers"] == []
    # the simple reviewer keeps what beats the best: the best is the last keep, the lowest kept row
    kept = [float(r[1]) for r in rows if r[3] == "keep"]
    assert st["best"]["val_bpb"] == pytest.approx(min(kept)) == pytest.approx(kept[-1])
    # the band falls back to the first row: the simple reviewer measures no noise
    band = runview.noise_band(data.read_results(loop_run / "results.tsv").rows, journal)
    assert band["source"] == "first row (no judge baseline recorded)" and band["threshold"] is None
    second = c.get("/t/rec/e/2").get_data(as_text=True)
    assert html.escape(journal[1]["decision_reason"]) in second and "diff --git a/train.py b/train.py" in second
    assert "no journal record" not in second
    base = c.get("/t/rec/e/1").get_data(as_text=True)
    assert "baseline (unmodified train.py)" in base and "diff --git" not in base


def test_now_panel_lists_the_experiments_in_flight(tmp_path):
    run = build(tmp_path / "d", "demo", n=3, seed=3, queue=False, workers=2)
    c = client(run)
    st = c.get("/api/state?tag=demo").get_json()
    assert [(w["worker"], w["n"]) for w in st["workers"]] == [(0, 4), (1, 5)]
    assert 90 <= st["workers"][0]["elapsed"] < 200 and st["workers"][1]["elapsed"] > st["workers"][0]["elapsed"]
    page = c.get("/t/demo/").get_data(as_text=True)
    for w in st["workers"]:
        assert f"worker {w['worker']} · exp {w['n']}" in page and html.escape(w["description"]) in page
    plain = build(tmp_path / "p", "demo", n=2, seed=3, queue=False)
    assert "in flight" not in client(plain).get("/t/demo/").get_data(as_text=True)


def test_the_demo_writes_the_loops_schema(loop_run, tmp_path):
    from harness.experiment_record import OPTIONAL_KEYS, ExperimentRecord
    from runfiles.state import RunState
    demo = build(tmp_path / "d", "demo", n=4, seed=1, queue=False)
    real = [r for r in map(json.loads, (loop_run / "journal.jsonl").read_text().splitlines())
            if r.get("kind", "experiment") == "experiment"]
    made = [json.loads(x) for x in (demo / "journal.jsonl").read_text().splitlines()]
    core = [k for k in real[0] if k not in OPTIONAL_KEYS]
    for rec in made:
        assert [k for k in rec if k not in OPTIONAL_KEYS] == core
        assert ExperimentRecord.from_dict(rec).extra == {}
    assert set(json.loads((demo / "state.json").read_text())) == set(RunState().to_dict()) | {"updated_at"}
    assert data.read_results(demo / "results.tsv").problems == []
