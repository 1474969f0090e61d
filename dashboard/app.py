"""The live dashboard: `uv run dashboard/app.py [--port 8000] [--host 127.0.0.1] [--tag T]
[--runs DIR] [--repo DIR]`.

It only reads what the loop writes (results.tsv, journal, traces, state, logs, git), plus the
human queue, which it may write: approve/reject need the token printed at start-up (or set in
AUTORESEARCH_DASHBOARD_TOKEN). Every response is scrubbed of secrets, every model-written text
is escaped, and bad or missing files are shown as such, never as a 500.
"""

from __future__ import annotations

import argparse
import hmac
import json
import math
import os
import secrets
import sys
import threading
import time
import traceback
from pathlib import Path
from urllib.parse import urlsplit

from flask import (Flask, Response, abort, jsonify, redirect, render_template, request,
                   stream_with_context, url_for)
from flask.json.provider import DefaultJSONProvider
from markupsafe import Markup
from werkzeug.exceptions import HTTPException
from werkzeug.serving import make_server

from dashboard import chart, data, human_queue, live, runview, serving, shared
from dashboard.runs import RunIndex, git_toplevel
from dashboard.scrub import Scrubber
from runfiles.shared_results import ImportedInfo

# Rows per page of the results table (a tag with thousands of experiments stays fast).
PAGE_SIZE = 100
# Most rows /api/results returns in one answer when asked for a limit.
MAX_LIMIT = 10_000
# Env var that fixes the action token (otherwise a random one is made at start-up).
TOKEN_ENV = "AUTORESEARCH_DASHBOARD_TOKEN"
# Header (or form field "token") that carries it on state-changing requests.
TOKEN_HEADER = "X-Dashboard-Token"
# Host headers accepted while bound to loopback (blocks DNS-rebinding pages from reading us).
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}
# Digits accepted in a numeric parameter (Last-Event-ID, since=, a queue item id): far more
# than any real count, far fewer than what makes int() slow or float() overflow.
MAX_INT_DIGITS = 12
# Longest note accepted with a queue decision (the review CLI's notes are a line or two).
MAX_NOTE_CHARS = 4000
# Model-written content may contain markup; scripts only ever come from our own /static.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'")


def create_app(repo=None, runs_dir=None, default_tag=None, token=None, loopback=True, environ=None):
    app = Flask(__name__)
    app.json = FiniteJSON(app)
    env = os.environ if environ is None else environ
    token = token or env.get(TOKEN_ENV) or secrets.token_urlsafe(18)
    index = RunIndex(Path(repo) if repo else None, Path(runs_dir) if runs_dir else None, default_tag)
    scrub = Scrubber(extra=[token], environ=env)
    stop = threading.Event()
    app.config.update(INDEX=index, TOKEN=token, SCRUB=scrub, STOP=stop, LOOPBACK=loopback,
                      STREAM_MAX_S=live.STREAM_MAX_S)
    app.jinja_env.filters.update(bpb=_fmt_bpb, when=_fmt_when, dur=_fmt_dur, pretty=_pretty, pct=_fmt_pct,
                                 yesno=_fmt_yesno)
    app.jinja_env.globals.update(bench_for=runview.bench_figures)  # serving figures beside val_bpb

    # ---------------------------------------------------------------- helpers

    def run_or_404(key):
        run = index.get(key) if key else index.default()
        if run is None:
            abort(404, description=f"unknown tag {key!r}" if key else "no runs found")
        return run

    def exp_base(run):
        # url_for once per page, not once per row/point (it dominated pages with 1,000 points).
        return url_for("experiment_page", key=run.key, n=0)[:-1]

    def link(run):
        base = exp_base(run)
        return lambda n: f"{base}{n}"

    def chart_svg(run, res=None):
        res = res or data.read_results(run.file("results.tsv"))
        band = runview.noise_band(res.lines, data.journal_records(run.file("journal.jsonl")))
        imported = ImportedInfo.read(run.path)   # shaded, and the running best starts afresh after them
        return chart.progress_svg(res.lines, band, link(run), imported.rows if imported else 0)

    def now_html(run):
        res = data.read_results(run.file("results.tsv"))
        now = runview.now_panel(run, res.lines, data.journal_records(run.file("journal.jsonl")))
        return render_template("_now.html", now=now, run=run)

    def queue_html(run):
        pending, decided, problem = human_queue.items(run)
        return render_template("_queue.html", pending=pending, decided=decided, problem=problem, run=run)

    def rows_html(run, lines):
        # Templates receive plain values, built from the typed lines (data.row_view).
        return render_template("_rows.html", rows=runview.rows_view(run, lines[::-1]), run=run,
                               ebase=exp_base(run))

    renderers = live.Renderers(rows=rows_html, chart=lambda run, res: chart_svg(run, res),
                               now=now_html, queue=queue_html)

    # ---------------------------------------------------------------- safety on every request

    @app.before_request
    def check_host():
        host = request.host or ""
        host = host[1:].split("]")[0] if host.startswith("[") else host.split(":")[0]
        if app.config["LOOPBACK"] and host not in LOOPBACK_NAMES:
            abort(403, description="this dashboard only answers to 127.0.0.1/localhost")

    @app.after_request
    def harden(resp: Response):
        resp.headers["Content-Security-Policy"] = CSP
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["Referrer-Policy"] = "no-referrer"
        resp.headers.setdefault("Cache-Control", "no-store")
        if not resp.is_streamed and not resp.direct_passthrough:
            ctype = resp.mimetype or ""
            if ctype.startswith("text/") or ctype in ("application/json", "image/svg+xml"):
                resp.set_data(scrub.bytes(resp.get_data()))
        return resp

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException):
        if request.path.startswith("/api/"):
            return jsonify(error=e.description, status=e.code), e.code
        return render_template("error.html", code=e.code, message=e.description,
                               runs=index.all()), e.code

    @app.errorhandler(Exception)
    def crash(e: Exception):
        # Should not happen (readers never raise on bad data); if it does, say what, not how.
        traceback.print_exc()
        msg = f"internal error ({type(e).__name__}); see the dashboard's console"
        if request.path.startswith("/api/"):
            return jsonify(error=msg, status=500), 500
        return render_template("error.html", code=500, message=msg, runs=index.all()), 500

    # ---------------------------------------------------------------- pages

    @app.get("/")
    def home():
        run = index.default()
        if run is None:
            return render_template("error.html", code=200, runs=[],
                                   message=f"No runs found. Looked in: {index.where()}")
        return redirect(url_for("run_page", key=run.key))

    @app.get("/t/<key>/")
    def run_page(key):
        run = run_or_404(key)
        res = data.read_results(run.file("results.tsv"))
        journal = data.read_jsonl(run.file("journal.jsonl"))
        pages = max(1, -(-len(res.lines) // PAGE_SIZE))
        page = min(max(1, request.args.get("page", 1, type=int) or 1), pages)
        newest_first = res.lines[::-1]
        shown = runview.rows_view(run, newest_first[(page - 1) * PAGE_SIZE: page * PAGE_SIZE])   # keeps say why
        problems = data.page_problems(res)
        fresh = not res.lines and not data.journal_records(run.file("journal.jsonl"))   # a pending line is no experiment
        if journal.missing and res.lines:
            problems.append("journal.jsonl not found (details per experiment unavailable)")
        elif journal.bad:
            problems.append(f"{journal.bad} line(s) of journal.jsonl could not be parsed")
        run_json, run_problem = data.read_json(run.file("run.json"))
        return render_template(
            "index.html", run=run, runs=index.all(), rows=shown, page=page, pages=pages,
            total=len(res.lines), complete=res.complete, problems=problems, run_json=run_json,
            run_problem=run_problem, fresh=fresh, data_warning=runview.data_warning(run_json),
            seal_warning=runview.seal_warning(run_json), shared=shared.notes(run),
            chart=Markup(chart_svg(run, res)), now=Markup(now_html(run)),
            serving_chart=Markup(serving.scatter_svg(serving.points(run, res.lines))),
            flywheel=serving.flywheel_rows(run),
            queue=Markup(queue_html(run)), rows_html=Markup(render_template("_rows.html", rows=shown, run=run, ebase=exp_base(run))))

    @app.get("/t/<key>/e/<int:n>")
    def experiment_page(key, n):
        run = run_or_404(key)
        exp = runview.experiment(run, n)
        if exp is None:
            abort(404, description=f"tag {run.tag} has no experiment #{n}")
        run_json, _ = data.read_json(run.file("run.json"))
        return render_template("experiment.html", run=run, runs=index.all(), e=exp,
                               data_warning=runview.data_warning(run_json),
                               seal_warning=runview.seal_warning(run_json))

    @app.get("/t/<key>/chart.svg")
    def chart_file(key):
        return Response(chart_svg(run_or_404(key)), mimetype="image/svg+xml")

    # ---------------------------------------------------------------- JSON API

    @app.get("/api/tags")
    def api_tags():
        return jsonify(tags=[{"key": r.key, "tag": r.tag, "path": str(r.path)} for r in index.all()])

    @app.get("/api/results")
    def api_results():
        run = run_or_404(request.args.get("tag"))
        res = data.read_results(run.file("results.tsv"))
        offset = max(0, request.args.get("offset", 0, type=int) or 0)
        limit = min(max(0, request.args.get("limit", MAX_LIMIT, type=int) or 0), MAX_LIMIT)
        keys = ("n", "commit", "val_bpb", "val_text", "memory_gb", "status", "description", "problem", "partial")
        rows = [{k: r[k] for k in keys} for r in map(data.row_view, res.lines[offset:offset + limit])]
        return jsonify(tag=run.tag, key=run.key, count=len(res.lines), complete=res.complete,
                       offset=offset, problems=data.page_problems(res), rows=rows)

    @app.get("/api/state")
    def api_state():
        run = run_or_404(request.args.get("tag"))
        res = data.read_results(run.file("results.tsv"))
        return jsonify(runview.now_panel(run, res.lines, data.journal_records(run.file("journal.jsonl"))))

    @app.get("/api/queue")
    def api_queue():
        run = run_or_404(request.args.get("tag"))
        pending, decided, problem = human_queue.items(run)
        return jsonify(tag=run.tag, pending=[i.as_dict() for i in pending], decided=[i.as_dict() for i in decided],
                       problem=problem)

    @app.get("/api/experiment")
    def api_experiment():
        run = run_or_404(request.args.get("tag"))
        n = request.args.get("n", type=int)
        exp = runview.experiment(run, n) if n is not None else None
        if exp is None:
            abort(404, description=f"tag {run.tag} has no experiment #{request.args.get('n')}")
        d, ev = exp["diff"], exp["evidence"]
        return jsonify({**exp, "diff": {"text": d.text, "source": d.source, "problems": d.problems},
                        "evidence": dict(ev.as_dict(), summary=ev.summary()) if ev else None})

    @app.get("/api/stream")
    def api_stream():
        run = run_or_404(request.args.get("tag"))
        since = _count(request.headers.get("Last-Event-ID", request.args.get("since", "0")), "since")
        gen = live.stream(run, since, renderers, scrub, stop, app.config["STREAM_MAX_S"])
        return Response(stream_with_context(gen), mimetype="text/event-stream",
                        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    @app.post("/api/queue/decide")
    def api_decide():
        foreign = _cross_origin(request)
        if foreign:
            abort(403, description=f"action refused: {foreign}")
        given = request.headers.get(TOKEN_HEADER) or request.form.get("token") or ""
        if not hmac.compare_digest(given.encode("utf-8", "replace"), token.encode()):
            abort(403, description="action refused: the dashboard token is missing or wrong "
                                   "(it is printed when the dashboard starts)")
        body = request.get_json(silent=True)
        body = request.form if body is None else body
        if not hasattr(body, "get"):
            abort(400, description="the request body must be a JSON object or a form")
        tag = body.get("tag")
        if tag is not None and not isinstance(tag, str):
            abort(400, description="tag must be text")
        run = run_or_404(tag)
        decision, note = body.get("decision", ""), body.get("note") or ""
        if not isinstance(decision, str) or not isinstance(note, str):
            abort(400, description="decision and note must be text")
        if len(note) > MAX_NOTE_CHARS:
            abort(400, description=f"note longer than {MAX_NOTE_CHARS} characters")
        item_id = _count(body.get("id"), "id", required=True)
        try:
            item = human_queue.decide(run, item_id, decision, note=note)
        except human_queue.QueueError as e:
            abort(409, description=str(e))
        return jsonify(item=item.as_dict(), html=queue_html(run))

    return app


# -------------------------------------------------------------------- request checks

class FiniteJSON(DefaultJSONProvider):
    """JSON answers stay valid JSON: inf/nan (which a journal may hold) become "inf"/"nan"."""

    def dumps(self, obj, **kw):
        return super().dumps(_finite_only(obj), **kw)


def _finite_only(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if obj != obj else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: _finite_only(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_only(v) for v in obj]
    return obj


def _count(value, name: str, required: bool = False) -> int:
    """A non-negative integer parameter (digits, or a JSON integer), bounded; else 400."""
    if value is None and not required:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10 ** MAX_INT_DIGITS:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= MAX_INT_DIGITS:
        return int(value)
    abort(400, description=f"{name} must be a whole number of at most {MAX_INT_DIGITS} digits")


def _cross_origin(req) -> str | None:
    """Why a state-changing request comes from another site, or None.

    Browsers send Origin on every POST from a page (Sec-Fetch-Site too); both must name this
    very host. A request without either (curl, the review CLI) carries only the token."""
    site = req.headers.get("Sec-Fetch-Site")
    if site and site not in ("same-origin", "none"):
        return f"a {site} request (Sec-Fetch-Site)"
    origin = req.headers.get("Origin")
    if origin is None:
        return None
    try:
        netloc = urlsplit(origin).netloc.lower()
    except ValueError:
        netloc = ""
    if not netloc or netloc != (req.host or "").lower():
        return f"Origin {origin[:100]!r} is not this dashboard ({req.host})"
    return None


# -------------------------------------------------------------------- formatting filters

def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v) -> bool:
    try:
        return _is_num(v) and math.isfinite(v)
    except OverflowError:      # an int too large for a float
        return False


def _fmt_bpb(v):
    if not _is_num(v):
        return "—"
    if not _finite(v):       # shown as such: "inf", "-inf", "nan" (or a number too big to print)
        return str(float(v)) if isinstance(v, float) else "(huge)"
    return f"{v:.6f}" if abs(v) < 1e12 else f"{v:.6g}"


def _fmt_pct(v):
    return f"{100 * v:.0f}%" if _finite(v) and abs(v) < 1e12 else "—"


def _fmt_yesno(v):
    return "yes" if v is True else "no" if v is False else "—" if v is None else str(v)


def _fmt_when(t):
    if not _finite(t):
        return "—"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    except (OverflowError, OSError, ValueError):
        return f"(time {t:.6g})"


def _fmt_dur(s):
    if not _finite(s):
        return "—" if not _is_num(s) else str(s)
    s = int(round(s))
    neg, s = s < 0, abs(s)
    text = f"{s // 3600}h {s % 3600 // 60:02d}m" if s >= 3600 else (f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s")
    return "-" + text if neg else text


def _pretty(obj):
    try:
        return json.dumps(obj, indent=2, sort_keys=True, default=str)
    except (TypeError, ValueError):     # keys of mixed types (only from Python, never from JSON)
        return repr(obj)


# -------------------------------------------------------------------- entry point

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Live dashboard for autoresearch runs.", allow_abbrev=False)
    ap.add_argument("--port", type=int, default=8000, help="port (0: any free port)")
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    ap.add_argument("--tag", help="tag shown first (others stay selectable)")
    ap.add_argument("--runs", help="read every folder holding a results.tsv below DIR")
    ap.add_argument("--repo", help="repository whose .autoresearch/<tag>/ runs to show (default: this one)")
    args = ap.parse_args(argv)
    for flag, value in (("--runs", args.runs), ("--repo", args.repo)):
        if value is not None and not Path(value).is_dir():
            ap.error(f"{flag} {value}: no such folder")
    repo = Path(args.repo).resolve() if args.repo else git_toplevel(Path.cwd())
    runs_dir = Path(args.runs).resolve() if args.runs else None
    loopback = args.host in ("127.0.0.1", "localhost", "::1")
    app = create_app(repo=repo, runs_dir=runs_dir, default_tag=args.tag, loopback=loopback)
    server = make_server(args.host, args.port, app, threaded=True)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{shown}:{server.port}/"
    print(f"dashboard: {url}", flush=True)
    print(f"runs: {app.config['INDEX'].where()}", flush=True)
    print(f"action token: {app.config['TOKEN']}  (open {url}#token={app.config['TOKEN']} to approve/reject)",
          flush=True)
    if not loopback:
        print(f"WARNING: bound to {args.host}: anyone who can reach this address can read the runs",
              flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        app.config["STOP"].set()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
