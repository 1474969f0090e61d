"""The trusted evaluation, in a clean process: python -I eval_worker.py SPEC.json

It never executes code of the experiment. harness/verify.py copies four trusted files into a
fresh folder, this one, graph.py and graph_ops.py (harness/) and prepare.py as committed at the
tag's base, and runs this in a sandbox that sees that folder, the pinned evaluation inputs and
the artifact:

1. the artifact is read with torch.load(weights_only=True): tensors, strings, numbers, nothing
   that runs; its "graph" is the model as recorded operators (graph_export.py), checked and replayed
   by graph.py as a pure, memory-safe function (docs/contracts.md "The trust boundary");
2. prepare.evaluate_bpb measures the graph on the pinned validation data (the fixed metric);
   every call's logits must be finite where the metric uses them (Checked._finite);
3. causality, inside the metric's own pass: a quarter of its calls, and at least enough to hold
   CHECK_MIN_CUTS rows (which ones, the cut positions, the donor rows and whether the spliced
   batch runs before or after the metric's own are drawn from a fresh secret seed), also run
   the batch with each row's future, from a random cut on, replaced by another row's real
   validation text at the same positions; the spliced rows are scored too. A log-probability
   before a cut that moves beyond a fixed limit of the device (LEAK_TOL) fails it; one random
   call is also run twice and must agree within NOISE_MAX (determinism). A model that peeks ahead at a fraction p of positions
   escapes n cuts with probability (1 - p)^n (docs/contracts.md has n per profile);
4. the serving figures (KV bytes and decode FLOPs per token) of the graph itself.

Every check fails closed: a NaN, an exception or a figure it cannot compute is a failure.
The verdict is one JSON line on this process's original stdout, a pipe the harness reads: the
file descriptor is set aside before anything else runs and fd 1 is pointed at stderr, so nothing
else can write to it. SPEC: {"dir", "artifact", "rows", "train_sha", "eval_tokens"}.
"""
import json
import math
import os
import secrets
import sys
import time
import traceback
from dataclasses import dataclass

# The causality check runs this fraction of the evaluation's batches again (its cost: that much
# more evaluation), and never fewer than hold CHECK_MIN_CUTS rows (every batch when there are fewer).
CHECK_FRACTION = 0.25
CHECK_MIN_CUTS = 256
# The checks compare log-probabilities (what the metric uses) clipped at -LOGP_FLOOR nats: the
# tolerances are then absolute, in the metric's units, and a graph's own values (a huge finite
# sentinel, -inf for tokens it never predicts) cannot stretch them. A token given less than
# e^-100 costs 100+ nats wherever it is the target, so a difference hidden below the floor cannot
# lower the metric.
LOGP_FLOOR = 100.0
# A log-probability before a cut may move by at most this much (nats). The limit depends only on
# the device the evaluator chose, never on anything the graph does: a graph that made itself
# nondeterministic (atomics in a scatter on a GPU) must not widen its own tolerance. On CPU in
# fp32 an honest causal graph moves nothing (exactly 0).
LEAK_TOL = 1e-5
# On a GPU, whether the bf16 kernels leave a prefix bit for bit unchanged when the future changes
# is unmeasured (scripts/gpu_check.py's `graph` step records it): until it is, the GPU's limit is
# the determinism bound below. What a leak this small is worth: at most 1e-3 nats per token,
# about 4e-4 bpb at ~3.5 bytes a token, under one judge sigma on any profile.
LEAK_TOL_CUDA = 1e-3
# The graph's own run-to-run difference on identical input may be at most this, else the
# evaluation is not a measurement (an integrity failure, never a wider tolerance).
NOISE_MAX = 1e-3


def main(spec_path):
    verdict_fd = os.dup(1)          # the pipe to the harness; from here on fd 1 is stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out = {"ok": False, "stage": "start", "timings": {}}
    t0 = time.perf_counter()
    checked = None

    def stage(name):
        out["timings"][out["stage"]] = round(time.perf_counter() - t0, 3)
        out["stage"] = name

    try:
        with open(spec_path) as f:
            spec = json.load(f)
        sys.path.insert(0, spec["dir"])
        import torch
        stage("load_artifact")
        art = torch.load(spec["artifact"], map_location="cpu", weights_only=True)
        if not isinstance(art, dict) or not {"state_dict", "graph", "constants"} <= set(art):
            raise ValueError("the artifact has no recorded graph (state_dict, graph, constants): the run "
                             "must save its model with runtime.save_model")
        out["sha_match"] = art.get("train_py_sha") == spec.get("train_sha")
        stage("import_prepare")
        import prepare
        import graph as G
        if spec.get("eval_tokens"):          # a proxy evaluation (screening): fewer tokens
            prepare.EVAL_TOKENS = int(spec["eval_tokens"])
        stage("load_graph")
        rows, T = int(spec["rows"]), prepare.MAX_SEQ_LEN
        recorded_on = _graph_device(art["graph"])
        if recorded_on == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("the graph was recorded on a GPU and this evaluation has none")
        device = torch.device("cuda" if recorded_on == "cuda" else "cpu")
        if device.type == "cpu":
            torch.set_num_threads(int(os.environ.get("AUTORESEARCH_THREADS") or os.cpu_count() or 1))
        model = G.load(art["graph"], _tensors(art["state_dict"]), _tensors(art["constants"]),
                       rows=rows, seq_len=T, device=device)
        steps = max(1, prepare.EVAL_TOKENS // (rows * T))      # as prepare.evaluate_bpb counts them
        checked = Checked(torch, model, secrets.randbits(63), steps,
                          leak_tol=LEAK_TOL_CUDA if device.type == "cuda" else LEAK_TOL)
        stage("evaluate")
        tokenizer = prepare.Tokenizer.from_directory()
        digest = model.digest()
        with torch.no_grad():
            bpb = float(prepare.evaluate_bpb(checked, tokenizer, rows))
            checked.finish()
        if not math.isfinite(bpb):
            raise IntegrityError(f"the metric is not finite ({bpb}): a target token has probability 0 (-inf logit)")
        out["trusted_bpb"] = bpb
        out["causality"] = checked.report()
        stage("serving")
        probe = torch.zeros(rows, T, dtype=torch.long, device=device)
        out["serving"] = G.serving_cost(model, probe)
        if model.digest() != digest:
            raise IntegrityError("the graph's weights, constants or nodes changed during the evaluation")
        out["replay_digest"] = digest
        stage("done")
        out["ok"] = True
    except BaseException as e:  # any failure is a verdict, reported with its stage
        out["error"] = f"{type(e).__name__}: {e}"[:2000]
        out["traceback"] = traceback.format_exc()[-3000:]
        if checked is not None:
            out["causality"] = checked.report()
    out["timings"]["total"] = round(time.perf_counter() - t0, 3)
    with os.fdopen(verdict_fd, "w") as f:
        f.write(json.dumps(out, default=str) + "\n")


def _graph_device(text):
    try:
        return json.loads(text).get("device", "cpu") if isinstance(text, str) else "cpu"
    except ValueError:
        return "cpu"


def _tensors(d):
    return {str(k): v for k, v in d.items()} if isinstance(d, dict) else {}


class IntegrityError(RuntimeError):
    """A check of the replay failed (the message says which and by how much)."""


def _num(v):
    """A figure for the JSON verdict: finite floats as they are, anything else as its repr."""
    return v if isinstance(v, (int, float)) and math.isfinite(v) else repr(v)


@dataclass
class CheckTally:
    """What the checks measured so far: the metric's calls, the batches and rows run with their
    futures spliced, the largest leak, the run-to-run noise (once measured), and the loss of the
    spliced rows against the same rows as given (the report's figures)."""
    calls: int = 0
    checked_batches: int = 0
    checked_rows: int = 0
    max_leak: float = 0.0
    noise: float = 0.0
    noise_measured: bool = False
    spliced_nats: float = 0.0
    base_nats: float = 0.0
    spliced_tokens: int = 0


class Checked:
    """The graph as the evaluation calls it, behind a copy of its input, with the checks: every
    call's logits are finite where the metric needs them, a random set of calls is also run with
    rows' futures spliced (in random order with the metric's own call), and one random call is
    run twice. Every comparison is written so that NaN fails it."""

    def __init__(self, torch, graph, seed, steps, leak_tol=LEAK_TOL):
        self.torch, self.graph = torch, graph
        self.leak_tol = leak_tol     # the device's, fixed before the graph runs
        self.gen = torch.Generator().manual_seed(seed)
        want = min(steps, max(-(-steps // round(1 / CHECK_FRACTION)), -(-CHECK_MIN_CUTS // max(1, graph.rows))))
        self.chosen = set(torch.randperm(steps, generator=self.gen)[:want].tolist())
        self.noise_step = int(torch.randint(steps, (1,), generator=self.gen))
        self.tally = CheckTally()
        self.finished = False
        self.failure = self.failure_kind = None

    # evaluate_bpb reads the device from parameters() or buffers() and switches train/eval
    def parameters(self):
        return self.graph.parameters()

    def buffers(self):
        return self.graph.buffers()

    @property
    def training(self):
        return False

    def eval(self):
        return self

    def train(self, mode=True):
        return self

    def _fail(self, kind, why):
        if self.failure is None:
            self.failure, self.failure_kind = why, kind
        raise IntegrityError(self.failure)

    def __call__(self, idx):
        if self.failure:
            raise IntegrityError(self.failure)
        step = self.tally.calls
        self.tally.calls += 1
        x = idx.clone()
        logits = self._checked(x) if step in self.chosen else self._run(x)
        if step == self.noise_step:
            self._noise(x, logits)
        if not self.torch.equal(x, idx):
            self._fail("integrity", "the replay changed its input")
        return logits

    def _run(self, x):
        logits = self.graph(x)
        self._finite(logits, x)
        return logits

    def _finite(self, logits, x):
        """Logits the metric can use: floating point, [B, T, V], no NaN, no +inf (nor beyond
        float32, which the metric computes in), and a finite logit at every position. -inf is
        accepted (a token the model rules out); as a target it makes the metric infinite: refused."""
        torch = self.torch
        if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
            self._fail("finite", f"the graph's output is not floating-point logits ({getattr(logits, 'dtype', logits)!r})")
        if logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(x.shape):
            self._fail("finite", f"the graph's output is {tuple(logits.shape)}, not logits [B, T, V] for {tuple(x.shape)}")
        bad = logits.isnan() | logits.isposinf()
        if torch.finfo(logits.dtype).max > torch.finfo(torch.float32).max:
            bad |= logits.abs() > torch.finfo(torch.float32).max
            bad &= ~logits.isneginf()
        if bool(bad.any()):
            self._fail("finite", "the logits contain NaN or +inf (or values beyond float32): a model's logits "
                                 "must be finite, or -inf for a token it rules out")
        if not bool(logits.isfinite().any(-1).all()):
            self._fail("finite", "a position has no finite logit (every token -inf)")

    def _logp(self, z):
        """Log-probabilities as the metric computes them, clipped at -LOGP_FLOOR (finite always)."""
        return self.torch.log_softmax(z.float(), -1).clamp(min=-LOGP_FLOOR)

    def _checked(self, x):
        torch = self.torch
        B, T = x.shape
        if B < 2 or T < 2:
            return self._run(x)
        cuts = torch.randint(1, T, (B,), generator=self.gen).tolist()
        shift = int(torch.randint(1, B, (1,), generator=self.gen))
        spliced_first = bool(torch.randint(2, (1,), generator=self.gen))
        x2 = x.clone()
        live = []
        for r, t in enumerate(cuts):
            donor = (r + shift) % B
            if not torch.equal(x[r, t:], x[donor, t:]):   # identical futures tell nothing
                x2[r, t:] = x[donor, t:]
                live.append((r, t))
        if not live:
            return self._run(x)
        if spliced_first:
            spliced = self._run(x2)
            logits = self._run(x)
        else:
            logits = self._run(x)
            spliced = self._run(x2)
        worst = 0.0
        tally = self.tally
        for r, t in live:
            moved = float((self._logp(spliced[r, :t]) - self._logp(logits[r, :t])).abs().max())
            if not (moved <= self.leak_tol):
                tally.max_leak = max(tally.max_leak, moved) if math.isfinite(moved) else moved
                self._fail("causality", f"replacing each row's future from a cut on with other validation text "
                                        f"moved log-probabilities before the cut by {moved:.3g} nats")
            worst = max(worst, moved)
            # the spliced row is scored like a metric row (targets: its own next tokens)
            tally.spliced_nats += float(torch.nn.functional.cross_entropy(
                spliced[r, :T - 1].float(), x2[r, 1:], reduction="sum"))
            tally.base_nats += float(torch.nn.functional.cross_entropy(
                logits[r, :T - 1].float(), x[r, 1:], reduction="sum"))
            tally.spliced_tokens += T - 1
        if not (math.isfinite(tally.spliced_nats) and math.isfinite(tally.base_nats)):
            self._fail("finite", "the loss on the checked rows is not finite (a target token has probability 0)")
        tally.max_leak = max(tally.max_leak, worst)
        tally.checked_batches += 1
        tally.checked_rows += len(live)
        return logits

    def _noise(self, x, logits):
        """The graph's own run-to-run difference: the same batch again, compared as the leak is."""
        again = self._run(x.clone())
        noise = 0.0
        for r in range(x.shape[0]):     # row by row (memory); each row's figure must pass (NaN does not)
            moved = float((self._logp(again[r]) - self._logp(logits[r])).abs().max())
            if not (moved <= NOISE_MAX):
                self._fail("determinism", f"the graph is not deterministic: the same batch twice differs by "
                                          f"{moved:.3g} nats (limit {NOISE_MAX:.3g})")
            noise = max(noise, moved)
        self.tally.noise, self.tally.noise_measured = noise, True

    def limit(self):
        """The leak limit: the device's constant (the measured noise never widens it)."""
        return self.leak_tol

    def finish(self):
        """After the metric's last call: the decisions that need every call's figures."""
        if self.failure:
            raise IntegrityError(self.failure)
        t = self.tally
        if not t.noise_measured:
            self._fail("determinism", "the run-to-run check never ran")
        if t.checked_batches == 0:
            self._fail("causality", "no batch could be checked")
        if not (t.max_leak <= self.limit()):
            self._fail("causality", f"replacing each row's future from a cut on with other validation text "
                                    f"moved log-probabilities before the cut by {t.max_leak:.3g} nats "
                                    f"(limit {self.limit():.3g})")
        self.finished = True

    def report(self):
        t = self.tally
        return {"checked_batches": t.checked_batches, "checked_rows": t.checked_rows,
                "batches": t.calls, "max_leak": _num(t.max_leak), "limit": _num(self.limit()),
                "noise": _num(t.noise), "noise_max": NOISE_MAX, "logp_floor": LOGP_FLOOR,
                "spliced_tokens": t.spliced_tokens, "spliced_nats": _num(t.spliced_nats),
                "base_nats": _num(t.base_nats),
                "causal": self.failure is None and self.finished and t.checked_batches > 0,
                "failure": self.failure, "failure_kind": self.failure_kind}


# After the verdict is written nothing is left to do: leave without Python's shutdown, which with
# torch loaded costs ~0.6 s of CPU (module teardown, the libraries' destructors) per evaluation.
if __name__ == "__main__":
    main(sys.argv[1])
    sys.stderr.flush()
    os._exit(0)
