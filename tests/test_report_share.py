"""The report's part to share on real run folders: progress.png, the hardware and its branch, the
terms (hardware, budget, data), the cost per bpb gained (report and dashboard), imported runs."""
import json
from dataclasses import replace

from agent import hardware, report, report_progress
from dashboard.app import create_app
from harness.experiment_record import experiment_records
from harness.results import read_journal, read_results
from runfiles.shared_results import CostPerGain
from tests.dashboard_fixtures import TOKEN
from tests.loop_fixtures import git, loop_run_folder
from tests.test_import_run import _import, reference_run
from tests.test_report_progress import png_title
from tests.test_report import make_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_hardware_names_and_slugs(tmp_path):
    assert hardware.slug("NVIDIA H200") == "nvidia-h200"
    assert hardware.slug("NVIDIA GeForce RTX 4090") == "nvidia-geforce-rtx-4090"
    assert hardware.slug("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz") == "intel-xeon-platinum-8375c"
    assert hardware.slug("AMD EPYC 7763 64-Core Processor") == "amd-epyc-7763"
    assert hardware.slug("///") == "unknown" and len(hardware.slug("x" * 100)) <= hardware.MAX_SLUG
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Core(TM) i7-9700K CPU @ 3.60GHz\n")
    assert hardware.cpu_name(info) == "Intel(R) Core(TM) i7-9700K CPU @ 3.60GHz"
    assert hardware.cpu_name(tmp_path / "absent") is None
    hw = hardware.detect()
    assert hw["kind"] in ("gpu", "cpu", "unknown") and hw["slug"] == hardware.slug(hw["name"])
    assert git(tmp_path, "check-ref-format", "--branch", hardware.branch_for(hw["slug"], "may29"))


NO_DRIVER = """
import json, sys
from agent import hardware
hardware.GPU_DRIVER_PATHS = (sys.argv[1],)
hw = hardware.detect()
print(json.dumps({"hw": hw, "torch": "torch" in sys.modules}))
"""


def test_without_a_gpu_driver_the_hardware_is_named_without_importing_torch(tmp_path):
    """The loop's end-of-run report names the hardware: on a machine with no GPU driver that costs
    no torch import; where a driver shows itself, torch is asked as before."""
    import subprocess
    import sys
    from tests.loop_fixtures import REPO
    absent = tmp_path / "no-driver"
    p = subprocess.run([sys.executable, "-c", NO_DRIVER, str(absent)], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout)
    assert got["torch"] is False and got["hw"]["kind"] in ("cpu", "unknown")
    absent.write_text("")                          # a driver node: torch is imported to ask it
    p = subprocess.run([sys.executable, "-c", NO_DRIVER, str(absent)], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["torch"] is True


def test_the_report_writes_progress_png_and_files_the_final_best(tmp_path):
    run = loop_run_folder(tmp_path, "share", 8)
    got = report.report(run, branches=True)
    out = run / "report"
    png = (out / "progress.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
    rows = read_results(run / "results.tsv").rows
    pts = report_progress.points(run)
    assert [p.n for p in pts] == [r.n for r in rows]
    best, running = None, []
    for r in rows:
        if r.status == "keep":
            best = r.val_bpb if best is None else min(best, r.val_bpb)
            running.append((r.n, best))
    assert report_progress.running_best(pts) == running
    hw = hardware.detect()
    branch = f"exp/{hw['slug']}/share"
    assert git(run, "rev-parse", branch) == got["summary"]["final"]
    md = (out / "report.md").read_text()
    assert f"Hardware: {hw['name']}" in md and "budget: 1 s of training per run" in md
    assert "data feedbeef0001 (fake, profile tiny)" in md and f"- branch: {branch}" in md
    page = (out / "report.html").read_text()
    assert '<img src="progress.png"' in page and "Results to share" in page


def test_cost_per_bpb_gained_in_the_report_and_the_dashboard(tmp_path, monkeypatch):
    repo, run = make_run(tmp_path, monkeypatch)   # scripted proposals at $0.01 each, 3 kept changes
    records = experiment_records(read_journal(run / "journal.jsonl")[0])
    c = CostPerGain.of(records)
    assert abs(c.baseline - 1.02) < 1e-9 and abs(c.best - 0.99) < 1e-9 and abs(c.dollars - 0.07) < 1e-9
    seconds = sum((r.timing("run") or 0) + (r.timing("eval") or 0) for r in records)
    assert seconds > 0 and abs(c.device_hours - seconds / 3600) < 1e-12
    line = c.line()
    assert f"${0.07 / 0.03:,.0f} and" in line and "0.030000 bpb gained (1.020000 -> 0.990000)" in line
    report.report(run)
    assert f"- cost per bpb gained: {line}" in (run / "report" / "report.md").read_text()
    page = create_app(repo=repo, token=TOKEN).test_client().get("/t/s/").get_data(as_text=True)
    assert "cost per bpb gained" in page and "0.030000 bpb gained" in page
    assert "no bpb gained" in CostPerGain.of(records[:1]).line()


def test_an_imported_run_is_shaded_and_its_best_restarts(tmp_path):
    repo, results, rows = reference_run(tmp_path)
    got = _import("--repo", repo, "--branch", "autoresearch/mar5", "--results", results, "--tag", "im", "--hardware", "H100")
    assert got.returncode == 0, got.stdout + got.stderr
    run = repo / ".autoresearch" / "im"
    report.report(run)
    assert (run / "report" / "progress.png").read_bytes().startswith(PNG_MAGIC)
    md = (run / "report" / "report.md").read_text()
    # The imported run's own hardware, never this machine's, above its figures; its gain from its own baseline.
    here = hardware.detect()["name"]
    assert "Hardware: H100 (the imported run's, from autoresearch/mar5; the report was made on" in md
    title = png_title(run / "report" / "progress.png")
    assert "H100" in title and here not in title and "5 experiments (5 imported), 3 kept" in title
    assert "0.020000 bpb gained over its own baseline (1.020000 -> 1.000000" in md and "no bpb gained" not in md
    assert "- imported: experiments 1-5 are imported from autoresearch/mar5" in md
    assert "budget: 300 s of training per run" in md, "the imported run's budget, until the tag runs here"
    page = create_app(repo=repo, token=TOKEN).test_client().get("/t/im/").get_data(as_text=True)
    assert "experiments 1-5 are imported from autoresearch/mar5" in page
    pts = report_progress.points(run, imported=5)
    own = read_results(run / "results.tsv").lines[0]
    pts.append(replace(pts[0], n=6, value=1.5, imported=False, line=own))
    assert report_progress.running_best(pts)[-1] == (6, 1.5), "the own best starts afresh after the imported rows"
    assert json.loads((run / "imported.json").read_text())["rows"] == 5


def test_the_terms_name_whose_hardware_each_figure_is():
    """All imported: the imported run's hardware (never this machine's above its figures); resumed
    here: this machine for the tag's own, the imported run's named for its rows; unknown: said."""
    from agent.report_share import figures_hardware, terms_line
    from runfiles.run import RunInfo
    from runfiles.shared_results import ImportedInfo
    here = {"name": "AMD EPYC 7763", "kind": "cpu", "slug": "amd-epyc-7763"}
    imp = ImportedInfo("/r", "exp/H100/mar8", "abc", 126, 300.0, hardware="H100")
    only = terms_line(RunInfo(), here, imp, only_imported=True)
    assert only.startswith("Hardware: H100 (the imported run's, from exp/H100/mar8; the report was made on AMD EPYC")
    assert figures_hardware(here, imp, True) == {"name": "H100", "kind": "imported", "slug": "h100"}
    mixed = terms_line(RunInfo(), here, imp, only_imported=False)
    assert mixed.startswith("Hardware: AMD EPYC 7763 (cpu; this machine") and "1-126 are imported, run on H100" in mixed
    assert figures_hardware(here, imp, False) is here
    unknown = ImportedInfo("/r", "autoresearch/mar5", "abc", 5, 300.0)
    assert "Hardware: not recorded (the imported run's" in terms_line(RunInfo(), here, unknown, only_imported=True)
