"""CPU seconds of one trusted evaluation (the replay behind the worker's checks, in-process), per
copy of the evaluator: what the replay's purity, bounds and finiteness checks cost.

    uv run scripts/bench_replay.py HARNESS_DIR [HARNESS_DIR ...]   (e.g. /path/to/main/harness harness)

Each HARNESS_DIR holds graph.py and eval_worker.py (and graph_ops.py where it has one). The
repository's train.py at the tiny profile's knob values, with random weights, is recorded once;
every copy replays it through its own Checked and prepare.evaluate_bpb three times (tiny profile,
one thread; the tiny data must be prepared). Prints CPU seconds (time.process_time, so other load
on the machine moves it little), the val_bpb and the check's figures.
"""
import importlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("AUTORESEARCH_PROFILE", "tiny")
os.environ["AUTORESEARCH_THREADS"] = "1"
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

import attention as attn  # noqa: E402
import prepare  # noqa: E402
import runtime  # noqa: E402
from search import knobs  # noqa: E402

REPEATS = 3


def evaluator(folder: str):
    """graph and eval_worker as the worker imports them: from the folder, as top-level modules."""
    sys.path.insert(0, folder)
    try:
        for name in ("graph_ops", "graph", "eval_worker"):
            sys.modules.pop(name, None)
        return importlib.import_module("graph"), importlib.import_module("eval_worker")
    finally:
        sys.path.remove(folder)


def main(folders) -> int:
    torch.set_num_threads(1)
    src = knobs.for_profile((REPO / "train.py").read_text(), "tiny")[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench_train.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location("bench_train", path)
        train = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(train)
    V, T = prepare.VOCAB_SIZE, prepare.MAX_SEQ_LEN
    torch.manual_seed(0)
    model = train.build_model(train.model_config(V, T)).eval()
    with torch.no_grad():       # off the initialisation (zero projections would hide attention)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    with attn.plain_aten():
        graph, consts = runtime.record_graph(model, torch.zeros(8, T, dtype=torch.long))
    text, weights = json.dumps(graph), {k: v.detach().clone() for k, v in model.state_dict().items()}
    tok = prepare.Tokenizer.from_directory()
    steps = max(1, prepare.EVAL_TOKENS // (8 * T))
    for folder in folders:
        G, W = evaluator(folder)
        seconds = []
        for _ in range(REPEATS):
            g = G.load(text, weights, consts, rows=8, seq_len=T, device="cpu")
            checked = W.Checked(torch, g, 7, steps)
            t0 = time.process_time()
            with torch.no_grad():
                bpb = prepare.evaluate_bpb(checked, tok, 8)
                if hasattr(checked, "finish"):
                    checked.finish()
            seconds.append(round(time.process_time() - t0, 2))
        r = checked.report()
        print(f"{folder}: cpu s {seconds}  val_bpb {bpb:.6f}  graph of {len(graph['nodes'])} nodes, "
              f"{checked.calls} metric batches  checked rows {r['checked_rows']}  max_leak {r['max_leak']}  "
              f"noise {r['noise']}  causal {r['causal']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or [str(REPO / "harness")]))
