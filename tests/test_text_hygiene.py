"""Proposed and imported text is cleaned by the one function (harness/secrets.py clean_text) before
it reaches results.tsv (through its real writer), a terminal (the console's lines and its live
panel) or report.md (tests/test_report_hostile.py): no terminal escape, control character, NUL or
bidi character gets through; results.tsv keeps its 5 plain-text columns; a description's newline
never starts a line of its own; rich never reads a description as markup."""
import io
import unicodedata

from rich.console import Console as RichConsole

from agent import console as con
from harness.experiment_record import ExperimentRecord
from harness.results import append_record, append_result, init_results, read_results

HOSTILE = [
    "clear \x1b[2J\x1b[H screen and \x1b[31mred\x1b[0m",
    "title \x1b]0;owned\x07 link \x1b]8;;https://evil.example\x1b\\here\x1b]8;;\x1b\\",
    "8-bit \x9b31m csi \x9d0;t\x9c osc \x85 nel",
    "nul\x00 bell\x07 backspace\x08\x08\x08 del\x7f vt\x0b ff\x0c",
    "bidi exe.\u202etxt\u202c \u2066iso\u2069 \u200f\u061c marks",
    "tab\tnewline\nreturn\rthen a fake line: exp 9 abc1234 keep val_bpb 0.100000",
    "zero\u200bwidth\ufeff and tags \U000e0041\U000e0042 and lone \ud800 surrogate",
    "line\u2028separator\u2029paragraph",
]


def _bad(text):
    return [hex(ord(c)) for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) < 0xa0
            or unicodedata.category(c) in ("Cf", "Cs")]


def test_results_tsv_rows_are_plain_five_column_text(tmp_path):
    path = tmp_path / "results.tsv"
    init_results(path)
    for i, desc in enumerate(HOSTILE):
        append_result(path, f"{i:07d}", 1.0 + i / 100, 1.0, "discard", desc)
    rec = ExperimentRecord.of(n=99, commit="abc\t1234567", status="keep", trusted_bpb=0.9, description=HOSTILE[0])
    append_record(path, rec)                                   # the loop's own writer of a record
    raw = path.read_bytes().decode("utf-8")                    # UTF-8 throughout (no lone surrogate)
    lines = raw.split("\n")[1:-1]
    assert len(lines) == len(HOSTILE) + 1
    for line in lines:
        assert line.count("\t") == 4 and "\r" not in line, repr(line)
        assert not _bad(line), (line, _bad(line))
    table = read_results(path)
    assert not table.problems
    assert table.rows[0].description == "clear screen and red"
    assert table.rows[1].description == "title link here"
    assert table.rows[5].description == "tab newline return then a fake line: exp 9 abc1234 keep val_bpb 0.100000"
    assert table.rows[6].description == "zerowidth and tags and lone \ufffd surrogate"
    assert table.rows[-1].commit == "abc1234" and table.rows[-1].description == "clear screen and red"


def test_plain_text_is_written_as_it_is(tmp_path):
    path = tmp_path / "results.tsv"
    init_results(path)
    normal = "lr 0.04 -> 0.02, «warmup» 5%, ünï, 日本語, emoji 😀 (<b>not html</b> & no escaping)"
    append_result(path, "abcdef0", 1.0, 1.0, "keep", normal)
    assert read_results(path).rows[0].description == normal, "results.tsv keeps plain text: nothing escaped"


def test_console_lines_are_clean_and_one_line_per_event(capsys):
    c = con.Console("t", 300, live=False)
    for desc in HOSTILE:
        rec = ExperimentRecord.of(n=3, short="abc1234", status="discard", trusted_bpb=1.01, description=desc,
                                  decision_reason="no gain\n\x1b[32mexp 4 keep\x1b[0m", crash_class=None)
        c.decision(rec)
        c.event(f"exp 5: trying {con.one_line(desc)} -- hypothesis: {con.one_line(desc)}")
    out = capsys.readouterr().out
    assert not _bad(out), _bad(out)
    lines = out.splitlines()
    assert len(lines) == 2 * len(HOSTILE), "each event is one line, whatever the description holds"
    assert all(line.startswith(("exp 3 abc1234 discard", "exp 5: trying")) for line in lines), lines


def test_the_live_panel_reads_no_markup_and_shows_no_escape():
    state = {"phase": "training", "experiment": 3, "started_at": 0.0, "phase_started_at": 0.0,
             "idea": {"description": "[link=https://evil.example]click[/link] [bold red]loud[/] \x1b[5mblink",
                      "hypothesis": "\u202eesrever\nsecond line"},
             "last_decision": "exp 2 keep: [blink]x[/blink] \x1b]0;title\x07"}
    rc = RichConsole(record=True, file=io.StringIO(), width=200, force_terminal=True, color_system="truecolor")
    rc.print(con.render_panel("t", 300, state, now=10.0))
    ansi = rc.file.getvalue()
    text = rc.export_text()
    assert "[link=https://evil.example]click[/link]" in text and "[bold red]loud[/]" in text
    assert "\x1b]8;" not in ansi, "no terminal hyperlink made from a description"
    assert "\x1b[5m" not in ansi and "\x1b]0;" not in ansi and "\u202e" not in ansi
    assert "esrever second line" in text
