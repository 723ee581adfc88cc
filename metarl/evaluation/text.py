"""Text that came from a candidate, made safe to show, archive and send to an LLM provider.

Anything a candidate's process produced (exception messages, printed output, the reason a
tracer gives) is untrusted: it may carry terminal escape sequences that redraw the screen (a
fake green PASSED), megabytes of noise, or a secret it read somewhere. Before such text reaches
a terminal, the archive or a prompt it is stripped of control characters, truncated, and every
value of a secret-looking variable of the parent's environment is replaced by `[redacted]`
(the sandbox already hides the environment; this is the second line).
"""

from __future__ import annotations

import os
import re

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
MIN_SECRET_CHARS = 8  # shorter values ("1", "true") would redact ordinary words
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def secret_values(environ: dict | None = None) -> list[str]:
    """Values of the variables whose names look secret, longest first."""
    environ = os.environ if environ is None else environ
    values = {v for k, v in environ.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)


def clean(text: str | None, limit: int = 8192, secrets: list[str] | None = None) -> str | None:
    """`text` without control characters (newlines and tabs kept), secrets redacted, truncated.

    Args:
        text: untrusted text, or None.
        limit: the most characters kept (the cut is marked).
        secrets: values to redact; default: secret_values() of this process's environment.

    Returns:
        The cleaned text (None stays None).
    """
    if text is None:
        return None
    text = _CONTROL.sub("", str(text))
    for secret in secret_values() if secrets is None else secrets:
        text = text.replace(secret, "[redacted]")
    if len(text) > limit:
        text = text[: limit - 40] + f" ... [{len(text) - limit + 40} characters cut]"
    return text
