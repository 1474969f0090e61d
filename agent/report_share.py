"""The report's part to share: what the figures are (hardware, budget, data), progress.png, the
final best filed under the hardware's name, the longer-budget check, the cost per bpb gained, and
where imported experiments came from. agent/report.py calls `extend` on its markdown and
`with_image` on its page; the rest stays here.
"""
from __future__ import annotations

from html import escape
from pathlib import Path

from agent import hardware
from agent.report_progress import points, write_png
from agent import gitops
from harness.results_table import bpb_figure
from harness.experiment_record import ExperimentRecord
from runfiles.run import RunInfo
from runfiles.shared_results import CostPerGain, ImportedInfo, Validation

HEADING = "## Results to share"
PNG = "progress.png"


def own_records(records: list[ExperimentRecord]) -> list[ExperimentRecord]:
    """The tag's own experiments when it has any, else every record (an imported tag not resumed
    yet): the report's figures never mix another machine's with this tag's."""
    own = [r for r in records if not r.imported]
    return own or records


def imported_only(records: list[ExperimentRecord]) -> bool:
    """The report's records are all imported (a tag not resumed yet): its figures are the
    original run's, on the original run's hardware."""
    return bool(records) and all(r.imported for r in records)


def figures_hardware(hw: dict, imported: ImportedInfo | None, only_imported: bool) -> dict:
    """Whose hardware the report's figures come from: the imported run's when they are all
    imported ({"name", "kind", "slug"} as agent/hardware.py's, kind "imported"), else this machine's."""
    if not (imported and only_imported):
        return hw
    name = imported.hardware or "unknown hardware"
    return {"name": name, "kind": "imported", "slug": hardware.slug(name)}


def terms_line(info: RunInfo, hw: dict, imported: ImportedInfo | None, only_imported: bool = False) -> str:
    budget = info.budget if info.budget is not None else (imported.budget if imported else None)
    data = f"data {info.fingerprint or '?'} ({info.source or 'source unknown'}, profile {info.profile or '?'})" \
        if info.fingerprint else "data not recorded yet (the tag has not run here)"
    if imported and only_imported:
        where = (f"Hardware: {imported.hardware or 'not recorded'} (the imported run's, from {imported.branch}; "
                 f"the report was made on {hw['name']})")
    else:
        where = f"Hardware: {hw['name']} ({hw['kind']}; this machine, where the report was made)"
        if imported:
            where += (f", for the tag's own experiments; experiments 1-{imported.rows} are imported, run on "
                      f"{imported.hardware or 'hardware not recorded'}")
    return (where + "; budget: " + (f"{budget:g} s of training per run" if budget else "unknown") + f"; {data}. "
            "Figures from another machine, budget or data are not comparable with these.")


def imported_gain(pts, rows: int) -> str:
    """What the imported run gained over its own baseline (its first kept row), on its machine."""
    kept = [v for p in pts if p.n <= rows and p.kept and (v := bpb_figure(p.value)) is not None]   # no 1e308
    if not kept:
        return "no kept row with a figure, so no gain"
    gain = kept[0] - min(kept)
    if gain <= 0:
        return f"no bpb gained over its own baseline ({kept[0]:.6f})"
    return (f"{gain:.6f} bpb gained over its own baseline ({kept[0]:.6f} -> {min(kept):.6f}, "
            f"{gain / kept[0] * 100:.2f}%)")


def extend(md: str, data: dict, s: dict, out: Path, branches: bool = False, validate: float | None = None,
           seeds: int | None = None) -> str:
    """`md` with the terms under its title and the section to share at its end; writes progress.png,
    makes exp/<hardware>/<tag> with `branches`, runs the longer-budget check with `validate` K."""
    run, info, here = Path(data["run"]), data["info"], hardware.detect()
    info = info if isinstance(info, RunInfo) else RunInfo.from_dict(info)
    imported = ImportedInfo.read(run)
    only_imported = imported_only(data["records"])
    hw = figures_hardware(here, imported, only_imported)      # whose machine the figures are from
    lines = md.split("\n")
    at = 3 if len(lines) > 2 and lines[2].startswith("**Headline") else 1   # the headline stays the first line
    lines.insert(at, "\n" + terms_line(info, here, imported, only_imported))
    section = ["", HEADING, ""]
    pts = points(run, imported.rows if imported else 0)
    on = hw["name"] if not imported or only_imported else \
        f"{hw['name']}; 1-{imported.rows} imported from {imported.hardware or 'hardware not recorded'}"
    title = (f"autoresearch {s['tag']}: {len(pts)} experiments"
             + (f" ({imported.rows} imported)" if imported else "")
             + f", {sum(p.status == 'keep' for p in pts)} kept; "
             f"{on}, {info.budget or (imported.budget if imported else 0) or 0:g} s budget")
    png = write_png(run, Path(out) / PNG, title, imported.rows if imported else 0, data["records"])
    section.append(f"- {PNG}: every experiment's val_bpb, kept steps, discarded points, the running best"
                   if png else f"- {PNG}: nothing measured to draw yet")
    if branches and s["final"]:
        name = hardware.branch_for(hw["slug"], s["tag"])
        gitops.git(run, "branch", "-f", name, s["final"])
        section.append(f"- branch: {name}, the final best {str(s['final'])[:7]} filed under "
                       + ("the imported run's hardware" if hw is not here else "this hardware"))
    if validate is not None:
        from agent.validate import DEFAULT_SEEDS, validate as check
        check(run, validate, seeds or DEFAULT_SEEDS)
    v = Validation.read(run)
    if v is not None and v.final.commit == s["final"]:
        section.append(f"- longer budget: {v.line()}")
    else:
        section.append("- longer budget: not checked (agent/report.py --validate K re-runs the final best and "
                       "the base at K x the budget)")
    if only_imported:
        section.append("- cost per bpb gained: not recorded for an imported run (its LLM and device costs are "
                       "the original run's)")
    else:
        section.append(f"- cost per bpb gained: {CostPerGain.of(data['records']).line()}")
    if imported is not None:
        section.append(f"- imported: {imported.line()}")
        section.append(f"- the imported run, on {imported.hardware or 'its machine'}: "
                       f"{imported_gain(pts, imported.rows)}")
    return "\n".join(lines + section) + "\n"


def with_image(page: str, out: Path) -> str:
    """The page with progress.png under the section's heading (when it was drawn)."""
    if not (Path(out) / PNG).exists():
        return page
    img = (f'<img src="{PNG}" alt="{escape("progress: val_bpb by experiment")}" '
           'style="max-width:100%;border:1px solid #d1d5db">')
    head = f"<h2>{HEADING[3:]}</h2>"
    return page.replace(head, head + "\n" + img, 1)
