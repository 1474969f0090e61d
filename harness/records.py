"""The run's typed records, in one module: what the loop writes and every reader reads.

- results.tsv: RESULT_COLUMNS, ResultRow, ResultLine, ResultTable, parse_results, read_table
  (harness/results_table.py, re-exported here: the one table the loop, recovery and the dashboard read).
- Decision and its typed Basis, ExperimentRecord (the journal's "experiment" record, the loop's
  history in memory, with to_dict/from_dict and typed accessors) and EvidenceFigures:
  harness/experiment_record.py, re-exported here.

run.json, state.json and the journal's annotations (audits, claims, queue applications,
re-measurements, trace spans) are the run folder's other files: runfiles/.

Records read from disk are data, not trusted: from_dict never raises and keeps values as read;
the accessors check types (a hostile journal gives None, never an exception).
"""
from __future__ import annotations


# results.tsv: the table lives in harness/results_table.py; its names are re-exported here,
# where readers of the typed records have always found them.
from harness.results_table import (MAX_DESCRIPTION, QUOTE_CHARS, RESULT_COLUMNS, RESULT_HEADER,  # noqa: F401
                                   STATUSES, ResultLine, ResultRow, ResultTable, clean_description, finite,
                                   fnum, parse_results, read_table)

# ---------------------------------------------------------------- decisions, the journal record, evidence
# Basis, Decision: harness/decision.py; ExperimentRecord (and its accessors), EvidenceFigures: harness/experiment_record.py.
from harness.experiment_record import (  # noqa: E402, F401  (re-exported: readers import them from here)
    OPTIONAL_KEYS, RECORD_KEYS, Basis, Decision, EvidenceFigures, EvidenceRun, ExperimentRecord, NoiseBandFigures,
    experiment_records)
from harness.results_table import as_dict, as_int, as_str  # noqa: E402, F401  (the readers' helpers)
