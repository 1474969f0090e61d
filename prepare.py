"""
Fixed data preparation and the fixed metric for autoresearch. The research loop never edits this file.

    uv run prepare.py                        # ClimbMix shards from the HF hub; offline: stdlib fallback
    uv run prepare.py --source ~/my-texts    # any folder of .txt / .md / .jsonl / .parquet
    uv run prepare.py --offline              # skip the hub, use the offline fallback
    uv run prepare.py --source climbmix --num-shards 20   # insist on ClimbMix (error when offline)

train.py imports the runtime half: the profile constants, Tokenizer, make_dataloader,
evaluate_bpb, get_token_bytes, data_fingerprint, describe.

Cache layout ($AUTORESEARCH_CACHE, default ~/.cache/autoresearch). ClimbMix shards are shared by
profiles, our own shards are cut per profile (the data key ends in -d<DOC_CHARS>), tokenizers are
per data set and vocab size, and each profile has its own pointer, so a `tiny` test cache can
never shadow a real one:
    data/<data key>/shard_NNNNN.parquet   text shards; shard_06542.parquet is always validation
    data/<data key>/manifest.json         what our own shards were built from (local/offline)
    tokenizer/<data key>-bpe<V>/          tokenizer.pkl (or byte.json), token_bytes.pt, fingerprint.json
    prepared-<profile>.json               which data + tokenizer the profile uses
"""

import argparse
import bisect
import hashlib
import itertools
import json
import math
import os
import pickle
import re
import socket
import sys
import sysconfig
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import requests
import tiktoken
import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------
# Profiles (fixed). TIME_BUDGET is the same everywhere; the rest is sized per platform.
# ---------------------------------------------------------------------------

PROFILES = {
    # the reference values of karpathy/autoresearch (one H100-class GPU)
    "gpu": dict(max_seq_len=2048, eval_tokens=40 * 524288, vocab_size=8192, num_shards=10,
                tokenizer_chars=1_000_000_000, buffer_docs=1000, doc_chars=8000, val_buffer_docs=1000),
    # 2 CPU cores. Measured: a 5.2M-param GPT (d=256, 4 layers, V=4096, T=256) evaluates
    # ~7.3K tok/s on 2 busy cores, so 128K tokens cost ~18 s (~6% of 300 s), less for smaller models.
    "cpu": dict(max_seq_len=256, eval_tokens=128 * 1024, vocab_size=4096, num_shards=2,
                tokenizer_chars=200_000_000, buffer_docs=1000, doc_chars=900, val_buffer_docs=64),
    # tests and smoke runs only: everything in seconds
    "tiny": dict(max_seq_len=64, eval_tokens=8 * 1024, vocab_size=512, num_shards=1,
                 tokenizer_chars=5_000_000, buffer_docs=64, doc_chars=150, val_buffer_docs=64),
}


def _detect_profile():
    name = os.environ.get("AUTORESEARCH_PROFILE", "").strip().lower()
    if name and name not in PROFILES:
        raise ValueError(f"AUTORESEARCH_PROFILE={name!r}: expected one of {', '.join(PROFILES)}")
    return name or ("gpu" if torch.cuda.is_available() else "cpu")


PROFILE = _detect_profile()
TIME_BUDGET = float(os.environ.get("AUTORESEARCH_TIME_BUDGET", "300"))  # training seconds
MAX_SEQ_LEN = PROFILES[PROFILE]["max_seq_len"]          # context length of training and evaluation
EVAL_TOKENS = PROFILES[PROFILE]["eval_tokens"]          # validation tokens per evaluation
VOCAB_SIZE = PROFILES[PROFILE]["vocab_size"]            # BPE vocabulary, specials included
NUM_SHARDS = PROFILES[PROFILE]["num_shards"]            # default ClimbMix training shards to fetch
TOKENIZER_CHARS = PROFILES[PROFILE]["tokenizer_chars"]  # text the BPE is trained on, at most
BUFFER_DOCS = PROFILES[PROFILE]["buffer_docs"]          # documents the packer chooses from
DOC_CHARS = PROFILES[PROFILE]["doc_chars"]  # our own shards cut long texts (at line breaks) into documents
# of about one row (MAX_SEQ_LEN tokens at ~3.5 chars/token): longer ones would be cropped by the packer
CACHE_DIR = Path(os.environ.get("AUTORESEARCH_CACHE") or Path.home() / ".cache" / "autoresearch").expanduser()
# Set by the harness in loop mode: train.py runs in a sandbox without the validation data, trains,
# saves its model (AUTORESEARCH_ARTIFACT) and does not evaluate; the harness's trusted evaluator does.
SEALED = os.environ.get("AUTORESEARCH_SEALED", "") == "1"

# ClimbMix on the Hugging Face hub, as the reference. HF_ENDPOINT is the hub's own mirror variable.
HF_ENDPOINT = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
BASE_URL = f"{HF_ENDPOINT}/datasets/karpathy/climbmix-400b-shuffle/resolve/main"
MAX_SHARD = 6542                                  # the last shard is shard_06542.parquet
VAL_SHARD = MAX_SHARD                             # pinned validation shard
VAL_FILENAME = f"shard_{VAL_SHARD:05d}.parquet"   # our own data sets use the same name for validation
CONNECT_TIMEOUT = 5      # seconds; offline we want to know at once, not after a retry storm
READ_TIMEOUT = 60        # seconds without a byte before a download attempt is abandoned
DOWNLOAD_ATTEMPTS = 4    # per shard, backoff 2, 4, 8 s; only once the hub has answered the probe
DOWNLOAD_WORKERS = 4     # parallel shard downloads

# Our own shards, from --source PATH or the offline fallback.
SOURCE_EXTENSIONS = (".txt", ".md", ".jsonl", ".parquet")
VAL_PERCENT = 10         # documents whose hash falls in the first 10% are validation
ROWS_PER_GROUP = 1024    # parquet row group: the unit the dataloader reads
DOCS_PER_SHARD = 50_000  # documents per training shard
LOCAL_MAX_CHARS = 2_000_000_000  # local text is shuffled in memory; stop reading beyond this
OFFLINE_ROOTS = [Path(sysconfig.get_paths()["stdlib"])]  # the Python installation: sources + docs
OFFLINE_EXTENSIONS = (".py", ".rst", ".txt")
OFFLINE_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
# The offline fallback's validation documents come from the stdlib's own test suite, a folder no
# program needs at run time: the sandbox hides it (and every Python test suite) from train.py,
# which must read the rest of the standard library to run at all.
OFFLINE_VAL_DIR = "test"


def offline_val_dirs():
    return [r / OFFLINE_VAL_DIR for r in OFFLINE_ROOTS]

# Tokenizer: GPT-4 style split with \p{N}{1,2}, as the reference.
SPLIT_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
SPECIAL_TOKENS = [f"<|reserved_{i}|>" for i in range(4)]
BOS_TOKEN = "<|reserved_0|>"
TOKENIZE_BATCH = 128     # documents tokenized per dataloader refill
# The packer's buffer on validation. It shapes the metric (which documents share a row), so the gpu
# profile uses the reference's 1000 (its val_bpb is comparable with the reference's); cpu and tiny
# keep 64: their own val sets are small, and a bigger buffer would read (and evaluate) past their end.
VAL_BUFFER_DOCS = PROFILES[PROFILE]["val_buffer_docs"]
# Among equally long documents that fit, the gpu profile's packer takes the one read first, as the
# reference does; cpu and tiny keep taking the one read last (their recorded metric depends on it).
PACK_EARLIEST_OF_EQUALS = PROFILE == "gpu"
RUN_PREPARE = "uv run prepare.py"


class PrepareError(RuntimeError):
    """Data or tokenizer missing or unusable; the message says what to run."""


class DataWarning(UserWarning):
    """Something was skipped or repaired (corrupt shard, bad record); the run goes on."""


def _warn(msg):
    warnings.warn(msg, DataWarning, stacklevel=2)


def _loud(msg):
    bar = "!" * 78
    print(f"\n{bar}\n{msg}\n{bar}\n", flush=True)


def _not_ready(what):
    return PrepareError(f"{what} (profile {PROFILE}, cache {CACHE_DIR}). "
                        f"Prepare data and tokenizer first: `{RUN_PREPARE}`")


def _read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _write_json(path, obj):
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


def _pointer_path():
    return CACHE_DIR / f"prepared-{PROFILE}.json"


def _tokenizer_dir(data_key, kind):
    return CACHE_DIR / "tokenizer" / (f"{data_key}-bpe{VOCAB_SIZE}" if kind == "bpe" else f"{data_key}-byte")


# What this profile uses, as recorded by the last `uv run prepare.py` (defaults: ClimbMix + BPE).
_POINTER = _read_json(_pointer_path()) or {}
SOURCE = _POINTER.get("source")   # "climbmix" | "local:PATH" | "offline-fallback" | None
DATA_DIR = CACHE_DIR / _POINTER.get("data", "data/climbmix")
TOKENIZER_DIR = CACHE_DIR / _POINTER["tokenizer"] if "tokenizer" in _POINTER else _tokenizer_dir("climbmix", "bpe")

# ---------------------------------------------------------------------------
# Source (a): ClimbMix from the hub
# ---------------------------------------------------------------------------


def _hub_unreachable_reason():
    """One quick probe. None when the hub answers, else why not. No retries: offline fails fast."""
    host, found = urlparse(BASE_URL).hostname, {}

    def resolve():  # getaddrinfo ignores socket timeouts, so it gets a thread and a deadline
        try:
            found["ok"] = bool(socket.getaddrinfo(host, None))
        except OSError as e:
            found["error"] = e
    t = threading.Thread(target=resolve, daemon=True)
    t.start()
    t.join(CONNECT_TIMEOUT)
    if not found.get("ok"):
        return f"cannot resolve {host}: {found.get('error', 'timed out')}"
    try:  # a streamed GET, closed after the headers: what the downloads themselves will do
        with requests.get(f"{BASE_URL}/{VAL_FILENAME}", stream=True, timeout=(CONNECT_TIMEOUT, CONNECT_TIMEOUT)) as r:
            return f"HTTP {r.status_code} for {r.url}" if r.status_code >= 400 else None
    except requests.RequestException as e:
        return f"{type(e).__name__}: {e}"


def _parquet_ok(path):
    """Readable footer with a text column: catches partial and corrupt files cheaply."""
    try:
        return "text" in pq.ParquetFile(path).schema_arrow.names
    except Exception:
        return False


def _download_shard(index, data_dir):
    name = f"shard_{index:05d}.parquet"
    path, tmp = data_dir / name, data_dir / f"{name}.tmp"
    if path.exists():
        if _parquet_ok(path):
            return True
        _warn(f"{path} is corrupt or partial; re-fetching it")
        path.unlink()
    for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
        try:
            have = tmp.stat().st_size if tmp.exists() else 0   # resume a partial download
            headers = {"Range": f"bytes={have}-"} if have else {}
            with requests.get(f"{BASE_URL}/{name}", stream=True, headers=headers,
                              timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)) as r:
                if r.status_code == 416:      # our partial file is no prefix of theirs: start over
                    tmp.unlink()
                    raise OSError("range not satisfiable; restarting the download")
                if 400 <= r.status_code < 500 and r.status_code not in (408, 429):
                    print(f"  {name}: HTTP {r.status_code}; not retrying")  # no such shard, or no access
                    return False
                r.raise_for_status()
                with open(tmp, "ab" if r.status_code == 206 else "wb") as f:
                    for chunk in r.iter_content(chunk_size=1 << 20):
                        f.write(chunk)
            if not _parquet_ok(tmp):
                tmp.unlink()
                raise OSError("downloaded file is not a readable parquet shard")
            os.replace(tmp, path)
            print(f"  downloaded {name}")
            return True
        except (requests.RequestException, OSError) as e:
            print(f"  attempt {attempt}/{DOWNLOAD_ATTEMPTS} for {name} failed: {e}")
            if attempt < DOWNLOAD_ATTEMPTS:
                time.sleep(2 ** attempt)
    return False


def download_climbmix(num_shards, data_dir):
    """Training shards 0..num_shards-1 plus the pinned validation shard. True when usable."""
    data_dir.mkdir(parents=True, exist_ok=True)
    ids = list(range(min(num_shards, MAX_SHARD))) + [VAL_SHARD]
    print(f"Data: ClimbMix, {len(ids) - 1} training shards + validation shard into {data_dir}")
    with ThreadPoolExecutor(max(1, min(DOWNLOAD_WORKERS, len(ids)))) as pool:
        ok = dict(zip(ids, pool.map(lambda i: _download_shard(i, data_dir), ids)))
    n_train = sum(ok[i] for i in ids[:-1])
    if n_train < len(ids) - 1:
        _warn(f"only {n_train} of {len(ids) - 1} training shards could be fetched")
    return ok[VAL_SHARD] and n_train > 0

# ---------------------------------------------------------------------------
# Sources (b) and (c): a local folder, or the Python installation, written as our own shards
# ---------------------------------------------------------------------------


def _split_doc(text):
    """Cut text into documents of at most DOC_CHARS chars at line breaks (hard cuts for long lines)."""
    docs, cur = [], ""
    for line in text.splitlines(keepends=True):
        for piece in (line[i:i + DOC_CHARS] for i in range(0, len(line), DOC_CHARS)):
            if len(cur) + len(piece) > DOC_CHARS:
                docs.append(cur)
                cur = ""
            cur += piece
    docs.append(cur)
    return [d for d in docs if d.strip()]


def _texts_of(path):
    """The documents of one source file: whole text files, jsonl records, parquet rows."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        bad = 0
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line) if line.strip() else {}
                text = rec.get("text", rec.get("content")) if isinstance(rec, dict) else None
            except ValueError:
                text = None
            if isinstance(text, str):
                yield text
            elif line.strip():
                bad += 1
        if bad:
            _warn(f"{path}: skipped {bad} lines that are not JSON objects with a 'text' string")
    elif suffix == ".parquet":
        if not _parquet_ok(path):
            _warn(f"{path}: not a readable parquet file with a 'text' column; skipped")
            return
        for batch in pq.ParquetFile(path).iter_batches(columns=["text"]):
            yield from (t for t in batch.column(0).to_pylist() if isinstance(t, str))
    else:
        yield path.read_text(encoding="utf-8", errors="replace")


def _walk(root, extensions, skip_dirs=()):
    """Files under root with these extensions, sorted, skipping hidden and excluded folders."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in skip_dirs)
        out += [Path(dirpath) / f for f in filenames
                if f.lower().endswith(extensions) and not f.startswith(".")]
    return sorted(out)


def _signature(files):
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _doc_hash(text):
    return hashlib.blake2b(text.encode("utf-8", errors="replace"), digest_size=16).digest()


def _read_docs(files, docs, chars=0):
    """Documents of these files into `docs` (hash -> text); returns the chars read so far."""
    for f in files:
        for text in _texts_of(f):
            for doc in _split_doc(text):
                docs[_doc_hash(doc)] = doc
                chars += len(doc)
        if chars > LOCAL_MAX_CHARS:
            _warn(f"stopped reading after {chars:,} chars (LOCAL_MAX_CHARS); the rest is unused")
            break
    return chars


def _write_shards(files, data_dir, source, signature, val_files=None):
    """Read, cut, dedupe, split and shuffle (by hash) the documents; write the shards. The split:
    documents whose hash falls in the first VAL_PERCENT are validation, or, with `val_files`,
    exactly the documents of those files (and no training document equals one of them)."""
    docs = {}
    chars = _read_docs(files, docs)
    if val_files is None:
        keys = sorted(docs)  # hash order: a deterministic shuffle, independent of file order
        val = [k for k in keys if int.from_bytes(k[:4], "little") % 100 < VAL_PERCENT]
        train = [k for k in keys if int.from_bytes(k[:4], "little") % 100 >= VAL_PERCENT]
    else:
        held = {}
        _read_docs(val_files, held, chars)
        val = sorted(held)
        train = sorted(k for k in docs if k not in held)
        docs.update(held)
        keys = sorted(docs)
    if len(keys) < 2:
        raise PrepareError(f"{source}: {len(keys)} document(s) of text found; need at least 2")
    if not val:
        val.append(train.pop())
    if not train:
        train.append(val.pop())
    data_dir.mkdir(parents=True, exist_ok=True)
    for old in data_dir.glob("shard_*.parquet"):
        old.unlink()
    shards = [(f"shard_{i:05d}.parquet", train[s:s + DOCS_PER_SHARD])
              for i, s in enumerate(range(0, len(train), DOCS_PER_SHARD))] + [(VAL_FILENAME, val)]
    assert len(shards) - 1 <= VAL_SHARD, "too many training shards"
    for name, part in shards:
        tmp = data_dir / f"{name}.tmp"
        pq.write_table(pa.table({"text": [docs[k] for k in part]}), tmp, row_group_size=ROWS_PER_GROUP)
        os.replace(tmp, data_dir / name)
    manifest = {"source": source, "signature": signature, "files": len(files),
                "docs": {"train": len(train), "val": len(val)},
                "chars": {"train": sum(len(docs[k]) for k in train), "val": sum(len(docs[k]) for k in val)}}
    _write_json(data_dir / "manifest.json", manifest)
    print(f"Data: {len(files)} files -> {len(train):,} train + {len(val):,} val documents "
          f"({manifest['chars']['train']:,} + {manifest['chars']['val']:,} chars) in {data_dir}")
    return manifest


def _build(key, files, source, val_files=None):
    """Our own shards for these files, reused while the files are unchanged. Returns (dir, signature)."""
    data_dir, signature = CACHE_DIR / "data" / key, _signature(files + (val_files or []))
    manifest = _read_json(data_dir / "manifest.json") or {}
    if manifest.get("signature") == signature and _shards_ok(data_dir):
        print(f"Data: {source} already written to {data_dir}")
        return data_dir, signature
    if manifest.get("signature") == signature:
        _warn(f"shards in {data_dir} are missing, corrupt or partial; writing them again")
    _write_shards(files, data_dir, source, signature, val_files)
    return data_dir, signature


def build_local(path):
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise PrepareError(f"--source {path}: not a folder")
    files = _walk(root, SOURCE_EXTENSIONS)
    if not files:
        raise PrepareError(f"--source {root}: no .txt, .md, .jsonl or .parquet files in it "
                           f"(searched recursively); point --source at a folder of text")
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", root.name)[:40] or "root"
    key = f"local-{slug}-{hashlib.sha256(str(root).encode()).hexdigest()[:8]}-d{DOC_CHARS}"
    return (key, f"local:{root}") + _build(key, files, f"local:{root}")


def build_offline():
    files = [f for r in OFFLINE_ROOTS for f in _walk(r, OFFLINE_EXTENSIONS, OFFLINE_SKIP_DIRS)
             if not f.name.startswith("_sysconfigdata")]  # holds this machine's build paths
    val_files = [f for d in offline_val_dirs() if d.is_dir() for f in _walk(d, (".py",), {"__pycache__"})]
    if not files:
        raise PrepareError(f"offline fallback: no Python sources under {OFFLINE_ROOTS}; "
                           f"use `{RUN_PREPARE} --source PATH` with a folder of text")
    if not val_files:
        raise PrepareError(f"offline fallback: this Python has no test suite ({', '.join(map(str, offline_val_dirs()))}), "
                           f"the only stdlib text a sealed run cannot read; use `{RUN_PREPARE} --source PATH`")
    key = f"offline-tests-py{sys.version_info[0]}{sys.version_info[1]}-d{DOC_CHARS}"
    return (key, "offline-fallback") + _build(key, files, "offline-fallback", val_files)


def list_shards(split, data_dir=None):
    """Shard paths of a split: the pinned validation shard, or every other shard in order."""
    data_dir = Path(data_dir or DATA_DIR)
    if split == "val":
        files = [data_dir / VAL_FILENAME] if (data_dir / VAL_FILENAME).exists() else []
    else:
        files = sorted(p for p in data_dir.glob("shard_*.parquet") if p.name != VAL_FILENAME)
    if not files:
        raise _not_ready(f"no {split} data in {data_dir}")
    return files


def _shards_ok(data_dir):
    """Every shard readable, and for our own shards every one the manifest's documents fill (one
    deleted training shard of several must not pass for prepared data: prepare writes it again)."""
    try:
        shards = list_shards("val", data_dir) + list_shards("train", data_dir)
    except PrepareError:
        return False
    train_docs = ((_read_json(Path(data_dir) / "manifest.json") or {}).get("docs") or {}).get("train")
    if isinstance(train_docs, int) and train_docs > 0:
        wanted = {f"shard_{i:05d}.parquet" for i in range(math.ceil(train_docs / DOCS_PER_SHARD))}
        if not wanted <= {p.name for p in shards}:
            return False
    return all(_parquet_ok(p) for p in shards)


def _texts(path):
    pf = pq.ParquetFile(path)
    for rg in range(pf.num_row_groups):
        yield from pf.read_row_group(rg, columns=["text"]).column(0).to_pylist()

# ---------------------------------------------------------------------------
# Tokenizer: BPE (rustbpe -> tiktoken), or bytes as the fallback; same interface
# ---------------------------------------------------------------------------


class Tokenizer:
    """BPE (a tiktoken Encoding, enc) or byte-level (enc None: ids 0-255 are bytes, then specials)."""

    def __init__(self, enc=None):
        self.enc = enc
        self.kind = "bpe" if enc is not None else "byte"
        self.bos_token_id = enc.encode_single_token(BOS_TOKEN) if enc else 256 + SPECIAL_TOKENS.index(BOS_TOKEN)

    @classmethod
    def from_directory(cls, path=None):
        path = Path(path or TOKENIZER_DIR)
        if (path / "tokenizer.pkl").exists():
            with open(path / "tokenizer.pkl", "rb") as f:
                return cls(pickle.load(f))
        if (path / "byte.json").exists():
            return cls(None)
        raise _not_ready(f"no tokenizer in {path}")

    def get_vocab_size(self):
        return self.enc.n_vocab if self.enc else 256 + len(SPECIAL_TOKENS)

    def get_bos_token_id(self):
        return self.bos_token_id

    def encode(self, text, prepend=None, num_threads=8):
        if prepend is not None and not isinstance(prepend, int):
            raise TypeError(f"prepend must be an int token id, got {type(prepend)}")
        if isinstance(text, str):
            return self.encode([text], prepend, num_threads)[0]
        if not isinstance(text, list):
            raise ValueError(f"Invalid input type: {type(text)}")
        if self.enc:
            rows = self.enc.encode_ordinary_batch(text, num_threads=num_threads)
        else:
            rows = [list(t.encode("utf-8")) for t in text]
        if prepend is not None:
            rows = [[prepend] + row for row in rows]
        return rows

    def decode(self, ids):
        if self.enc:
            return self.enc.decode(ids)
        raw = b"".join(bytes([i]) if i < 256 else SPECIAL_TOKENS[i - 256].encode() for i in ids)
        return raw.decode("utf-8", errors="replace")

    def token_bytes(self):
        """Raw byte length of every id, 0 for specials: the denominator of bits per byte."""
        if not self.enc:
            return [1] * 256 + [0] * len(SPECIAL_TOKENS)
        specials = {self.enc.encode_single_token(s) for s in SPECIAL_TOKENS}
        return [0 if i in specials else len(self.enc.decode_single_token_bytes(i))
                for i in range(self.enc.n_vocab)]

    def digest(self):
        """Hash of what the tokenizer does: kind, split pattern, every token's bytes, specials."""
        h = hashlib.sha256(f"{self.kind}\0{getattr(self.enc, '_pat_str', '')}\0".encode())
        for i, n in enumerate(self.token_bytes()):
            h.update(self.enc.decode_single_token_bytes(i) if (self.enc and n) else f"<{i}:{n}>".encode())
        return h.hexdigest()


def _training_texts(data_dir, doc_cap=10_000):
    """Training-split text for the BPE, documents capped, TOKENIZER_CHARS at most."""
    total = 0
    for path in list_shards("train", data_dir):
        if not _parquet_ok(path):
            _warn(f"{path} is unreadable; the tokenizer is trained without it")
            continue
        for text in _texts(path):
            yield text[:doc_cap]
            total += min(len(text), doc_cap)
            if total >= TOKENIZER_CHARS:
                return


def _train_tokenizer(data_dir, tok_dir, kind):
    tok_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if kind == "bpe":
        import rustbpe
        bpe = rustbpe.Tokenizer()
        bpe.train_from_iterator(_training_texts(data_dir), VOCAB_SIZE - len(SPECIAL_TOKENS), pattern=SPLIT_PATTERN)
        ranks = {bytes(k): v for k, v in bpe.get_mergeable_ranks()}
        enc = tiktoken.Encoding(name=f"autoresearch-bpe{VOCAB_SIZE}", pat_str=bpe.get_pattern(), mergeable_ranks=ranks,
                                special_tokens={s: len(ranks) + i for i, s in enumerate(SPECIAL_TOKENS)})
        with open(tok_dir / "tokenizer.pkl.tmp", "wb") as f:
            pickle.dump(enc, f)
        os.replace(tok_dir / "tokenizer.pkl.tmp", tok_dir / "tokenizer.pkl")
    else:
        _write_json(tok_dir / "byte.json", {"kind": "byte", "specials": SPECIAL_TOKENS})
    tok = Tokenizer.from_directory(tok_dir)
    sample = "Hello world! Numbers: 123. Unicode: 你好 \n\tdef f(x): return x**2"
    assert tok.decode(tok.encode(sample)) == sample, "tokenizer round trip failed"
    torch.save(torch.tensor(tok.token_bytes(), dtype=torch.int32), tok_dir / "token_bytes.pt")
    print(f"Tokenizer: {tok.kind}, vocab {tok.get_vocab_size()}, trained in {time.time() - t0:.1f}s -> {tok_dir}")
    return tok


def _ensure_tokenizer(data_key, data_dir, signature, kind):
    """Train (or reuse) the tokenizer for this data; BPE failures fall back to bytes, loudly."""
    for k in ([kind, "byte"] if kind == "bpe" else [kind]):
        tok_dir = _tokenizer_dir(data_key, k)
        meta = _read_json(tok_dir / "meta.json") or {}
        if meta.get("data_signature") == signature and (tok_dir / "token_bytes.pt").exists():
            print(f"Tokenizer: {k} already trained at {tok_dir}")
            return tok_dir
        (tok_dir / "fingerprint.json").unlink(missing_ok=True)  # belongs to the tokenizer being replaced
        try:
            _train_tokenizer(data_dir, tok_dir, k)
        except Exception as e:  # rustbpe missing or failing must not leave the user without data
            if k == "byte":
                raise
            _loud(f"BPE TOKENIZER TRAINING FAILED ({type(e).__name__}: {e}).\n"
                  f"FALLING BACK TO THE BYTE-LEVEL TOKENIZER (vocab {256 + len(SPECIAL_TOKENS)}).")
            continue
        _write_json(tok_dir / "meta.json", {"kind": k, "data_signature": signature})
        return tok_dir


def get_token_bytes(device="cpu"):
    path = TOKENIZER_DIR / "token_bytes.pt"
    if not path.exists():
        raise _not_ready(f"no token_bytes.pt in {TOKENIZER_DIR}")
    return torch.load(path, map_location="cpu", weights_only=True).to(device=device, dtype=torch.long)

# ---------------------------------------------------------------------------
# Data fingerprint: hash(validation data + tokenizer), so runs on different data are never compared
# ---------------------------------------------------------------------------


def _ensure_fingerprint(data_dir, tok_dir, signature, sample_chars=20_000_000):
    saved = _read_json(tok_dir / "fingerprint.json") or {}
    if saved.get("data_signature") == signature and len(saved.get("fingerprint", "")) == 12:
        return saved
    tok, h = Tokenizer.from_directory(tok_dir), hashlib.sha256()
    val_docs = val_chars = sampled_chars = sampled_tokens = 0
    for text in _texts(data_dir / VAL_FILENAME):
        raw = text.encode("utf-8", errors="replace")
        h.update(len(raw).to_bytes(8, "little") + raw)
        val_docs, val_chars = val_docs + 1, val_chars + len(text)
        if sampled_chars < sample_chars:  # chars per token, measured on (up to) 20M chars
            sampled_chars, sampled_tokens = sampled_chars + len(text), sampled_tokens + len(tok.encode(text))
    h.update(tok.digest().encode())
    manifest = _read_json(data_dir / "manifest.json") or {}
    train_chars = manifest.get("chars", {}).get("train")
    per_token = sampled_chars / max(1, sampled_tokens)
    stats = {"val_docs": val_docs, "val_chars": val_chars, "val_tokens": round(val_chars / per_token),
             "train_docs": manifest.get("docs", {}).get("train") or sum(
                 pq.ParquetFile(p).metadata.num_rows for p in list_shards("train", data_dir)),
             "train_tokens": round(train_chars / per_token) if train_chars else None,
             "chars_per_token": round(per_token, 3)}
    info = {"fingerprint": h.hexdigest()[:12], "data_signature": signature, "stats": stats}
    _write_json(tok_dir / "fingerprint.json", info)
    return info


def data_fingerprint():
    info = _read_json(TOKENIZER_DIR / "fingerprint.json")
    if not info:
        raise _not_ready(f"no fingerprint.json in {TOKENIZER_DIR}")
    return info["fingerprint"]


def describe():
    try:
        fingerprint, vocab = data_fingerprint(), Tokenizer.from_directory().get_vocab_size()
    except PrepareError:
        fingerprint, vocab = None, VOCAB_SIZE
    return {"profile": PROFILE, "time_budget": TIME_BUDGET, "max_seq_len": MAX_SEQ_LEN,
            "eval_tokens": EVAL_TOKENS, "vocab_size": vocab, "source": SOURCE, "fingerprint": fingerprint,
            "paths": data_paths()}


def data_paths():
    """Where this profile's data lives (absolute): what a sandbox shows or hides, and the inputs
    the metric depends on (the harness pins those by content). "hide": the folders the validation
    documents were read from (a --source folder, the offline fallback's test suite)."""
    val = DATA_DIR / VAL_FILENAME
    if (SOURCE or "").startswith("local:"):
        hide = [SOURCE[len("local:"):]]
    elif SOURCE == "offline-fallback":
        hide = [str(d.resolve()) for d in offline_val_dirs() if d.is_dir()]
    else:
        hide = []
    return {"cache": str(CACHE_DIR.resolve()), "data": str(DATA_DIR.resolve()), "val": str(val.resolve()),
            "tokenizer": str(TOKENIZER_DIR.resolve()), "pointer": str(_pointer_path().resolve()), "hide": hide}

# ---------------------------------------------------------------------------
# Dataloader: BOS-aligned best-fit packing, resumable
# ---------------------------------------------------------------------------


def _default_device():
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    return torch.device("mps" if mps and mps.is_available() else "cpu")


class DataLoader:
    """
    Infinite iterator of (x, y, epoch), x and y int64 [B, T], y is x shifted by one.
    Every row starts with BOS and is filled completely (no padding): from a buffer of documents it
    takes the longest one that still fits; when none fits, it crops the shortest to fill the row.
    Deterministic; state_dict() is the exact position, and DataLoader(..., state=it) resumes there.
    On CUDA the batch is copied from pinned memory with non_blocking through two alternating
    slots, so a yielded batch stays valid until two more batches have been taken.
    """

    def __init__(self, tokenizer, B, T, split, device=None, state=None):
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        self.tokenizer, self.B, self.T, self.split = tokenizer, B, T, split
        self.files = list_shards(split)
        self.device = torch.device(device) if device is not None else _default_device()
        self.bos = tokenizer.get_bos_token_id()
        self._keys, self._docs, self._seq = [], [], 0          # buffer, sorted by (length, seq)
        self._epoch, self._file, self._rg, self._row = 1, 0, 0, 0  # stream position
        self._open_file, self._group, self._bad = None, None, set()
        self._slots, self._turn = [], 0
        self.buffer_docs = BUFFER_DOCS if split == "train" else VAL_BUFFER_DOCS
        if state is not None:
            self.load_state_dict(state)

    def __iter__(self):
        return self

    def __next__(self):
        rows = np.empty((self.B, self.T + 1), dtype=np.int64)
        for r in range(self.B):
            pos = 0
            while pos <= self.T:
                while len(self._docs) < self.buffer_docs:
                    self._refill()
                room = self.T + 1 - pos
                i = max(0, bisect.bisect_right(self._keys, (room, math.inf)) - 1)  # longest fitting, else shortest
                if PACK_EARLIEST_OF_EQUALS:
                    i = bisect.bisect_left(self._keys, (self._keys[i][0], -1))
                self._keys.pop(i)
                doc = self._docs.pop(i)[:room]
                rows[r, pos:pos + len(doc)] = doc
                pos += len(doc)
        x, y = self._to_device(torch.from_numpy(rows))
        return x, y, self._epoch

    def _refill(self):
        for ids in self.tokenizer.encode(self._next_texts(TOKENIZE_BATCH), prepend=self.bos):
            key = (len(ids), self._seq)
            self._seq += 1
            i = bisect.bisect_left(self._keys, key)
            self._keys.insert(i, key)
            self._docs.insert(i, np.asarray(ids, dtype=np.int64))

    def _next_texts(self, n):
        out, idle = [], 0
        while len(out) < n:
            if self._file >= len(self.files):
                self._file, self._epoch = 0, self._epoch + 1
            pf = self._parquet(self._file)
            if pf is None or self._rg >= pf.num_row_groups:
                self._file, self._rg, self._row, idle = self._file + 1, 0, 0, idle + 1
                if idle > len(self.files):  # a whole pass without one document
                    raise _not_ready(f"no readable {self.split} documents in {self.files[0].parent}")
                continue
            if self._group is None or self._group[0] != (self._file, self._rg):
                texts = pf.read_row_group(self._rg, columns=["text"]).column(0).to_pylist()
                self._group = ((self._file, self._rg), texts)
            texts = self._group[1]
            take = texts[self._row:self._row + n - len(out)]
            out += take
            idle = 0 if take else idle
            self._row += len(take)
            if self._row >= len(texts):
                self._rg, self._row = self._rg + 1, 0
        return out

    def _parquet(self, index):
        if self._open_file is None or self._open_file[0] != index:
            path = self.files[index]
            try:
                pf = pq.ParquetFile(path)
                if "text" not in pf.schema_arrow.names:
                    raise ValueError("no 'text' column")
            except Exception as e:
                if self.split == "val" and SEALED:
                    raise PrepareError("the validation data is sealed: in loop mode (AUTORESEARCH_SEALED=1) "
                                       "train.py must not evaluate; the harness evaluates the saved model") from e
                if self.split == "val":
                    raise PrepareError(f"validation shard {path} is unreadable ({e}); "
                                       f"re-create it with `{RUN_PREPARE}`") from e
                if path not in self._bad:
                    self._bad.add(path)
                    _warn(f"skipping unreadable shard {path}: {e}")
                return None
            self._open_file = (index, pf)
        return self._open_file[1]

    def _to_device(self, rows):
        if self.device.type != "cuda":
            x, y = rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
            return (x, y) if self.device.type == "cpu" else (x.to(self.device), y.to(self.device))
        if not self._slots:
            self._slots = [(torch.empty(2, self.B, self.T, dtype=torch.long, pin_memory=True),
                            torch.empty(2, self.B, self.T, dtype=torch.long, device=self.device),
                            torch.cuda.Event()) for _ in range(2)]
        host, dev, done = self._slots[self._turn]
        self._turn ^= 1
        done.synchronize()  # the previous copy out of this pinned buffer has finished
        host[0].copy_(rows[:, :-1])
        host[1].copy_(rows[:, 1:])
        dev.copy_(host, non_blocking=True)
        done.record()
        return dev[0], dev[1]

    def state_dict(self):
        return {"split": self.split, "files": [p.name for p in self.files], "epoch": self._epoch,
                "file": self._file, "row_group": self._rg, "row": self._row, "seq": self._seq,
                "keys": torch.tensor(self._keys, dtype=torch.long).reshape(-1, 2),
                "tokens": torch.from_numpy(np.concatenate(self._docs).astype(np.int32) if self._docs
                                           else np.zeros(0, dtype=np.int32))}

    def load_state_dict(self, state):
        if state["split"] != self.split or state["files"] != [p.name for p in self.files]:
            raise ValueError(f"dataloader state is for split {state['split']!r} over {len(state['files'])} shards, "
                             f"but the data now has {len(self.files)} {self.split} shards; re-run without state")
        self._epoch, self._file, self._rg, self._row, self._seq = (
            int(state[k]) for k in ("epoch", "file", "row_group", "row", "seq"))
        self._keys = [tuple(k) for k in state["keys"].tolist()]
        bounds = np.cumsum([0] + [k[0] for k in self._keys])
        tokens = state["tokens"].cpu().numpy().astype(np.int64)  # the state may have been loaded onto a GPU
        self._docs = [tokens[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        self._group = None


def make_dataloader(tokenizer, B, T, split, device=None, state=None):
    return DataLoader(tokenizer, B, T, split, device=device, state=state)

# ---------------------------------------------------------------------------
# Evaluation: the fixed metric
# ---------------------------------------------------------------------------


@torch.no_grad()
def evaluate_bpb(model, tokenizer, batch_size):
    """
    Bits per byte on the pinned validation data: a fixed, deterministic pass over EVAL_TOKENS at
    MAX_SEQ_LEN. The model only ever sees the inputs, model(x) -> logits [B, T, V]; the loss is
    computed here in float32. Targets that are special tokens (0 bytes) count in neither sum.
    """
    device = next(itertools.chain(model.parameters(), model.buffers()), torch.empty(0)).device
    token_bytes = get_token_bytes(device)
    loader = make_dataloader(tokenizer, batch_size, MAX_SEQ_LEN, "val", device=device)
    steps = max(1, EVAL_TOKENS // (batch_size * MAX_SEQ_LEN))
    acc = torch.float32 if device.type == "mps" else torch.float64  # mps has no float64
    was_training, total_nats, total_bytes = model.training, 0.0, 0
    model.eval()
    try:
        for _ in range(steps):
            x, y, epoch = next(loader)
            logits = model(x)
            if logits.shape[:2] != y.shape or logits.size(-1) < tokenizer.get_vocab_size():
                raise ValueError(f"model(x) must return logits [B, T, >={tokenizer.get_vocab_size()}], "
                                 f"got {tuple(logits.shape)}")
            nats = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1), reduction="none")
            nbytes = token_bytes[y.reshape(-1)]
            total_nats += (nats.to(acc) * (nbytes > 0)).sum().item()
            total_bytes += nbytes.sum().item()
    finally:
        model.train(was_training)
    if epoch > 1:
        _warn("the validation data is smaller than EVAL_TOKENS; the evaluation repeats documents")
    return total_nats / (math.log(2) * total_bytes)

# ---------------------------------------------------------------------------
# Preparation (CLI)
# ---------------------------------------------------------------------------


def _ready(pointer):
    data_dir, tok_dir = CACHE_DIR / pointer.get("data", "?"), CACHE_DIR / pointer.get("tokenizer", "?")
    return (_shards_ok(data_dir) and (tok_dir / "token_bytes.pt").exists()
            and bool(_read_json(tok_dir / "fingerprint.json")))


def prepare(source=None, num_shards=None, offline=False, tokenizer_kind=None):
    """Make data + tokenizer + fingerprint ready for this profile; idempotent. Returns the pointer."""
    global SOURCE, DATA_DIR, TOKENIZER_DIR
    pointer = _read_json(_pointer_path()) or {}
    if (source is None and pointer and _ready(pointer) and tokenizer_kind in (None, pointer.get("kind"))
            and not (pointer["source"] == "climbmix" and num_shards)):
        print(f"Already prepared for profile {PROFILE}: {pointer['source']} (nothing to do)")
        if pointer["source"] == "offline-fallback":
            _loud("NOTE: THIS PROFILE USES THE OFFLINE FALLBACK DATA (Python's standard library), NOT ClimbMix.\n"
                  f"To fetch ClimbMix once the hub is reachable: `{RUN_PREPARE} --source climbmix`")
    else:
        if source is None and pointer.get("source", "").startswith("local:"):
            source = pointer["source"][len("local:"):]  # repair the folder this profile was prepared from
        if source not in (None, "climbmix"):
            key, name, data_dir, signature = build_local(source)
        else:
            climbmix_dir, wanted = CACHE_DIR / "data" / "climbmix", num_shards or NUM_SHARDS
            if all(_parquet_ok(climbmix_dir / f"shard_{i:05d}.parquet") for i in [VAL_SHARD, *range(wanted)]):
                reason = None  # all there already: no need for the network
            else:
                reason = "--offline given" if offline else _hub_unreachable_reason()
                if reason is None and not download_climbmix(wanted, climbmix_dir):
                    reason = "download failed (see above)"
            if reason is None:
                key, name, data_dir, signature = "climbmix", "climbmix", climbmix_dir, "climbmix"
            elif source == "climbmix":
                raise PrepareError(f"ClimbMix is not reachable at {BASE_URL}: {reason}")
            else:
                _loud(f"CLIMBMIX IS NOT AVAILABLE ({reason}).\n"
                      f"USING THE OFFLINE FALLBACK: the Python standard library's sources and docs\n"
                      f"({', '.join(map(str, OFFLINE_ROOTS))}). Results are NOT comparable with ClimbMix runs.")
                key, name, data_dir, signature = build_offline()
        tok_dir = _ensure_tokenizer(key, data_dir, signature, tokenizer_kind or "bpe")
        info = _ensure_fingerprint(data_dir, tok_dir, signature)
        pointer = {"source": name, "data": str(data_dir.relative_to(CACHE_DIR)),
                   "tokenizer": str(tok_dir.relative_to(CACHE_DIR)), "kind": Tokenizer.from_directory(tok_dir).kind,
                   "fingerprint": info["fingerprint"], "stats": info["stats"], "prepared_at": time.time()}
        _write_json(_pointer_path(), pointer)
    SOURCE, DATA_DIR, TOKENIZER_DIR = pointer["source"], CACHE_DIR / pointer["data"], CACHE_DIR / pointer["tokenizer"]
    return pointer


def main(argv=None):
    parser = argparse.ArgumentParser(description="Prepare data and tokenizer for autoresearch (fixed).", allow_abbrev=False)
    parser.add_argument("--source", help="a folder of .txt/.md/.jsonl/.parquet, or 'climbmix' (default: "
                        "ClimbMix, falling back to the offline data when the hub is unreachable)")
    parser.add_argument("--num-shards", type=int, help=f"ClimbMix training shards (-1 = all; profile default {NUM_SHARDS})")
    parser.add_argument("--offline", action="store_true", help="skip the hub; use the offline fallback")
    parser.add_argument("--tokenizer", choices=["bpe", "byte"], help="tokenizer kind (default bpe)")
    args = parser.parse_args(argv)
    num_shards = MAX_SHARD if args.num_shards == -1 else args.num_shards
    t0 = time.time()
    print(f"profile: {PROFILE}  time_budget: {TIME_BUDGET:g}s  max_seq_len: {MAX_SEQ_LEN}  "
          f"eval_tokens: {EVAL_TOKENS}  vocab_size: {VOCAB_SIZE}\ncache: {CACHE_DIR}")
    try:
        pointer = prepare(args.source, num_shards, args.offline, args.tokenizer)
    except PrepareError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    s = pointer.get("stats", {})
    print(f"source: {pointer['source']}\ntokenizer: {pointer['kind']} ({TOKENIZER_DIR})\n"
          f"data: {s.get('train_docs')} train docs (~{s.get('train_tokens') or '?'} tokens), {s.get('val_docs')} val docs "
          f"(~{s.get('val_tokens')} tokens, {s.get('chars_per_token')} chars/token)\n"
          f"fingerprint: {pointer['fingerprint']}\nready in {time.time() - t0:.1f}s")
    if s.get("val_tokens") and s["val_tokens"] < EVAL_TOKENS:
        _warn(f"validation data (~{s['val_tokens']} tokens) is smaller than EVAL_TOKENS={EVAL_TOKENS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
