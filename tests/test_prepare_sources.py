"""prepare.py's CLI and data sources: local folders, the offline fallback, the hub (a local stand-in).

Every test runs `prepare.main([...])` in-process against its own empty cache (fixture `fresh`).
"""

import http.server
import json
import math
import socket
import sys
import sysconfig
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_prepare import UniformModel

STDLIB = Path(sysconfig.get_paths()["stdlib"])
# the small corpora here have less validation text than EVAL_TOKENS, which prepare.py rightly says
pytestmark = pytest.mark.filterwarnings("ignore:.*smaller than EVAL_TOKENS")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """The in-process prepare module pointed at an empty cache; restored afterwards."""
    import prepare
    assert prepare.PROFILE == "tiny"
    cache = tmp_path / "cache"
    for name, value in {"CACHE_DIR": cache, "DATA_DIR": cache / "data" / "climbmix",
                        "TOKENIZER_DIR": cache / "tokenizer" / "none", "SOURCE": None}.items():
        monkeypatch.setattr(prepare, name, value)
    return prepare


def small_corpus(folder, modules=("textwrap.py", "heapq.py", "bisect.py")):
    folder.mkdir(parents=True, exist_ok=True)
    for m in modules:
        (folder / f"{m}.txt").write_text((STDLIB / m).read_text())
    return folder


def shard_texts(data_dir):
    return [t for p in sorted(data_dir.glob("shard_*.parquet")) for t in pq.read_table(p)["text"].to_pylist()]


def test_empty_or_missing_source_folder_is_a_clear_error(fresh, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert fresh.main(["--source", str(tmp_path / "empty")]) == 1
    err = capsys.readouterr().err
    assert "no .txt, .md, .jsonl or .parquet files" in err and str(tmp_path / "empty") in err
    assert fresh.main(["--source", str(tmp_path / "nope")]) == 1
    assert "not a folder" in capsys.readouterr().err
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "a.txt").write_text("   \n\n")
    assert fresh.main(["--source", str(tmp_path / "blank")]) == 1
    assert "0 document(s) of text found" in capsys.readouterr().err
    assert not (fresh.CACHE_DIR / "prepared-tiny.json").exists()


def test_local_folder_formats(fresh, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / ".hidden").mkdir()
    (src / "a.md").write_text("# Title\n\nSome markdown prose.\n")
    (src / "b.txt").write_text("a plain text file\n")
    (src / "sub" / "c.jsonl").write_text('{"text": "jsonl one"}\n{"text": "jsonl two"}\nnot json\n[1, 2]\n'
                                          '{"content": "jsonl three"}\n\n')
    pq.write_table(pa.table({"text": ["parquet one", "parquet two"], "id": [1, 2]}), src / "d.parquet")
    (src / "broken.parquet").write_bytes(b"PAR1 truncated")
    (src / ".hidden" / "e.txt").write_text("hidden text")
    (src / "f.py").write_text("python is not a --source format")
    with pytest.warns(fresh.DataWarning) as caught:
        assert fresh.main(["--source", str(src)]) == 0
    messages = " | ".join(str(w.message) for w in caught)
    assert "skipped 2 lines" in messages and "broken.parquet" in messages
    assert sorted(shard_texts(fresh.DATA_DIR)) == sorted([
        "# Title\n\nSome markdown prose.\n", "a plain text file\n", "jsonl one", "jsonl two", "jsonl three",
        "parquet one", "parquet two"])
    manifest = json.loads((fresh.DATA_DIR / "manifest.json").read_text())
    assert manifest["files"] == 5 and manifest["docs"]["val"] >= 1 and manifest["docs"]["train"] >= 1
    assert fresh.SOURCE == f"local:{src.resolve()}"


def test_split_is_deterministic_and_long_texts_are_cut(fresh, tmp_path):
    corpus = small_corpus(tmp_path / "corpus")
    assert fresh.main(["--source", str(corpus)]) == 0
    val = pq.read_table(fresh.DATA_DIR / fresh.VAL_FILENAME)["text"].to_pylist()
    train = [t for p in fresh.list_shards("train") for t in pq.read_table(p)["text"].to_pylist()]
    assert all(len(t) <= fresh.DOC_CHARS for t in val + train)
    assert not set(val) & set(train) and 0.03 < len(val) / (len(val) + len(train)) < 0.2
    # the same folder under another name gives the same documents in the same order
    other = small_corpus(tmp_path / "other")
    assert fresh.main(["--source", str(other)]) == 0
    assert pq.read_table(fresh.DATA_DIR / fresh.VAL_FILENAME)["text"].to_pylist() == val


def test_rerun_is_idempotent_and_repairs_corrupt_shards(fresh, tmp_path, capsys):
    corpus = small_corpus(tmp_path / "corpus")
    assert fresh.main(["--source", str(corpus)]) == 0
    fp, pkl = fresh.data_fingerprint(), fresh.TOKENIZER_DIR / "tokenizer.pkl"
    stamp = pkl.stat().st_mtime_ns
    capsys.readouterr()
    assert fresh.main(["--source", str(corpus)]) == 0
    out = capsys.readouterr().out
    assert "already written" in out and "already trained" in out and pkl.stat().st_mtime_ns == stamp
    assert fresh.main([]) == 0
    assert "Already prepared for profile tiny: local:" in capsys.readouterr().out
    shard = fresh.DATA_DIR / "shard_00000.parquet"
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.warns(fresh.DataWarning, match="writing them again"):
        assert fresh.main([]) == 0
    assert fresh._shards_ok(fresh.DATA_DIR) and fresh.data_fingerprint() == fp


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_hub_fails_fast_and_falls_back_loudly(fresh, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(fresh, "BASE_URL", f"http://127.0.0.1:{_closed_port()}/hub")
    root = small_corpus(tmp_path / "python", modules=("heapq.py", "bisect.py"))
    for f in root.iterdir():
        f.rename(f.with_suffix(""))  # heapq.py, bisect.py
    (root / "test").mkdir()
    (root / "test" / "test_x.py").write_text("SKIPPED_TEST_DIR = 1\n")
    (root / "site-packages").mkdir()
    (root / "site-packages" / "y.py").write_text("SKIPPED_SITE_PACKAGES = 1\n")
    monkeypatch.setattr(fresh, "OFFLINE_ROOTS", [root])
    sleeps = []
    monkeypatch.setattr(fresh.time, "sleep", sleeps.append)
    assert fresh.main([]) == 0
    out = capsys.readouterr().out
    assert "CLIMBMIX IS NOT AVAILABLE (ConnectionError" in out and "USING THE OFFLINE FALLBACK" in out
    assert "attempt" not in out and sleeps == []  # one refused probe, no retry storm
    assert fresh.describe()["source"] == "offline-fallback" and fresh.describe()["fingerprint"]
    train = "".join(t for p in fresh.list_shards("train") for t in pq.read_table(p)["text"].to_pylist())
    val = "".join(pq.read_table(fresh.DATA_DIR / fresh.VAL_FILENAME)["text"].to_pylist())
    assert "def heappush" in train and "SKIPPED" not in train
    # the validation documents are the stdlib's test suite, the one folder a sealed run cannot see
    assert val == "SKIPPED_TEST_DIR = 1\n" and "SKIPPED_SITE_PACKAGES" not in train + val
    assert fresh.data_paths()["hide"] == [str((root / "test").resolve())]
    # asked for explicitly, an unreachable ClimbMix is an error, not a silent fallback
    assert fresh.main(["--source", "climbmix"]) == 1
    assert "ClimbMix is not reachable" in capsys.readouterr().err
    # --offline does not even probe
    monkeypatch.setattr(fresh, "_hub_unreachable_reason", lambda: pytest.fail("probed the hub"))
    monkeypatch.setattr(fresh, "CACHE_DIR", tmp_path / "cache2")
    assert fresh.main(["--offline"]) == 0 and fresh.SOURCE == "offline-fallback"


def test_offline_fallback_reads_the_python_installation(fresh):
    files = [f for r in fresh.OFFLINE_ROOTS for f in fresh._walk(r, fresh.OFFLINE_EXTENSIONS, fresh.OFFLINE_SKIP_DIRS)]
    names = {str(f.relative_to(fresh.OFFLINE_ROOTS[0])) for f in files}
    assert len(files) > 200 and "json/__init__.py" in names and "LICENSE.txt" in names
    assert not any(part in fresh.OFFLINE_SKIP_DIRS for f in names for part in Path(f).parts[:-1])


class HubStandIn(http.server.BaseHTTPRequestHandler):
    """Serves files by their last path component, with HTTP Range support, and logs requests."""
    files: dict = {}
    log: list = []

    def log_message(self, *args):
        pass

    def _answer(self, body):
        data = self.files.get(self.path.rsplit("/", 1)[-1])
        self.log.append((self.command, self.path.rsplit("/", 1)[-1], self.headers.get("Range")))
        if data is None:
            return self.send_error(404)
        start = int(self.headers["Range"].split("=")[1].split("-")[0]) if self.headers.get("Range") else 0
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        if body:
            try:
                self.wfile.write(data[start:])
            except (BrokenPipeError, ConnectionResetError):  # the probe hangs up after the headers
                pass

    def do_HEAD(self):
        self._answer(False)

    def do_GET(self):
        self._answer(True)


@pytest.fixture
def hub(tmp_path):
    docs = [d for m in ("textwrap.py", "heapq.py", "csv.py") for d in (STDLIB / m).read_text().split("\n\n") if d.strip()]
    files = {}
    for name, part in [("shard_00000.parquet", docs[40:]), ("shard_06542.parquet", docs[:40])]:
        pq.write_table(pa.table({"text": part}), tmp_path / name, row_group_size=50)
        files[name] = (tmp_path / name).read_bytes()
    handler = type("Hub", (HubStandIn,), {"files": files, "log": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/datasets/x/resolve/main", handler
    server.shutdown()
    server.server_close()


def test_climbmix_download_resumes_refetches_corrupt_shards_and_is_idempotent(fresh, monkeypatch, hub, capsys):
    url, handler = hub
    monkeypatch.setattr(fresh, "BASE_URL", url)
    data_dir = fresh.CACHE_DIR / "data" / "climbmix"
    data_dir.mkdir(parents=True)
    train, val = handler.files["shard_00000.parquet"], handler.files[fresh.VAL_FILENAME]
    (data_dir / "shard_00000.parquet").write_bytes(train[: len(train) // 2])      # corrupt, "complete"
    (data_dir / f"{fresh.VAL_FILENAME}.tmp").write_bytes(val[: len(val) // 3])    # interrupted download
    with pytest.warns(fresh.DataWarning, match="shard_00000.parquet is corrupt or partial; re-fetching"):
        assert fresh.main(["--num-shards", "1"]) == 0
    assert (data_dir / "shard_00000.parquet").read_bytes() == train
    assert (data_dir / fresh.VAL_FILENAME).read_bytes() == val and not list(data_dir.glob("*.tmp"))
    assert ("GET", fresh.VAL_FILENAME, f"bytes={len(val) // 3}-") in handler.log   # resumed, not restarted
    assert fresh.SOURCE == "climbmix" and len(fresh.data_fingerprint()) == 12
    tok = fresh.Tokenizer.from_directory()
    x, y, _ = next(fresh.make_dataloader(tok, 2, 64, "train", device="cpu"))
    assert (x[:, 0] == tok.get_bos_token_id()).all()
    requests_before = len(handler.log)
    capsys.readouterr()
    assert fresh.main([]) == 0
    assert "Already prepared for profile tiny: climbmix" in capsys.readouterr().out
    monkeypatch.setattr(fresh, "BASE_URL", f"http://127.0.0.1:{_closed_port()}/hub")
    assert fresh.main(["--source", "climbmix", "--num-shards", "1"]) == 0  # shards present: no network needed
    assert len(handler.log) == requests_before  # nothing fetched again


def test_bpe_failure_falls_back_to_bytes_loudly(fresh, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "rustbpe", None)  # `import rustbpe` now fails
    assert fresh.main(["--source", str(small_corpus(tmp_path / "corpus"))]) == 0
    assert "BPE TOKENIZER TRAINING FAILED" in capsys.readouterr().out
    tok = fresh.Tokenizer.from_directory()
    assert tok.kind == "byte" and fresh.TOKENIZER_DIR.name.endswith("-byte")
    # every byte token is one byte, so uniform logits cost exactly log2(260) bits per byte
    assert math.isclose(fresh.evaluate_bpb(UniformModel(260), tok, 4), math.log2(260), rel_tol=1e-6)


def test_byte_tokenizer_on_request(fresh, tmp_path, capsys):
    assert fresh.main(["--source", str(small_corpus(tmp_path / "corpus")), "--tokenizer", "byte"]) == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out and "tokenizer: byte" in out
    assert json.loads((fresh.CACHE_DIR / "prepared-tiny.json").read_text())["kind"] == "byte"
    assert fresh.get_token_bytes().tolist() == [1] * 256 + [0] * 4
