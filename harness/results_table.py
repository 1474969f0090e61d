"""results.tsv as one typed table: what the loop writes, and what the loop, recovery and the
dashboard read back.

- RESULT_COLUMNS, ResultRow: one row, formatted (the writer, harness/results.py) and parsed.
- parse_results: the one parser. A corrupt line is a flagged ResultLine with a clear message,
  never a crash, never dropped; a lost header loses no row.
- ResultTable: every line as read (`lines`, the dashboard shows them all, the bad ones flagged),
  the well-formed ones (`rows`, what the loop and recovery act on), every problem as
  "line N: why" (`problems`).
- read_table: the file, parsed (a missing file is an empty table that says so).

The file is data: nothing here raises on its content.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from harness.secrets import clean_text

# The header of program.md, exactly; never extra columns (richer data goes to the journal).
RESULT_COLUMNS = ("commit", "val_bpb", "memory_gb", "status", "description")
RESULT_HEADER = "\t".join(RESULT_COLUMNS)
STATUSES = ("keep", "discard", "crash")
# The val_bpb cell of a discard that has no figure (never trained, or its evaluation failed):
# `nan`, which pandas' read_csv reads as a missing value, so no reader takes it for a result. A
# crash carries 0.000000 as the reference protocol writes it (its status says crash; the
# reference analysis leaves crash rows out by status).
NO_FIGURE = "nan"
# Descriptions are one line and tab-free so the TSV stays 5 columns.
MAX_DESCRIPTION = 200
# Characters of a bad cell quoted in a problem message.
QUOTE_CHARS = 40
# What a row says about itself when it is the last line and has no newline yet.
PARTIAL_NOTE = "last line has no newline yet (being written?)"


def clean_description(text: str) -> str:
    """One results.tsv cell of proposed or imported text: the one cleaning (harness/secrets.py
    clean_text: no escapes, controls, NUL or bidi characters, no secrets), on one line, no tab."""
    return clean_text(text, one_line=True)[:MAX_DESCRIPTION] or "(no description)"


def finite(v) -> bool:
    """A real number (not bool) that is finite; ints too large for a float are not."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def fnum(v) -> float | None:
    """v as a finite float, else None (bools, strings, inf and nan are not figures)."""
    return float(v) if finite(v) else None


@dataclass
class ResultRow:
    """One results.tsv row. val_bpb/memory_gb are None when the cell is not a number."""
    commit: str
    val_bpb: float | None
    memory_gb: float | None
    status: str
    description: str

    def format(self) -> str:
        """The TSV line (with its newline): a crash carries 0.000000 and 0.0 (the reference
        protocol), a discard without a figure `nan` (NO_FIGURE), never a 0.0 that reads as a result."""
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        crash = self.status == "crash"
        if crash:
            bpb = f"{0.0:.6f}"
        elif finite(self.val_bpb):
            bpb = f"{float(self.val_bpb):.6f}"
        else:
            bpb = NO_FIGURE
        mem = 0.0 if crash or not finite(self.memory_gb) else float(self.memory_gb)
        commit = "".join(clean_text(self.commit, one_line=True).split())[:7]   # never a tab or newline
        return f"{commit}\t{bpb}\t{mem:.1f}\t{self.status}\t{clean_description(self.description)}\n"

    @classmethod
    def parse(cls, raw: str) -> tuple["ResultRow", list[str]]:
        """(row, problems): never raises; a malformed line gives what could be read plus why not."""
        cells = raw.rstrip("\r\n").split("\t")
        problems = []
        if len(cells) < len(RESULT_COLUMNS):
            problems.append(f"{len(cells)} of {len(RESULT_COLUMNS)} columns")
        elif len(cells) > len(RESULT_COLUMNS):
            # A tab inside the description: keep the text, it is still one experiment.
            cells = cells[:4] + ["\t".join(cells[4:])]
            problems.append("extra tab(s) in the description")
        commit, bpb, mem, status, desc = (cells + [""] * len(RESULT_COLUMNS))[:len(RESULT_COLUMNS)]
        row = cls(commit, _cell_float(bpb), _cell_float(mem), status, desc)
        for name, text, value in (("val_bpb", bpb, row.val_bpb), ("memory_gb", mem, row.memory_gb)):
            if name == "val_bpb" and text == NO_FIGURE and status in ("discard", "crash"):
                continue   # a discard (or crash) without a figure, as the writer marks it
            if value is not None and not math.isfinite(value):
                problems.append(f"{name} {text!r} is not finite")
            elif value is None and text:
                problems.append(f"{name} {text[:QUOTE_CHARS]!r} is not a number")
            elif value is None and len(cells) == len(RESULT_COLUMNS):
                problems.append(f"{name} is empty")
        if status and status not in STATUSES:
            problems.append(f"unknown status {status[:QUOTE_CHARS]!r}")
        elif not status and len(cells) == len(RESULT_COLUMNS):
            problems.append("status is empty")
        return row, problems


def _cell_float(text: str) -> float | None:
    try:
        return float(text)
    except (ValueError, OverflowError):
        return None


def _word(v: float | None) -> str | None:
    """What to show instead of a number that is not finite; None for a finite one (or none)."""
    if v is None or math.isfinite(v):
        return None
    return "nan" if v != v else ("inf" if v > 0 else "-inf")


@dataclass
class ResultLine:
    """One non-blank line of results.tsv after the header, as parsed."""
    n: int                       # 1-based row number (file order): the experiment's place
    line: int                    # 1-based line number in the file
    raw: str
    row: ResultRow
    problems: list[str] = field(default_factory=list)
    partial: bool = False        # the last line, without its newline yet (being written?)

    @property
    def ok(self) -> bool:
        return not self.problems

    # ---- the cells, typed (a cell that is not a finite number reads as None)
    @property
    def commit(self) -> str:
        return self.row.commit

    @property
    def status(self) -> str:
        return self.row.status

    @property
    def description(self) -> str:
        return self.row.description

    @property
    def val_bpb(self) -> float | None:
        return fnum(self.row.val_bpb)

    @property
    def memory_gb(self) -> float | None:
        return fnum(self.row.memory_gb)

    @property
    def figure(self) -> float | None:
        """The row's result, or None when it has none: a crash, a discard marked `nan`, and a
        discard at exactly 0.0 (files written before NO_FIGURE, and the reference's crashes;
        no model reaches 0 bits per byte)."""
        v = self.val_bpb
        if v is None or self.status == "crash" or (v == 0.0 and self.status != "keep"):
            return None
        return v

    @property
    def val_text(self) -> str | None:
        """"inf", "-inf" or "nan" for a val_bpb cell that is a number but no figure, else None
        (also for the writer's NO_FIGURE on a discard or crash: that row simply has no figure)."""
        if not self.problems and self.row.status in ("discard", "crash") and self.row.val_bpb != self.row.val_bpb:
            return None
        return _word(self.row.val_bpb)

    @property
    def flagged(self) -> bool:
        """Malformed, or not finished yet: shown with a warning."""
        return bool(self.problems) or self.partial

    @property
    def problem(self) -> str | None:
        """Everything wrong with the line in one sentence, or None."""
        return "; ".join(self.problems + ([PARTIAL_NOTE] if self.partial else [])) or None


@dataclass
class ResultTable:
    """results.tsv, parsed: every line kept (flagged when malformed) plus what is wrong with the file."""
    lines: list[ResultLine] = field(default_factory=list)
    file_problems: list[str] = field(default_factory=list)   # about the file: header, emptiness, absence
    complete: int = 0            # rows that end with a newline
    missing: bool = False        # no file (or unreadable): said in file_problems

    @property
    def rows(self) -> list[ResultLine]:
        """The well-formed lines (a partial one too if it parses): what the loop acts on."""
        return [ln for ln in self.lines if ln.ok]

    @property
    def problems(self) -> list[str]:
        """Every problem, file-level first, each malformed row as "line N: why"."""
        return self.file_problems + [f"line {ln.line}: {'; '.join(ln.problems)}" for ln in self.lines if ln.problems]

    @property
    def flagged(self) -> list[ResultLine]:
        return [ln for ln in self.lines if ln.flagged]


def parse_results(text: str) -> ResultTable:
    """The one results.tsv parser. Without a valid header the first line is read as a row
    (a lost header loses no experiment); every row is returned, flagged when malformed."""
    out = ResultTable()
    if not text.strip():
        out.file_problems.append("results.tsv is empty (no header yet)")
        return out
    lines = text.split("\n")
    terminated = text.endswith("\n")
    if terminated:
        lines.pop()                       # the empty string after the final newline
    start = 0
    if lines[0].rstrip("\r") == RESULT_HEADER:
        start = 1
    else:
        out.file_problems.append(f"line 1: header is {lines[0][:80]!r}, expected {RESULT_HEADER!r}; "
                                 "reading rows anyway")
    n = 0
    for i in range(start, len(lines)):
        raw = lines[i].rstrip("\r")
        if not raw.strip():
            continue
        n += 1
        partial = (i == len(lines) - 1) and not terminated
        row, problems = ResultRow.parse(raw)
        out.lines.append(ResultLine(n, i + 1, raw, row, problems, partial))
        if not partial:
            out.complete = n
    return out


def read_table(path: Path) -> ResultTable:
    """results.tsv from disk (bytes not UTF-8 read as U+FFFD; line ends as Python's text mode
    reads them, as recovery counts lines); a missing or unreadable file is an empty table
    that says so."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return ResultTable(file_problems=[f"{path.name} not found"], missing=True)
    except OSError as e:
        return ResultTable(file_problems=[f"cannot read {path.name}: {e.strerror}"], missing=True)
    return parse_results(text)


# ---- Reading values out of data that is not trusted (a journal a run may have corrupted): a value
# is a number, an int, a string or a dict only when it really is one.
def as_int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def as_str(v) -> str | None:
    return v if isinstance(v, str) else None


def as_dict(v) -> dict:
    return v if isinstance(v, dict) else {}


# A val_bpb shown or drawn as a result: bits per byte are never negative, and past MAX_BPB a figure
# is broken, not a model (a byte is 8 bits; a model far worse than a uniform guess is still
# single or double digits). 1e308 printed is 309 digits, and 1e308 - -1e308 overflows to inf.
MAX_BPB = 1e6


def bpb_figure(v) -> float | None:
    """`v` when it can be a val_bpb (finite, 0 <= v <= MAX_BPB), else None."""
    v = fnum(v)
    return v if v is not None and 0.0 <= v <= MAX_BPB else None


# Past this magnitude a number is printed in short scientific form (a hostile file's 1e308 is 309
# digits in fixed notation; no real count of dollars, seconds or tokens comes near it).
LONG_NUMBER = 1e15


def figure_text(v, spec: str = ".6f") -> str:
    """A number as a report prints it: format `spec` when finite and under LONG_NUMBER, short
    scientific form past it, "-" for none (inf, nan, an int too large for a float, not a number)."""
    v = fnum(v)
    if v is None:
        return "-"
    return format(v, spec) if abs(v) < LONG_NUMBER else f"{v:.3g}"
