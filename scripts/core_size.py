"""How big the trust boundary is: what one reader has to hold to believe a recorded val_bpb.

Prints harness/ (the sandbox, one run and its clock, one evaluation and the graph replay, the
journal's records and writers: docs/architecture.md "The trust path"): its modules and their code
lines (not blank, not comment, not docstring, by Python's tokenizer), and every import of it from
outside the standard library, torch, numpy, pyarrow, prepare.py and harness itself (there should
be none). Then, for the whole project: the classes in agent/, harness/ and dashboard/ with more
than 12 attributes, the .py files over 500 lines (train.py and prepare.py are single files by
contract), the import circles (`__main__` blocks included), and the loop's module-level import
closure (project modules: imports inside functions are not followed, they run only when their
option is used).

    uv run scripts/core_size.py [--entry agent/loop.py] [--json]
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "harness", "dashboard", "executors", "llm", "search", "runfiles", "lab", "inference", "scripts")
# What harness/ may import: the trust boundary runs on these and itself alone (tests/test_layout.py).
HARNESS_MAY_IMPORT = {"torch", "numpy", "pyarrow", "prepare", "harness", "__future__",
                      "graph", "graph_ops", "graph_calls", "replay"}   # the evaluator's own folder
ROOT_MODULES = ("train", "prepare", "runtime", "attention", "graph_export")
MAX_ATTRIBUTES = 12      # a class one reader can hold
MAX_LINES = 500          # a file one reader can hold
SINGLE_FILES = {"train.py", "prepare.py"}   # single files by contract


def module_path(name: str) -> Path | None:
    """The project file of a dotted module name, or None for a library."""
    parts = name.split(".")
    if parts[0] not in PACKAGES and parts[0] not in ROOT_MODULES:
        return None
    base = REPO.joinpath(*parts)
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_main_block(node: ast.AST) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def imports_of(path: Path, *, main_blocks: bool, lazy: bool = False, packages: bool = True) -> set[str]:
    """The project modules `path` imports at module level (top-level statements, `if`/`try`
    bodies). `main_blocks` also follows `if __name__ == "__main__":`, `lazy` the imports inside
    functions too, `packages` the package `__init__` a dotted import runs on the way."""
    tree = ast.parse(path.read_text(), str(path))
    me = module_name(path)
    pkg = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()

    def visit(stmts):
        for node in stmts:
            if isinstance(node, ast.Import):
                for a in node.names:
                    found.add(a.name)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)] if pkg else []
                    base = ".".join([*up, base] if base else up)
                found.add(base)
                for a in node.names:
                    found.add(f"{base}.{a.name}")
            elif _is_main_block(node):
                if main_blocks:
                    visit(node.body)
            elif lazy and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(node.body)
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                for field in ("body", "orelse", "finalbody", "handlers"):   # nested statements
                    for sub in getattr(node, field, []) or []:
                        visit(sub.body if isinstance(sub, ast.ExceptHandler) else [sub])
    visit(tree.body)
    out = set()
    for name in found:
        p = module_path(name)
        if p is not None and p != path:
            out.add(module_name(p))
        # `from pkg import mod` names the package too: its __init__ runs
        head = name.split(".") if packages else []
        for i in range(1, len(head)):
            q = module_path(".".join(head[:i]))
            if q is not None and q.name == "__init__.py" and q != path:
                out.add(module_name(q))
    return out


def closure(entry: Path) -> list[Path]:
    seen: dict[str, Path] = {}
    todo = [entry]
    while todo:
        p = todo.pop()
        name = module_name(p)
        if name in seen:
            continue
        seen[name] = p
        for dep in imports_of(p, main_blocks=(p == entry)):
            q = module_path(dep)
            if q is not None:
                todo.append(q)
    return sorted(seen.values())


def project_files() -> list[Path]:
    files = [REPO / f"{m}.py" for m in ROOT_MODULES if (REPO / f"{m}.py").is_file()]
    for pkg in PACKAGES:
        files += sorted((REPO / pkg).rglob("*.py"))
    return files


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan); tests/test_layout.py uses
    this checker too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def circles() -> list[list[str]]:
    """Import circles among project modules, lazy imports and `__main__` blocks included."""
    return cycles({module_name(p): imports_of(p, main_blocks=True, lazy=True, packages=False)
                   for p in project_files()})


def _targets(targets) -> list[ast.expr]:
    """Assignment targets with tuples and lists unpacked (`self.a, self.b = ...` sets two)."""
    out = []
    for t in targets:
        if isinstance(t, (ast.Tuple, ast.List)):
            out += _targets(t.elts)
        elif isinstance(t, ast.Starred):
            out += _targets([t.value])
        else:
            out.append(t)
    return out


def class_attributes(path: Path) -> list[tuple[str, int]]:
    """(class, attributes) for each class: annotated fields, class-level assignments and
    `self.x = ...` anywhere in its methods (tuple targets unpacked)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ClassDef):
            continue
        names: set[str] = set()
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                names.add(stmt.target.id)
            elif isinstance(stmt, ast.Assign):
                names |= {t.id for t in _targets(stmt.targets) if isinstance(t, ast.Name)}
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(stmt):
                    targets = sub.targets if isinstance(sub, ast.Assign) else \
                        [sub.target] if isinstance(sub, (ast.AnnAssign, ast.AugAssign)) else []
                    for t in _targets(targets):
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            names.add(t.attr)
        names = {n for n in names if not (n.startswith("__") and n.endswith("__"))}
        out.append((node.name, len(names)))
    return out


def code_lines(path: Path) -> int:
    """Lines of `path` that hold code: not blank, not a comment, not a docstring."""
    import io
    import tokenize
    src = path.read_text()
    tree = ast.parse(src)
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                docs.update(range(first.lineno, first.end_lineno + 1))
    lines = set()
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type not in skip:
            lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docs)
    return len(lines)


def harness_size() -> dict:
    """{"modules": {path: code lines} (modules with code), "total", "foreign": [(path, line, module)]}."""
    mods, foreign = {}, []
    for p in sorted((REPO / "harness").rglob("*.py")):
        n = code_lines(p)
        if n:
            mods[p.relative_to(REPO).as_posix()] = n
        for node in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else []
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in HARNESS_MAY_IMPORT:
                    foreign.append((p.relative_to(REPO).as_posix(), node.lineno, name))
    return {"modules": mods, "total": sum(mods.values()), "foreign": foreign}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--entry", default="agent/loop.py")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    mods = closure(REPO / a.entry)
    lines = sum(len(p.read_text().splitlines()) for p in mods)
    big_classes = [(p.relative_to(REPO).as_posix(), c, n)
                   for folder in ("agent", "harness", "dashboard") for p in sorted((REPO / folder).rglob("*.py"))
                   for c, n in class_attributes(p) if n > MAX_ATTRIBUTES]
    big_files = [(p.relative_to(REPO).as_posix(), len(p.read_text().splitlines())) for p in project_files()
                 if p.name not in SINGLE_FILES and len(p.read_text().splitlines()) > MAX_LINES]
    circ = circles()
    h = harness_size()
    if a.json:
        print(json.dumps({"harness": h, "closure_modules": len(mods), "closure_lines": lines,
                          "closure": [p.relative_to(REPO).as_posix() for p in mods],
                          "big_classes": big_classes, "big_files": big_files, "circles": circ}, indent=1))
        return 0
    print(f"harness/ (the trust boundary): {len(h['modules'])} modules, {h['total']} code lines")
    for f, n in sorted(h["modules"].items(), key=lambda kv: -kv[1]):
        print(f"  {n:5d}  {f}")
    print(f"imports of harness/ from outside the standard library, torch, numpy, pyarrow, prepare: {len(h['foreign'])}")
    for f, line, name in h["foreign"]:
        print(f"  {f}:{line}: {name}")
    print(f"import closure of {a.entry}: {len(mods)} project modules, {lines} lines")
    for p in mods:
        print(f"  {p.relative_to(REPO).as_posix()}")
    print(f"classes over {MAX_ATTRIBUTES} attributes: {len(big_classes)}")
    for f, c, n in big_classes:
        print(f"  {f}: {c} {n}")
    print(f"files over {MAX_LINES} lines: {len(big_files)}")
    for f, n in big_files:
        print(f"  {f}: {n}")
    print(f"import circles (__main__ blocks included): {len(circ)}")
    for c in circ:
        print("  " + " <-> ".join(c))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
