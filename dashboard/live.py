"""One server-sent-events stream per open page.

The browser holds a single EventSource; the server watches the run's files with cheap stat()
calls and pushes only what changed: new results rows (with the redrawn chart), the Now panel,
the human queue. No client polling of several endpoints.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Callable, Iterator

from dashboard.data import file_key, read_results
from dashboard.runs import Run

# Seconds between stat() checks of the run's files: well inside the 2 s "new row" target.
WATCH_INTERVAL_S = 0.25
# Seconds between keep-alive comments (also how a closed tab is noticed).
HEARTBEAT_S = 15.0
# A stream ends after this long; EventSource reconnects by itself (with Last-Event-ID), so a
# dashboard left open for days never pins a thread forever.
STREAM_MAX_S = 600.0
# Milliseconds the browser waits before reconnecting.
RETRY_MS = 1000


def event(name: str, payload: dict, event_id: int | None = None) -> str:
    head = f"event: {name}\n" + (f"id: {event_id}\n" if event_id is not None else "")
    return head + "data: " + json.dumps(payload) + "\n\n"


class Renderers:
    """What the stream sends, rendered by the app (same templates as the page)."""

    def __init__(self, rows: Callable, chart: Callable, now: Callable, queue: Callable):
        self.rows, self.chart, self.now, self.queue = rows, chart, now, queue


def stream(run: Run, since: int, render: Renderers, scrub: Callable[[str], str],
           stop: threading.Event, max_s: float = STREAM_MAX_S) -> Iterator[str]:
    """Events for one page that already shows `since` complete rows."""
    results = run.file("results.tsv")
    watched_now = (run.file("state.json"), run.file("journal.jsonl"), results)
    watched_queue = (run.file("queue.sqlite"), run.file("queue.sqlite-wal"))
    last_rows = last_now = last_queue = object()   # unknown: first check always compares unequal
    sent = since
    deadline = time.monotonic() + max_s
    beat = time.monotonic()
    yield f"retry: {RETRY_MS}\n\n"
    yield event("hello", {"since": since}, sent)
    while not stop.is_set() and time.monotonic() < deadline:
        out = []
        k = file_key(results)
        if k != last_rows:
            last_rows = k
            res = read_results(results)
            if res.complete < sent:
                # results.tsv shrank (rewritten by --resume reconciliation?): the page is stale.
                out.append(event("reset", {"reason": "results.tsv was rewritten"}, res.complete))
                sent = res.complete
            elif res.complete > sent:
                new = res.lines[sent:res.complete]
                sent = res.complete
                out.append(event("rows", {"count": sent, "html": render.rows(run, new),
                                          "chart": render.chart(run, res)}, sent))
        # Now panel and queue are also sent on the first check: they may have changed between
        # the page's render and this stream's start.
        k = tuple(file_key(p) for p in watched_now)
        if k != last_now:
            last_now = k
            out.append(event("now", {"html": render.now(run)}, sent))
        k = tuple(file_key(p) for p in watched_queue)
        if k != last_queue:
            last_queue = k
            out.append(event("queue", {"html": render.queue(run)}, sent))
        if out:
            yield scrub("".join(out))
            beat = time.monotonic()
        elif time.monotonic() - beat > HEARTBEAT_S:
            yield ": keep-alive\n\n"
            beat = time.monotonic()
        stop.wait(WATCH_INTERVAL_S)
