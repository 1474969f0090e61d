"""`python -m search sweep ...`: Hyperband over train.py's knobs (search/sweep.py).

The command line lives here, not in hyperband.py, so the scheduler imports nothing of the sweep
that drives it (no import circle)."""
import sys

USAGE = ("usage: python -m search sweep [options]\n\n"
         "Hyperband over train.py's knobs: the same command as `python -m search.sweep`.\n"
         "`python -m search sweep --help` lists the options; docs/hyperband.md explains them.")


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if argv[:1] != ["sweep"]:
        print(USAGE, file=sys.stderr)
        return 2
    from search.sweep import main as sweep
    return sweep(argv[1:], prog="python -m search sweep")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
