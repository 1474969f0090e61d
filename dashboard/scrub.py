"""Remove secrets from anything the dashboard sends.

Everything the dashboard shows was written by the loop, the judges or a model, and any of them
may have echoed an API key into a log, a diff or a trace. The app runs every response body
through one Scrubber, so no page, JSON answer or event can carry a key, whatever produced it.
The Scrubber is harness.secrets's (the loop's one scrubber), which also knows the forms a value
takes once escaped into HTML or JSON.
"""

from __future__ import annotations

from harness.secrets import REDACTED, Scrubber

__all__ = ["REDACTED", "Scrubber"]
