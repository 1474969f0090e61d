"""The replay process holds nothing worth stealing: a graph that could read every byte of the
process it runs in finds no target, keeps nothing between calls (fork mode), never sees both
halves of a comparison (pair mode), and one that kills its process fails itself, not the evaluator.

The "graph that reads everything" is the real evaluator (eval_worker.py, replay.py, graph_ops.py,
prepare.py, copied as verify() copies them) with graph.py replaced by a spy: the real graph runs
and, on each call, the spy scans the writable memory of its own process (/proc/self/mem) for each
input row's bytes as int64, and reports the 8 bytes that follow every copy: where the data
loader's buffer is, the row is followed by its last target. That is more than any kernel read
out of bounds could reach. A positive control runs the same scan in a process that holds the
loader's batch, as the evaluator does, and finds the targets there.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.verify import judge_worker_output, source_sha
from tests.replay_fixtures import ROWS, Causal, save_artifact

HARNESS = Path(__file__).resolve().parent.parent / "harness"
ROOT = HARNESS.parent
# Calls the spy scans (each scan reads a few hundred MB): enough to cover metric, spliced and
# repeated calls without making the test slow.
SCANNED_CALLS = 4

SCAN = '''
import os


def _writable_memory():
    with open("/proc/self/maps") as f:
        regions = [line.split() for line in f]
    with open("/proc/self/mem", "rb", buffering=0) as mem:
        for r in regions:
            lo, hi = (int(v, 16) for v in r[0].split("-"))
            if not r[1].startswith("rw") or hi - lo > (1 << 29):
                continue
            try:
                mem.seek(lo)
                yield mem.read(hi - lo)
            except (OSError, OverflowError, ValueError):
                continue


def scan(rows):
    """For each row: the int64 values that follow each copy of it found in this process, at any
    8-byte alignment (tensors' storage is aligned). The row is matched from its second token on:
    the first, BOS, is in every row."""
    import numpy as np
    pats = [r[1:].numpy().astype("<i8") for r in rows]
    found = [[] for _ in pats]
    for chunk in _writable_memory():
        mem = np.frombuffer(chunk, dtype="<i8", count=len(chunk) // 8)
        for i, p in enumerate(pats):
            for at in np.flatnonzero(mem[:len(mem) - len(p)] == p[0])[:100_000]:
                if len(found[i]) < 50 and np.array_equal(mem[at:at + len(p)], p):
                    found[i].append(int(mem[at + len(p)]))
    return found
'''

SPY = '''
import json, os, sys
import real_graph as _real
from real_graph import *   # noqa: F401,F403  everything else as the real module has it
''' + SCAN + '''
CALLS = [0]
MODE = os.environ.get("SPY_MODE", "scan")


def take_budget():
    """One scan from the budget file (shared by every fork of the replay)."""
    path = os.environ["SPY_BUDGET_FILE"]
    fd = os.open(path, os.O_RDWR)
    try:
        import fcntl
        fcntl.flock(fd, fcntl.LOCK_EX)
        left = int(os.read(fd, 32) or b"0")
        if left <= 0:
            return False
        os.lseek(fd, 0, 0)
        os.ftruncate(fd, 0)
        os.write(fd, str(left - 1).encode())
        return True
    finally:
        os.close(fd)


class Graph(_real.Graph):
    def forward(self, tokens):
        CALLS[0] += 1
        if MODE == "kill" and CALLS[0] == 1:
            os.kill(os.getpid(), 11)
        out = super().forward(tokens)
        rep = {"pid": os.getpid(), "calls_here": CALLS[0], "tokens": tokens.tolist()}
        if MODE == "scan" and take_budget():
            rep["found"] = scan(tokens.cpu())
        print("SPY " + json.dumps(rep), file=sys.stderr, flush=True)
        return out


def load(text, weights, constants, *, rows, seq_len, device):
    return Graph(_real.parse(text, rows, seq_len), weights, constants, device)
'''


def evaluator_with_spy(tmp_path, model_path, mode="scan", replay="fork", budget=SCANNED_CALLS):
    """Run the real evaluator with the spy graph; (verdict, spy reports)."""
    folder = tmp_path / "eval"
    folder.mkdir()
    for name in ("eval_worker.py", "replay.py", "graph_ops.py", "graph_calls.py"):
        shutil.copy(HARNESS / name, folder / name)
    shutil.copy(HARNESS / "graph.py", folder / "real_graph.py")
    (folder / "graph.py").write_text(SPY)
    shutil.copy(ROOT / "prepare.py", folder / "prepare.py")
    spec = {"dir": str(folder), "artifact": str(model_path), "rows": ROWS,
            "train_sha": source_sha("# a train.py\n"), "eval_tokens": None}
    (folder / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "budget").write_text(str(budget))
    env = dict(os.environ, SPY_MODE=mode, SPY_BUDGET_FILE=str(tmp_path / "budget"), AUTORESEARCH_REPLAY=replay)
    proc = subprocess.run([sys.executable, "-I", str(folder / "eval_worker.py"), str(folder / "spec.json")],
                          capture_output=True, text=True, env=env, timeout=600)
    verdict = json.loads(proc.stdout.strip().splitlines()[-1])
    spies = [json.loads(line[4:]) for line in proc.stderr.splitlines() if line.startswith("SPY ")]
    return verdict, spies


def metric_batches():
    """The evaluation's batches as the evaluator's loader makes them: (x, last target per row)."""
    import prepare
    loader = prepare.make_dataloader(prepare.Tokenizer.from_directory(), ROWS, prepare.MAX_SEQ_LEN, "val",
                                     device="cpu")
    steps = max(1, prepare.EVAL_TOKENS // (ROWS * prepare.MAX_SEQ_LEN))
    out = []
    for _ in range(steps):
        x, y, _ = next(loader)
        out.append((x.clone(), y[:, -1].clone()))
    return out


def stolen(report, batches):
    """Rows whose last target the spy found right after a copy of the row, where the input
    itself holds something else there (the next row's first token)."""
    x = torch.tensor(report["tokens"])
    hits = []
    for bx, last in batches:
        if not torch.equal(bx, x):
            continue
        for r, after in enumerate(report["found"]):
            in_input = int(x[r + 1, 0]) if r + 1 < len(x) else None
            if int(last[r]) in after and int(last[r]) != in_input:
                hits.append(r)
    return hits


@pytest.fixture()
def honest_artifact(tiny_cache, tmp_path):
    import prepare
    return save_artifact(Causal(prepare.VOCAB_SIZE, prepare.MAX_SEQ_LEN), tmp_path, "honest")


def test_the_scan_finds_the_targets_where_the_data_lives(tiny_cache, tmp_path):
    """Positive control: in a process that holds the loader's batch (as the evaluator does), the
    same scan finds each row's last target right after the row."""
    script = tmp_path / "control.py"
    script.write_text(SCAN + f"""
import sys, json
sys.path.insert(0, {str(ROOT)!r})
import prepare
loader = prepare.make_dataloader(prepare.Tokenizer.from_directory(), {ROWS}, prepare.MAX_SEQ_LEN, "val", device="cpu")
x, y, _ = next(loader)
found = scan(x)
print(json.dumps(sum(int(y[r, -1]) in found[r] for r in range({ROWS}))))
""")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip().splitlines()[-1]) >= ROWS - 1


@pytest.mark.parametrize("replay", ["fork", "pair"])
def test_a_graph_reading_all_of_its_process_finds_no_target(honest_artifact, tmp_path, replay):
    verdict, spies = evaluator_with_spy(tmp_path, honest_artifact, replay=replay)
    assert verdict["ok"] is True, verdict.get("error")
    assert verdict["replay_mode"] == replay
    scanned = [s for s in spies if "found" in s]
    assert len(scanned) >= 3
    batches = metric_batches()
    # the scan did find the input itself (each row at least once): it looked where it should
    assert all(all(len(f) >= 1 for f in s["found"]) for s in scanned)
    assert [stolen(s, batches) for s in scanned] == [[] for _ in scanned]
    evaluator_pid = {s["pid"] for s in spies}
    assert os.getpid() not in evaluator_pid


def test_fork_mode_every_call_starts_clean(honest_artifact, tmp_path):
    """Each call runs in a fresh fork of a replay that never ran the graph: a counter the graph
    keeps in its own memory is 1 on every call, and no two calls share a process."""
    verdict, spies = evaluator_with_spy(tmp_path, honest_artifact, budget=0)
    assert verdict["ok"] is True, verdict.get("error")
    assert len(spies) >= 16 and {s["calls_here"] for s in spies} == {1}
    assert len({s["pid"] for s in spies}) == len(spies)


def test_pair_mode_never_shows_one_process_both_halves(honest_artifact, tmp_path):
    """Two replay processes; the two calls of each comparison (a batch and its spliced twin, a
    batch and its repeat) run in different ones."""
    verdict, spies = evaluator_with_spy(tmp_path, honest_artifact, replay="pair", budget=0)
    assert verdict["ok"] is True, verdict.get("error")
    assert len({s["pid"] for s in spies}) == 2
    batches = [bx for bx, _ in metric_batches()]
    twins = 0
    for bx in batches:
        metric = [s["pid"] for s in spies if torch.equal(torch.tensor(s["tokens"]), bx)]
        spliced = [s["pid"] for s in spies if not torch.equal(torch.tensor(s["tokens"]), bx)
                   and (torch.tensor(s["tokens"]) == bx).float().mean() > 0.5]
        if len(metric) == 2:           # the determinism check's repeat
            assert metric[0] != metric[1]
            twins += 1
        for pid in spliced:
            assert pid != metric[0]
            twins += 1
    assert twins >= 2


def test_a_graph_that_kills_its_replay_fails_itself(honest_artifact, tmp_path):
    """A graph that kills its process (here by SIGSEGV; a kernel's SIGFPE is the same) is a failure
    of the candidate, reported as an integrity failure, and the evaluator still answers."""
    verdict, _ = evaluator_with_spy(tmp_path, honest_artifact, mode="kill")
    assert verdict["ok"] is False
    assert verdict["causality"]["failure_kind"] == "replay"
    assert "SIGSEGV" in verdict["causality"]["failure"]
    v = judge_worker_output(verdict, None, 1.0, sealed=True)
    assert not v.ok and v.reason.startswith("integrity check failed") and "SIGSEGV" in v.reason
