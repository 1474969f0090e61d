"""The dashboard says what the loop is doing and draws what the judge used: the Now panel's idea,
"run k of n (why)" and "evaluating"; the noise band the judge's latest margin around the kept
baseline; no point at 0.0 for a row without a figure; a one-point chart's y labels all distinct.
Through the real Flask app, and once in headless Chromium with the page updating live."""
import html
import json
import re

import pytest

from dashboard.browser import Chromium
from dashboard.demo import build
from harness.experiment_record import ExperimentRecord
from runfiles.state import RunState
from runfiles.state import write_state
from tests.dashboard_fixtures import HEADER, client
from tests.test_dashboard_browser import server  # noqa: F401  (the real app.py on a port)
from tests.test_results_analysis import crashing_run, integrity_records

IDEA = {"description": "deeper: DEPTH 4 -> 6", "hypothesis": "more layers fit more in the same budget",
        "proposer": "offline"}


def set_state(folder, **fields):
    old = json.loads((folder / "state.json").read_text())
    state = RunState.from_dict({**old, **fields})
    write_state(folder / "state.json", **state.to_dict())


def y_ticks(svg: str) -> list[str]:
    return re.findall(r'<text class="tick" x="\d+" y="[^"]+" text-anchor="end">([^<]+)</text>', svg)


def test_now_shows_the_idea_the_run_and_evaluating(tmp_path):
    run = build(tmp_path / "d", "demo", n=3, seed=7, queue=False)
    set_state(run, phase="evaluating", experiment=4, idea=IDEA, run={"k": 2, "of": 3, "why": "confirming a gain"})
    _, c = client(run)
    page = c.get("/t/demo/").get_data(as_text=True)
    now = page.split('id="now"', 1)[1].split("</section>", 1)[0]
    assert html.escape(IDEA["description"]) in now and html.escape(IDEA["hypothesis"]) in now
    assert "run 2 of 3 (confirming a gain)" in now
    assert 'class="cell evaluating"' in now and "trusted evaluation of the trained model" in now
    assert "elapsed ·" not in now, "no training clock while the evaluation runs"
    set_state(run, phase="training", run={"k": 1, "of": None, "why": ""})
    now = c.get("/t/demo/").get_data(as_text=True).split('id="now"', 1)[1].split("</section>", 1)[0]
    assert "elapsed ·" in now and "run 1<" in now.replace("</span>", "<") and 'class="cell evaluating"' not in now
    set_state(run, phase="idle")   # between experiments: the last idea is no longer being tried
    now = c.get("/t/demo/").get_data(as_text=True).split('id="now"', 1)[1].split("</section>", 1)[0]
    assert html.escape(IDEA["description"]) not in now and "run 1" not in now


def judged_run(tmp_path):
    """A run folder whose journal has an integrity-discarded baseline try, the kept baseline (its
    first band 1.82 wide, from two runs), later decisions that used a margin of 0.28, and rows
    without a figure (a guard rejection written nan, a legacy 0.000000 discard, a crash)."""
    run = build(tmp_path / "d", "demo", n=2, seed=8, queue=False)
    recs = integrity_records()
    recs[1].verdicts["judge"]["threshold"] = 1.82
    recs[5].evidence = {"call": "keep", "comparison": {"margin": 0.28, "sigma": 0.05, "gain": 0.07}}
    recs[2].evidence = {"call": "discard", "comparison": {"margin": 0.31, "sigma": 0.06}}
    (run / "journal.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in recs))
    rows = [f"{'a' * 7}\t3.270000\t1.0\tkeep\tbaseline", f"{'b' * 7}\t3.250000\t1.0\tdiscard\tmeasured, integrity",
            f"{'c' * 7}\tnan\t0.0\tdiscard\tguard: no change", f"{'d' * 7}\t0.000000\t0.0\tcrash\toom",
            f"{'e' * 7}\t3.200000\t1.0\tkeep\tbetter", f"{'f' * 7}\t0.000000\t1.0\tdiscard\twritten before nan"]
    (run / "results.tsv").write_text(HEADER + "".join(r + "\n" for r in rows))
    return run


def test_the_band_is_the_judges_latest_margin_around_the_kept_baseline(tmp_path):
    run = judged_run(tmp_path)
    _, c = client(run)
    svg = c.get("/t/demo/chart.svg").get_data(as_text=True)
    assert "baseline 3.2700 ± 0.28 noise band" in svg, "the judge's margin, not the baseline's first 1.82"
    assert "margin the judge used at experiment 6" in svg
    base_y = float(svg.split('class="baseline"', 1)[1].split('y1="', 1)[1].split('"', 1)[0])
    top, height = (float(svg.split('class="band"', 1)[1].split(f'{a}="', 1)[1].split('"', 1)[0]) for a in ("y", "height"))
    assert base_y == pytest.approx(top + height / 2, abs=0.2)
    # two keeps, one discard with a figure; the nan, the legacy 0.0 and the crash are marks along the top
    assert svg.count('class="pt keep"') == 2 and svg.count('class="pt discard"') == 1
    assert svg.count('class="pt crash"') == 3 and "crash / no value (3)" in svg
    assert not any(float(t) < 3.0 for t in y_ticks(svg)), "nothing stretches the axis down to 0.0"
    page = c.get("/t/demo/").get_data(as_text=True)
    row = page.split('data-n="3"', 1)[1].split("</tr>", 1)[0]
    assert ">nan<" not in row and "⚠" not in row, "a figure-less discard is a plain row, not a malformed one"


def test_a_one_point_chart_has_distinct_y_labels(tmp_path):
    run = build(tmp_path / "d", "demo", n=2, seed=9, queue=False)
    (run / "results.tsv").write_text(HEADER + "aaaaaaa\t3.268600\t1.0\tkeep\tbaseline\n")
    base = ExperimentRecord.of(n=1, commit="a" * 40, status="keep", proposer="baseline", trusted_bpb=3.2686,
                            verdicts={"judge": {"basis": "baseline", "baseline_values": [3.2686, 3.2686],
                                                "threshold": 1e-9}})   # identical runs: a band of nothing
    (run / "journal.jsonl").write_text(json.dumps(base.to_dict()) + "\n")
    _, c = client(run)
    svg = c.get("/t/demo/chart.svg").get_data(as_text=True)
    ticks = y_ticks(svg)
    assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), ticks
    assert svg.count('class="pt keep"') == 1


def test_a_real_run_with_a_failed_baseline_try(tmp_path):
    """The loop's own folder: the baseline's first try crashed (journal only), an experiment
    crashed. The table starts at the kept baseline, the chart has no point at 0, and the row's page
    names the experiment number the console printed."""
    _, run, _ = crashing_run(tmp_path)
    _, c = client(run)
    svg = c.get("/t/c/chart.svg").get_data(as_text=True)
    assert svg.count('class="pt keep"') == 1 and svg.count('class="pt crash"') == 1
    assert "baseline 1.0200" in svg and not any(float(t) < 0.9 for t in y_ticks(svg))
    page = c.get("/t/c/e/1").get_data(as_text=True)
    assert "baseline (unmodified train.py)" in page and "is experiment 2 in the journal" in page
    assert c.get("/t/c/e/5").status_code == 404, "4 rows for 5 journal records"


def test_the_now_panel_in_chromium_follows_the_loop_live(server):  # noqa: F811
    run, url, token = server
    set_state(run, phase="evaluating", idea=IDEA, run={"k": 2, "of": 3, "why": "confirming a gain"})
    with Chromium(width=1200, height=900) as browser:
        browser.open(url + "t/may29/")
        browser.wait_for("document.getElementById('live').className === 'live on'")
        assert browser.evaluate("document.querySelector('#now .idea-description').textContent") == IDEA["description"]
        assert IDEA["hypothesis"] in browser.evaluate("document.querySelector('#now .idea-hypothesis').textContent")
        assert browser.evaluate("document.querySelector('#now .run-of').textContent") == "run 2 of 3 (confirming a gain)"
        assert browser.evaluate("!!document.querySelector('#now .cell.evaluating')")
        # the loop moves on: the page follows without a reload
        set_state(run, phase="training", idea={**IDEA, "description": "wider: ASPECT_RATIO 64 -> 96"},
                  run={"k": 1, "of": 2, "why": "first run"})
        browser.wait_for("document.querySelector('#now .idea-description').textContent.includes('wider')")
        assert browser.evaluate("document.querySelector('#now .cell.evaluating')") is None
        assert browser.evaluate("document.querySelector('#now .run-of').textContent") == "run 1 of 2 (first run)"
