"""Notifications against endpoints that misbehave, on real sockets: one that drips its answer a
byte at a time (in the status line, the headers or the body), one that accepts and never answers,
one that never even accepts, one that answers garbage, resets or hangs up. Each message has one
deadline whatever the endpoint does; the sender is never held past it, never dies, and the
console says when messages are lost and how many. Timings are asserted loosely (a deadline of
1 s must end within a few seconds), what was received and said strictly."""
import json
import socket
import struct
import threading
import time

import pytest

from agent.notify import Notifier

# How often a dripping endpoint sends its next byte.
DRIP_S = 0.2
# A deadline for the tests, and what "returns within a few seconds of it" means here.
DEADLINE = 1.0
SLACK_S = 6.0


def _read_request(conn) -> bytes | None:
    """The request's body (by Content-Length), or None when the client went away first."""
    data = b""
    while b"\r\n\r\n" not in data:
        got = conn.recv(65536)
        if not got:
            return None
        data += got
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        got = conn.recv(65536)
        if not got:
            return None
        body += got
    return body


class Raw:
    """A TCP endpoint on 127.0.0.1 that answers its k-th connection with script[k] (then "ok"
    for every later one). `accept=False`: it listens and never accepts (the kernel completes
    the handshake; nobody ever reads)."""

    def __init__(self, script=(), accept=True):
        self.script, self.bodies, self.conns = list(script), [], 0
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/api/webhooks/1/tokenpart"
        if accept:
            threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            how = self.script[self.conns] if self.conns < len(self.script) else "ok"
            self.conns += 1
            threading.Thread(target=self._handle, args=(conn, how), daemon=True).start()

    def _drip(self, conn, data: bytes):
        for i in range(len(data)):
            if self.stop.wait(DRIP_S):
                return
            conn.sendall(data[i:i + 1])

    def _handle(self, conn, how):
        try:
            with conn:
                body = _read_request(conn)
                if body is None:
                    return
                if how == "ok":
                    self.bodies.append(json.loads(body))
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                elif how == "drip_status":
                    self._drip(conn, b"HTTP/1.1 200 OK\r\n" * 100)
                elif how == "drip_headers":
                    conn.sendall(b"HTTP/1.1 200 OK\r\n")
                    self._drip(conn, b"X-Slow: yes\r\n" * 100)
                elif how == "drip_body":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                    self._drip(conn, b"o" * 1000)
                elif how == "silent":
                    self.stop.wait(60)
                elif how == "garbage":
                    conn.sendall(b"SPAM SPAM SPAM\r\n\r\n")
                elif how == "long_header":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 200_000 + b"\r\n\r\n")
                elif how == "hang_up":
                    pass
                elif how == "reset":
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass   # the client shut the connection: what a deadline does

    def close(self):
        self.stop.set()
        self.sock.close()


@pytest.fixture
def raw():
    made = []

    def make(*a, **kw):
        made.append(Raw(*a, **kw))
        return made[-1]
    yield make
    for r in made:
        r.close()


@pytest.mark.parametrize("how", ["drip_status", "drip_headers", "drip_body", "silent"])
def test_an_endpoint_that_holds_a_message_costs_that_message_its_deadline_and_nothing_more(raw, how):
    """The first message meets an endpoint that never finishes answering; the second finds it
    answering again. urllib's own timeout (15 s per read) would never fire on a drip."""
    hook = raw([how])
    said = []
    n = Notifier(hook.url, said.append, tries=3, backoff_s=0.01, timeout_s=15, deadline_s=DEADLINE)
    t0 = time.monotonic()
    n.post("new_best", "first")
    n.post("digest", "second")
    assert time.monotonic() - t0 < 0.5, "post() never waits for the endpoint"
    n.close(timeout=20)
    took = time.monotonic() - t0
    assert took < DEADLINE + SLACK_S, f"{how}: the sender was held {took:.1f} s past a {DEADLINE} s deadline"
    assert [b["content"] for b in hook.bodies] == ["second"], how
    assert hook.conns == 2, "the held message used its deadline on one try; the next went straight through"
    assert n.dropped == 1 and n.sent == 1
    assert said == [f"notify: 127.0.0.1 did not take a message (no answer within {DEADLINE:g} s); dropping "
                    "messages until it answers (the loop goes on)",
                    "notify: 127.0.0.1 answers again; 1 message(s) were lost while it did not"], said


def test_a_try_that_hangs_leaves_the_message_time_for_another(raw):
    hook = raw(["silent"])
    said = []
    n = Notifier(hook.url, said.append, tries=3, backoff_s=0.01, timeout_s=0.5, deadline_s=5)
    n.post("stop", "kept")
    n.close(timeout=10)
    assert [b["content"] for b in hook.bodies] == ["kept"] and said == [] and n.sent == 1


@pytest.mark.parametrize("how", ["garbage", "long_header", "hang_up", "reset"])
def test_a_garbled_answer_is_tried_again_and_never_kills_the_sender(raw, how):
    """http.client raises its own exceptions (BadStatusLine, LineTooLong: not OSError) for some of
    these: the sender lives on, and the next try goes through."""
    hook = raw([how, how])
    said = []
    n = Notifier(hook.url, said.append, tries=4, backoff_s=0.01, deadline_s=10)
    n.post("queue", "one")
    n.post("queue", "two")
    n.close(timeout=20)
    assert [b["content"] for b in hook.bodies] == ["one", "two"], (how, said)
    assert said == [] and n.sent == 2 and n.dropped == 0
    assert hook.conns == 4


def test_an_endpoint_that_never_accepts_loses_each_message_once_and_says_how_many(raw):
    hook = raw(accept=False)
    said = []
    n = Notifier(hook.url, said.append, tries=2, backoff_s=0.01, deadline_s=DEADLINE)
    t0 = time.monotonic()
    for i in range(3):
        n.post("digest", f"m{i}")
    n.close(timeout=20)
    assert time.monotonic() - t0 < 3 * DEADLINE + SLACK_S
    assert n.dropped == 3 and n.sent == 0
    assert len(said) == 2 and said[0].startswith("notify: 127.0.0.1 did not take a message")
    assert said[1] == ("notify: 127.0.0.1 did not answer again before the stop: 3 message(s) lost "
                       f"(no answer within {DEADLINE:g} s)")


def test_the_stop_never_waits_for_a_held_sender_and_says_what_it_leaves(raw):
    hook = raw(["drip_status"] * 10)
    said = []
    n = Notifier(hook.url, said.append, tries=1, deadline_s=30)
    for i in range(3):
        n.post("digest", f"m{i}")
    time.sleep(0.3)   # the sender has the first one on the wire
    t0 = time.monotonic()
    n.close(timeout=1)
    assert time.monotonic() - t0 < 1 + SLACK_S / 2
    assert said == ["notify: 3 message(s) to 127.0.0.1 not sent at the stop (not taken within 1 s)"], said
    assert hook.bodies == []


def test_a_full_queue_never_blocks_post_and_is_said_once(raw):
    hook = raw(["silent"] * 1000)
    said = []
    n = Notifier(hook.url, said.append, tries=1, deadline_s=30)
    t0 = time.monotonic()
    for i in range(250):
        n.post("digest", f"m{i}")
    assert time.monotonic() - t0 < 1.0, "post() returned at once every time"
    assert n.dropped >= 250 - 101 and len(said) == 1 and "its queue is full" in said[0], said
    n.close(timeout=0.5)
    assert len(said) == 2 and "not sent at the stop" in said[1] and f"{n.dropped} more lost" in said[1], said


def test_a_tls_handshake_that_never_ends_is_cut_at_the_deadline(raw):
    """https:// to an endpoint that never answers the ClientHello: the handshake blocks on the
    socket too, and the deadline shuts it as it shuts a plain read."""
    hook = raw(["silent"] * 5)
    said = []
    n = Notifier(hook.url.replace("http://", "https://"), said.append, tries=3, backoff_s=0.01, deadline_s=DEADLINE)
    t0 = time.monotonic()
    n.post("stop", "one")
    n.close(timeout=20)
    assert time.monotonic() - t0 < DEADLINE + SLACK_S
    assert n.dropped == 1 and said[0].startswith("notify: 127.0.0.1 did not take a message (no answer within")
