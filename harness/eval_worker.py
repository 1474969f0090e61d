"""The trusted evaluation, in a clean process: python -I eval_worker.py SPEC.json

It never executes code of the experiment. harness/verify.py copies three trusted files into a
fresh folder, this one, graph.py (harness/graph.py) and prepare.py as committed at the tag's base,
and runs this in a sandbox that sees that folder, the pinned evaluation inputs and the artifact:

1. the artifact is read with torch.load(weights_only=True): tensors, strings, numbers, nothing
   that runs; its "graph" is the model as recorded operators (runtime.py), checked and replayed
   by graph.py;
2. prepare.evaluate_bpb measures the graph on the pinned validation data (the fixed metric);
3. causality on the evaluation's own data: a quarter of the batches, and at least enough to hold
   CHECK_MIN_CUTS rows (which ones, the cut positions and the donor rows are drawn from a fresh
   secret seed), are run a second time with each row's future, from a random cut on, replaced by
   another row's real validation text at the same positions; a logit before a cut that changes
   beyond the graph's own run-to-run noise fails it. A model that peeks ahead at a fraction p of
   positions escapes n cuts with probability (1 - p)^n (docs/contracts.md has n per profile);
4. the serving figures (KV bytes and decode FLOPs per token) of the graph itself.

The verdict is one JSON line on this process's original stdout, a pipe the harness reads: the
file descriptor is set aside before anything else runs and fd 1 is pointed at stderr, so nothing
else can write to it. SPEC: {"dir", "artifact", "rows", "train_sha", "eval_tokens"}.
"""
import json
import os
import secrets
import sys
import time
import traceback

# The causality check runs this fraction of the evaluation's batches again (its cost: that much
# more evaluation), and never fewer than hold CHECK_MIN_CUTS rows (every batch when there are fewer).
CHECK_FRACTION = 0.25
CHECK_MIN_CUTS = 256
# A logit before a cut may move by this much relative to the logits' scale, or by the graph's own
# run-to-run difference on identical input, whichever is larger (fp32 CPU: exactly 0).
LEAK_RTOL = 1e-6
# ...and that run-to-run difference may itself be at most this (else the evaluation is not a
# measurement: nondeterministic kernels could hide a leak under their noise).
NOISE_RTOL = 1e-4


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
        checked = Checked(torch, model, secrets.randbits(63), steps)
        stage("evaluate")
        tokenizer = prepare.Tokenizer.from_directory()
        with torch.no_grad():
            out["trusted_bpb"] = float(prepare.evaluate_bpb(checked, tokenizer, rows))
        out["causality"] = checked.report()
        stage("serving")
        probe = torch.zeros(rows, T, dtype=torch.long, device=device)
        out["serving"] = G.serving_cost(model, probe)
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


class Checked:
    """The graph as the evaluation calls it, behind a copy of its input, with the splice check."""

    def __init__(self, torch, graph, seed, steps):
        self.torch, self.graph = torch, graph
        self.gen = torch.Generator().manual_seed(seed)
        want = min(steps, max(-(-steps // round(1 / CHECK_FRACTION)), -(-CHECK_MIN_CUTS // max(1, graph.rows))))
        self.chosen = set(torch.randperm(steps, generator=self.gen)[:want].tolist())
        self.calls = self.checked_batches = self.checked_rows = 0
        self.max_leak = self.scale = self.noise = 0.0
        self.failure = None

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

    def __call__(self, idx):
        x = idx.clone()
        logits = self.graph(x)
        if self.calls == 0:              # the graph's own run-to-run difference, on identical input
            again = self.graph(idx.clone())
            self.noise = float((again.float() - logits.float()).abs().max())
        if self.calls in self.chosen:
            self._check(x, logits)
        self.calls += 1
        if self.failure:
            raise RuntimeError(self.failure)
        return logits

    def _check(self, x, logits):
        torch = self.torch
        B, T = x.shape
        if B < 2 or T < 2:
            return
        cuts = torch.randint(1, T, (B,), generator=self.gen).tolist()
        shift = int(torch.randint(1, B, (1,), generator=self.gen))
        x2 = x.clone()
        live = []
        for r, t in enumerate(cuts):
            donor = (r + shift) % B
            if not torch.equal(x[r, t:], x[donor, t:]):   # identical futures tell nothing
                x2[r, t:] = x[donor, t:]
                live.append((r, t))
        if not live:
            return
        spliced = self.graph(x2).float()
        base = logits.float()
        self.scale = max(self.scale, float(base.abs().max()))
        worst = max(float((spliced[r, :t] - base[r, :t]).abs().max()) for r, t in live)
        self.max_leak = max(self.max_leak, worst)
        self.checked_batches += 1
        self.checked_rows += len(live)
        if self.noise > NOISE_RTOL * max(self.scale, 1.0):
            self.failure = (f"the graph is not deterministic: the same batch twice differs by {self.noise:.3g} "
                            f"(limit {NOISE_RTOL * max(self.scale, 1.0):.3g})")
        elif worst > self.limit():
            self.failure = (f"replacing each row's future from a cut on with other validation text moved "
                            f"logits before the cut by {worst:.3g} (limit {self.limit():.3g})")

    def limit(self):
        return max(LEAK_RTOL * max(self.scale, 1.0), self.noise)

    def report(self):
        return {"checked_batches": self.checked_batches, "checked_rows": self.checked_rows,
                "batches": self.calls, "max_leak": self.max_leak,
                "limit": self.limit(), "noise": self.noise, "scale": self.scale,
                "causal": self.failure is None and self.checked_batches > 0, "failure": self.failure}


# After the verdict is written nothing is left to do: leave without Python's shutdown, which with
# torch loaded costs ~0.6 s of CPU (module teardown, the libraries' destructors) per evaluation.
if __name__ == "__main__":
    main(sys.argv[1])
    sys.stderr.flush()
    os._exit(0)
