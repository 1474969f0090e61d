#!/usr/bin/env bash
# One command: install -> prepare data -> tune -> Hyperband sweep -> train the winner -> its serving
# benchmark (inference/bench.py) -> dashboard.
#
#   scripts/pipeline.sh                       # defaults below
#   SWEEP_MAX_STEPS=243 SWEEP_MIN_STEPS=9 scripts/pipeline.sh
#   scripts/pipeline.sh --full                # also: speculative decoding, the winner drafted by
#                                             # the sweep's smallest survivor
#
# The sweep searches train.py's knobs (search/space.py) with Hyperband + the cheap prior, through
# the throughput harness; the winner's train.py is then trained for the full wall-clock budget
# (AUTORESEARCH_TIME_BUDGET, default 300 s) like any loop experiment, and its result is written
# as a run folder the dashboard shows. Everything lands in $OUT (git-ignored).
set -euo pipefail

usage() {
    cat <<'EOF'
usage: scripts/pipeline.sh [-h|--help]

One command: install (uv sync) -> prepare data -> tune workers (once per machine) -> Hyperband
sweep of train.py's knobs -> full-budget run of the winner -> dashboard on the results.

Settings are environment variables (defaults in brackets):
  OUT               where everything lands (git-ignored)            [out/pipeline]
  SWEEP_MAX_STEPS   steps of a full evaluation in the sweep         [81]
  SWEEP_MIN_STEPS   steps at the lowest rung                        [3]
  SWEEP_ETA         Hyperband's downsampling rate                   [3]
  PRIOR_STORE       the cheap prior's memory, reused by later runs  [$OUT/prior_store.json]
  SWEEP_ARGS        extra sweep options, e.g. "--small --budget-steps 600"
  PORT              dashboard port                                  [8000]
  AUTORESEARCH_TIME_BUDGET  training seconds of the winner's run    [300]

Example: SWEEP_MAX_STEPS=243 SWEEP_MIN_STEPS=9 scripts/pipeline.sh
EOF
}
for arg in "$@"; do
    case "$arg" in
        -h|--help) usage; exit 0 ;;
        *) echo "scripts/pipeline.sh: unknown argument '$arg' (settings are environment variables)" >&2
           usage >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.."
FULL=0
[ "${1:-}" = "--full" ] && FULL=1

OUT=${OUT:-out/pipeline}
SWEEP_MAX_STEPS=${SWEEP_MAX_STEPS:-81}     # steps of a full evaluation in the sweep
SWEEP_MIN_STEPS=${SWEEP_MIN_STEPS:-3}      # steps at the lowest rung
SWEEP_ETA=${SWEEP_ETA:-3}
PRIOR_STORE=${PRIOR_STORE:-$OUT/prior_store.json}   # the prior's memory, reused by later runs
SWEEP_ARGS=${SWEEP_ARGS:-}                 # extra sweep options, e.g. "--small --budget-steps 600"
PORT=${PORT:-8000}

echo "== install"; uv sync
echo "== prepare"; uv run prepare.py
if [ ! -f harness_profile.json ]; then
    echo "== tune (once per machine)"; uv run python -m search.throughput tune
fi
mkdir -p "$OUT"
echo "== sweep"
uv run python -m search sweep --max-steps "$SWEEP_MAX_STEPS" --min-steps "$SWEEP_MIN_STEPS" \
    --eta "$SWEEP_ETA" --policy prior --warm-prior "$PRIOR_STORE" --out "$OUT/sweep" $SWEEP_ARGS

echo "== benchmark the winner (full wall-clock budget)"
RUN="$OUT/run"
mkdir -p "$RUN/logs"
cp "$OUT/sweep/winner_train.py" "$RUN/train.py"
# train.py imports prepare: run the winner's copy with the repo root on the path
PYTHONPATH=".:${PYTHONPATH:-}" AUTORESEARCH_ARTIFACT="$RUN/artifacts/exp-0001/model.pt" \
    uv run python "$RUN/train.py" > "$RUN/logs/exp-0001.log" 2>&1 \
    || echo "winner run failed: see $RUN/logs/exp-0001.log"
uv run python - "$RUN" <<'PY'
import sys
from pathlib import Path
from harness.clock import parse_summary
run = Path(sys.argv[1])
s = parse_summary((run / "logs" / "exp-0001.log").read_text(errors="replace"))
row = ("sweep", f"{s['val_bpb']:.6f}", f"{s['peak_vram_mb'] / 1024:.1f}", "keep",
       "Hyperband sweep winner, full budget") if s else ("sweep", "0.000000", "0.0", "crash", "winner run crashed")
(run / "results.tsv").write_text("commit\tval_bpb\tmemory_gb\tstatus\tdescription\n" + "\t".join(row) + "\n")
print("winner:", "\t".join(row))
PY

echo "== serving benchmark of the winner (prefill/decode tok/s, KV bytes/token)"
if [ -f "$RUN/artifacts/exp-0001/model.pt" ]; then
    uv run inference/bench.py --artifact "$RUN/artifacts/exp-0001/model.pt" --train "$RUN/train.py" \
        --out "$RUN/bench/winner.json" || echo "benchmark failed"
    if [ "$FULL" = 1 ]; then
        echo "== speculative decoding: the winner drafted by the sweep's smallest survivor"
        uv run inference/sweep_draft.py --sweep "$OUT/sweep" --out "$OUT/draft" \
            && uv run inference/speculative.py --target-artifact "$RUN/artifacts/exp-0001/model.pt" \
                --target-train "$RUN/train.py" --draft-artifact "$OUT/draft/model.pt" \
                --draft-train "$OUT/draft/train.py" --out "$RUN/bench/speculative.json" \
            || echo "speculative decoding failed"
    fi
fi

echo "== dashboard on http://127.0.0.1:$PORT (Ctrl-C to stop)"
exec uv run dashboard/app.py --runs "$OUT" --port "$PORT"
