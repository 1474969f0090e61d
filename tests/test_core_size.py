"""scripts/core_size.py counts a class's attributes honestly: every way a method sets one."""
from scripts.core_size import class_attributes


def test_class_attributes_count_tuple_chained_and_annotated_targets(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "class A:\n"
        "    x: int\n"
        "    y = 1\n"
        "    def __init__(self):\n"
        "        self.a, (self.b, *self.c) = 1, (2, 3)\n"
        "        self.d = self.e = 0\n"
        "        self.f: int = 0\n"
        "        self.a += 1\n"
        "        other.g = 1\n"
        "    def m(self):\n"
        "        [self.h, self.i] = 1, 2\n"
        "class B:\n"
        "    pass\n")
    assert class_attributes(src) == [("A", 10), ("B", 0)]   # x y a b c d e f h i, and no `other.g`
