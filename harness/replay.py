"""The replay process: the only place a recorded graph runs, holding nothing worth stealing.

The trusted evaluator (harness/eval_worker.py) keeps the validation data, the targets, the loss
and every check in its own process. It starts this file as a separate process (`python -I
replay.py SPEC_JSON FD`, in the same sandbox) that loads the artifact and the graph (harness/graph.py
checks every node) and then answers one request at a time over a Unix socket: the input tokens of
one call in, logits out. So whatever a graph reads through a kernel (its own heap, freed memory),
the targets, the other calls' inputs and the evaluator's state are not in the address space it
runs in.

Isolation per call, by device:

- **fork** (CPU): the replay process never runs the graph itself. For each call it forks a child
  that runs the graph once on the tokens it was sent, writes the logits into a memory file of its
  own and exits; the parent sends that file to the evaluator. Every call starts from the same
  clean state (the graph loaded, no call made): no earlier batch, no earlier output, nothing a
  previous call left in freed memory. A child that dies (a kernel's SIGFPE, a segfault) or fails
  is a failure of the graph, reported as such; the replay process itself goes on.
- **pair** (CUDA, where a process that has used the GPU cannot fork; on CPU by AUTORESEARCH_REPLAY=pair):
  two replay processes that run the graph themselves. The evaluator sends the two calls of a
  causality check (a batch and its spliced twin) and the two of the determinism check to
  different processes, picked at random, so no process ever sees both halves of a comparison: a
  graph that remembers its earlier calls (through a kernel read out of bounds) has nothing to
  match its input against. What it could remember is other batches of the validation stream,
  which hold no future of the batch it is given. Kernels are kept in bounds anyway
  (harness/graph_ops.py).

Transport: the logits travel in a memory file (memfd) passed over the socket (SCM_RIGHTS), made
fresh for each call; on CUDA as the output tensor itself, shared by a CUDA IPC handle, which the
evaluator releases before the next call. The evaluator checks everything it receives (shape,
dtype, finiteness); nothing the replay says is a verdict, except what it reports about loading
(the artifact's train.py hash, the graph's device and digest), which happens before any graph
code runs.

Messages are 4-byte big-endian lengths followed by JSON; a response may carry one file descriptor.
"""
from __future__ import annotations

import json
import mmap
import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import traceback

# The most bytes a JSON message may have: a call's tokens travel in one (the gpu profile's 32 x
# 2048 ids as JSON are under 1 MiB), the logits never (a memory file, or a CUDA IPC handle).
MAX_MESSAGE = 4 << 20
# The most bytes of logits one call may return: far beyond any profile's [rows, seq_len, vocab]
# in float32 (the gpu profile's 32 x 2048 x 8192 x 4 = 2 GiB).
MAX_LOGITS_BYTES = 8 << 30
# How the replay is isolated per call when the device does not decide (see the docstring).
MODE_ENV = "AUTORESEARCH_REPLAY"
DTYPES = ("float32", "float64", "float16", "bfloat16")


class ReplayError(RuntimeError):
    """The graph failed or killed its replay: a failure of the candidate (the message says how)."""


class ReplayDown(RuntimeError):
    """The replay process could not be started or its answer could not be read (the message says why)."""


# ---- the wire ---------------------------------------------------------------------------------

def send(sock: socket.socket, msg: dict, fd: int | None = None) -> None:
    data = json.dumps(msg).encode()
    head = struct.pack(">I", len(data))
    if fd is None:
        sock.sendall(head + data)
    else:
        socket.send_fds(sock, [head + data], [fd])


def recv(sock: socket.socket) -> tuple[dict, int | None]:
    """One message and the descriptor sent with it (None when none came)."""
    first, fds, _, _ = socket.recv_fds(sock, 4, 1)
    fd = fds[0] if fds else None
    head = first + _exactly(sock, 4 - len(first)) if first else b""
    if len(head) != 4:
        raise EOFError("the replay's socket closed")
    (size,) = struct.unpack(">I", head)
    if size > MAX_MESSAGE:
        raise ReplayDown(f"a message of {size} bytes from the replay (limit {MAX_MESSAGE})")
    msg = json.loads(_exactly(sock, size))
    if not isinstance(msg, dict):
        raise ReplayDown("a message from the replay is not an object")
    return msg, fd


def _exactly(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError("the replay's socket closed mid-message")
        out += chunk
    return out


# ---- the evaluator's side ----------------------------------------------------------------------

class Lane:
    """One replay process, as the evaluator sees it: its socket and its Popen."""

    def __init__(self, folder: str, spec: dict, env: dict):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = mine
        argv = [sys.executable, "-I", os.path.join(folder, "replay.py"), json.dumps(spec), str(theirs.fileno())]
        self.proc = subprocess.Popen(argv, pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
                                     stdout=sys.stderr, stderr=sys.stderr)
        theirs.close()

    def ask(self, msg: dict, fd: int | None = None) -> tuple[dict, int | None]:
        try:
            send(self.sock, msg, fd)
            return recv(self.sock)
        except (OSError, EOFError, ValueError) as exc:
            self.proc.wait()
            code = self.proc.returncode
            how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit {code}"
            raise ReplayError(f"the graph killed its replay process ({how}; {type(exc).__name__})") from None

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()


class Replay:
    """The graph as the evaluator calls it: replay(x, lane) -> logits, computed in a replay process.

    `Replay.start` launches the first replay process before the evaluator has even imported torch
    (the two start side by side); `ready(torch, rows, seq_len)` waits for it to load the artifact,
    starts the second in pair mode, and keeps what they reported: the artifact's train.py hash, the
    device, the graph's input shape (checked against the evaluation's) and digest."""

    def __init__(self, folder: str, spec: dict, env: dict | None = None):
        self.folder, self.spec = folder, dict(spec)
        self.env = dict(os.environ if env is None else env)
        self.lanes: list[Lane] = [Lane(folder, self.spec, self.env)]
        self.torch = None

    @classmethod
    def start(cls, folder: str, spec: dict, env: dict | None = None) -> "Replay":
        return cls(folder, spec, env)

    def ready(self, torch, rows: int, seq_len: int) -> "Replay":
        self.torch = torch
        try:
            hello, _ = self.lanes[0].ask({"op": "hello"})
            if hello.get("ok") is not True:
                raise ReplayError(str(hello.get("error") or "the replay could not load the graph"))
            if [hello.get("rows"), hello.get("seq_len")] != [rows, seq_len]:
                raise ReplayError(f"the graph takes int64 [{hello.get('rows')}, {hello.get('seq_len')}]; the "
                                  f"evaluation feeds int64 [{rows}, {seq_len}]")
            self.mode = hello["mode"]
            if self.mode == "pair":
                second = Lane(self.folder, self.spec, self.env)
                self.lanes.append(second)
                again, _ = second.ask({"op": "hello"})
                if again.get("ok") is not True or again.get("digest") != hello.get("digest"):
                    raise ReplayError("the second replay process did not load the same graph")
        except BaseException:
            self.close()
            raise
        self.device = torch.device(hello["device"])
        self.rows, self.seq_len = rows, seq_len
        self.sha, self.digest_at_load = hello.get("sha"), hello["digest"]
        return self

    # evaluate_bpb finds the model's device through parameters() or buffers()
    def parameters(self):
        return iter([self.torch.empty(0, device=self.device)])

    def buffers(self):
        return iter(())

    def __call__(self, x, lane: int | None = None):
        torch = self.torch
        if lane is None:
            lane = secrets.randbelow(len(self.lanes))
        tokens = x.detach().to("cpu", torch.long).contiguous()
        msg, fd = self.lanes[lane % len(self.lanes)].ask(
            {"op": "call", "shape": list(tokens.shape), "tokens": tokens.flatten().tolist()})
        try:
            if msg.get("ok") is not True:
                raise ReplayError(str(msg.get("error") or "the replay failed"))
            return self._logits(msg, fd)
        finally:
            if fd is not None:
                os.close(fd)

    def serving(self) -> dict | None:
        msg, _ = self.lanes[0].ask({"op": "serving"})
        if msg.get("ok") is not True:
            raise ReplayError(str(msg.get("error") or "the serving figures failed"))
        return msg.get("serving")

    def digests(self) -> list[str]:
        """Each replay process's digest of the graph now (pair mode: they ran it themselves)."""
        out = []
        for lane in self.lanes:
            msg, _ = lane.ask({"op": "digest"})
            out.append(msg.get("digest"))
        return out

    def close(self) -> None:
        for lane in self.lanes:
            lane.close()
        self.lanes = []

    def _logits(self, msg: dict, fd: int | None):
        torch = self.torch
        dtype, shape = msg.get("dtype"), msg.get("shape")
        if dtype not in DTYPES or not (isinstance(shape, list) and len(shape) == 3
                                       and all(isinstance(s, int) and s >= 0 for s in shape)):
            raise ReplayError(f"the graph's output is {dtype} {shape}, not floating-point logits [B, T, V]")
        tdtype = getattr(torch, dtype)
        count = shape[0] * shape[1] * shape[2]
        nbytes = count * torch.empty(0, dtype=tdtype).element_size()
        if nbytes > MAX_LOGITS_BYTES:
            raise ReplayError(f"the graph's output {shape} is beyond {MAX_LOGITS_BYTES >> 30} GiB")
        if msg.get("cuda"):
            from torch.multiprocessing.reductions import rebuild_cuda_tensor
            out = rebuild_cuda_tensor(*_cuda_args(torch, msg["cuda"]))
            if out.dtype != tdtype or list(out.shape) != shape:
                raise ReplayError("the shared output does not match its description")
            return out     # the replay keeps it alive until its next call (the other lane's comes first)
        if fd is None or os.fstat(fd).st_size < nbytes:
            raise ReplayError("the replay's logits file is missing or short")
        if nbytes == 0:
            return torch.empty(shape, dtype=tdtype)
        buf = mmap.mmap(fd, nbytes, prot=mmap.PROT_READ | mmap.PROT_WRITE, flags=mmap.MAP_PRIVATE)
        return torch.frombuffer(buf, dtype=tdtype, count=count).view(shape)


def _cuda_args(torch, d: dict) -> tuple:
    """rebuild_cuda_tensor's arguments from the JSON form _cuda_share wrote (no pickle crosses)."""
    storage_cls = {"TypedStorage": torch.storage.TypedStorage, "UntypedStorage": torch.UntypedStorage}[d["storage_cls"]]
    return (torch.Tensor, tuple(d["size"]), tuple(d["stride"]), int(d["offset"]), storage_cls,
            getattr(torch, d["dtype"]), int(d["device"]), _unhex(d["handle"]), int(d["storage_size"]),
            int(d["storage_offset"]), bool(d["requires_grad"]), _unhex(d["ref_handle"]), int(d["ref_offset"]),
            _unhex(d["event_handle"]), bool(d["event_sync_required"]))


def _unhex(v):
    return bytes.fromhex(v) if isinstance(v, str) else None


# ---- the replay's side -------------------------------------------------------------------------

def serve(spec: dict, fd: int) -> None:
    """Load the artifact, answer the evaluator's hello with what was loaded, then one request at a time."""
    sock = socket.socket(fileno=fd)
    try:
        state = _load(spec)
    except BaseException as e:   # the verdict's stage says it: the artifact could not be loaded
        state, failed = None, f"{type(e).__name__}: {e}"[:2000]
    try:
        recv(sock)    # the hello
    except EOFError:
        return
    if state is None:
        send(sock, {"ok": False, "error": failed})
        return
    torch, graph = state["torch"], state["graph"]
    send(sock, {"ok": True, "mode": state["mode"], "device": str(graph.device), "rows": graph.rows,
                "seq_len": graph.seq_len, "sha": state["sha"], "digest": graph.digest()})
    while True:
        try:
            msg, _ = recv(sock)
        except EOFError:
            return
        op = msg.get("op")
        if op == "digest":
            send(sock, {"ok": True, "digest": graph.digest()})
        elif op == "call":
            tokens = torch.tensor(msg["tokens"], dtype=torch.long).view(msg["shape"])
            _answer(sock, state, lambda: graph(tokens.to(graph.device)))
        elif op == "serving":
            import graph as G
            probe = torch.zeros(graph.rows, graph.seq_len, dtype=torch.long, device=graph.device)
            _answer(sock, state, lambda: G.serving_cost(graph, probe), figures=True)
        else:
            send(sock, {"ok": False, "error": f"unknown request {op!r}"})


def _load(spec: dict) -> dict:
    """The artifact and its graph, checked by graph.py; spec: {"dir", "artifact", "rows", "threads"}."""
    sys.path.insert(0, spec["dir"])
    import torch
    import graph as G
    torch.set_num_threads(1)     # fork mode: no thread pool exists before a child forks (OpenMP is not fork-safe)
    art = torch.load(spec["artifact"], map_location="cpu", weights_only=True)
    if not isinstance(art, dict) or not {"state_dict", "graph", "constants"} <= set(art):
        raise ValueError("the artifact has no recorded graph (state_dict, graph, constants): the run "
                         "must save its model with runtime.save_model")
    recorded_on = _graph_device(art["graph"])
    if recorded_on == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("the graph was recorded on a GPU and this evaluation has none")
    device = torch.device("cuda" if recorded_on == "cuda" else "cpu")
    mode = "pair" if device.type == "cuda" else (os.environ.get(MODE_ENV) or "fork")
    if mode not in ("fork", "pair"):
        raise ValueError(f"{MODE_ENV}={mode!r}: expected fork or pair")
    graph = G.load(art["graph"], _tensors(art["state_dict"]), _tensors(art["constants"]),
                   rows=int(spec["rows"]), seq_len=_seq_len(art["graph"]), device=device)
    sha = art.get("train_py_sha")
    return {"torch": torch, "graph": graph, "mode": mode, "sha": sha if isinstance(sha, str) else None,
            "threads": int(spec.get("threads") or 1)}


def _answer(sock, state: dict, work, figures: bool = False) -> None:
    """Run `work` (one call of the graph) isolated as the mode says and send its result."""
    if state["mode"] == "pair":
        send(sock, *_result(state, work, figures, None))
        return
    memfd = os.memfd_create("replay-logits")
    status = os.fdopen(os.memfd_create("replay-status"), "w+b")
    pid = os.fork()
    if pid == 0:   # the child: one call from the clean state, then gone
        code = 3
        try:
            sock.close()
            state["torch"].set_num_threads(state["threads"])
            msg, _ = _result(state, work, figures, memfd)
            status.write(json.dumps(msg).encode())
            status.flush()
            code = 0
        finally:
            os._exit(code)
    _, wstatus = os.waitpid(pid, 0)
    try:
        status.seek(0)
        raw = status.read(MAX_MESSAGE + 1)
        if os.WIFSIGNALED(wstatus):
            msg = {"ok": False, "error": f"the graph killed its replay (signal "
                                         f"{signal.Signals(os.WTERMSIG(wstatus)).name})", "crash": True}
        elif os.waitstatus_to_exitcode(wstatus) != 0 or not raw or len(raw) > MAX_MESSAGE:
            msg = {"ok": False, "error": f"the graph's replay exited {os.waitstatus_to_exitcode(wstatus)} "
                                         "without an answer", "crash": True}
        else:
            msg = json.loads(raw)
        send(sock, msg, memfd if msg.get("ok") and not figures else None)
    finally:
        status.close()
        os.close(memfd)


def _result(state: dict, work, figures: bool, memfd: int | None) -> tuple[dict, int | None]:
    torch = state["torch"]
    try:
        with torch.no_grad():
            out = work()
    except Exception as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}, None
    if figures:
        return {"ok": True, "serving": out}, None
    if not isinstance(out, torch.Tensor) or str(out.dtype).replace("torch.", "") not in DTYPES or out.dim() != 3:
        return {"ok": False, "error": f"the graph's output is not floating-point logits [B, T, V] "
                                      f"({getattr(out, 'dtype', type(out).__name__)}, "
                                      f"{tuple(getattr(out, 'shape', ()))})"}, None
    msg = {"ok": True, "dtype": str(out.dtype).replace("torch.", ""), "shape": list(out.shape)}
    if out.device.type == "cuda":
        torch.cuda.synchronize(out.device)
        state["last"] = out = out.contiguous()   # kept alive until the next request
        msg["cuda"] = _cuda_share(torch, out)
        return msg, None
    out = out.contiguous()
    nbytes = out.numel() * out.element_size()
    if memfd is None:     # pair mode on CPU: a fresh memory file for this call
        memfd = os.memfd_create("replay-logits")
    if nbytes > MAX_LOGITS_BYTES:
        return {"ok": False, "error": f"the graph's output {list(out.shape)} is beyond the limit"}, None
    os.ftruncate(memfd, max(1, nbytes))
    if nbytes:
        with mmap.mmap(memfd, nbytes) as m:
            torch.frombuffer(m, dtype=out.dtype, count=out.numel()).copy_(out.reshape(-1))
            del m
    return msg, memfd


def _cuda_share(torch, t) -> dict:
    """torch's own IPC description of a CUDA tensor (reduce_tensor), as JSON."""
    from torch.multiprocessing.reductions import reduce_tensor
    _, args = reduce_tensor(t)
    (_cls, size, stride, offset, storage_cls, _dtype, device, handle, storage_size, storage_offset, requires_grad,
     ref_handle, ref_offset, event_handle, event_sync) = args

    def hexed(b):
        return b.hex() if isinstance(b, (bytes, bytearray)) else None
    return {"dtype": str(t.dtype).replace("torch.", ""), "size": list(size), "stride": list(stride),
            "offset": offset, "storage_cls": storage_cls.__name__, "device": device, "handle": hexed(handle),
            "storage_size": storage_size, "storage_offset": storage_offset, "requires_grad": requires_grad,
            "ref_handle": hexed(ref_handle), "ref_offset": ref_offset, "event_handle": hexed(event_handle),
            "event_sync_required": event_sync}


def _seq_len(text) -> int:
    """The graph's own input length (the evaluator checks it against the evaluation's)."""
    try:
        n = json.loads(text)["input"]["shape"][1]
        return n if isinstance(n, int) and not isinstance(n, bool) else -1
    except (ValueError, KeyError, IndexError, TypeError):
        return -1


def _graph_device(text) -> str:
    try:
        return json.loads(text).get("device", "cpu") if isinstance(text, str) else "cpu"
    except (ValueError, AttributeError):
        return "cpu"


def _tensors(d) -> dict:
    return {str(k): v for k, v in d.items()} if isinstance(d, dict) else {}


if __name__ == "__main__":
    try:
        serve(json.loads(sys.argv[1]), int(sys.argv[2]))
    except BaseException:
        traceback.print_exc()
    sys.stderr.flush()
    os._exit(0)
