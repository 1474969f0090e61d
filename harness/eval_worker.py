"""The trusted evaluation, in a clean process: python -I eval_worker.py SPEC.json

It never executes code of the experiment, and it never runs the experiment's graph either.
harness/verify.py copies six trusted files into a fresh folder (this one, replay.py, graph.py,
graph_ops.py, graph_calls.py from harness/, and prepare.py as committed at the tag's base), and runs this in a
sandbox that sees that folder, the pinned evaluation inputs and the artifact:

1. the graph runs in a separate replay process (harness/replay.py): this process sends it the
   input tokens of one call and gets logits back, nothing else. The validation data, the targets,
   the loss and every check stay here; on CPU every call runs in a fresh fork of a replay that
   has never run the graph, so a graph that reads memory it should not (through a kernel) finds
   neither the targets nor any earlier batch. A graph that kills its replay is its own failure;
2. prepare.evaluate_bpb measures the replayed graph on the pinned validation data (the fixed
   metric); every call's logits must be finite where the metric uses them (Checked._finite);
3. causality, inside the metric's own pass: a quarter of its calls, and at least enough to hold
   CHECK_MIN_CUTS rows (which ones, the cut positions, the donor rows and whether the spliced
   batch runs before or after the metric's own are drawn from a fresh secret seed), also run
   the batch with each row's future, from a random cut on, replaced by another row's real
   validation text at the same positions, in another replay process than the metric's call
   (pair mode). A log-probability before a cut that moves beyond a fixed limit of the device
   (LEAK_TOL) fails it. The spliced text after the cut is scored against the same text in its
   own row: a model that costs more than SPLICE_EXCESS_MAX nats a token on text only because
   another row's text precedes it is not a language model of that text (a graph that knows the
   metric's next tokens pays exactly there). One random call is also run twice and must agree
   within NOISE_MAX (determinism). A model that peeks ahead at a fraction p of positions escapes
   n cuts with probability (1 - p)^n (docs/contracts.md has n per profile);
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

if __package__:           # harness.eval_worker (tests), or beside replay.py in the evaluator's folder
    from . import replay as R
else:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import replay as R

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
# The spliced text after a cut may cost at most this many nats a token more than the same text in
# its own row (the same targets at the same positions; the last position, whose target is not in
# the batch, left out), averaged over every spliced row of the evaluation. An honest model pays
# only for the foreign text before the cut: a fraction of a nat at the cut, fading after it
# (tests/test_replay_finite.py measures the test models). A graph that knows the metric's next
# tokens (read from memory it should not reach) predicts them in the spliced rows too, where they
# are wrong: the issue that built this check saw ~14 nats a token.
SPLICE_EXCESS_MAX = 1.0


def main(spec_path):
    verdict_fd = os.dup(1)          # the pipe to the harness; from here on fd 1 is stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out = {"ok": False, "stage": "start", "timings": {}}
    t0 = time.perf_counter()
    checked = replay = None

    def stage(name):
        out["timings"][out["stage"]] = round(time.perf_counter() - t0, 3)
        out["stage"] = name

    try:
        with open(spec_path) as f:
            spec = json.load(f)
        sys.path.insert(0, spec["dir"])
        threads = int(os.environ.get("AUTORESEARCH_THREADS") or os.cpu_count() or 1)
        rows = int(spec["rows"])
        # the replay loads the graph while this process imports torch and the data
        replay = R.Replay.start(spec["dir"], {"dir": spec["dir"], "artifact": spec["artifact"], "rows": rows,
                                              "threads": threads})
        import torch
        stage("import_prepare")
        import prepare
        if spec.get("eval_tokens"):          # a proxy evaluation (screening): fewer tokens
            prepare.EVAL_TOKENS = int(spec["eval_tokens"])
        torch.set_num_threads(threads)
        tokenizer = prepare.Tokenizer.from_directory()
        stage("load_graph")
        T = prepare.MAX_SEQ_LEN
        replay.ready(torch, rows, T)
        out["sha_match"] = replay.sha == spec.get("train_sha")
        out["replay_mode"] = replay.mode
        steps = max(1, prepare.EVAL_TOKENS // (rows * T))      # as prepare.evaluate_bpb counts them
        checked = Checked(torch, replay, secrets.randbits(63), steps,
                          leak_tol=LEAK_TOL_CUDA if replay.device.type == "cuda" else LEAK_TOL)
        stage("evaluate")
        with torch.no_grad():
            bpb = float(prepare.evaluate_bpb(checked, tokenizer, rows))
            checked.finish()
        if not math.isfinite(bpb):
            raise IntegrityError(f"the metric is not finite ({bpb}): a target token has probability 0 (-inf logit)")
        out["trusted_bpb"] = bpb
        out["causality"] = checked.report()
        stage("serving")
        out["serving"] = replay.serving()
        if any(d != replay.digest_at_load for d in replay.digests()):
            raise IntegrityError("the graph's weights, constants or nodes changed during the evaluation")
        out["replay_digest"] = replay.digest_at_load
        stage("done")
        out["ok"] = True
    except BaseException as e:  # any failure is a verdict, reported with its stage
        out["error"] = f"{type(e).__name__}: {e}"[:2000]
        out["traceback"] = traceback.format_exc()[-3000:]
        if checked is not None:
            out["causality"] = checked.report()
    finally:
        if replay is not None:
            replay.close()
    out["timings"]["total"] = round(time.perf_counter() - t0, 3)
    with os.fdopen(verdict_fd, "w") as f:
        f.write(json.dumps(out, default=str) + "\n")


class IntegrityError(RuntimeError):
    """A check of the replay failed (the message says which and by how much)."""


def _num(v):
    """A figure for the JSON verdict: finite floats as they are, anything else as its repr."""
    return v if isinstance(v, (int, float)) and math.isfinite(v) else repr(v)


@dataclass
class CheckTally:
    """What the checks measured so far: the metric's calls, the batches and rows run with their
    futures spliced, the largest leak, the run-to-run noise (once measured), and the nats of the
    spliced text after its cuts against the same text in its own row (spliced_nats, own_nats, over
    spliced_tokens)."""
    calls: int = 0
    checked_batches: int = 0
    checked_rows: int = 0
    max_leak: float = 0.0
    noise: float = 0.0
    noise_measured: bool = False
    spliced_nats: float = 0.0
    own_nats: float = 0.0
    spliced_tokens: int = 0

    @property
    def splice_excess(self) -> float:
        """Nats a token the spliced text cost beyond its own row's (NaN before any was scored)."""
        return (self.spliced_nats - self.own_nats) / self.spliced_tokens if self.spliced_tokens else float("nan")


class Checked:
    """The graph as the evaluation calls it, behind a copy of its input, with the checks: every
    call's logits are finite where the metric needs them, a random set of calls is also run with
    rows' futures spliced (in random order with the metric's own call), and one random call is
    run twice. The two calls of a comparison go to different replay processes where there are
    two (harness/replay.py, pair mode). Every comparison is written so that NaN fails it.

    `graph`: a harness.replay.Replay (the evaluator), or any callable graph (tests, in process)."""

    def __init__(self, torch, graph, seed, steps, leak_tol=LEAK_TOL):
        self.torch, self.graph = torch, graph
        self.lanes = len(graph.lanes) if isinstance(graph, R.Replay) else 1
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
        mine, other = self._lanes()      # a comparison's second call never runs where its first did
        logits = self._checked(x, mine, other) if step in self.chosen else self._run(x, mine)
        if step == self.noise_step:
            self._noise(x, logits, other)
        if not self.torch.equal(x, idx):
            self._fail("integrity", "the replay changed its input")
        return logits

    def _run(self, x, lane=None):
        try:
            logits = self.graph(x, lane) if self.lanes > 1 else self.graph(x)
        except R.ReplayError as e:   # it failed or killed its replay: the candidate's failure
            self._fail("replay", str(e))
        self._finite(logits, x)
        return logits

    def _lanes(self):
        """Two different replay processes for the two calls of a comparison (one when there is one)."""
        if self.lanes < 2:
            return None, None
        a = int(self.torch.randint(2, (1,), generator=self.gen))
        return a, 1 - a

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

    def _checked(self, x, mine=None, other=None):
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
            spliced = self._run(x2, other)
            logits = self._run(x, mine)
        else:
            logits = self._run(x, mine)
            spliced = self._run(x2, other)
        worst = 0.0
        tally = self.tally
        ce = torch.nn.functional.cross_entropy
        for r, t in live:
            moved = float((self._logp(spliced[r, :t]) - self._logp(logits[r, :t])).abs().max())
            if not (moved <= self.leak_tol):
                tally.max_leak = max(tally.max_leak, moved) if math.isfinite(moved) else moved
                self._fail("causality", f"replacing each row's future from a cut on with other validation text "
                                        f"moved log-probabilities before the cut by {moved:.3g} nats")
            worst = max(worst, moved)
            if t < T - 1:   # the donor's text after the cut, in the spliced row and in its own
                donor = (r + shift) % B
                target = x[donor, t:]
                tally.spliced_nats += float(ce(spliced[r, t - 1:T - 1].float(), target, reduction="sum"))
                tally.own_nats += float(ce(logits[donor, t - 1:T - 1].float(), target, reduction="sum"))
                tally.spliced_tokens += T - t
        if not (math.isfinite(tally.spliced_nats) and math.isfinite(tally.own_nats)):
            self._fail("finite", "the loss on the checked rows is not finite (a target token has probability 0)")
        tally.max_leak = max(tally.max_leak, worst)
        tally.checked_batches += 1
        tally.checked_rows += len(live)
        return logits

    def _noise(self, x, logits, other=None):
        """The graph's own run-to-run difference: the same batch again, compared as the leak is."""
        again = self._run(x.clone(), other)
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
        if not (t.splice_excess <= SPLICE_EXCESS_MAX):
            self._fail("causality", f"the spliced text after its cuts cost {t.splice_excess:.3g} nats a token more "
                                    f"than the same text in its own row (limit {SPLICE_EXCESS_MAX:g}, over "
                                    f"{t.spliced_tokens} tokens): the model predicts what the metric's rows hold, "
                                    "not the text it is given")
        self.finished = True

    def report(self):
        t = self.tally
        return {"checked_batches": t.checked_batches, "checked_rows": t.checked_rows,
                "batches": t.calls, "max_leak": _num(t.max_leak), "limit": _num(self.limit()),
                "noise": _num(t.noise), "noise_max": NOISE_MAX, "logp_floor": LOGP_FLOOR,
                "spliced_tokens": t.spliced_tokens, "spliced_nats": _num(t.spliced_nats),
                "own_nats": _num(t.own_nats), "splice_excess": _num(t.splice_excess),
                "splice_limit": SPLICE_EXCESS_MAX,
                "causal": self.failure is None and self.finished and t.checked_batches > 0,
                "failure": self.failure, "failure_kind": self.failure_kind}


# After the verdict is written nothing is left to do: leave without Python's shutdown, which with
# torch loaded costs ~0.6 s of CPU (module teardown, the libraries' destructors) per evaluation.
if __name__ == "__main__":
    main(sys.argv[1])
    sys.stderr.flush()
    os._exit(0)
