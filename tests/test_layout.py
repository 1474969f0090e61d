"""The architecture as the folders show it: harness/ never imports agent/ or dashboard/, and no
module imports itself back through others (an import circle), counting imports inside functions
and in `if __name__ == "__main__":` blocks (a lazy import, or a command line's, is still a
dependency); and agent/ and dashboard/ read the run's records through their types."""
import ast
import re
import sys
from pathlib import Path

from scripts.core_size import cycles, harness_size   # the checkers, shared with the measuring script

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "harness", "dashboard", "executors", "llm", "search", "runfiles", "inference", "lab")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, known: set[str]) -> set[str]:
    """The known modules this file imports anywhere, its __main__ block included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(tree):
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


def test_no_import_circles():
    g = graph()
    found = cycles(g)
    detail = [[f"{a} -> {b}" for a in comp for b in sorted(g[a]) if b in comp] for comp in found]
    assert not found, f"import circles: {detail}"


def test_the_checker_finds_a_circle():
    """The checker itself: a circle of three is found, a chain is not."""
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]] and cycles({"a": {"b"}, "b": set()}) == []


def test_a_main_block_import_counts(tmp_path, monkeypatch):
    """An import inside `if __name__ == "__main__":` is a dependency like any other."""
    pkg = tmp_path / "harness"
    pkg.mkdir()
    (pkg / "a.py").write_text("import harness.b\n")
    (pkg / "b.py").write_text("if __name__ == '__main__':\n    from harness import a\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    known = {"harness.a", "harness.b"}
    assert imports(pkg / "b.py", known) == {"harness.a"}
    assert cycles({m: imports(pkg / f"{m.split('.')[1]}.py", known) for m in known}) == [["harness.a", "harness.b"]]


def test_harness_imports_only_itself_of_the_project():
    g = graph()
    bad = sorted(f"{m} -> {d}" for m, deps in g.items() if m.startswith("harness")
                 for d in deps if d.split(".")[0] != "harness")
    assert not bad, bad


# The trust boundary's size (docs/architecture.md "The trust path"): at most this many modules,
# and no more code lines than it has now (scripts/core_size.py prints them; we aim at 3,000).
HARNESS_MODULES_MAX = 20
HARNESS_CODE_LINES_MAX = 4_374


def test_the_trust_boundary_imports_nothing_else_and_does_not_grow():
    """harness/ imports the standard library, torch, numpy, pyarrow, prepare.py and itself only,
    in at most HARNESS_MODULES_MAX modules and HARNESS_CODE_LINES_MAX code lines; and agent/,
    dashboard/ and the other folders import harness/, never the reverse (above)."""
    size = harness_size()
    assert not size["foreign"], f"harness/ imports outside its allowance: {size['foreign']}"
    assert len(size["modules"]) <= HARNESS_MODULES_MAX, sorted(size["modules"])
    assert size["total"] <= HARNESS_CODE_LINES_MAX, f"harness/ grew to {size['total']} code lines"


def test_the_size_checker_sees_a_foreign_import(tmp_path, monkeypatch):
    """The checker itself: an import of the search package from harness/ is named; a docstring
    and comments are not code lines."""
    import scripts.core_size as cs
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "a.py").write_text('"""doc\nstring"""\n# note\nimport os\nfrom search import knobs\n')
    monkeypatch.setattr(cs, "REPO", tmp_path)
    size = cs.harness_size()
    assert size["foreign"] == [("harness/a.py", 5, "search")] and size["total"] == 2


# Reads of a dict by a literal key that are not reads of one of the run's records: the protocols
# of other programs (the environment, Flask's request, Ray, Optuna, the browser's DevTools, the
# LLM's tool reply and our own tool schema) and the two readers that turn a file into a record.
# (file, what the line reads): anything else in agent/ or dashboard/ must go through the types.
NOT_RECORDS = {
    "agent/judges/llm_judge.py": "parse_verdict: the LLM's tool reply, read into an Opinion",
    "agent/coordinator.py": "PendingFile.from_dict and undecided: the journal's pending lines read into the record",
    "agent/compile_warm.py": "a commit's files (name -> text) and train.py's knob values",
    "agent/proposers/offline.py": "Optuna's study and trial user_attrs",
    "agent/proposers/tools.py": "the tool's own JSON schema",
    "agent/workers.py": "Ray's cluster_resources() and nodes()",
    "dashboard/app.py": "Flask's request body (JSON or form)",
    "dashboard/browser.py": "the DevTools protocol's replies",
    "dashboard/serving.py": "lab/flywheel.py's report (a lab artefact, not a run record)",
}
EXTERNAL_GETS = ("os.environ.get(", "request.args.get(", "request.headers.get(", "request.form.get(",
                 "req.headers.get(", "@app.get(")


def test_records_are_read_through_their_types():
    """No `.get("...")` reads a record in agent/ or dashboard/: run.json, the incumbent,
    a run's summary and clock, the verdicts, the journal's other kinds, the traces, a proposal's
    info and a re-measurement each have a type (harness/experiment_record.py, runfiles/, agent/proposing.py
    ProposalInfo) and are read through it."""
    found = []
    for folder in ("agent", "dashboard"):
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for i, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#")[0]
                if re.search(r"""\.get\(["']""", code) and not any(e in code for e in EXTERNAL_GETS) \
                        and rel not in NOT_RECORDS:
                    found.append(f"{rel}:{i}: {line.strip()}")
    assert not found, "record fields read by key:\n" + "\n".join(found)
    for rel in NOT_RECORDS:   # the exemptions name files that exist and still need them
        assert re.search(r"""\.get\(["']""", (REPO / rel).read_text()), f"{rel} no longer needs its exemption"
