"""The seeds runs get (AUTORESEARCH_SEED), drawn so that train.py cannot tell which run it is in.

A seed is HMAC-SHA256(key, label) cut to 31 bits. The label says what the run is for (run r of
experiment n, the i-th re-measurement, a claim's run); the key is random, written once into the
run folder (KEY_FILE), which a sealed run never sees (harness/runner.py hides the run folder). So
a loop's run, a re-measurement and a claim draw from the same range and none of them can be
predicted: a recipe that trained well only on the loop's seeds (or badly only on the night end's)
has no way to know which it has. Counting seeds from fixed bases gave that away.

Every seed a run used is recorded with its evidence in the journal, and the key stays in the run
folder, so a run is reproduced by hand from either (`AUTORESEARCH_SEED=<seed> uv run train.py`).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

# The key's file in the run folder (hex; the run folder is hidden from every sealed run).
KEY_FILE = "seed-key"
KEY_BYTES = 16
# Seeds are 31-bit: every torch and numpy seed call takes them.
SEED_MASK = 0x7FFF_FFFF
# Labels of the draws that are not a loop's runs: re-measurements (remeasure.py, the benches) and
# claims (the night's end, `report --confirm`) take different streams, so a claim never replays a
# re-measurement's draw; the ablations (report --ablate) share one seed, so their runs are paired.
FRESH = "fresh"
CLAIM = "claim"
ABLATE = "ablate"


class SeedKeyError(ValueError):
    """A run folder's seed key that cannot be read as one."""


def key_of(run_dir: Path) -> bytes:
    """The run folder's seed key, made (random) the first time it is asked for."""
    path = Path(run_dir) / KEY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(KEY_BYTES) + "\n")
        try:
            os.link(tmp, path)   # published whole, or not at all: another process made it first
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    text = path.read_text().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise SeedKeyError(f"{path}: not a seed key ({KEY_BYTES * 2} hex digits); the run's seeds are "
                           f"recorded in its journal, so move the file aside only if nothing is to be resumed")
    return key


def set_key(run_dir: Path, key: bytes) -> None:
    """Fix a run folder's key before its night (the benches: a night of either rule on the same
    seed draws the same seeds; tests that need to know them)."""
    if len(key) != KEY_BYTES:
        raise SeedKeyError(f"a seed key is {KEY_BYTES} bytes, not {len(key)}")
    path = Path(run_dir) / KEY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(key.hex() + "\n")
    path.chmod(0o600)


def named_key(name: str) -> bytes:
    """A key anyone can derive from `name`: for benches and tests, never for a real night."""
    return hashlib.sha256(f"autoresearch seed key: {name}".encode()).digest()[:KEY_BYTES]


def draw(key: bytes, label: str) -> int:
    """The seed `label` gets under `key`."""
    digest = hmac.new(key, label.encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:4], "big") & SEED_MASK


def loop_seed(key: bytes, n: int, r: int) -> int | None:
    """AUTORESEARCH_SEED of run r (0 = the first) of experiment n; None: the baseline's first run
    keeps train.py's own SEED, so `uv run train.py` reproduces it."""
    if n == 1 and r == 0:
        return None
    return draw(key, f"run {n} {r}")


def loop_seeds(key: bytes, max_n: int, reruns: int, own_seed: int | None = None) -> set[int]:
    """Every seed a loop of `max_n` experiments of up to `reruns` + 1 runs can give, and train.py's SEED."""
    seeds = {loop_seed(key, n, r) for n in range(1, max_n + 1) for r in range(reruns + 1)}
    seeds.discard(None)
    if own_seed is not None:
        seeds.add(own_seed)
    return seeds


def one_off(used: set[int]) -> int:
    """A seed for a run no label names (a queue decision's re-measurement): random, none of `used`."""
    while (s := secrets.randbelow(SEED_MASK + 1)) in used:
        pass
    return s


def fresh(key: bytes, k: int, used: set[int], stream: str = FRESH) -> list[int]:
    """k seeds of `stream`, none of them in `used` (the same k for the same key and `used`)."""
    out, i = [], 0
    while len(out) < k:
        s = draw(key, f"{stream} {i}")
        if s not in used and s not in out:
            out.append(s)
        i += 1
    return out
