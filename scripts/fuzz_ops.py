"""Fuzz every operator the trusted evaluator accepts, through the replay's own path.

    uv run scripts/fuzz_ops.py --cases N --seed S [--ops mm,index] [--only CASE] [--json]

Every overload harness/graph_ops.py accepts (accepted_overloads(): in-place forms included) gets
cases in turn. A case is a one-operator graph (plus the view nodes that make its operands) whose
arguments are adversarial: random shapes with 0 and 1 sizes, mismatched operands, mixed dtypes,
integer extremes and NaNs in the data, huge and zero strides, storage offsets, layouts made by
allowed view nodes (a slice with a step of 2**40 on a size-1 dimension, expand, transpose, select,
narrow...), index tensors out of range, huge ints and special floats. It is loaded and run by
harness/graph.py exactly as the evaluator does (load checks, check_call, the kernel, the output
checks) and must end in a clean refusal (an exception the replay raises: GraphError, or torch's
own error) or a correct result. Cases run in a worker subprocess, many per worker; a worker that
dies (SIGSEGV, SIGFPE, abort) or hangs costs only the case it was running, which is reported as a
failure (and run again alone, to tell its own crash from one an earlier case's damage caused), and
a fresh worker goes on with the next case. Figures: cases per overload, refused (and by whom),
correct, unverified, failures, seconds.

How a read outside the operands is detected, and how far that is sound:
- Guard pages: every operand's storage is a fresh mapping that ends (or, on alternate cases,
  starts) exactly at an inaccessible page, so a read just past the end (before the start) faults:
  a crash, a failure. The rest of the mapped page around the storage holds canary bytes.
- Canaries: each case runs twice on identical operands (same values, sizes, strides, offsets and
  alignment) that differ only in the canary bytes around their storages (0xFF: NaN or -1, then
  0x7F: a huge value); the two results must be identical to the bit. A kernel that reads any
  canary byte, and lets it reach its output, differs; so, most often, does one that returns
  memory nobody wrote (it holds whatever the previous allocations left).
- Reference: the same operator on canonical contiguous copies of the operands' logical values
  (extracted by numpy from the storage bytes and the view's metadata, not by a torch kernel) must
  agree: exactly for integers and booleans, within a tolerance for floats (sums in another order;
  compared where both are finite unless the data was finite and moderate). A kernel that read
  other elements of the storage, or another heap block, gets different values.
What it cannot see: a read whose value never reaches the output (both canaries give the same
comparison), a read far away that lands on memory holding the same values both times, reads of
the replay's own temporaries (only operand storages are guarded), a check that refuses a legal
call (that shows only as fewer correct results), and GPU kernels: the graphs are CPU graphs, so
the CUDA-only attention kernels and products end in NotImplementedError after check_call passed
them, and are covered only by check_call's own refusals.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import random
import resource
import selectors
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from harness import graph as G  # noqa: E402
from harness import graph_calls, graph_ops  # noqa: E402
from fuzz_cases import Case, build  # noqa: E402  (beside this file)

PAGE = mmap.PAGESIZE
CANARIES = (0xFF, 0x7F)          # NaN / -1, then a huge finite value: reading either shows
BATCH = 200                       # cases per worker before a fresh one (a leak stays bounded)
CASE_SECONDS = 60                 # a case running longer than this is a hang: a failure
COPY_LIMIT = 1 << 24              # elements of a result the fuzzer copies to compare (larger: unverified)
MEMORY = 6 << 30                  # address space a worker may add to what torch maps at import
# Operators whose kernel reads the operands' metadata, not their values (a reference on other strides
# is not the same call).
METADATA_OPS = {"_assert_tensor_metadata", "view.dtype", "view_copy.dtype"}
# Exceptions that are torch (or graph.py) refusing a call; any other type raised by the replay is a
# bug in its checks.
REFUSALS = (RuntimeError, IndexError, ValueError, TypeError, NotImplementedError, OverflowError)


# ---- memory with guard pages ----------------------------------------------------------------------

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def guarded_bytes(nbytes: int, at_end: bool, canary: int):
    """A uint8 tensor of exactly nbytes whose storage ends (at_end) or starts at an inaccessible page;
    the rest of its pages hold `canary`. The mapping lives as long as the tensor."""
    pages = -(-max(nbytes, 1) // PAGE)
    mm = mmap.mmap(-1, (pages + 2) * PAGE)
    mm.write(bytes([canary]) * ((pages + 2) * PAGE))
    addr = ctypes.addressof((ctypes.c_char * len(mm)).from_buffer(mm))
    for page in (0, pages + 1):
        if _LIBC.mprotect(addr + page * PAGE, PAGE, 0) != 0:
            raise OSError(ctypes.get_errno(), "mprotect")
    start = (pages + 1) * PAGE - nbytes if at_end else PAGE
    return torch.frombuffer(mm, dtype=torch.uint8, count=nbytes, offset=start) if nbytes else torch.empty(0, dtype=torch.uint8)


def values(spec: dict, numel: int) -> np.ndarray:
    """The operand's whole storage as numpy values (same for both runs: seeded by the spec)."""
    g = np.random.default_rng(spec["seed"])
    dt = getattr(torch, spec["dtype"])
    if spec.get("index"):
        lo, hi = spec["index"]
        v = g.integers(lo, max(hi, lo + 1), numel)
        bad = g.random(numel) < spec.get("bad", 0)
        v[bad] = g.choice([hi, hi + 3, -1, -hi - 1, 2 ** 40, -(2 ** 63)], bad.sum())
        return v.astype(np.int64 if dt == torch.int64 else np.int32)
    if dt == torch.bool:
        return g.random(numel) < 0.5
    if spec["tame"]:          # finite, moderate, no ties: a sum in another order stays close
        v = g.standard_normal(numel) if dt.is_floating_point else g.permutation(numel) % 100 - 50
        return v.astype({torch.float64: np.float64}.get(dt, np.float32) if dt.is_floating_point else np.int64)
    if dt.is_floating_point:
        v = g.standard_normal(numel) * g.choice([1.0, 1.0, 30.0])
        special = g.random(numel) < 0.06
        v[special] = g.choice([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 1e-30], special.sum())
        return v.astype(np.float32 if dt != torch.float64 else np.float64)
    info = torch.iinfo(dt)
    v = g.integers(max(info.min, -20), min(info.max, 20) + 1, numel)
    special = g.random(numel) < (0.5 if spec["heavy"] else 0.1)
    v[special] = g.choice([info.min, info.max, -1 if info.min < 0 else 1, 0], special.sum())
    return v.astype({torch.uint8: np.uint8, torch.int8: np.int8, torch.int16: np.int16, torch.int32: np.int32,
                     torch.int64: np.int64}[dt])


def materialise(spec: dict, at_end: bool, canary: int) -> torch.Tensor:
    """The operand: its values in a guarded storage, seen through its strides and offset."""
    dt = getattr(torch, spec["dtype"])
    size = torch.empty(0, dtype=dt).element_size()
    raw = guarded_bytes(-(-spec["numel"] * size // 8) * 8, at_end, canary)
    base = raw.view(dt)
    v = torch.from_numpy(values(spec, spec["numel"]))
    base[: spec["numel"]].copy_(v.to(dt))
    return base.as_strided(spec["shape"], spec["strides"], spec["offset"])


class TooBig(Exception):
    """A result too large to copy (an expanded view of 2**40 elements): its values go unchecked."""


def logical(t: torch.Tensor) -> torch.Tensor:
    """A canonical contiguous copy of t's values, read by numpy from the storage bytes and t's
    metadata (no torch kernel reads t)."""
    if t.numel() > COPY_LIMIT:
        raise TooBig(f"{t.numel()} elements")
    size = t.element_size()
    store = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).numpy()
    words = store[: len(store) // size * size].view(f"u{size}")
    strides = [0 if n == 1 else s * size for n, s in zip(t.shape, t.stride())]
    if t.numel() == 0:
        arr = np.zeros(t.shape, dtype=f"u{size}")
    else:
        arr = np.lib.stride_tricks.as_strided(words[t.storage_offset():], t.shape, strides)
    # a fresh C-order copy: numpy's ascontiguousarray keeps an array whose size-1 dims have other strides
    return torch.from_numpy(arr.copy(order="C")).view(t.dtype).reshape(t.shape).clone(memory_format=torch.contiguous_format)




# ---- one case -----------------------------------------------------------------------------------

def targets(ops: str | None):
    """The accepted overloads to fuzz, in a fixed order (--ops: base names to keep)."""
    keep = set(ops.split(",")) if ops else None
    return [(n, o, op) for n, o, op in graph_ops.accepted_overloads()
            if keep is None or graph_ops.base_name(n) in keep]


# Operators whose kernels trust relations between operands, sizes or indices get this many times
# the cases of the others (attention, where the attacks were found, the most).
WEIGHTS = {**{n: 3 for n in """addbmm addmm addmv baddbmm bmm dot linear matmul mm mv einsum convolution
              native_group_norm group_norm layer_norm native_layer_norm rms_norm _fused_rms_norm embedding index
              index_select gather scatter repeat_interleave repeat tile constant_pad_nd pad diag div topk cat""".split()},
           **{n: 8 for n in graph_ops.ATTENTION_OPS}}


def make_case(i: int, seed: int, ops) -> Case:
    order = [t for t in ops for _ in range(WEIGHTS.get(graph_ops.base_name(t[0]), 1))]
    random.Random(seed).shuffle(order)
    name, overload, op = order[i % len(order)]
    return build(Case(random.Random(seed * 1_000_003 + i), name, overload, op))


def run_graph(case: Case, canary: int):
    """Load and replay the case's graph as the evaluator does. (outcome, outputs, arguments): outcome
    "ran" with the target's outputs as canonical copies and its arguments as graph.py built them
    (before check_call), or "refused: ..." with the exception."""
    out = case.target
    nodes = [{"name": f"n{i}", "op": op, "args": a, "kwargs": k} for i, (op, a, k) in enumerate(case.nodes)]
    spec = {"format": G.GRAPH_FORMAT, "device": "cpu", "input": {"shape": [1, 1], "dtype": "int64"}, "nodes": nodes,
            "output": {"ref": f"n{out}", "index": 0} if multi(case.op) else {"ref": f"n{out}"}}
    seen = {}
    real = graph_calls.check_call

    def check_call(node, op, args, kwargs):
        if node["name"] == f"n{out}":        # the values before the kernel runs (an in-place op changes them)
            seen["args"] = (canon(list(args)), {k: canon(v) for k, v in kwargs.items()})
        return real(node, op, args, kwargs)

    consts = {k: materialise(s, case.at_end, canary) for k, s in case.specs.items()}
    graph_calls.check_call = check_call
    try:
        g = G.load(json.dumps(spec), {}, consts, rows=1, seq_len=1, device="cpu")
        g.ops[out] = Capture(g.ops[out], seen)
        with torch.no_grad():
            g(torch.zeros(1, 1, dtype=torch.long))
    except Exception as e:  # noqa: BLE001 - every exception is classified below
        if "result" not in seen or not all(graph_ops.within_storage(t) for t in graph_ops.tensors_in(seen["result"])):
            return refusal(e), None, None
    finally:
        graph_calls.check_call = real
    return "ran", [logical(t) for t in graph_ops.tensors_in(seen["result"])], seen["args"]


class Capture:
    """The target operator as graph.py calls it, keeping what it returns."""

    def __init__(self, op, seen):
        self.op, self._schema, self.seen = op, op._schema, seen

    def __call__(self, *args, **kwargs):
        self.seen["result"] = self.op(*args, **kwargs)
        return self.seen["result"]


def multi(op) -> bool:
    return len(op._schema.returns) > 1 or "List" in str(op._schema.returns[0].real_type) if op._schema.returns else False


def refusal(e: Exception) -> str:
    if isinstance(e, graph_ops.PreconditionError):
        return f"refused: check_call: {str(e)[:160]}"
    if isinstance(e, graph_ops.GraphError):
        return f"refused: GraphError: {str(e)[:160]}"
    if isinstance(e, REFUSALS):
        return f"refused: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    tb = traceback.extract_tb(e.__traceback__)[-1]
    return f"harness error: {type(e).__name__} at {Path(tb.filename).name}:{tb.lineno}: {e}"


def canon(v):
    """Tensors (in lists too) replaced by canonical contiguous copies of their values."""
    if isinstance(v, torch.Tensor):
        return logical(v)
    if isinstance(v, (list, tuple)):
        return [canon(x) for x in v]
    return v


def reference(case: Case, args, kwargs):
    """The operator on canonical contiguous copies of the same logical values (what it should give)."""
    with torch.no_grad():
        result = case.op(*args, **kwargs)
    return [logical(t) for t in graph_ops.tensors_in(result)]


def same_bits(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and x.dtype == y.dtype and
                                    torch.equal(x.view(torch.uint8) if x.dim() else x.reshape(1).view(torch.uint8),
                                                y.view(torch.uint8) if y.dim() else y.reshape(1).view(torch.uint8))
                                    for x, y in zip(a, b))


def close(case: Case, got: list, want: list, scale: float) -> str | None:
    """Why got differs from the reference, or None. Floats within a tolerance of the dtype and of the
    inputs' magnitude (sums in another order), compared where both are finite unless the data was tame."""
    if len(got) != len(want):
        return f"{len(got)} outputs, the reference {len(want)}"
    if case.base == "topk" and literal(case, "sorted") is False:      # any order: compare sorted
        got, want = [got[0].sort(-1).values], [want[0].sort(-1).values]
    for i, (x, y) in enumerate(zip(got, want)):
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"output {i}: {x.dtype} {tuple(x.shape)}, the reference {y.dtype} {tuple(y.shape)}"
        if not x.dtype.is_floating_point:
            if not torch.equal(x, y):
                return f"output {i} differs from the reference"
            continue
        x, y = x.double(), y.double()
        tol = 5e-2 if got[i].dtype in (torch.bfloat16, torch.float16) else 1e-4
        both = torch.isfinite(x) & torch.isfinite(y)
        if all(s["tame"] for s in case.specs.values()) and not torch.equal(torch.isfinite(x), torch.isfinite(y)):
            return f"output {i}: finite in one, not in the other"
        if not torch.allclose(x[both], y[both], rtol=tol, atol=tol * max(1.0, scale)):
            return f"output {i}: max difference {(x[both] - y[both]).abs().max().item():.3g}"
    return None


def literal(case: Case, name: str):
    """The target node's argument `name`, positional or by name (None where left at its default)."""
    names = [a.name for a in case.op._schema.arguments]
    _, args, kwargs = case.nodes[case.target]
    i = names.index(name) if name in names else len(args)
    return args[i] if i < len(args) else kwargs.get(name)


def magnitude(args) -> float:
    vals = [logical(t).double().abs() for t in graph_ops.tensors_in(list(args)) if t.numel() and t.dtype.is_floating_point]
    finite = [v[torch.isfinite(v)] for v in vals]
    return max([float(v.max()) for v in finite if v.numel()] + [1.0])


def judge(case: Case) -> tuple[str, str]:
    """(kind, detail): kind "refused", "correct", "failure", or "unverified" (a result too large to copy,
    or one the same call on canonical copies refuses: torch treats some layouts differently)."""
    try:
        return _judge(case)
    except TooBig as e:
        return "unverified", f"a result or operand of {e}"


def _judge(case: Case) -> tuple[str, str]:
    first, out0, args = run_graph(case, CANARIES[0])
    second, out1, _ = run_graph(case, CANARIES[1])
    if first.startswith("harness error") or second.startswith("harness error"):
        return "failure", first if first.startswith("harness") else second
    if first != "ran" or second != "ran":
        if (first == "ran") != (second == "ran"):
            return "failure", f"refused in one canary run only: {first} / {second}"
        return "refused", first
    if not same_bits(out0, out1):
        return "failure", "the result depends on the bytes around the operands (a read outside them) or on memory nobody wrote"
    if case.base in METADATA_OPS or f"{case.base}.{case.overload}" in METADATA_OPS:
        return "correct", "its result depends on the operands' strides: checked by the canaries only"
    try:
        want = reference(case, *args)
    except Exception as e:  # noqa: BLE001 - torch itself treats some layouts differently (linear, 1-D weight)
        return "unverified", f"the call on canonical copies raised {type(e).__name__}: {str(e)[:120]}"
    why = close(case, out0, want, magnitude(list(args[0]) + list(args[1].values())))
    return ("failure", why) if why else ("correct", "")


# ---- workers and the sweep ----------------------------------------------------------------------

def worker(seed: int, cases: list[int], ops: str | None, threads: int) -> None:
    """Run the cases in order: "S i" before each, then "R" and its verdict as JSON (parent reads)."""
    torch.set_num_threads(threads)
    soft = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024 + MEMORY
    resource.setrlimit(resource.RLIMIT_AS, (soft, resource.getrlimit(resource.RLIMIT_AS)[1]))
    chosen = targets(ops)
    for i in cases:
        print(f"S {i}", flush=True)
        try:
            case = make_case(i, seed, chosen)
            kind, detail = judge(case)
            op = f"{case.name}.{case.overload}"
        except Exception as e:  # noqa: BLE001 - a fuzzer bug is reported, not hidden
            kind, detail, op = "failure", f"fuzzer error {type(e).__name__}: {e}", "?"
        print("R " + json.dumps({"case": i, "op": op, "kind": kind, "detail": detail}), flush=True)


def run_batch(args, cases: list[int]) -> dict[int, dict]:
    """The verdicts of `cases`, in fresh worker processes: a worker that dies or hangs costs the case
    it was running (a failure, re-run alone to tell a crash of its own from one an earlier case caused)."""
    done: dict[int, dict] = {}
    todo = list(cases)
    while todo:
        cmd = [sys.executable, __file__, "--worker", "--seed", str(args.seed), "--threads", str(args.threads),
               "--list", ",".join(map(str, todo))] + (["--ops", args.ops] if args.ops else [])
        errors = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, text=True)
        current, started, hung = None, False, False
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            if not sel.select(CASE_SECONDS):
                hung = True
                proc.kill()
                break
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("S "):
                current, started = int(line[2:]), True
            elif line.startswith("R "):
                v = json.loads(line[2:])
                done[v["case"]] = v
                current = None
        proc.wait()
        if not started:                     # the worker never began a case: the fuzzer itself is broken
            errors.seek(0)
            raise RuntimeError(f"a fuzz worker died before its first case (exit {proc.returncode}):\n{errors.read()[-3000:]}")
        if current is not None:
            how = f"hang (no verdict in {CASE_SECONDS} s)" if hung else f"crash (exit {proc.returncode})"
            if len(todo) > 1 and todo[0] != current:
                alone = run_batch(args, [current])[current]
                if alone["kind"] != "failure":
                    how += f"; alone it was {alone['kind']}: an earlier case of its worker may have caused it"
            done[current] = {"case": current, "op": op_name(args, current), "kind": "failure", "detail": how}
        todo = [i for i in todo if i not in done]
    return done


def op_name(args, i: int) -> str:
    try:
        case = make_case(i, args.seed, targets(args.ops))
        return f"{case.name}.{case.overload}"
    except Exception:  # noqa: BLE001
        return "?"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ops", help="comma-separated base names (default: every accepted operator)")
    p.add_argument("--only", type=int, help="run this one case in-process and print it")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    p.add_argument("--verbose", action="store_true", help="the commonest refusals of each overload")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--list", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.seed, [int(x) for x in args.list.split(",")], args.ops, args.threads)
        return 0
    if args.only is not None:
        case = make_case(args.only, args.seed, targets(args.ops))
        print(json.dumps({"nodes": case.nodes, "specs": case.specs}, default=str, indent=1))
        print(judge(case))
        return 0
    t0 = time.time()
    verdicts: dict[int, dict] = {}
    for start in range(0, args.cases, BATCH):
        verdicts.update(run_batch(args, list(range(start, min(start + BATCH, args.cases)))))
    return report(args, verdicts, time.time() - t0)


def report(args, verdicts: dict, seconds: float) -> int:
    per = defaultdict(Counter)
    for v in verdicts.values():
        per[v["op"]][v["kind"]] += 1
    kinds = Counter(v["kind"] for v in verdicts.values())
    n_ops = len(targets(args.ops))
    print(f"{'overload':48} cases refused correct failures")
    for op in sorted(per):
        c = per[op]
        print(f"{op:48} {sum(c.values()):5} {c['refused']:7} {c['correct']:7} {c['failure']:8}"
              + (f"  ({c['unverified']} unverified)" if c["unverified"] else ""))
    by = Counter(v["detail"].split(":")[1].strip() for v in verdicts.values() if v["kind"] == "refused")
    print("refused by: " + ", ".join(f"{k} {n}" for k, n in by.most_common()))
    if args.verbose:
        for op in sorted(per):
            reasons = Counter(v["detail"][:150] for v in verdicts.values() if v["op"] == op and v["kind"] == "refused")
            print(f"  {op}: " + " | ".join(f"{n}x {r}" for r, n in reasons.most_common(3)))
    failures = sorted((v for v in verdicts.values() if v["kind"] == "failure"), key=lambda v: v["case"])
    for v in failures:
        print(f"FAILURE case {v['case']} {v['op']}: {v['detail']}  (rerun: --seed {args.seed} --only {v['case']})")
    figures = {"cases": len(verdicts), "overloads": n_ops, "overloads_run": len(per),
               "overloads_correct": sum(1 for c in per.values() if c["correct"]), "refused": kinds["refused"],
               "correct": kinds["correct"], "unverified": kinds["unverified"], "failures": kinds["failure"],
               "seconds": round(seconds, 1),
               "seed": args.seed}
    print(f"{figures['cases']} cases over {figures['overloads_run']} of {n_ops} accepted overloads "
          f"({figures['overloads_correct']} with a correct result): {figures['refused']} refused, "
          f"{figures['correct']} correct, {figures['unverified']} unverified, {figures['failures']} failures, "
          f"{figures['seconds']} s")
    if args.json:
        print(json.dumps(figures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
