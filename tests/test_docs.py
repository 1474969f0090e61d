"""The documentation a new user reads: a README short enough to read in five minutes, no commit
hashes or issue numbers (they mean nothing to a reader without the history), and no link in
README.md or docs/*.md that leads nowhere (every relative link names a file tracked in git, every
#anchor a heading of its target)."""
import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Five minutes of reading: the quick start, the file table, the protocol and the command table.
README_MAX_LINES = 200
# A commit hash as it is quoted: 7-40 hex digits standing alone, with a digit and a letter in it
# (a plain number such as 20971520, or a word such as "defaced", is neither).
HEX = re.compile(r"(?<![0-9A-Za-z_/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
# Hex strings in docs/*.md that are data, not commits: data fingerprints, the demo run's
# fingerprint and short commit in a format example, and Hyperband candidate ids (config_id).
DATA_HEX = {"015a2b47a3cf", "c5041bea99d7", "9a08fe62292d", "a1b2c3d4e5f6", "abc1234",
            "6a984f7c", "ddcc2f4a"}
# A hex string a few words after "fingerprint" is one (prepare.py prints 12 hex digits).
FINGERPRINT_BEFORE = re.compile(r"fingerprint\W{0,4}$", re.I)
ISSUE = re.compile(r"\b(?:[Ii]ssues?|PR|[Pp]ull request)\s*#?\d+|(?<![\w&/])#\d{1,5}\b")
# The .py form: the word issue (or issues) and a number ("#3" is data in tests' strings, not checked).
PY_ISSUE = re.compile(r"\b[Ii]ssues? #?\d+")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def tracked() -> set[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.fail(f"git ls-files failed in {REPO}: {out.stderr.strip()} (the link check needs the repository)")
    return set(filter(None, out.stdout.split("\0")))


def doc_files() -> list[Path]:
    return [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))


def prose(text: str) -> str:
    """The text outside fenced code blocks (a link in a code sample is not a link)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


def hashes(text: str, allowed: set[str] = frozenset()) -> list[str]:
    return [m.group(0) for m in HEX.finditer(text)
            if m.group(0) not in allowed and not FINGERPRINT_BEFORE.search(text[max(0, m.start() - 30):m.start()])]


def test_readme_is_short():
    n = len((REPO / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}): move detail to docs/"


def test_readme_has_no_commit_hash_or_issue_number():
    text = (REPO / "README.md").read_text()
    assert not hashes(text), f"commit hashes in README.md: {hashes(text)} (say what changed, in words)"
    issues = [m.group(0) for m in ISSUE.finditer(text)]
    assert not issues, f"issue numbers in README.md: {issues}"


def test_docs_have_no_commit_hash_or_issue_number():
    bad = []
    for path in sorted((REPO / "docs").glob("*.md")):
        text = path.read_text()
        bad += [f"{path.name}: hash {h}" for h in hashes(text, DATA_HEX)]
        bad += [f"{path.name}: {m.group(0)!r}" for m in ISSUE.finditer(text)]
    assert not bad, ("commit hashes or issue numbers in docs/ (a hex string that is data, such as a "
                     "fingerprint, goes in DATA_HEX): " + "; ".join(bad))


def comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((node.body[0].lineno, doc))
    return out


def test_python_comments_cite_no_commit_or_issue():
    bad = []
    for name in sorted(f for f in tracked() if f.endswith(".py")):
        path = REPO / name
        if not path.exists():        # deleted in the working tree, not yet committed
            continue
        for line, text in comments_and_docstrings(path.read_text()):
            bad += [f"{name}:{line}: {m.group(0)!r}" for m in PY_ISSUE.finditer(text)]
            bad += [f"{name}:{line}: hash {h}" for h in hashes(text)]
    assert not bad, "comments and docstrings say the reason, not the commit or issue: " + "; ".join(bad)


def test_relative_links_lead_to_tracked_files_and_headings():
    files = tracked()
    bad = []
    for doc in doc_files():
        for m in LINK.finditer(prose(doc.read_text())):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):       # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            dest = (doc.parent / path_part).resolve() if path_part else doc
            rel = dest.relative_to(REPO).as_posix() if dest.is_relative_to(REPO) else None
            where = f"{doc.relative_to(REPO)}: ({target})"
            if rel is None or (rel not in files and not any(f.startswith(rel + "/") for f in files)):
                bad.append(f"{where} names no file tracked in git")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{where} names no heading of {rel}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("heading, anchor", [
    ("The trust boundary (harness/sandbox.py, harness/verify.py)", "the-trust-boundary-harnesssandboxpy-harnessverifypy"),
    ("Many GPUs: `--workers N`", "many-gpus---workers-n"),
    ("Loop ↔ review (agent/judges/reviewer.py)", "loop--review-agentjudgesreviewerpy"),
])
def test_slug_follows_github(heading, anchor):
    assert slug(heading) == anchor


def test_the_checks_catch_what_they_are_for(tmp_path):
    # the patterns find the forms these pages used to hold, and leave data and numbers alone
    assert hashes("the same bench at c5450ec (below)") == ["c5450ec"]
    assert hashes("(a50229b, 3b2e9f1)") == ["a50229b", "3b2e9f1"]
    assert hashes("EVAL_TOKENS=20971520, decade, fingerprint `015a2b47a3cf`, docs/x9f3a2b1c.png") == []
    assert [m.group(0) for m in ISSUE.finditer("since issue 21 and issues 20 and PR #7, see #12")] == \
        ["issue 21", "issues 20", "PR #7", "#12"]
    assert not list(ISSUE.finditer("&#39; the issue's case [x](#open-issues)"))
    assert PY_ISSUE.search("# --- issue 12: device keys") and not PY_ISSUE.search('"#1 discard"')
    src = 'X = "abc1234"  # kept at 3b2e9f1 (issue 9)\ndef f():\n    """Since c623b26."""\n'
    assert [t for _, t in comments_and_docstrings(src)] == ["# kept at 3b2e9f1 (issue 9)", "Since c623b26."]
    page = tmp_path / "p.md"
    page.write_text("# Title\n## Title\n```\n## not a heading\n```\n## A: `b` (c/d.py)\n")
    assert anchors(page) == {"title", "title-1", "a-b-cdpy"}
