"""Parsing Python source from several threads: CPython 3.11's AST construction is not safe when
two threads parse at once ("SystemError: AST constructor recursion depth mismatch", seen with
--workers 2 guarding two proposals together). Every parse of train.py in the harness and the
agent goes through this one lock.
"""
from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _LOCK:
        return ast.parse(source, filename)


def compile_source(source: str, filename: str):
    with _LOCK:
        return compile(source, filename, "exec")
