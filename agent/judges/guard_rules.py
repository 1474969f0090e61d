"""The guard's static rules: what an edited train.py may not do, found by walking its AST.

Each rule yields Violations keyed by (rule, code). The guard compares the keys of the old and the
new file and rejects only violations the edit *adds* (by count), so idioms the human-written
baseline already has (an absolute ptxas glob, an env var write) are not held against every
later proposal, while a second copy of them is.

The rules protect what the keep decision rests on: prepare.py's fixed evaluation and budget,
the validation split, the seed, and the machine (network, processes, files outside the run).
They are a fence against the obvious and the accidental; harness/verify.py is what makes the
metric unforgeable by the rest.
"""
from __future__ import annotations

import ast
import re
from search import knobs
from collections import Counter
from dataclasses import dataclass

# Modules train.py may import (top-level name). Anything else is rejected: an allowlist fails
# closed when someone finds a module we did not think of.
ALLOWED_IMPORTS = frozenset({
    "__future__", "abc", "argparse", "collections", "contextlib", "copy", "dataclasses", "datetime",
    "enum", "functools", "gc", "glob", "hashlib", "heapq", "inspect", "itertools", "json", "logging",
    "math", "numpy", "operator", "os", "pathlib", "platform", "prepare", "random", "re", "resource",
    "statistics", "string", "sys", "textwrap", "time", "torch", "traceback", "typing", "warnings",
    "kernels", "triton", "tiktoken", "einops", "runtime",
})
# Named categories, so a rejection says *why* a module is refused.
NETWORK_MODULES = frozenset({"socket", "urllib", "urllib3", "requests", "http", "httpx", "aiohttp",
                             "ftplib", "smtplib", "telnetlib", "ssl", "xmlrpc", "websocket",
                             "websockets", "paramiko", "asyncio", "socketserver"})
PROCESS_MODULES = frozenset({"subprocess", "multiprocessing", "pty", "pexpect", "concurrent", "signal"})
DYNAMIC_MODULES = frozenset({"importlib", "builtins", "ctypes", "cffi", "marshal", "pickle", "runpy",
                             "code", "codeop", "types", "imp", "zipimport", "shutil", "tempfile"})

# Builtins that run or reach arbitrary code or rebind globals by name.
FORBIDDEN_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "globals", "locals", "vars",
                                "breakpoint", "__builtins__"})
# Attributes that reach into interpreter internals (frames, closures, globals of other modules).
FORBIDDEN_ATTRS = frozenset({"__dict__", "__globals__", "__code__", "__closure__", "__defaults__",
                             "__kwdefaults__", "__builtins__", "__subclasses__", "__bases__", "__mro__",
                             "__getattribute__", "__setattr__", "__delattr__", "__loader__", "__spec__",
                             "f_globals", "f_locals", "f_back", "f_builtins", "gi_frame", "tb_frame",
                             "co_code", "__wrapped__"})
# Fully-qualified names train.py may not touch at all (prefix match on the dotted name).
FORBIDDEN_NAMES = (
    "os.system", "os.popen", "os.exec", "os.spawn", "os.fork", "os.posix_spawn", "os.kill",
    "os.putenv", "os.unsetenv", "os.chdir", "os.symlink", "os.link", "os.remove", "os.unlink",
    "os.rmdir", "os.removedirs", "os.rename", "os.chmod", "os.chown", "os.truncate",
    "sys.modules", "sys.path", "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache",
    "sys.settrace", "sys.setprofile", "sys._getframe", "sys.addaudithook", "sys.stdin",
    "inspect.currentframe", "inspect.stack", "inspect.getouterframes", "inspect.getmembers",
    "inspect.trace", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "torch.hub", "torch.distributed", "torch.multiprocessing", "torch.utils.cpp_extension",
    "torch.ops.load_library", "torch.classes.load_library", "torch.library",
    "pathlib.Path.home", "os.path.expanduser",
)
# Module attributes that are configuration, not behaviour: assigning them is fine.
CONFIG_PREFIXES = ("torch.backends.", "torch._inductor.config.", "torch._dynamo.config.",
                   "torch._functorch.config.")
# prepare.py's public API (docs/contracts.md); the rest of prepare is off limits (val shards, paths).
PREPARE_API = frozenset({"TIME_BUDGET", "MAX_SEQ_LEN", "EVAL_TOKENS", "VOCAB_SIZE", "PROFILE",
                         "Tokenizer", "get_token_bytes", "make_dataloader", "evaluate_bpb",
                         "data_fingerprint", "describe", "TOKENIZER_DIR"})
# Names that carry the fixed budget/evaluation: never bound in train.py.
PROTECTED_NAMES = frozenset({"TIME_BUDGET", "MAX_SEQ_LEN", "EVAL_TOKENS", "VOCAB_SIZE", "PROFILE",
                             "evaluate_bpb", "make_dataloader", "get_token_bytes", "Tokenizer"})
# Environment the harness owns: train.py may not write any AUTORESEARCH_ variable, nor read these.
HARNESS_ENV_PREFIX = "AUTORESEARCH_"
UNREADABLE_ENV = frozenset({"AUTORESEARCH_CACHE", "AUTORESEARCH_TIME_BUDGET", "AUTORESEARCH_PROFILE"})
# Split names that mean held-out data.
VAL_SPLIT_WORDS = frozenset({"val", "valid", "validation"})
# Calls that set a random seed; a new or changed one is a seed change.
SEED_CALLS = frozenset({"manual_seed", "manual_seed_all", "seed", "set_rng_state", "set_seed", "seed_all"})
SEED_NAME_RE = re.compile(r"SEED")
# A path literal that leaves the run's directory: absolute, home-relative, or climbing with '..'.
OUTSIDE_PATH_RE = re.compile(r"^(/[\w.\-*]|~)|(^|[/\\])\.\.([/\\]|$)")
# Calls that write files, and os.environ methods that write the environment.
WRITE_CALLS = frozenset({"open", "write_text", "write_bytes", "save", "savez", "mkdir", "makedirs",
                         "touch", "replace", "rename", "unlink", "rmdir", "symlink_to", "hardlink_to"})
ENV_WRITE_METHODS = frozenset({"update", "pop", "popitem", "clear", "__setitem__", "__delitem__"})


@dataclass(frozen=True)
class Violation:
    rule: str      # short rule id: import, monkeypatch, budget, val_split, seed, write, dynamic, ...
    line: int
    message: str
    code: str      # the offending code, normalised (the comparison key with `rule`)

    @property
    def key(self) -> tuple[str, str]:
        return (self.rule, self.code)


class _Checker(ast.NodeVisitor):
    def __init__(self):
        self.aliases: dict[str, str] = {}   # local name -> dotted module/object it was imported as
        self.refs: dict[str, str] = {}      # local name -> what an assignment made it (`j = json`)
        self.from_names: set[str] = set()   # names bound by `from X import name` (not modules)
        self.out: list[Violation] = []
        self.seed_consts: dict[str, str] = {}
        self.budget_refs = 0

    # -- helpers ---------------------------------------------------------------------------------
    def flag(self, rule, node, message, code=None):
        """Record a violation; `code` overrides the comparison key where only the count matters."""
        if code is None:
            code = ast.unparse(node) if isinstance(node, ast.AST) else str(node)
        self.out.append(Violation(rule, getattr(node, "lineno", 0), message, code[:300]))

    def dotted(self, node) -> str | None:
        """'torch.nn.functional.cross_entropy' for F.cross_entropy when F is an import alias."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and (node.id in self.aliases or node.id in self.refs):
            return ".".join([self.aliases.get(node.id) or self.refs[node.id], *reversed(parts)])
        return None

    def root_name(self, node) -> str | None:
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            node = node.func if isinstance(node, ast.Call) else node.value
        return node.id if isinstance(node, ast.Name) else None

    # -- imports ---------------------------------------------------------------------------------
    def _check_module(self, node, module):
        top = module.split(".")[0]
        if top in NETWORK_MODULES:
            self.flag("network", node, f"network module {module} is not allowed in train.py")
        elif top in PROCESS_MODULES:
            self.flag("process", node, f"process module {module} is not allowed in train.py")
        elif top in DYNAMIC_MODULES:
            self.flag("dynamic", node, f"module {module} can run or rewrite code; not allowed in train.py")
        elif top not in ALLOWED_IMPORTS:
            self.flag("import", node, f"module {module} is not on train.py's import allowlist")
        elif any((module + ".").startswith(p + ".") for p in FORBIDDEN_NAMES):
            self.flag("forbidden", node, f"{module} is not allowed in train.py")

    def visit_Import(self, node):
        for a in node.names:
            self._check_module(node, a.name)
            if a.asname:
                self.aliases[a.asname] = a.name
            else:
                top = a.name.split(".")[0]
                self.aliases[top] = top

    def visit_ImportFrom(self, node):
        if node.level:
            self.flag("import", node, "relative imports are not allowed in train.py")
            return
        self._check_module(node, node.module or "")
        for a in node.names:
            if a.name == "*":
                self.flag("import", node, f"'from {node.module} import *' hides what it binds")
                continue
            full = f"{node.module}.{a.name}"
            self._check_name(node, full)
            self.aliases[a.asname or a.name] = full
            self.from_names.add(a.asname or a.name)

    # -- names, attributes, bindings ---------------------------------------------------------------
    def _check_name(self, node, full: str):
        # every tail of the chain too: logging.handlers.os.system reaches os.system
        parts = full.split(".")
        tails = [".".join(parts[i:]) for i in range(len(parts))]
        if any(t == p or t.startswith(p + ".") or (p.endswith(("exec", "spawn")) and t.startswith(p))
               for t in tails for p in FORBIDDEN_NAMES):
            self.flag("forbidden", node, f"{full} is not allowed in train.py")
        if full.startswith("prepare."):
            name = full.split(".")[1]
            if name not in PREPARE_API:
                self.flag("prepare_api", node, f"prepare.{name} is not part of prepare's public API "
                                               "(train.py may use only the contract's names)")
            if name == "TIME_BUDGET":
                self.budget_refs += 1

    def visit_Name(self, node):
        if node.id in FORBIDDEN_BUILTINS and node.id not in self.aliases:
            self.flag("dynamic", node, f"{node.id} can run or rebind code by name; not allowed in train.py")
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._binding(node, node.id)
        elif node.id in self.aliases or node.id in self.refs:
            self._check_name(node, self.aliases.get(node.id) or self.refs[node.id])

    def visit_Attribute(self, node):
        if node.attr in FORBIDDEN_ATTRS:
            self.flag("dynamic", node, f"attribute {node.attr} reaches interpreter internals")
        full = self.dotted(node)
        if full is not None:
            self._check_name(node, full)
            if isinstance(node.ctx, (ast.Store, ast.Del)) and not full.startswith(CONFIG_PREFIXES):
                self.flag("monkeypatch", node, f"assigning {full} patches an imported module "
                                               "(prepare, time, torch... are fixed)")
            if full.startswith("os.environ.") and node.attr in ENV_WRITE_METHODS:
                self.flag("env", node, f"os.environ.{node.attr} writes the environment the harness owns")
            # Only the outermost attribute of a chain is checked; do not re-flag the inner ones.
            return
        self.generic_visit(node)

    def visit_Assign(self, node):
        """`j = json` or `h = logging.handlers`: the new name is the module under another name."""
        source = node.value
        full = self.dotted(source) if isinstance(source, (ast.Attribute, ast.Name)) else None
        self.generic_visit(node)              # the targets' own bindings first (a reassignment forgets)
        if full is not None:
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id not in self.aliases:
                    self.refs[t.id] = full

    def visit_Subscript(self, node):
        full = self.dotted(node.value)
        if isinstance(node.ctx, (ast.Store, ast.Del)) and full is not None:
            key = node.slice.value if isinstance(node.slice, ast.Constant) else None
            if full == "os.environ":
                if not isinstance(key, str) or key.startswith(HARNESS_ENV_PREFIX):
                    self.flag("env", node, "train.py may set only literal, non-AUTORESEARCH_ environment variables")
            elif not full.startswith(CONFIG_PREFIXES):
                self.flag("monkeypatch", node, f"item assignment on {full} patches an imported module")
        self.generic_visit(node)

    def _binding(self, node, name):
        self.refs.pop(name, None)
        if name in PROTECTED_NAMES:
            self.flag("budget", node, f"train.py may not bind {name}: it belongs to prepare.py's fixed setup")
        elif name in self.aliases and not self._rebindable(name):
            self.flag("monkeypatch", node, f"rebinding {name} (imported as {self.aliases[name]}) "
                                           "replaces what the training or evaluation relies on")

    def _rebindable(self, name) -> bool:
        """A function taken with `from torch... import f` lives in train.py's own namespace (the
        evaluation never sees it): wrapping it, e.g. f = torch.compile(f), is fine. Module aliases,
        and anything from prepare or time (the budget clock), are not."""
        return name in self.from_names and self.aliases[name].split(".")[0] not in ("prepare", "time")

    def visit_arg(self, node):
        if node.arg in PROTECTED_NAMES:
            self.flag("budget", node, f"a parameter may not shadow {node.arg} from prepare.py")

    def visit_FunctionDef(self, node):
        self._binding(node, node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self._binding(node, node.name)
        self.generic_visit(node)

    def visit_Global(self, node):
        for name in node.names:
            if name in PROTECTED_NAMES or name in self.aliases:
                self.flag("budget", node, f"'global {name}' would rebind a fixed name")

    # -- calls -----------------------------------------------------------------------------------
    def visit_Call(self, node):
        func = node.func
        fname = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        full = self.dotted(func) or (self.aliases.get(fname) if isinstance(func, ast.Name) else None) or fname
        if fname in ("setattr", "delattr") and node.args:
            target = self.root_name(node.args[0])
            if target in self.aliases or target in self.refs or not isinstance(node.args[0], ast.Name):
                self.flag("monkeypatch", node, f"{fname} on {ast.unparse(node.args[0])} patches an imported object")
        if fname == "getattr" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                and node.args[1].value in FORBIDDEN_ATTRS:
            self.flag("dynamic", node, f"getattr of {node.args[1].value} reaches interpreter internals")
        if fname == "getattr" and len(node.args) > 1 and self.dotted(node.args[0]) is not None:
            name = node.args[1].value if isinstance(node.args[1], ast.Constant) else None
            if not isinstance(name, str):
                self.flag("dynamic", node, f"getattr on {ast.unparse(node.args[0])} with a computed name")
            else:
                self._check_name(node, f"{self.dotted(node.args[0])}.{name}")
        if full.endswith("make_dataloader"):
            self._check_split(node)
        if full.endswith("evaluate_bpb"):
            self.flag("eval_calls", node, "evaluate_bpb runs once, at the end: more calls select on validation data",
                      code="evaluate_bpb(...)")
        if fname in SEED_CALLS:
            self.flag("seed", node, "a new or changed seed call: a seed change is not an improvement")
        if fname in WRITE_CALLS:
            self._check_write(node, fname)
        if full in ("os.environ.get", "os.getenv", "os.environ.setdefault") and node.args:
            key = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
            if key in UNREADABLE_ENV:
                self.flag("env", node, f"{key} belongs to prepare.py; train.py reads it through prepare")
            if full.endswith("setdefault") and (not isinstance(key, str) or key.startswith(HARNESS_ENV_PREFIX)):
                self.flag("env", node, "os.environ.setdefault of a harness variable")
        self.generic_visit(node)

    def _check_split(self, node):
        split = next((k.value for k in node.keywords if k.arg == "split"), None)
        if split is None and len(node.args) >= 4:
            split = node.args[3]
        if not (isinstance(split, ast.Constant) and split.value == "train"):
            self.flag("val_split", node, "make_dataloader must get the literal split 'train' in train.py "
                                         "(the validation split is for evaluate_bpb only)")

    def _check_write(self, node, fname):
        mode = next((k.value for k in node.keywords if k.arg == "mode"), None)
        if fname == "open":
            mode = mode or (node.args[1] if len(node.args) > 1 else None)
            if not (isinstance(mode, ast.Constant) and isinstance(mode.value, str)
                    and any(c in mode.value for c in "wax+")):
                return  # reading is fine
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            for const in ast.walk(arg):
                if isinstance(const, ast.Constant) and isinstance(const.value, str) and (
                        OUTSIDE_PATH_RE.search(const.value) or const.value.endswith((".py", ".pth", ".pyc"))
                        or "prepare" in const.value):
                    self.flag("write", node, f"{fname} writes {const.value!r}: outside the run's directory "
                                             "or onto code")

    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, str):
            if v.strip().lower() in VAL_SPLIT_WORDS:
                self.flag("val_split", node, f"the string {v!r} names held-out data")
            elif OUTSIDE_PATH_RE.search(v) and "\n" not in v:
                self.flag("write", node, f"path {v!r} points outside the run's directory")
            elif v.startswith(HARNESS_ENV_PREFIX) and v in UNREADABLE_ENV:
                self.flag("env", node, f"{v} belongs to prepare.py")

    # -- module level ----------------------------------------------------------------------------
    def visit_BinOp(self, node):
        sides = (node.left, node.right)
        if any(self._is_budget(s) for s in sides):
            other = node.right if self._is_budget(node.left) else node.left
            grows = isinstance(node.op, (ast.Mult, ast.Add, ast.Pow, ast.LShift)) or (
                isinstance(node.op, (ast.Div, ast.FloorDiv)) and self._is_budget(node.left))
            if grows and not (isinstance(other, ast.Constant) and isinstance(other.value, (int, float))
                              and self._shrinks(node.op, other.value)):
                self.flag("budget", node, "arithmetic on TIME_BUDGET may stretch the fixed budget")
        self.generic_visit(node)

    def _is_budget(self, node):
        return (isinstance(node, ast.Name) and node.id == "TIME_BUDGET") or (
            self.dotted(node) == "prepare.TIME_BUDGET")

    @staticmethod
    def _shrinks(op, c):
        if isinstance(op, ast.Mult):
            return 0 <= c <= 1
        if isinstance(op, ast.Add):
            return c <= 0
        if isinstance(op, (ast.Div, ast.FloorDiv)):
            return c >= 1
        return False


def seed_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = value lines whose name mentions SEED, as written."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and SEED_NAME_RE.search(t.id):
                    out[t.id] = ast.unparse(node.value)
    return out


def scan(source: str) -> tuple[ast.Module, list[Violation], int]:
    """Parse and check one source: (tree, violations, references to prepare.TIME_BUDGET)."""
    tree = knobs.parse(source)
    checker = _Checker()
    checker.visit(tree)
    return tree, checker.out, checker.budget_refs


def new_violations(old: list[Violation], new: list[Violation]) -> list[Violation]:
    """Violations in `new` beyond those already in `old` (by key and count)."""
    budget = Counter(v.key for v in old)
    out = []
    for v in new:
        if budget[v.key] > 0:
            budget[v.key] -= 1
        else:
            out.append(v)
    return out
