"""search/knobs.py: reading and rewriting the CAPS knob lines of train.py."""
import pytest

from search import knobs
from tests.loop_fixtures import REPO

SRC = '''"""doc"""
import os

DEPTH = 8  # transformer layers
LR = 0.04   # learning rate # with a hash
PATTERN = "SS#L"  # a hash inside the string
FLAG = True
LIST = [1, 2]  # not a simple literal: not a knob
lower = 3
CALL = os.getcwd()


def f():
    INNER = 5
    return INNER
'''


def test_read():
    k = knobs.read_knobs(SRC)
    assert list(k) == ["DEPTH", "LR", "PATTERN", "FLAG"]
    assert k["LR"].value == 0.04 and k["LR"].comment == "# learning rate # with a hash"
    assert k["PATTERN"].value == "SS#L" and k["PATTERN"].comment == "# a hash inside the string"
    assert k["FLAG"].comment == ""


def test_rewrite_keeps_everything_else():
    new = knobs.set_knobs(SRC, {"DEPTH": 10, "LR": 0.04 * 2 ** 0.5, "PATTERN": "SSSL", "FLAG": False})
    assert "DEPTH = 10  # transformer layers\n" in new
    assert "LR = 0.05657   # learning rate # with a hash\n" in new
    assert 'PATTERN = "SSSL"  # a hash inside the string\n' in new
    assert "FLAG = False\n" in new
    changed = [(a, b) for a, b in zip(SRC.splitlines(), new.splitlines()) if a != b]
    assert len(changed) == 4 and len(SRC.splitlines()) == len(new.splitlines())
    assert knobs.values(new)["LR"] == 0.05657


def test_int_to_float_and_type_checks():
    assert "LR = 1.0" in knobs.set_knobs(SRC, {"LR": 1})
    with pytest.raises(TypeError):
        knobs.set_knobs(SRC, {"DEPTH": "deep"})
    with pytest.raises(KeyError):
        knobs.set_knobs(SRC, {"NOPE": 1})


def test_format_literal():
    assert knobs.format_literal(2.0) == "2.0"
    assert knobs.format_literal(3e-5) == "3e-05"
    assert knobs.format_literal(0.1 + 0.2) == "0.3"
    assert knobs.format_literal(True) == "True"


def test_real_train_py_round_trip():
    src = (REPO / "train.py").read_text()
    k = knobs.values(src)
    assert "DEPTH" in k and isinstance(k["DEPTH"], int)
    new = knobs.set_knobs(src, {"DEPTH": k["DEPTH"] + 1})
    assert knobs.values(new)["DEPTH"] == k["DEPTH"] + 1
    compile(new, "train.py", "exec")
    assert knobs.code_fingerprint(new) == knobs.code_fingerprint(src)
    assert knobs.code_fingerprint(src + "\nX_ = 1\n") != knobs.code_fingerprint(src)
