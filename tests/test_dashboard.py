"""The dashboard's pages through Flask's test client, against real run folders (dashboard/demo.py
builds a git repo with a worktree, kept commits, discarded refs and every run file). The JSON API,
the stream and decisions: tests/test_dashboard_api.py."""

import html
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dashboard.app import create_app
from dashboard.demo import build
from runfiles.queue_store import QueueStore
from tests.dashboard_fixtures import HEADER, TOKEN, stream_events, client, demo, fresh, repo_of, rows_of  # noqa: F401  (fixtures)


def test_home_redirects_to_the_run_and_lists_rows_newest_first(demo):
    _, c = client(demo)
    r = c.get("/")
    assert r.status_code == 302 and r.headers["Location"].endswith("/t/demo/")
    page = c.get("/t/demo/").get_data(as_text=True)
    rows = rows_of(demo)
    # Every row is there, newest first, with its status class.
    positions = [page.index(f'data-n="{n}"') for n in range(len(rows), 0, -1)]
    assert positions == sorted(positions)
    for n, (commit, bpb, mem, status, desc) in enumerate(rows, 1):
        assert f'class="st-{status}" data-n="{n}"' in page
        assert commit in page
    # The Now panel reads state.json.
    assert "training" in page and "$0.87" in page and "182,340" in page


def test_chart_marks_kept_discarded_crashes_best_and_baseline(demo):
    _, c = client(demo)
    svg = c.get("/t/demo/chart.svg").get_data(as_text=True)
    rows = rows_of(demo)
    keeps = [r for r in rows if r[3] == "keep"]
    assert svg.count('class="pt keep"') == len(keeps)
    assert svg.count('class="pt discard"') == sum(r[3] == "discard" for r in rows)
    assert svg.count('class="pt crash"') == sum(r[3] == "crash" for r in rows)
    for r in keeps:       # kept points labelled with their descriptions
        assert f">{html.escape(r[4])}</text>" in svg
    assert 'class="best"' in svg and 'class="baseline"' in svg and 'class="band"' in svg
    # the band is the margin the judge used in its latest decision (its evidence), not the baseline's first guess
    journal = [json.loads(x) for x in (demo / "journal.jsonl").read_text().splitlines()]
    margin = next(r["evidence"]["comparison"]["margin"] for r in reversed(journal) if r.get("evidence"))
    assert f"baseline 1.1020 ± {margin:.3g} noise band" in svg and margin != 2 * 0.0015


def test_experiment_pages_show_git_diffs_verdicts_log_and_trace(demo):
    _, c = client(demo)
    journal = [json.loads(x) for x in (demo / "journal.jsonl").read_text().splitlines()]
    kept = next(r for r in journal if r["status"] == "keep" and r["n"] > 1)
    dropped = next(r for r in journal if r["status"] == "discard")
    page = c.get(f"/t/demo/e/{kept['n']}").get_data(as_text=True)
    assert f"from git: commit {kept['commit'][:12]}" in page
    assert "diff --git a/train.py b/train.py" in page and f"exp {kept['n']}:" in page
    assert html.escape(kept["hypothesis"]) in page
    assert "MetaJudge" in page and "Judge" in page and kept["verdicts"]["judge"]["reason"] in page
    assert "val_bpb:" in page                               # log tail (the summary block)
    # the runs the decision rested on, the bar, the noise and the probability
    ev = kept["evidence"]
    assert "<h2>Evidence</h2>" in page and "P(better)" in page and "0.9950" in page
    assert f"{ev['candidate']['runs'][1]['bpb']:.6f}" in page and str(ev["candidate"]["runs"][1]["seed"]) in page
    assert "2 run(s) of its own" in page and "logs/exp-" in page and ".rerun1.log" in page
    for name in ("propose", "guard", "run", "evaluate", "judge"):
        assert f'<div class="span-name" style="padding-left: 14px">{name}</div>' in page
    page = c.get(f"/t/demo/e/{dropped['n']}").get_data(as_text=True)
    assert f"from git: refs/autoresearch/demo/discarded/{dropped['n']}" in page
    api = c.get(f"/api/experiment?tag=demo&n={dropped['n']}").get_json()
    assert api["record"]["commit"] == dropped["commit"] and "diff --git" in api["diff"]["text"]
    assert api["evidence"]["summary"].startswith("1 run(s) of its own") and api["evidence"]["p_better"] == 0.3
    assert set(api["evidence"]) == {"call", "why", "runs", "has_runs", "incumbent_commit", "incumbent_runs",
                                     "incumbent_mean", "remembered", "gain", "margin", "p_better", "p_keep", "sigma",
                                     "df", "se", "erratic", "rule", "summary"}     # the API's evidence stays flat


def test_deleted_ref_and_lost_commit_are_shown_not_500(fresh):
    journal = [json.loads(x) for x in (fresh / "journal.jsonl").read_text().splitlines()]
    dropped = next(r for r in journal if r["status"] != "keep")
    subprocess.run(["git", "update-ref", "-d", dropped["discarded_ref"]], cwd=fresh, check=True)
    _, c = client(fresh)
    r = c.get(f"/t/demo/e/{dropped['n']}")
    page = r.get_data(as_text=True)
    assert r.status_code == 200
    assert f"discarded ref {dropped['discarded_ref']} is gone" in page
    # The object itself is still in the repo (not gc'd), so the diff still comes from git.
    assert f"from git: commit {dropped['commit'][:12]}" in page
    # A commit git never had: the journal's copy is shown, labelled.
    lines = (fresh / "results.tsv").read_text().splitlines(keepends=True)
    bogus = "f" * 40
    lines[dropped["n"]] = lines[dropped["n"]].replace(dropped["commit"][:7], bogus[:7])
    (fresh / "results.tsv").write_text("".join(lines))
    journal[dropped["n"] - 1].update(commit=bogus, short=bogus[:7])
    (fresh / "journal.jsonl").write_text("".join(json.dumps(x) + "\n" for x in journal))
    page = c.get(f"/t/demo/e/{dropped['n']}").get_data(as_text=True)
    assert "commit ffffffffffff not found in git" in page and "the journal&#39;s copy" in page


def test_malformed_and_half_written_rows_are_flagged(fresh):
    good = rows_of(fresh)
    (fresh / "results.tsv").write_text(
        HEADER + "\t".join(good[0]) + "\n"
        + "abc1234\tnot-a-number\t44.0\tkeep\tbad number\n"
        + "abc1235\t1.05\tdiscard\n"                       # missing columns
        + "abc1236\t1.04\t44.0\tmaybe\tunknown status\n"
        + "abc1237\t1.03\t44.0\tdiscard\thalf writ")        # no newline yet
    _, c = client(fresh)
    r = c.get("/t/demo/")
    page = r.get_data(as_text=True)
    assert r.status_code == 200
    assert "val_bpb &#39;not-a-number&#39; is not a number" in page
    assert "3 of 5 columns" in page and "unknown status &#39;maybe&#39;" in page
    assert "last line has no newline yet" in page
    body = c.get("/api/results?tag=demo").get_json()
    assert body["count"] == 5 and body["complete"] == 4
    assert [bool(x["problem"]) for x in body["rows"]] == [False, True, True, True, True]
    assert body["rows"][4]["partial"] is True
    for n in range(1, 6):
        assert c.get(f"/t/demo/e/{n}").status_code == 200
    assert c.get("/t/demo/chart.svg").status_code == 200
    # Garbage and an empty file.
    (fresh / "results.tsv").write_bytes(b"\xff\xfe\x00garbage\n\t\t\n")
    assert c.get("/t/demo/").status_code == 200
    (fresh / "results.tsv").write_text("")
    assert "results.tsv is empty" in c.get("/t/demo/").get_data(as_text=True)


def test_missing_journal_state_traces_logs_queue(fresh):
    for name in ("journal.jsonl", "state.json", "traces.jsonl", "queue.sqlite", "run.json"):
        (fresh / name).unlink()
    shutil.rmtree(fresh / "logs")
    _, c = client(fresh)
    page = c.get("/t/demo/").get_data(as_text=True)
    assert "journal.jsonl not found" in page and "state.json not found" in page
    assert "No pending escalations" in page
    exp = c.get("/t/demo/e/2")
    assert exp.status_code == 200
    text = exp.get_data(as_text=True)
    assert "journal.jsonl not found" in text and "traces.jsonl not found" in text
    assert c.get("/api/state?tag=demo").get_json()["phase"] == "unknown"
    assert c.get("/api/queue?tag=demo").get_json()["pending"] == []
    # A journal with a broken line: the rest still reads.
    (fresh / "journal.jsonl").write_text('{"n": 1, "status": "keep"}\n{not json\n')
    assert "1 line(s) of journal.jsonl could not be parsed" in c.get("/t/demo/").get_data(as_text=True)
    (fresh / "state.json").write_text('{"phase": "train')      # a non-atomic writer caught mid-write
    assert "state.json is not valid JSON" in c.get("/t/demo/").get_data(as_text=True)


def test_unknown_tag_and_experiment_are_404(demo):
    _, c = client(demo)
    for url in ("/t/nope/", "/t/nope/e/1", "/t/demo/e/999", "/t/nope/chart.svg"):
        assert c.get(url).status_code == 404, url
    for url in ("/api/results?tag=nope", "/api/state?tag=nope", "/api/queue?tag=nope",
                "/api/stream?tag=nope", "/api/experiment?tag=demo&n=999", "/api/experiment?tag=nope&n=1"):
        r = c.get(url)
        assert r.status_code == 404 and "error" in r.get_json(), url


def test_no_runs_found_says_where_it_looked(tmp_path):
    app = create_app(repo=tmp_path, token=TOKEN)
    r = app.test_client().get("/")
    assert r.status_code == 200 and "No runs found" in r.get_data(as_text=True)
    assert app.test_client().get("/api/results").status_code == 404


def test_secrets_never_leave_and_model_text_is_escaped(fresh):
    key, sk = "abcd-planted-secret-value-42", "sk-ant-api03-" + "Z" * 30
    hostile = f"<script>alert(1)</script> {key} {sk}"
    with open(fresh / "results.tsv", "a") as f:
        f.write(f"1234567\t1.0\t44.0\tkeep\t{hostile}\n")
    with open(fresh / "journal.jsonl", "a") as f:
        f.write(json.dumps({"n": 7, "commit": "1234567", "status": "keep", "hypothesis": hostile,
                            "log": "logs/exp-0007.log", "verdicts": {"judge": {"reason": hostile}}}) + "\n")
    (fresh / "logs" / "exp-0007.log").write_text(f"token={key}\n{sk}\n")
    QueueStore(fresh / "queue.sqlite").escalate(tag="demo", experiment=7, commit="1234567", kind="bias",
                                                reason=hostile, payload={"k": key})
    _, c = client(fresh, environ={"MY_API_KEY": key, "PATH": "/usr/bin"})
    bodies = [c.get(u).get_data(as_text=True) for u in (
        "/t/demo/", "/t/demo/e/7", "/t/demo/chart.svg", "/api/results?tag=demo", "/api/queue?tag=demo",
        "/api/experiment?tag=demo&n=7", "/api/state?tag=demo")]
    stream = b"".join(stream_events(c, "/api/stream?tag=demo&since=0", want=b"event: rows")).decode()
    for text in bodies + [stream]:
        assert key not in text and sk not in text and TOKEN not in text
    for text in bodies[:3] + [stream]:            # HTML and SVG (JSON answers are data, not markup)
        assert "<script>alert" not in text
    assert "[redacted]" in bodies[0] and "&lt;script&gt;alert(1)&lt;/script&gt;" in bodies[0]
    assert "[redacted]" in bodies[1] and "token=[redacted]" in bodies[1]


def test_pagination_keeps_thousands_fast_to_render(tmp_path):
    run = build(tmp_path / "big", "big", n=250, seed=3, git_upto=3, queue=False)
    app = create_app(repo=run.parent.parent, token=TOKEN)
    c = app.test_client()
    page1 = c.get("/t/big/").get_data(as_text=True)
    assert page1.count("<tr class=") == 100 and 'data-n="250"' in page1 and 'data-n="150"' not in page1
    assert "page 1 of 3" in page1
    page3 = c.get("/t/big/?page=3").get_data(as_text=True)
    assert page3.count("<tr class=") == 50 and 'data-n="1"' in page3
    assert c.get("/t/big/?page=99").status_code == 200          # clamped, not an error
    assert len(c.get("/api/results?tag=big").get_json()["rows"]) == 250


def _svg_number(svg, cls, attr):
    part = svg.split(f'class="{cls}"', 1)[1]
    return float(part.split(f'{attr}="', 1)[1].split('"', 1)[0])


def test_band_sits_at_the_judges_baseline_not_at_a_discarded_row(tmp_path):
    """A guard-rejected proposal is recorded with its parent's commit (the baseline's): it must
    not move the baseline. The band is the judge's: mean of the baseline runs ± threshold."""
    run = build(tmp_path / "d", "demo", n=3, seed=5)
    recs = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    base_commit = recs[0]["commit"]
    judge = recs[0]["verdicts"]["judge"]
    judge.update(baseline_values=[2.54, 2.56], threshold=0.03, spread=0.015)
    recs[0]["trusted_bpb"] = 2.55
    rejected = {**recs[1], "n": 2, "commit": base_commit, "short": base_commit[:7], "status": "discard",
                "trusted_bpb": 2.70, "verdicts": {"guard": {"ok": False, "reason": "touched prepare.py"}},
                "evidence": None}   # never run: the judge weighed nothing, so the band is the baseline's
    (run / "journal.jsonl").write_text(json.dumps(recs[0]) + "\n" + json.dumps(rejected) + "\n")
    (run / "results.tsv").write_text(HEADER + f"{base_commit[:7]}\t2.550000\t44.0\tkeep\tbaseline\n"
                                     f"{base_commit[:7]}\t2.700000\t44.0\tdiscard\trejected by the guard\n")
    _, c = client(run)
    svg = c.get("/t/demo/chart.svg").get_data(as_text=True)
    assert "baseline 2.5500 ± 0.03 noise band" in svg
    y_line = _svg_number(svg, "baseline", "y1")
    y_top, height = _svg_number(svg, "band", "y"), _svg_number(svg, "band", "height")
    assert y_line == pytest.approx(y_top + height / 2, abs=0.2)
    # The discarded row's point is plotted well below (higher val_bpb: smaller y) the band.
    cy = float(svg.split('class="pt discard" cx="', 1)[1].split('cy="', 1)[1].split('"', 1)[0])
    assert cy < y_top


def test_experiment_page_shows_trusted_figure_and_verification_table(demo):
    _, c = client(demo)
    recs = [json.loads(x) for x in (demo / "journal.jsonl").read_text().splitlines()]
    rec = next(r for r in recs if r["status"] == "discard")
    page = c.get(f"/t/demo/e/{rec['n']}").get_data(as_text=True)
    assert f'<td class="mono trusted">{rec["trusted_bpb"]:.6f}' in page
    v = rec["verdicts"]["verify"]
    assert "<h3>Trusted re-evaluation</h3>" in page
    for label, shown in (("ok", "yes"), ("causal", "yes"), ("trusted val_bpb", f"{v['trusted_bpb']:.6f}"),
                         ("printed by train.py", f"{v['printed_bpb']:.6f}"), ("seconds", f"{round(v['seconds'])}s")):
        assert f"<th>{label}</th><td" in page and shown in page.split(f"<th>{label}</th>", 1)[1][:120]
    assert html.escape(v["reason"]) in page
    assert "&#34;printed_bpb&#34;" not in page               # not dumped as raw JSON
    # The judge's figures as a table too: band, best before, improvement.
    assert "<th>band (k × spread)</th>" in page and "<th>best before</th>" in page


def test_baseline_page_says_unmodified_instead_of_the_upstream_diff(demo):
    _, c = client(demo)
    page = c.get("/t/demo/e/1").get_data(as_text=True)
    assert "baseline: unmodified train.py" in page
    assert "diff --git" not in page and "No diff available" not in page
    assert "(mean of the baseline runs)" in page


def test_fresh_run_is_calm_and_offline_data_is_flagged(tmp_path):
    run = build(tmp_path / "d", "demo", n=2, seed=6, queue=False)
    for name in ("journal.jsonl", "traces.jsonl", "state.json"):
        (run / name).unlink()
    (run / "results.tsv").write_text(HEADER)
    run_json = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**run_json, "source": "offline-fallback"}))
    _, c = client(run)
    page = c.get("/t/demo/").get_data(as_text=True)
    assert "No experiments yet" in page and "journal.jsonl not found" not in page
    assert "offline data: not comparable" in page                       # in the header bar
    assert "offline fallback corpus" in page and "not comparable with runs on the real data" in page
    (run / "run.json").write_text(json.dumps({**run_json, "source": "climbmix"}))
    page = c.get("/t/demo/").get_data(as_text=True)
    assert "offline data" not in page


def _labels(svg):
    """(x, y, angle, anchor, chars) of each kept-point label."""
    out = []
    for part in svg.split('<text class="label" ')[1:]:
        anchor = part.split('text-anchor="', 1)[1].split('"', 1)[0]
        x, y = (float(v) for v in part.split("translate(", 1)[1].split(")", 1)[0].split())
        angle = float(part.split("rotate(", 1)[1].split(")", 1)[0])
        text = html.unescape(part.split(">", 1)[1].split("</text>", 1)[0])
        out.append((x, y, angle, anchor, len(text)))
    return out


def test_chart_alone_single_point_padding_fonts_and_labels_apart(tmp_path):
    from dashboard import chart
    run = build(tmp_path / "d", "demo", n=2, seed=6, queue=False)
    first = (run / "results.tsv").read_text().splitlines()[1]
    (run / "results.tsv").write_text(HEADER + first + "\n")
    _, c = client(run)
    svg = c.get("/t/demo/chart.svg").get_data(as_text=True)
    assert 'font-family="system-ui' in svg.split(">", 1)[0] and "sans-serif" in svg.split(">", 1)[0]
    assert "<style>" in svg and "svg.progress .tick{" in svg
    x_ticks = [t.rsplit(">", 1)[-1] for t in svg.split("</text>")
               if 'class="tick"' in t and 'text-anchor="middle"' in t]
    assert x_ticks == ["1"]
    # Twenty kept points in a row at nearly one value: labels never run into each other.
    rows = "".join(f"{i:07x}\t{1.1 - i * 1e-4:.6f}\t44.0\tkeep\tkept experiment number {i} with a long name\n"
                   for i in range(1, 21))
    (run / "results.tsv").write_text(HEADER + rows)
    (run / "journal.jsonl").write_text("")
    svg = c.get("/t/demo/chart.svg").get_data(as_text=True)
    labels = _labels(svg)
    assert 2 <= len(labels) < 20 and "label(s) hidden to avoid overlap" in svg
    samples = []
    for k, (x, y, angle, anchor, chars) in enumerate(labels):
        d = math.radians(angle + (180 if anchor == "end" else 0))
        samples += [(k, x + math.cos(d) * s, y + math.sin(d) * s) for s in range(0, int(chars * 5.6), 4)]
    close = [(a[0], b[0]) for a in samples for b in samples
             if a[0] < b[0] and math.hypot(a[1] - b[1], a[2] - b[2]) < 8]
    assert not close, f"labels {close[:3]} overlap"
    for x, y, *_ in labels:                      # inside the canvas
        assert 0 <= x <= chart.WIDTH and 0 <= y <= chart.HEIGHT
    # The last point is inside the frame, not on its edge.
    last_cx = max(float(p.split('cx="', 1)[1].split('"', 1)[0]) for p in svg.split('class="pt keep"')[1:])
    assert last_cx <= chart.WIDTH - chart.MARGIN_R - 10


def test_runs_folder_that_does_not_exist_is_an_error(tmp_path):
    """The real entry point (a subprocess with a timeout: a regression would serve forever)."""
    app_py = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
    for args in (["--runs", str(tmp_path / "nonexistent")], ["--repo", str(tmp_path / "nope")]):
        p = subprocess.run([sys.executable, str(app_py), *args, "--port", "0"], capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)
        assert p.returncode == 2 and "no such folder" in p.stderr, (p.returncode, p.stderr[-300:])
        assert "dashboard:" not in p.stdout


def test_trusted_figure_falls_back_to_the_verification_when_the_decision_has_none(fresh):
    """An integrity discard records no decision figure, but the re-evaluation ran: show its value."""
    recs = [json.loads(x) for x in (fresh / "journal.jsonl").read_text().splitlines()]
    rec = next(r for r in recs if r["status"] == "discard")
    rec["trusted_bpb"] = None
    rec["verdicts"]["verify"].update(ok=False, reason="printed val_bpb disagrees with the trusted one")
    (fresh / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    _, c = client(fresh)
    page = c.get(f"/t/demo/e/{rec['n']}").get_data(as_text=True)
    shown = page.split('<td class="mono trusted">', 1)[1][:200]
    assert shown.startswith(f"{rec['verdicts']['verify']['trusted_bpb']:.6f}")
    assert "the trusted re-evaluation; not the decision figure" in shown
    assert "<th>ok</th><td>no</td>" in page


def test_training_clock_past_the_budget_says_so(fresh):
    import time
    state = json.loads((fresh / "state.json").read_text())
    (fresh / "state.json").write_text(json.dumps({**state, "phase": "training", "budget": 300,
                                                  "run_started_at": time.time() - 400}))
    _, c = client(fresh)
    page = c.get("/t/demo/").get_data(as_text=True)
    assert "budget reached 1m 40s ago" in page or "budget reached 1m 41s ago" in page
    assert "-1m" not in page
