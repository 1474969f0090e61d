"""
Shared test set-up: no test ever touches ~/.cache/autoresearch or the network.

What every test gets, without asking:
  * At import of this file (before any test module is collected): AUTORESEARCH_CACHE points at an
    empty temporary folder, AUTORESEARCH_PROFILE=tiny and AUTORESEARCH_THREADS=1 (and
    TORCHINDUCTOR_COMPILE_THREADS=1 unless set), so even a
    module-level `import prepare` (which reads the env at import) never sees the real cache.
  * Per test (autouse `_isolated_cache`): AUTORESEARCH_CACHE is a fresh empty folder under the
    test's tmp_path, unless the test asked for `tiny_cache`.

Opt-in fixture `tiny_cache` (session scope): a prepared cache for profile `tiny` (MAX_SEQ_LEN 64,
VOCAB_SIZE 512, EVAL_TOKENS 8192): a BPE tokenizer and train/val shards built from a few standard
library modules copied to tmp (a few hundred KB, ~2 s once per session). It exports
AUTORESEARCH_PROFILE=tiny, AUTORESEARCH_CACHE=<that folder>, AUTORESEARCH_THREADS=1 in
os.environ, reloads the in-process `prepare` module so its constants match, and returns a dict
of the full environment to hand to subprocesses:

    def test_train_runs(tiny_cache, tmp_path):
        env = dict(tiny_cache, AUTORESEARCH_TIME_BUDGET="3")
        subprocess.run([sys.executable, "train.py"], env=env, cwd=REPO, check=True)

    def test_in_process(tiny_cache):
        import prepare          # import inside the test (or use prepare.X, never `from prepare import X`
        tok = prepare.Tokenizer.from_directory()   # at module level): constants were reloaded

tiny_cache["AUTORESEARCH_CACHE"] is the cache folder. Never modify it (it is shared by the
session); copy what you need into your own tmp_path.
"""

import atexit
import importlib
import os
import shutil
import sysconfig
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Module-level guard: runs before test modules are imported.
_GUARD_CACHE = tempfile.mkdtemp(prefix="autoresearch-test-empty-cache-")
atexit.register(shutil.rmtree, _GUARD_CACHE, True)
os.environ["AUTORESEARCH_CACHE"] = _GUARD_CACHE
os.environ["AUTORESEARCH_PROFILE"] = "tiny"
os.environ["AUTORESEARCH_THREADS"] = "1"
# Inductor compiles in the process that compiles (its default on 2 cores is a pool of 2 worker
# processes, each importing torch for the few kernels a test compiles: ~7% of a compile test).
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

# The tiny corpus: standard-library modules present in every CPython >= 3.10 (~450 KB).
TINY_CORPUS = ["argparse.py", "difflib.py", "statistics.py", "calendar.py", "textwrap.py",
               "fractions.py", "heapq.py", "bisect.py", "string.py", "shlex.py", "csv.py",
               "fnmatch.py", "glob.py", "pprint.py", "json/__init__.py", "json/decoder.py",
               "json/encoder.py", "LICENSE.txt"]


def write_tiny_corpus(folder):
    """Copy the tiny corpus into folder as .txt files (prepare --source reads .txt/.md/.jsonl/.parquet)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name in TINY_CORPUS:
        if (stdlib / name).exists():
            (folder / (name.replace("/", "_") + ".txt")).write_bytes((stdlib / name).read_bytes())
    return folder


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_cache")
    corpus = write_tiny_corpus(root / "corpus")
    os.environ.update(AUTORESEARCH_PROFILE="tiny", AUTORESEARCH_CACHE=str(root / "cache"),
                      AUTORESEARCH_THREADS="1")
    import prepare
    importlib.reload(prepare)  # prepare reads the env at import
    assert prepare.main(["--source", str(corpus)]) == 0, "preparing the tiny cache failed"
    return dict(os.environ)


@pytest.fixture(autouse=True)
def _isolated_cache(request, tmp_path, monkeypatch):
    if "tiny_cache" not in request.fixturenames:
        monkeypatch.setenv("AUTORESEARCH_CACHE", str(tmp_path / "autoresearch-cache"))


@pytest.fixture(scope="session")
def loop_run(tmp_path_factory):
    """A read-only run folder produced by the real loop on the stand-in train.py (one run per session)."""
    from tests.loop_fixtures import loop_run_folder
    return loop_run_folder(tmp_path_factory.mktemp("loop_run"))
