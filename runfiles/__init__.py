"""The run folder's files besides the journal and results.tsv, typed for the loop that writes them
and the dashboard and report that read them: run.json (run.py), state.json (state.py), the
journal's annotations (journal.py: audits, queue applications, claims, re-measurements, trace
spans), the human queue's store (queue_store.py), imported.json and validation.json
(shared_results.py), and how results.tsv's rows and the journal's records match (matching.py).

harness/ (the trust boundary) holds the experiment record and the writers; these ride on it.
"""
