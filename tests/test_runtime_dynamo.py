"""runtime.defer_dynamo_import(): torch.optim's not-to-be-compiled marks and step() wrappers
import torch._dynamo (seconds) on their first call; the deferral makes them plain calls until
something imports torch._dynamo, with the same numbers, and torch's own behaviour after."""

import json
import re
import subprocess
import sys
from pathlib import Path

from search import knobs
from harness.job import FIXED_SOURCES

REPO = Path(__file__).resolve().parent.parent

# Two optimizers through every marked method (add_param_group in __init__, zero_grad, step,
# state_dict, load_state_dict), then torch._dynamo imported and three more steps.
SCRIPT = r"""
import json, sys
import torch
sys.path.insert(0, sys.argv[2])
import runtime
if sys.argv[1] == "defer":
    runtime.defer_dynamo_import()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opts = [torch.optim.AdamW(model[0].parameters(), lr=1e-2), torch.optim.SGD(model[2].parameters(), lr=1e-2, momentum=0.9)]
x, y = torch.randn(32, 8), torch.randn(32, 1)
out = {}

def steps(n):
    for _ in range(n):
        for o in opts:
            o.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        for o in opts:
            o.step()
    opts[0].load_state_dict(opts[0].state_dict())

steps(3)
out["dynamo_before"] = "torch._dynamo" in sys.modules
out["grad_enabled"] = torch.is_grad_enabled()
import torch._dynamo
steps(3)
mark = getattr(torch.optim.Optimizer.zero_grad.__wrapped__, "__dynamo_disable", None)
out["real_disable_after"] = bool(getattr(mark, "_torchdynamo_disable", False))
out["params"] = [p.detach().flatten().tolist() for p in model.parameters()]
print(json.dumps(out))
"""


def run(mode):
    p = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(REPO)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_optimizers_run_without_dynamo_and_give_the_same_numbers():
    plain, deferred = run("plain"), run("defer")
    assert plain["dynamo_before"] is True, "torch.optim imports torch._dynamo on its own (else this test tests nothing)"
    assert deferred["dynamo_before"] is False
    assert deferred["grad_enabled"] is True, "step() restores grad mode"
    assert deferred["params"] == plain["params"], "bit for bit the same steps"
    # once dynamo is in, the marks are torch's own disable again
    assert deferred["real_disable_after"] is True and plain["real_disable_after"] is True


def test_a_tiny_training_never_imports_dynamo(tiny_cache, tmp_path):
    for f in FIXED_SOURCES:
        (tmp_path / f).write_text((REPO / f).read_text())
    source = knobs.set_knobs(knobs.for_profile((REPO / "train.py").read_text(), "tiny")[0], {
        "DEPTH": 2, "DEVICE_BATCH_SIZE": 4, "TOTAL_BATCH_SIZE": 256, "STARTUP_STEPS": 1})
    (tmp_path / "train.py").write_text(source)
    # sealed, as the loop runs it: the model is saved as data (runtime.save_model's recorder is a
    # TorchDispatchMode, whose __torch_dispatch__ torch marks too)
    env = dict(tiny_cache, AUTORESEARCH_STEPS="2", AUTORESEARCH_SEALED="1",
               AUTORESEARCH_ARTIFACT=str(tmp_path / "model.pt"), AUTORESEARCH_KNOBS_AS_WRITTEN="1")
    p = subprocess.run([sys.executable, "-X", "importtime", "train.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert re.search(r"^val_bpb:\s+sealed$", p.stdout, re.M) and (tmp_path / "model.pt").stat().st_size > 0
    imported = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" in imported and "torch.optim" in imported
    assert "torch._dynamo" not in imported, "a run that compiles nothing imported torch._dynamo"
