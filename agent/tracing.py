"""Spans for every proposer call, judge call, run, evaluation and decision.

    tracer = Tracer(run_dir / "traces.jsonl", braintrust_project=None)
    with tracer.span("propose", input={"n": 3}) as sp:          # sp.id, sp.trace
        sp.log(output={...}, tokens={"input": 10, "output": 5}, cost=0.001)

Each finished span is one JSON line (id, parent, trace, name, start, end, input, output, tokens,
cost, error; times in unix seconds) appended to the local file, always, and flushed at once so a
kill -9 loses nothing finished. When BRAINTRUST_API_KEY is set (or a logger is passed in) the same
span also goes to Braintrust through its SDK. Tracing never breaks the loop: a failure to write
(either sink) is reported once as a warning and the work goes on. An exception raised inside a
span is recorded in `error` and re-raised.

Nesting: `parent` is a Span or a span id; when it is None the span nests under the span that is
open in the current context (thread / task), if any, so a proposer's own spans sit under the
loop's "propose" span without the loop passing anything down.

Secrets: everything written goes through harness.secrets.scrub (the one scrubber: the loop's
own secret values and the shapes of keys), as does everything else the loop writes.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import threading
import time
import uuid
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.results import append_line, is_json_object, is_out_of_space
from runfiles.journal import SpanRecord

log = logging.getLogger(__name__)

from harness.secrets import REDACTED, scrub  # noqa: F401  (the one scrubber; re-exported for old callers)

# Strings longer than this are cut in traces: spans hold summaries, the journal holds the rest.
MAX_STRING_CHARS = 4000
# Braintrust project used when BRAINTRUST_API_KEY is set and no project was named.
DEFAULT_BT_PROJECT = "autoresearch"
# Braintrust's token metrics and the span's token keys they come from.
BT_TOKEN_METRICS = (("prompt_tokens", "input"), ("completion_tokens", "output"),
                    ("prompt_cached_tokens", "cache_read"), ("prompt_cache_creation_tokens", "cache_write"))

_current: contextvars.ContextVar["Span | None"] = contextvars.ContextVar("trace_span", default=None)


@dataclass
class SpanResult:
    """What a span's work came to: its output, the tokens and cost it logged, the error that
    ended it (None: none)."""
    output: Any = None
    tokens: dict = field(default_factory=dict)
    cost: float = 0.0
    error: str | None = None


class Span:
    """An open span. `log` may be called several times: output dicts merge (else replace),
    tokens add up key by key, cost adds up (its `result`)."""

    def __init__(self, tracer: "Tracer", name: str, input: Any, parent: "Span | None",
                 parent_id: str | None):
        self.tracer = tracer
        self.name = name
        self.id = uuid.uuid4().hex
        self.parent = parent_id
        self.trace = parent.trace if parent is not None else tracer._trace_of(parent_id, self.id)
        self.start = time.time()
        self.end: float | None = None
        self.input = input
        self.result = SpanResult()
        self._bt = None              # the Braintrust span, when that sink is on

    def log(self, output: Any = None, tokens: dict | None = None, cost: float | None = None) -> None:
        res = self.result
        if output is not None:
            if isinstance(output, dict) and isinstance(res.output, dict):
                res.output = {**res.output, **output}
            else:
                res.output = output
        for k, v in (tokens or {}).items():
            if isinstance(v, (int, float)):
                res.tokens[k] = res.tokens.get(k, 0) + v
        if cost:
            res.cost += float(cost)

    def record(self) -> dict:
        return {"id": self.id, "parent": self.parent, "trace": self.trace, "name": self.name,
                "start": self.start, "end": self.end, "input": self.input, "output": self.result.output,
                "tokens": self.result.tokens, "cost": self.result.cost, "error": self.result.error}


class Tracer:
    def __init__(self, path: str | Path, braintrust_project: str | None = None, *,
                 braintrust_logger: Any = None):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._open: dict[str, Span] = {}
        self._trace_by_id: dict[str, str] = {}
        self._file_broken = False
        self._bt_broken = False
        self._bt = braintrust_logger
        if self._bt is None and os.environ.get("BRAINTRUST_API_KEY"):
            try:
                import braintrust

                from agent import sdk_logs   # only with Braintrust: its failures, one scrubbed line each
                # set_current=False: this tracer owns its logger; nothing global changes.
                self._bt = braintrust.init_logger(project=braintrust_project or DEFAULT_BT_PROJECT,
                                                  set_current=False)
                sdk_logs.quiet_braintrust(self._bt)
            except Exception as e:
                self._bt_failed(e)

    # ---- the API ----
    @contextmanager
    def span(self, name: str, input: Any = None, parent: "Span | str | None" = None):
        sp = self._begin(name, input, parent)
        token = _current.set(sp)
        try:
            yield sp
        except BaseException as e:
            sp.result.error = f"{type(e).__name__}: {e}"
            raise
        finally:
            _current.reset(token)
            self._finish(sp)

    def current(self) -> Span | None:
        sp = _current.get()
        return sp if sp is not None and sp.tracer is self else None

    def flush(self) -> None:
        if self._bt is not None and not self._bt_broken:
            try:
                self._bt.flush()
            except Exception as e:
                self._bt_failed(e)

    close = flush

    # ---- internals ----
    def _trace_of(self, parent_id: str | None, own_id: str) -> str:
        if parent_id is None:
            return own_id
        return self._trace_by_id.get(parent_id, parent_id)   # unknown parent: its id names the trace

    def _begin(self, name: str, input: Any, parent) -> Span:
        try:
            if parent is None:
                parent = self.current()
            parent_span = parent if isinstance(parent, Span) else self._open.get(parent) if parent else None
            parent_id = parent.id if isinstance(parent, Span) else parent
            sp = Span(self, name, input, parent_span, parent_id)
        except Exception as e:                      # never let bookkeeping break the caller
            log.warning("tracing: could not start span %s: %s", name, e)
            sp = Span(self, name, input, None, None)
        with self._lock:
            self._open[sp.id] = sp
            self._trace_by_id[sp.id] = sp.trace
        self._bt_start(sp, parent_span)
        return sp

    def _finish(self, sp: Span) -> None:
        sp.end = time.time()
        with self._lock:
            self._open.pop(sp.id, None)
        try:
            rec = scrub(sp.record(), limit=MAX_STRING_CHARS)
        except Exception as e:
            rec = {**{k: None for k in sp.record()}, "id": sp.id, "parent": sp.parent,
                   "trace": sp.trace, "name": sp.name, "start": sp.start, "end": sp.end,
                   "error": f"tracing: could not summarise span: {e}"}
        self._write_line(rec)
        self._bt_end(sp, rec)

    def _write_line(self, rec: dict) -> None:
        if self._file_broken:
            return
        try:
            line = json.dumps(rec, default=str)
            with self._lock:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # one whole line or none; a torn last line is repaired, never glued onto
                append_line(self.path, line, complete=is_json_object, fsync=False)
        except Exception as e:
            if is_out_of_space(e):   # the loop stops for space itself (one message); retry later
                return
            self._file_broken = True
            log.warning("tracing: cannot write %s (%s); local traces are off for this run", self.path, e)

    def _bt_failed(self, e: Exception) -> None:
        if not self._bt_broken:   # the error may quote a server reply: one scrubbed line only
            from agent import sdk_logs
            log.warning("tracing: Braintrust logging failed (%s: %s); it is off for this run",
                        type(e).__name__, sdk_logs.clean_line(str(e)))
        self._bt_broken = True

    def _bt_start(self, sp: Span, parent_span: Span | None) -> None:
        if self._bt is None or self._bt_broken:
            return
        try:
            if parent_span is not None and parent_span._bt is not None:
                sp._bt = parent_span._bt.start_span(name=sp.name, start_time=sp.start, set_current=False)
            else:
                sp._bt = self._bt.start_span(name=sp.name, start_time=sp.start, set_current=False,
                                             span_id=sp.id, root_span_id=sp.trace)
        except Exception as e:
            self._bt_failed(e)

    def _bt_end(self, sp: Span, rec: dict) -> None:
        if sp._bt is None or self._bt_broken:
            return
        try:
            done = SpanRecord.from_dict(rec)   # what the file got (scrubbed), typed
            metrics = {name: done.token(key) for name, key in BT_TOKEN_METRICS}
            metrics = {k: v for k, v in metrics.items() if v}
            event = {"input": done.input, "output": done.output,
                     "metadata": {"trace_id": sp.trace, "span_id": sp.id, "parent_id": sp.parent,
                                  "cost_usd": done.cost}}
            if metrics:
                event["metrics"] = metrics
            if done.error:
                event["error"] = done.error
            sp._bt.log(**event)
            sp._bt.end(end_time=sp.end)
        except Exception as e:
            self._bt_failed(e)


class NoSpan:
    """A span that records nothing: what a step logs to when there is no tracer."""

    def log(self, **kw) -> None:
        pass


def span_of(tracer, name: str, input: dict):
    """`tracer.span(name, input)`, or a context giving a NoSpan where there is no tracer."""
    return tracer.span(name, input=input) if tracer is not None else nullcontext(NoSpan())
