"""The architecture as the folders show it: harness/ never imports agent/ or dashboard/, and no
module imports itself back through others (an import circle), counting imports inside functions
(a lazy import is still a dependency; only a module's `if __name__ == "__main__":` block, its
command line, is left out)."""
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "harness", "dashboard", "inference", "lab")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, known: set[str]) -> set[str]:
    """The known modules this file imports anywhere but in its __main__ block."""
    tree = ast.parse(path.read_text(), filename=str(path))
    main = {id(n) for top in tree.body if isinstance(top, ast.If) and "__main__" in ast.unparse(top.test)
            for n in ast.walk(top)}
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(tree):
        if id(node) in main:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return {m for m in out if m in known and m != name}


def graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")]
    known = {module_name(p) for p in files}
    return {module_name(p): imports(p, known) for p in files}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
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

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    g = graph()
    found = cycles(g)
    detail = [[f"{a} -> {b}" for a in comp for b in sorted(g[a]) if b in comp] for comp in found]
    assert not found, f"import circles: {detail}"


def test_the_checker_finds_a_circle():
    """The checker itself: a lazy import back is a circle, a __main__ block's is not."""
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]] and cycles({"a": {"b"}, "b": set()}) == []


def test_harness_never_imports_agent_or_dashboard():
    g = graph()
    bad = sorted(f"{m} -> {d}" for m, deps in g.items() if m.startswith("harness")
                 for d in deps if d.split(".")[0] in ("agent", "dashboard"))
    assert not bad, bad
