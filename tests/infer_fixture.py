"""A fake run folder for the inference tests: a git repo with train.py committed twice (two kept
experiments), a journal, random-weight artifacts and a byte-level pinned tokenizer. No training."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import torch

import train

REPO = Path(__file__).resolve().parent.parent
BYTE_VOCAB = 260  # 256 bytes + 4 specials: prepare's byte-level tokenizer


def tiny_config(n_layer=4, n_embd=64, head_dim=16, n_kv_head=2, pattern="SL", frac=0.25, seq_len=64,
                vocab=BYTE_VOCAB):
    return {"vocab_size": vocab, "sequence_len": seq_len, "n_layer": n_layer, "n_embd": n_embd,
            "n_head": n_embd // head_dim, "n_kv_head": n_kv_head, "head_dim": head_dim,
            "window_pattern": pattern, "short_window_frac": frac, "softcap": 15.0}


def random_model(cfg, seed=0, std=0.3):
    """build_model(cfg) with every weight random (the init zeroes projections: too easy a test)."""
    torch.manual_seed(seed)
    model = train.build_model(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, std)
    return model.eval()


def _git(cwd, *args):
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout.strip()


def make_run(tmp_path: Path, configs=None) -> tuple[Path, list[str]]:
    """Run folder with one kept commit per config (first = larger "target", last = smaller "draft")."""
    configs = configs or [tiny_config(), tiny_config(n_layer=2, n_embd=32, n_kv_head=1)]
    run = tmp_path / "run"
    run.mkdir()
    _git(run, "init", "-q")
    _git(run, "config", "user.email", "t@example.com")
    _git(run, "config", "user.name", "t")
    source = (REPO / "train.py").read_text()
    commits, records = [], []
    for n, cfg in enumerate(configs, start=1):
        (run / "train.py").write_text(source + f"\n# experiment {n}\n")
        _git(run, "add", "train.py")
        _git(run, "commit", "-q", "-m", f"exp {n}")
        commit = _git(run, "rev-parse", "HEAD")
        commits.append(commit)
        art = run / "artifacts" / f"exp-{n:04d}" / "model.pt"
        art.parent.mkdir(parents=True)
        torch.save({"config": cfg, "state_dict": random_model(cfg, seed=n).state_dict(), "train_py_sha": None}, art)
        records.append({"n": n, "commit": commit, "short": commit[:7], "status": "keep",
                        "description": f"model {n}", "trusted_bpb": 2.0 + n / 10})
    records.append({"kind": "audit", "note": "skipped by readers"})
    (run / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    tok = run / ".sealed" / "cache" / "tokenizer" / "byte"
    tok.mkdir(parents=True)
    (tok / "byte.json").write_text("{}")
    return run, commits


def one_thread():
    """Generator body for an autouse fixture: torch on one thread (2 threads on this shared 2-core
    box run tiny models ~10x slower under contention), restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
