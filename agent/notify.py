"""Notifications: a short JSON post to a webhook when something happens overnight.

    uv run agent/loop.py --tag may29 --notify https://hooks.slack.com/services/...
    AUTORESEARCH_NOTIFY_URL=https://discord.com/api/webhooks/... uv run agent/loop.py --tag may29

What is posted (`Watch`, fed the loop's records as they are written):

- a new best: its val_bpb, the gain over the previous best, why the judge kept it and the evidence;
- every other keep (an efficiency or simplicity keep at an equal result): why it was kept;
- a stop: why, and the end summary;
- a crash streak (CRASH_STREAK crashes in a row), said once per streak;
- a human-queue item (an escalated decision), with the command that reviews it;
- at most once an hour, a digest: kept, discarded, crashed since the last one, the best, what runs.

The body carries `text` (Slack) and `content` (Discord, at most 2,000 characters); the text, in
part proposed text, is cleaned and scrubbed by harness/secrets.py clean_text, then escaped for each
service (Slack's `&<>`, Discord's markdown and mentions, `allowed_mentions` none, `@everyone`,
`@here`, `@channel` broken, no link previews). The URL, its path and its query (where the token
lives: `credentials_of`) are remembered as secrets: no journal, log or run's environment carries them.

`Notifier.post` never blocks the loop: a bounded queue, a background sender, one deadline per
message for every try and backoff (DEADLINE_S); at the deadline the try's socket is shut (however
slowly the endpoint drips) and the message dropped; lost messages are said once per outage, and
how many when it answers again or at the stop.
"""
from __future__ import annotations

import http.client
import json
import queue
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable

from agent.config import NOTIFY_ENV as ENV_VAR  # noqa: F401  (the name callers know it by)
from harness.experiment_record import ExperimentRecord
from harness.secrets import clean_text, remember

# Tries per message before it is dropped, and the first backoff (doubling).
TRIES = 4
BACKOFF_S = 2.0
# One message's whole time, every try and backoff included, whatever the endpoint does: a webhook
# down for half a minute loses nothing, one that drips a byte a minute holds the sender a minute.
DEADLINE_S = 60.0
# One try's share of it at most, so a try that hangs leaves time for another.
TIMEOUT_S = 15.0
# After the deadline shut a try's socket: how long the sender waits for the try to end. One still
# running then (a name lookup no socket can interrupt) is left behind, never waited for again.
GRACE_S = 2.0
# Tries left behind and still running, at most: past it a message is dropped untried (threads
# never pile up behind a resolver that never answers).
MAX_STUCK = 2
# What the loop's stop waits at most for the messages already queued (the stop's own among them).
CLOSE_S = 15.0
# Bytes of an answer read (a webhook answers "ok"; the rest is not wanted).
READ_MAX = 1 << 16
# Messages waiting at most: past it new ones are dropped (a dead endpoint must not grow memory).
QUEUE_MAX = 100
# Discord's limit on `content`; Slack takes more, but a notification is a line, not a report.
MAX_CHARS = 2000
# The digest: at most one per this many seconds.
DIGEST_EVERY_S = 3600.0
# Crashes in a row that make a streak worth a message.
CRASH_STREAK = 3
# Discord's flag that suppresses link previews (a proposed URL is never fetched by the channel).
SUPPRESS_EMBEDS = 4

# Words that notify everyone in a channel when written after "@" (Slack, Discord): a zero-width
# space after the "@" keeps the word readable and notifies nobody.
_MASS_MENTION = re.compile(r"@(?=(?:everyone|here|channel)\b)", re.IGNORECASE)
# Slack's markup: the three characters its docs say to escape ("<" starts links and mentions).
_SLACK = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
# Discord's markdown and mention syntax, each escaped with a backslash (shown as the character).
_DISCORD = str.maketrans({c: "\\" + c for c in "\\*_~`|>[]<#@"})


def host_of(url: str) -> str:
    """What the console may say about the endpoint: its host, never the path (which holds the token)."""
    return urllib.parse.urlsplit(url).hostname or "?"


def check_url(url: str) -> str | None:
    """Why `url` cannot be a webhook, or None (naming its scheme and host, never its path)."""
    try:
        parts = urllib.parse.urlsplit(url or "")
        host = parts.hostname
    except ValueError:   # a malformed host or port
        return "--notify wants an http(s) URL, got one that does not parse"
    if parts.scheme not in ("http", "https") or not host:
        return f"--notify wants an http(s) URL, got scheme {parts.scheme or 'none'!r} and host {host or 'none'!r}"
    return None


def credentials_of(url: str) -> list[str]:
    """The parts of a webhook URL that grant posting to it, each a secret of its own: the URL, its
    path and its query (an HTTP stack's error may quote the path alone, as http.client's does)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return [url]
    return [v for v in (url, parts.path, parts.query, parts.path + ("?" + parts.query if parts.query else ""))
            if v and v.strip("/")]


def _fit(text: str, escape: dict, limit: int = MAX_CHARS) -> str:
    """`text` escaped with `escape` (a str.translate table), cut so the escaped form fits `limit`
    (an escape is never cut in half)."""
    out, n = [], 0
    for c in text:
        e = escape.get(ord(c), c)
        if n + len(e) > limit:
            break
        out.append(e)
        n += len(e)
    return "".join(out)


def slack_text(text: str) -> str:
    return _fit(_MASS_MENTION.sub("@\u200b", text), _SLACK)


def discord_content(text: str) -> str:
    return _fit(_MASS_MENTION.sub("@\u200b", text), _DISCORD)


def body(text: str, event: str) -> bytes:
    """The JSON posted: the text cleaned (harness/secrets.py clean_text), then escaped per service."""
    plain = clean_text(text)
    return json.dumps({"text": slack_text(plain), "content": discord_content(plain), "event": event,
                       "allowed_mentions": {"parse": []}, "flags": SUPPRESS_EMBEDS,
                       "unfurl_links": False, "unfurl_media": False}).encode()


class _Cutoff:
    """One try's deadline, held by its sockets: `fire()` shuts every socket the try opened, so a
    read or write blocked on one returns at once. The try's connections open their sockets through
    `connect` (the socket kept is a duplicate, so shutting it down never touches a descriptor the
    try already closed and the system gave to something else)."""

    def __init__(self, until: float):
        self.until = until
        self.fired = False
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []

    def left(self) -> float:
        return self.until - time.monotonic()

    def connect(self, address, timeout=None, source_address=None, *args, **kwargs):
        left = self.left()
        if left <= 0:
            raise TimeoutError("the message's deadline passed")
        timeout = left if not isinstance(timeout, (int, float)) else min(timeout, left)
        sock = socket.create_connection(address, timeout, source_address, *args, **kwargs)
        with self._lock:
            if self.fired:
                sock.close()
                raise TimeoutError("the message's deadline passed")
            self._socks.append(sock.dup())
        return sock

    def connection(self, cls):
        """A factory of `cls` (http.client's HTTP(S)Connection) whose sockets are this cutoff's."""
        def make(host, **kwargs):
            conn = cls(host, **kwargs)
            conn._create_connection = self.connect   # http.client's own hook for opening the socket
            return conn
        return make

    def fire(self) -> None:
        with self._lock:
            self.fired = True
            for s in self._socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def release(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            s.close()


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, cutoff: _Cutoff):
        super().__init__()
        self.cutoff = cutoff

    def http_open(self, req):
        return self.do_open(self.cutoff.connection(http.client.HTTPConnection), req)


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, cutoff: _Cutoff):
        super().__init__()
        self.cutoff = cutoff

    def https_open(self, req):
        return self.do_open(self.cutoff.connection(http.client.HTTPSConnection), req, context=self._context)


@dataclass
class _Try:
    """What one try came to: taken, an HTTP error status, or what else went wrong."""
    ok: bool = False
    code: int | None = None
    error: str | None = None


def _deliver(url: str, data: bytes, cutoff: _Cutoff, timeout: float, out: _Try) -> None:
    """One try (in its own thread): the real urllib stack, its sockets held by `cutoff`; the
    outcome goes into `out`."""
    try:
        opener = urllib.request.build_opener(_HTTP(cutoff), _HTTPS(cutoff))
        req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
        with opener.open(req, timeout=timeout) as resp:
            resp.read(READ_MAX)
        out.ok = True
    except urllib.error.HTTPError as exc:
        out.code = exc.code
        exc.close()
    except urllib.error.URLError as exc:
        out.error = f"{type(exc).__name__}: {exc.reason}"
    except (OSError, ValueError, http.client.HTTPException) as exc:   # timeouts, resets, a garbled answer
        out.error = type(exc).__name__ + ("" if isinstance(exc, http.client.HTTPException) else f": {exc}")
    except BaseException as exc:   # anything else: said, never a dead sender
        out.error = type(exc).__name__
    finally:
        cutoff.release()


class Notifier:
    """Posts messages to one webhook from a background thread; post() returns at once."""

    def __init__(self, url: str, say: Callable[[str], None] = print, *, tries: int = TRIES,
                 backoff_s: float = BACKOFF_S, timeout_s: float = TIMEOUT_S, deadline_s: float = DEADLINE_S):
        for part in credentials_of(url):   # scrubbed from everything the loop writes and says, and
            remember(part)                 # kept out of every child's environment
        self.url, self.say, self.host = url, say, host_of(url)
        self.tries, self.backoff_s, self.timeout_s, self.deadline_s = tries, backoff_s, timeout_s, deadline_s
        self.sent = self.dropped = 0
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue(QUEUE_MAX)
        self._closing = threading.Event()   # close() was called: leave once the queue is empty
        self._give_up = threading.Event()   # close() waited long enough: send nothing more
        self._busy = False                  # a message is being sent now
        self._down: str | None = None       # why the current outage started (said on the console)
        self._lost = 0                      # messages dropped since the outage started
        self._stuck: list[threading.Thread] = []   # tries left behind
        self._thread = threading.Thread(target=self._work, name="notify", daemon=True)
        self._thread.start()

    def post(self, event: str, text: str) -> None:
        try:
            self._queue.put_nowait((event, text))
        except queue.Full:
            self._lose("its queue is full: the endpoint takes messages slower than they come")

    def close(self, timeout: float = CLOSE_S) -> None:
        """Give the messages already queued (the stop's) up to `timeout` seconds, then leave,
        saying what was not sent."""
        self._closing.set()
        self._thread.join(timeout)
        self._give_up.set()
        with self._lock:
            pending = self._queue.qsize() + (1 if self._busy else 0)
            down, lost = self._down, self._lost
        if pending:
            self.say(f"notify: {pending} message(s) to {self.host} not sent at the stop (not taken within "
                     f"{timeout:g} s)" + (f"; {lost} more lost since it stopped answering ({down})" if down else ""))
        elif down:
            self.say(f"notify: {self.host} did not answer again before the stop: {lost} message(s) lost ({down})")

    def _work(self) -> None:
        while True:
            try:
                event, text = self._queue.get(timeout=0.1)
            except queue.Empty:
                if self._closing.is_set():
                    return
                continue
            if self._give_up.is_set():
                continue   # the stop stopped waiting: what is left is said lost there, not sent
            with self._lock:
                self._busy = True
            try:
                self._send(event, text)
            except Exception as exc:   # a message may be lost; the sender never is
                self._lose(f"unsendable: {type(exc).__name__}")
            finally:
                with self._lock:
                    self._busy = False

    def _send(self, event: str, text: str) -> None:
        until = time.monotonic() + self.deadline_s
        data, why = body(text, event), "no try"
        for attempt in range(self.tries):
            if attempt:
                pause = min(self.backoff_s * 2 ** (attempt - 1), until - time.monotonic())
                if pause <= 0:
                    break
                time.sleep(pause)
            left = until - time.monotonic()
            if left <= 0:
                break
            why, final = self._try(data, min(left, self.timeout_s))
            if why is None:
                self._delivered()
                return
            if final:
                break
        self._lose(why)

    def _try(self, data: bytes, limit: float) -> tuple[str | None, bool]:
        """(None, _) when the endpoint took the message, else (why not, whether trying again is useless)."""
        self._stuck = [t for t in self._stuck if t.is_alive()]
        if len(self._stuck) >= MAX_STUCK:
            return f"{len(self._stuck)} earlier tries still hang (name lookup?)", True
        cutoff, out = _Cutoff(time.monotonic() + limit), _Try()
        worker = threading.Thread(target=_deliver, args=(self.url, data, cutoff, limit, out),
                                  name="notify-try", daemon=True)
        worker.start()
        worker.join(limit)
        if worker.is_alive():
            cutoff.fire()           # whatever the endpoint does, its socket is shut now
            worker.join(GRACE_S)
            if worker.is_alive():
                self._stuck.append(worker)
            return f"no answer within {limit:.3g} s", False
        if out.ok:
            return None, False
        if out.code is None and time.monotonic() >= cutoff.until:   # its own socket timeout, at the deadline
            return f"no answer within {limit:.3g} s", False
        if out.code is not None:
            # a 4xx refuses this message: sending it again changes nothing (but 408 and 429 ask for it)
            return f"HTTP {out.code}", 400 <= out.code < 500 and out.code not in (408, 429)
        return out.error or "no answer", False

    def _delivered(self) -> None:
        with self._lock:
            self.sent += 1
            down, lost = self._down, self._lost
            self._down, self._lost = None, 0
        if down and not self._give_up.is_set():   # after the stop, close() has said it all
            self.say(f"notify: {self.host} answers again; {lost} message(s) were lost while it did not")

    def _lose(self, why: str) -> None:
        why = clean_text(why, one_line=True)[:200]
        with self._lock:
            self.dropped += 1
            self._lost += 1
            first = self._down is None
            if first:
                self._down = why
        if first and not self._give_up.is_set():
            self.say(f"notify: {self.host} did not take a message ({why}); dropping messages until it "
                     "answers (the loop goes on)")


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
            if rec.status == "keep" and bpb is not None and not rec.imported:
                prev = self._best if self._best is not None else _best_before(history[:-1])
                if rec.is_baseline:
                    self.post("baseline", f"autoresearch {self.tag}: baseline {bpb:.6f} measured "
                              f"({rec.decision_reason[:200]})")
                elif prev is None or bpb < prev:
                    gain = f", {prev - bpb:+.6f} over {prev:.6f}" if prev is not None else ""
                    self.post("new_best", f"autoresearch {self.tag}: new best {bpb:.6f}{gain} by exp {rec.n} "
                              f"({str(rec.commit)[:7]}): {rec.description[:200]}. {_why(rec)}{_evidence(rec)}")
                else:   # kept on another ground than a better figure (efficiency, simplicity)
                    self.post("keep", f"autoresearch {self.tag}: exp {rec.n} ({str(rec.commit)[:7]}) kept at "
                              f"{bpb:.6f}, the best stays {prev:.6f}: {rec.description[:200]}. {_why(rec)}{_evidence(rec)}")
                self._best = bpb if prev is None else min(prev, bpb)
            elif rec.status == "keep" and not rec.imported:   # a keep without a figure: still why
                self.post("keep", f"autoresearch {self.tag}: exp {rec.n} ({str(rec.commit)[:7]}) kept without a "
                          f"figure: {rec.description[:200]}. {_why(rec)}")
            crashes = _trailing_crashes(history)
            if crashes == self.streak:
                self.post("crash_streak", f"autoresearch {self.tag}: {crashes} crashes in a row, the last "
                          f"exp {rec.n} ({rec.crash_class}): {rec.description[:200]}")
            for kind, item in _escalations(rec):
                show = f"show {item}" if item is not None else "list"
                self.post("queue", f"autoresearch {self.tag}: exp {rec.n} went to the human queue ({kind}): "
                          f"{rec.decision_reason[:300]}. Review: uv run agent/review_queue.py {show}")

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
    """The best kept figure of the tag's own (an imported one is another machine's, never the bar)."""
    vals = [r.decision_bpb for r in history
            if r.status == "keep" and r.decision_bpb is not None and not r.imported]
    return min(vals) if vals else None


def _why(rec: ExperimentRecord) -> str:
    """Why the judge kept it: the ground (its Basis: metric, efficiency, simplicity...) and its reason."""
    basis = rec.basis.value if rec.basis is not None else "the judge's call"
    reason = rec.text("decision_reason")[:300] or "no reason recorded"
    return f"Kept on {basis}: {reason}"


def _trailing_crashes(history: list[ExperimentRecord]) -> int:
    n = 0
    for r in reversed(history):
        if r.status != "crash":
            break
        n += 1
    return n


def _evidence(rec: ExperimentRecord) -> str:
    """". Evidence: <the runs, the bar, the test>" when the judge recorded them, else "" (the
    reason, said already, is all there is)."""
    ev = rec.evidence_view()
    return f". Evidence: {ev.summary()}" if ev is not None else ""


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
