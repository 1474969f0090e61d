"""Notifications: a short JSON post to a webhook when something happens overnight.

    uv run agent/loop.py --tag may29 --notify https://hooks.slack.com/services/...
    AUTORESEARCH_NOTIFY_URL=https://discord.com/api/webhooks/... uv run agent/loop.py --tag may29

What is posted (`Watch`, fed the loop's records as they are written):

- a new best: its val_bpb, the gain over the previous best and the evidence the judge kept it on;
- a stop: why, and the end summary;
- a crash streak (CRASH_STREAK crashes in a row), said once per streak;
- a human-queue item (an escalated decision), with the command that reviews it;
- at most once an hour, a digest: kept, discarded, crashed since the last one, the best, what runs.

The body is `{"text": ..., "content": ...}`: Slack's incoming webhooks read `text`, Discord's
read `content` (at most 2,000 characters), and each ignores the other key. Every text goes
through the one scrubber (harness/secrets.py), and the URL itself is remembered as a secret, so
neither the journal, the logs nor a training run's environment ever carries it.

`Notifier.post` never blocks the loop: messages go to a bounded queue that a background thread
sends; a slow or failing endpoint is retried (TRIES, with backoff) and then the message is
dropped, and an outage is said once on the console (and once more when it answers again).
"""
from __future__ import annotations

import json
import queue
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable

from agent.config import NOTIFY_ENV as ENV_VAR  # noqa: F401  (the name callers know it by)
from harness.records import ExperimentRecord
from harness.secrets import remember, scrub

# Sends per message before it is dropped, the first backoff (doubling), and one request's timeout:
# a webhook that is down for a minute loses nothing; one that is down for the night costs nothing.
TRIES = 4
BACKOFF_S = 2.0
TIMEOUT_S = 10.0
# Messages waiting at most: past it new ones are dropped (a dead endpoint must not grow memory).
QUEUE_MAX = 100
# Discord's limit on `content`; Slack takes more, but a notification is a line, not a report.
MAX_CHARS = 2000
# The digest: at most one per this many seconds.
DIGEST_EVERY_S = 3600.0
# Crashes in a row that make a streak worth a message.
CRASH_STREAK = 3


def host_of(url: str) -> str:
    """What the console may say about the endpoint: its host, never the path (which holds the token)."""
    return urllib.parse.urlsplit(url).hostname or "?"


def check_url(url: str) -> str | None:
    """Why `url` cannot be a webhook, or None."""
    parts = urllib.parse.urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"--notify wants an http(s) URL, got {url[:40]!r}"
    return None


def body(text: str, event: str) -> bytes:
    text = scrub(text)[:MAX_CHARS]
    return json.dumps({"text": text, "content": text, "event": event}).encode()


class Notifier:
    """Posts messages to one webhook from a background thread; post() returns at once."""

    def __init__(self, url: str, say: Callable[[str], None] = print, *, tries: int = TRIES,
                 backoff_s: float = BACKOFF_S, timeout_s: float = TIMEOUT_S):
        remember(url)   # scrubbed from everything the loop writes, and kept out of every child's environment
        self.url, self.say = url, say
        self.tries, self.backoff_s, self.timeout_s = tries, backoff_s, timeout_s
        self.sent = self.dropped = 0
        self._queue: queue.Queue = queue.Queue(QUEUE_MAX)
        self._down = False        # an outage already said on the console
        self._thread = threading.Thread(target=self._work, name="notify", daemon=True)
        self._thread.start()

    def post(self, event: str, text: str) -> None:
        try:
            self._queue.put_nowait((event, text))
        except queue.Full:
            self.dropped += 1
            self._outage("its queue is full")

    def close(self, timeout: float = TIMEOUT_S) -> None:
        """Give the messages already queued (the stop's) up to `timeout` seconds, then leave."""
        self._queue.put((None, None))
        self._thread.join(timeout)

    def _work(self) -> None:
        while True:
            event, text = self._queue.get()
            if event is None:
                return
            self._send(event, text)

    def _send(self, event: str, text: str) -> None:
        data, why = body(text, event), ""
        for attempt in range(self.tries):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                req = urllib.request.Request(self.url, data=data, method="POST",
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    resp.read(1 << 16)
                self.sent += 1
                if self._down:
                    self._down = False
                    self.say(f"notify: {host_of(self.url)} answers again")
                return
            except urllib.error.HTTPError as exc:
                why = f"HTTP {exc.code}"
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    break   # the endpoint refuses this message: sending it again changes nothing
            except (OSError, ValueError) as exc:   # URLError, timeouts, refused connections
                why = type(exc).__name__ + (f": {exc.reason}" if isinstance(exc, urllib.error.URLError) else "")
        self.dropped += 1
        self._outage(scrub(why))

    def _outage(self, why: str) -> None:
        if not self._down:
            self._down = True
            self.say(f"notify: {host_of(self.url)} did not take a message ({why}); dropping messages "
                     "until it answers (the loop goes on)")


class Watch:
    """Turns what the loop records into notifications. record() after each decision; tick() now
    and then (the digest); stopped() at the end. `post(event, text)`: a Notifier's."""

    def __init__(self, tag: str, post: Callable[[str, str], None], *, clock: Callable[[], float] = time.time,
                 digest_every_s: float = DIGEST_EVERY_S, streak: int = CRASH_STREAK):
        self.tag, self.post, self.clock = tag, post, clock
        self.digest_every_s, self.streak = digest_every_s, streak
        self._last_digest = clock()
        self._since: list[ExperimentRecord] = []   # decided since the last digest
        self._best: float | None = None
        self._lock = threading.Lock()              # --workers N: records come from N threads

    def record(self, rec: ExperimentRecord, history: list[ExperimentRecord]) -> None:
        """A decision was written; `history`: every record so far, this one last."""
        with self._lock:
            self._since.append(rec)
            bpb = rec.decision_bpb
            if rec.status == "keep" and bpb is not None:
                prev = self._best if self._best is not None else _best_before(history[:-1])
                if rec.is_baseline:
                    self.post("baseline", f"autoresearch {self.tag}: baseline {bpb:.6f} measured "
                              f"({rec.decision.decision_reason[:200]})")
                elif prev is None or bpb < prev:
                    gain = f", {prev - bpb:+.6f} over {prev:.6f}" if prev is not None else ""
                    self.post("new_best", f"autoresearch {self.tag}: new best {bpb:.6f}{gain} by exp {rec.n} "
                              f"({str(rec.commit)[:7]}): {rec.description[:200]}. Evidence: {_evidence(rec)}")
                self._best = bpb if prev is None else min(prev, bpb)
            crashes = _trailing_crashes(history)
            if crashes == self.streak:
                self.post("crash_streak", f"autoresearch {self.tag}: {crashes} crashes in a row, the last "
                          f"exp {rec.n} ({rec.run.crash_class}): {rec.description[:200]}")
            for kind, item in _escalations(rec):
                show = f"show {item}" if item is not None else "list"
                self.post("queue", f"autoresearch {self.tag}: exp {rec.n} went to the human queue ({kind}): "
                          f"{rec.decision.decision_reason[:300]}. Review: uv run agent/review_queue.py {show}")

    def tick(self, running: str = "") -> None:
        """At most once per digest_every_s: what was decided since the last digest."""
        with self._lock:
            now = self.clock()
            if now - self._last_digest < self.digest_every_s:
                return
            counts = {s: sum(1 for r in self._since if r.status == s) for s in ("keep", "discard", "crash")}
            best = f"{self._best:.6f}" if self._best is not None else "-"
            hours = (now - self._last_digest) / 3600
            self.post("digest", f"autoresearch {self.tag}, the last {hours:.1f} h: {counts['keep']} kept, "
                      f"{counts['discard']} discarded, {counts['crash']} crashed; best {best}"
                      + (f"; running: {running[:200]}" if running else ""))
            self._last_digest, self._since = now, []

    def stopped(self, reason: str, summary: str = "") -> None:
        self.post("stop", f"autoresearch {self.tag} stopped: {reason}" + (f"\n{summary}" if summary else ""))


def _best_before(history: list[ExperimentRecord]) -> float | None:
    vals = [r.decision_bpb for r in history if r.status == "keep" and r.decision_bpb is not None]
    return min(vals) if vals else None


def _trailing_crashes(history: list[ExperimentRecord]) -> int:
    n = 0
    for r in reversed(history):
        if r.status != "crash":
            break
        n += 1
    return n


def _evidence(rec: ExperimentRecord) -> str:
    ev = rec.evidence_view()
    return ev.summary() if ev is not None else (rec.decision.decision_reason[:300] or "-")


def _escalations(rec: ExperimentRecord) -> list[tuple[str, int | None]]:
    """(kind, queue item id) of each escalation the judge recorded (agent/judges/queue_apply.py escalate)."""
    return rec.escalations


class LoopNotify:
    """What the loop holds: a Notifier and its Watch when a URL was given, else nothing posts.
    The loop calls record() per recorded decision and stopped() once at its stop."""

    def __init__(self, url: str | None, tag: str, say: Callable[[str], None] = print):
        self.notifier = Notifier(url, say) if url else None
        self.watch = Watch(tag, self.notifier.post) if self.notifier else None
        self._stopped = False

    def record(self, rec: ExperimentRecord, history: list[ExperimentRecord], in_flight=()) -> None:
        """After each recorded decision; `in_flight`: the experiment numbers still running (--workers)."""
        if self.watch is None:
            return
        try:   # a notification must never stop the loop
            self.watch.record(rec, history)
            self.watch.tick(", ".join(f"exp {n}" for n in sorted(n for n in in_flight if n != rec.n)))
        except Exception as exc:
            self.notifier.say(f"notify: skipped a message ({type(exc).__name__})")

    def stopped(self, loop) -> None:
        """The stop's message (why, the end summary), then up to TIMEOUT_S for the queue to drain."""
        if self.watch is None or self._stopped:
            return
        self._stopped = True
        try:
            from agent import summary
            exc = sys.exc_info()[1]   # stop() runs inside the loop's `except` when an error ended it
            reason = loop.stop_reason or (
                f"error: {type(exc).__name__}: {exc}" if exc is not None and not isinstance(exc, KeyboardInterrupt)
                else summary.interrupted_reason(getattr(loop, "interim", None), [r.n for r in loop.history]))
            text = summary.render(summary.build(loop.run_dir, loop.tag, reason, time.time() - loop.started_at,
                                                cap=loop.config.ideas.max_cost))
            self.watch.stopped(reason, text)
        except Exception as exc:
            self.watch.stopped(loop.stop_reason or "stopped", f"(no summary: {type(exc).__name__})")
        self.notifier.close()
