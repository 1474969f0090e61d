"""The tag's seal at setup: which sandbox its runs get, and the pinned copy of the eval inputs.

Called once by the loop after the data is ready and run.json exists. Without a working sandbox
the tag does not start unless the user asked for --sandbox none (then run.json, the console, the
end summary and the dashboard say the results are unsealed). A new tag pins the inputs
(harness/pinned.py) and records their hashes and the sandbox in run.json; a resumed tag checks
that its pinned copy still holds what run.json recorded, restoring it from the shared cache if
it can, and refusing to go on if it cannot (one tag is never measured on two versions of data).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from harness import pinned
from harness.pinned import PinnedError, Seal
from harness.records import RunInfo
from harness.results import write_json_atomic
from harness.sandbox import DataView, detect, refusal, warning


class SealError(RuntimeError):
    """The tag's evaluation inputs cannot be trusted any more; the message says what to do."""


def make_seal(run_dir: Path, info: dict, run_info: RunInfo | dict, mode: str, say) -> Seal:
    """Detect the sandbox, pin (or check) the inputs, update run.json (and `run_info`, when it is
    the loop's RunInfo); `info` is prepare.describe()'s; `say` prints a line."""
    if not isinstance(run_info, RunInfo):
        run_info = RunInfo.from_dict(run_info)
    try:
        box = detect(mode)
    except RuntimeError as exc:
        raise SealError(str(exc)) from None
    if mode != "none" and not box.sealed:   # no sandbox is no trust: only an explicit --sandbox none
        raise SealError(refusal(box))
    loud = warning(box)
    if loud:
        say(loud)
    view = DataView.from_describe(info)
    seal = Seal(sandbox=box, data=view)
    run_json = Path(run_dir) / "run.json"
    changed = {}
    if run_info.seal.sandbox != box.describe():
        changed["sandbox"] = box.describe()
        if run_info.seal.sandbox:
            say(f"note: this tag's runs were sandboxed as {run_info.sandbox_kind}; now {box.kind}")
    if view is not None:
        target = Path(run_dir) / pinned.PINNED_DIR / "cache"
        recorded = run_info.seal.inputs
        try:
            if not recorded:
                seal.eval_cache, seal.inputs = pinned.pin(run_dir, view)
                changed["inputs"] = seal.inputs
            else:
                seal.eval_cache, seal.inputs = target, dict(recorded)
                bad = pinned.check(target, seal.inputs)
                if bad:
                    say(f"resume: pinned evaluation inputs: {'; '.join(bad[:4])}; "
                        + pinned.repair(target, view, seal.inputs))
        except PinnedError as exc:
            raise SealError(str(exc)) from None
    if changed:
        for key, value in changed.items():
            setattr(run_info.seal, key, value)
        write_json_atomic(run_json, run_info.to_dict())
    return seal


def clear_leftovers(run_dir: Path) -> list[str]:
    """Folders of trusted evaluations that a killed loop left behind (their processes are ended
    first by harness.runner.kill_leftover)."""
    gone = []
    for folder in (Path(run_dir) / ".verify", Path(run_dir) / ".runs"):   # evaluations; runs' files
        if folder.is_dir():
            for p in folder.iterdir():
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                    gone.append(p.name)
    return gone
