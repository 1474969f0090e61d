"""The dashboard's experiment numbers hold when results.tsv has a hand-corrupted line: on a real
run folder (the loop, in process), a line mangled by hand keeps its place, the row the loop's
recovery writes back for it takes the number and the mangled line stands for no experiment, and a
line split in two adds no experiment; every later experiment keeps its number in the table, on its
page and in the chart. And every keep says why it was kept, in the table."""
import html
import re

from dashboard.app import create_app
from harness.results import read_results
from tests.dashboard_fixtures import TOKEN
from tests.loop_fixtures import fake_env, fake_repo, run_loop
from tests.test_loop import Scripted, run_in_process
from tests.test_report import make_run

# Eight experiments of the stand-in train.py: kept 1, 2, 5, 8; 6 crashes.
STEPS = [("depth 6", lambda s: s.replace("DEPTH = 4", "DEPTH = 6")),
         ("bias on", lambda s: s.replace("USE_BIAS = False", "USE_BIAS = True")),
         ("lr 0.08", lambda s: s.replace("LR = 0.04", "LR = 0.08")),
         ("better trick", lambda s: s.replace("bpb = 1.0 + 0.01", "bpb = 0.995 + 0.01")),
         ("divide by zero", lambda s: s.replace("def main():\n", "def main():\n    1/0\n")),
         ("lr 0.02", lambda s: s.replace("LR = 0.04", "LR = 0.02")),
         ("best trick", lambda s: s.replace("bpb = 0.995 + 0.01", "bpb = 0.99 + 0.01"))]
MANGLED = "zz!!\t1.04x\t44\tdiscrad\tlr 0.08 (edited by hand)"


def numbers(page: str) -> dict[str, str]:
    """Row number shown -> the commit shown in that row ("—" for a line that is no experiment)."""
    out = {}
    for m in re.finditer(r'data-n="(\d+)">\s*<td class="num">(.*?)</td>\s*<td class="mono">(.*?)</td>', page, re.S):
        shown = re.sub(r"<[^>]+>", "", m.group(2)).strip()
        out.setdefault(shown, []).append(re.sub(r"<[^>]+>", "", m.group(3)).strip())
    return out


def check(c, expect: dict[int, str], extra: int) -> str:
    page = c.get("/t/s/").get_data(as_text=True)
    got = numbers(page)
    assert {int(k): v for k, v in got.items() if k != "—"} == {n: [commit] for n, commit in expect.items()}, got
    assert len(got.get("—", [])) == extra
    for n, commit in expect.items():                     # each experiment's page is its own
        assert html.escape(commit) in c.get(f"/t/s/e/{n}").get_data(as_text=True), n
    svg = c.get("/t/s/chart.svg").get_data(as_text=True)
    assert sorted(int(n) for n in re.findall(r"<title>#(\d+) ", svg)) == sorted(expect)
    return page


def test_a_hand_corrupted_line_shifts_no_experiment_number(tmp_path, monkeypatch):
    repo = fake_repo(tmp_path / "repo")
    lp = run_in_process(repo, tmp_path, monkeypatch, Scripted(STEPS), "--max-experiments", "8", "--fix-tries", "0")
    lp.run_lock.close()                                  # the lock is the process's: the resume below is another loop
    run = repo / ".autoresearch" / "s"
    path = run / "results.tsv"
    rows = read_results(path).rows
    commits = {r.n: r.commit for r in rows}
    assert sorted(commits) == list(range(1, 9))
    lines = path.read_text().splitlines(True)
    lines[4] = MANGLED + "\n"                           # experiment 4 (line 5 of the file), mangled by hand
    path.write_text("".join(lines))
    c = create_app(repo=repo, token=TOKEN).test_client()
    check(c, {n: commits[n] for n in commits if n != 4} | {4: "zz!!"}, extra=0)

    # The loop resumes: recovery writes experiment 4's row back beside the mangled line (it cannot
    # tell the mangled line is experiment 4's), and experiment 9 is appended.
    p = run_loop(repo, fake_env(tmp_path), "--tag", "s", "--resume", "--max-experiments", "9", timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    table = read_results(path)
    assert MANGLED in [ln.raw for ln in table.lines] and len(table.lines) == 10, "the mangled line is left as it was"
    commits = {**commits, 9: table.lines[-1].commit}
    page = check(c, commits, extra=1)
    row = page.split('data-n="0"', 1)[1].split("</tr>", 1)[0]
    assert "no experiment number" in html.unescape(row) and "zz!!" in row

    # A line split in two by hand (a newline typed into experiment 7's description): still 9.
    lines = path.read_text().splitlines(True)
    at = next(i for i, ln in enumerate(lines) if ln.startswith(commits[7][:7]))
    lines[at] = lines[at].replace("\tlr 0.02", "\tlr\n 0.02")
    path.write_text("".join(lines))
    check(c, commits, extra=2)


def test_every_keep_in_the_table_says_why(tmp_path, monkeypatch):
    repo, run = make_run(tmp_path, monkeypatch)
    page = create_app(repo=repo, token=TOKEN).test_client().get("/t/s/").get_data(as_text=True)
    kept = [m for m in re.finditer(r'<tr class="st-keep[^"]*" data-n="(\d+)">(.*?)</tr>', page, re.S)]
    assert sorted(int(m.group(1)) for m in kept) == [1, 2, 5, 8]
    for m in kept:
        why = re.search(r'<div class="why">(.*?)</div>', m.group(2), re.S)
        assert why and why.group(1).startswith("kept on ") and len(why.group(1)) > len("kept on x: y"), m.group(0)
    assert '<div class="why">' not in "".join(re.findall(r'<tr class="st-(?:discard|crash)[^"]*".*?</tr>', page, re.S))


def test_every_keep_says_why_on_the_console_and_the_dashboard_whatever_its_ground():
    """A keep on efficiency, on simplicity, on the metric, and one with no reason recorded: the
    console's verdict line and the dashboard's row both say why (the ground and the reason)."""
    from agent.console import decision_line
    from dashboard.data import row_view
    from harness.experiment_record import ExperimentRecord
    from harness.results_table import parse_results
    cases = [("efficiency", "efficiency: 31% fewer FLOPs per token at an equal result (2.700100 vs 2.700000)",
              "kept on efficiency: 31% fewer FLOPs per token"),
             ("simplicity", "simplicity: 12 fewer lines of code with an equal result",
              "kept on simplicity: 12 fewer lines"),
             ("metric", "P(better) 0.9931 >= 0.99 over 2 runs", "kept on metric: P(better) 0.9931"),
             (None, "", "kept on the judge's call: no reason recorded")]
    for basis, reason, said in cases:
        rec = ExperimentRecord.of(n=7, commit="e" * 40, short="eeeeeee", status="keep", description="smaller MLP",
                                  decision_reason=reason, verdicts={"judge": {"basis": basis}} if basis else {})
        line = decision_line(rec)
        assert line.startswith("exp 7 eeeeeee keep") and f"-- {said}" in line, line
        row = parse_results("commit\tval_bpb\tmemory_gb\tstatus\tdescription\neeeeeee\t2.7001\t1.0\tkeep\tsmaller MLP\n")
        assert row_view(row.lines[0], rec)["why"].startswith(said)
        discard = ExperimentRecord.of(n=7, commit="e" * 40, status="discard", decision_reason="worse")
        assert row_view(row.lines[0], discard)["why"] is None, "a row says why it was kept only when it was"
