"""harness/compiled.py on a real package directory: missing bytecode is found without importing
the package, compiled once with compileall, and a second call does nothing."""
import importlib
import json
import os
import signal
import subprocess
import sys
import time

from harness import procs

from harness import compiled as bytecode


def _package(root):
    pkg = root / "site" / "arfakepkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")   # finding must not import it
    (pkg / "sub" / "__init__.py").write_text("X = 1\n")
    (pkg / "sub" / "leaf.py").write_text("Y = 2\n")
    return pkg


def test_missing_bytecode_is_compiled_once_for_the_whole_package_directory(tmp_path, monkeypatch):
    pkg = _package(tmp_path)
    monkeypatch.syspath_prepend(str(pkg.parent))
    importlib.invalidate_caches()
    markers = ("arfakepkg", "arfakepkg.sub")
    todo = bytecode.missing(markers)
    assert set(todo) == set(markers) and "arfakepkg" not in sys.modules
    assert bytecode.package_root(todo["arfakepkg.sub"], "arfakepkg.sub") == pkg.parent
    lines = []
    note = bytecode.ensure(lines.append, markers=markers)
    assert note == "compiled", lines
    assert "arfakepkg, arfakepkg.sub" in lines[0] and str(pkg.parent) in lines[0]
    leaf_pyc = importlib.util.cache_from_source(str(pkg / "sub" / "leaf.py"))
    assert bytecode.missing(markers) == {} and os.path.exists(leaf_pyc)   # the whole directory
    assert bytecode.ensure(lines.append, markers=markers) is None and len(lines) == 2   # once per process


def test_a_source_newer_than_its_bytecode_counts_as_missing(tmp_path, monkeypatch):
    pkg = _package(tmp_path)
    monkeypatch.syspath_prepend(str(pkg.parent))
    importlib.invalidate_caches()
    ok, _, _ = bytecode.compile_dirs([pkg.parent])
    assert ok and bytecode.missing(("arfakepkg.sub",)) == {}
    src = pkg / "sub" / "__init__.py"
    st = src.stat()
    os.utime(src, (st.st_atime, st.st_mtime + 10))
    assert list(bytecode.missing(("arfakepkg.sub",))) == ["arfakepkg.sub"]
    assert bytecode.missing(("no_such_module_here",)) == {}


def test_a_file_for_a_newer_python_is_left_alone_without_alarm(tmp_path, monkeypatch):
    """A package that ships a file with syntax this Python lacks (never imported here): what runs
    import is compiled, the note says "compiled" and counts the file, and nothing reads as a failure."""
    pkg = _package(tmp_path)
    # syntax from the future: no Python of today parses it, as a newer version's file would not on this one
    (pkg / "sub" / "future_only.py").write_text("def f[T](x: T) -> T:\n    return x\nmatch := ???\n")
    monkeypatch.syspath_prepend(str(pkg.parent))
    monkeypatch.setattr(bytecode, "_checked", set())   # once per process: this test's own process view
    importlib.invalidate_caches()
    lines = []
    note = bytecode.ensure(lines.append, markers=("arfakepkg", "arfakepkg.sub"))
    assert note.startswith("compiled (1 file(s)") and "never imported" in note, note
    said = "\n".join(lines)
    assert "could not" not in said and "Error" not in said and "SyntaxError" not in said
    assert bytecode.missing(("arfakepkg", "arfakepkg.sub")) == {}


def test_a_compile_left_by_a_killed_loop_is_ended_by_the_leftover_sweep(tmp_path):
    """The compile leads its own process group, recorded in the run folder: after a kill -9 of the
    process that started it, harness/procs.py kill_leftover (what --resume runs) ends it."""
    src = tmp_path / "big"
    src.mkdir()
    for i in range(6):   # files that take seconds to compile
        (src / f"m{i}.py").write_text("".join(f"x{j} = ({j} + 1) * 2 - {j}\n" for j in range(60000)))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    code = ("import sys; from pathlib import Path; from harness import compiled as bytecode; "
            f"bytecode.compile_dirs([Path({str(src)!r})], pid_dir=Path({str(run_dir)!r}))")
    loop = subprocess.Popen([sys.executable, "-c", code], cwd=str(bytecode.Path(__file__).parent.parent))
    pid_file = run_dir / bytecode.PID_FILE
    deadline = time.time() + 60
    while not pid_file.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert pid_file.exists(), "the compile's group was not recorded"
    pgid = json.loads(pid_file.read_text())["pgid"]
    os.kill(loop.pid, signal.SIGKILL)
    loop.wait()
    assert procs._group_alive(pgid), "the compile should outlive the killed loop (that is the case to handle)"
    note = procs.kill_leftover(run_dir)
    assert note and "bytecode" in note
    assert not procs._group_alive(pgid) and not pid_file.exists()
