"""harness/bytecode.py on a real package directory: missing bytecode is found without importing
the package, compiled once with compileall, and a second call does nothing."""
import importlib
import os
import sys

from harness import bytecode


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
    ok, _ = bytecode.compile_dirs([pkg.parent])
    assert ok and bytecode.missing(("arfakepkg.sub",)) == {}
    src = pkg / "sub" / "__init__.py"
    st = src.stat()
    os.utime(src, (st.st_atime, st.st_mtime + 10))
    assert list(bytecode.missing(("arfakepkg.sub",))) == ["arfakepkg.sub"]
    assert bytecode.missing(("no_such_module_here",)) == {}
