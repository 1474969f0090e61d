"""Capture the loop's console panel of a running tag, as the terminal shows it, to SVG (and PNG).

    uv run scripts/console_snapshot.py --run .autoresearch/may29 --out docs/console.svg \
        [--phase training] [--contains TEXT] [--timeout 600] [--png]

Waits until the running loop's state.json is in --phase (and, in training, has a progress line
from the log), then renders agent/console.py's panel from that state with rich and saves it as
SVG (and the same as plain text beside it, .txt); --png also screenshots the SVG with headless Chromium (Debian `chromium`). The panel is the
same function the live console draws, fed the state the loop wrote: a capture of a real run.
"""
from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console as RichConsole

from agent.console import render_panel

# Width of the captured terminal, in columns (a common 100-column terminal).
WIDTH = 100


def wait_for(run: Path, phase: str, timeout: float, contains: str = "") -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            state = json.loads((run / "state.json").read_text())
        except (OSError, json.JSONDecodeError):
            state = {}
        if state.get("phase") == phase and (phase != "training" or state.get("progress")) \
                and contains in json.dumps(state):
            return state
        time.sleep(0.5)
    raise SystemExit(f"state.json of {run} never reached phase {phase!r} in {timeout:g}s")


def svg_size(svg: str) -> tuple[int, int]:
    """The SVG's own size (rich writes viewBox="0 0 W H"), so the screenshot has no margins."""
    m = re.search(r'viewBox="0 0 ([0-9.]+) ([0-9.]+)"', svg)
    return (int(float(m.group(1))) + 1, int(float(m.group(2))) + 1) if m else (1000, 560)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--run", type=Path, required=True, help="the run folder (the tag's worktree)")
    ap.add_argument("--out", type=Path, required=True, help="the SVG to write")
    ap.add_argument("--phase", default="training", help="capture once the loop is in this phase")
    ap.add_argument("--contains", default="", help="...and its state.json holds this text (e.g. 'rerunning')")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--png", action="store_true", help="also write a PNG beside it (headless Chromium)")
    args = ap.parse_args(argv)
    state = wait_for(args.run, args.phase, args.timeout, args.contains)
    rc = RichConsole(record=True, file=io.StringIO(), width=WIDTH, force_terminal=True)
    rc.print(render_panel(state.get("tag", "?"), float(state.get("budget") or 0), state,
                          now=float(state.get("updated_at") or time.time())))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = rc.export_text(clear=False, styles=False)
    rc.save_svg(str(args.out), title=f"uv run agent/loop.py --tag {state.get('tag')}")
    args.out.with_suffix(".txt").write_text(text)
    print(text)
    print(f"wrote {args.out} and {args.out.with_suffix('.txt')}")
    if args.png:
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if not chromium:
            print("no chromium on PATH: PNG skipped", file=sys.stderr)
            return 1
        png = args.out.with_suffix(".png")
        width, height = svg_size(args.out.read_text())
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={png.resolve()}", f"--window-size={width},{height}",
                        args.out.resolve().as_uri()], check=True, capture_output=True, timeout=120)
        print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
