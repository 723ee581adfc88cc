"""Text that came from a candidate or a model, made safe to show, archive and send to an LLM
provider; and credentials kept out of everything but the request that needs them.

Anything a candidate's process or a language model produced (exception messages, printed
output, thoughts, names, code, the reason a tracer gives) is untrusted: it may carry terminal
escape sequences that clear the screen, print a fake green PASSED, retitle the window or plant a
hyperlink, or Unicode bidi overrides that reorder what a reviewer reads. `printable` makes every
such character *visible* (ESC becomes the four characters `\\x1b`), so a reviewer sees that
something was there instead of having it silently removed; it is the one sanitiser every
command applies before text of that origin reaches a terminal (the CLI also hands it to rich as
`Text`, never as markup). `clean` adds truncation and the redaction of the parent's secret
environment values, for what is archived and put in prompts.

A URL a user gives (`--api-base http://user:pass@host/v1?api_key=...`) carries credentials
that must reach the server and nothing else: `redact_secrets` (and `redact_config` for a whole
config) replaces their userinfo and secret-named query parameters with `***` wherever such a
URL appears; the archive applies it to what it stores, the log to every record, the report to
what it prints, the LLM client to every error text it records.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable
from urllib.parse import unquote

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
MIN_SECRET_CHARS = 8  # shorter values ("1", "true") would redact ordinary words
MIN_URL_SECRET_CHARS = 4  # a URL's own credentials: shorter ones are redacted in the URL only
REDACTED = "***"

# C0 controls but newline and tab, DEL, C1 controls (0x9b is an 8-bit CSI), and the invisible
# characters that reorder or hide text: bidi marks, embeddings, overrides and isolates, the
# line and paragraph separators, zero-width space, word joiner and the byte-order mark.
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u200e\u200f\u2028-\u202e\u2060\u2066-\u2069\ufeff]"
)
# a URL with a scheme; it ends at whitespace, quotes and angle brackets (a repr, JSON, HTML),
# and a sentence's punctuation after it is not part of it
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s'\"<>`]*[^\s'\"<>`.,;:!?)\]}]")
# a query or fragment parameter: separator, name, value
_PARAM = re.compile(r"([?&;#])([^=&;#]*)=([^&;#]*)")
# parameter names whose values are credentials: key=, api_key=, apikey=, token=,
# access_token=, password=, secret=, sig=, X-Amz-Signature=, ...
_SECRET_PARAM = re.compile(r"key|token|secret|passw|pwd|sig|credential|auth|session", re.I)
# config keys whose (string) values are credentials themselves
_SECRET_KEY = re.compile(r"(^|_)(api_?key|token|secret|password|passwd)$", re.IGNORECASE)


def _visible(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: Any) -> str:
    """`text` safe for a terminal: control and invisible characters shown as escapes.

    Every C0/C1 control character but newline and tab (ESC, BEL, a bare CR, backspace, ...),
    DEL and the bidi/zero-width characters become their escape (`\\x1b`, `\\x07`, `\\x0d`,
    `\\u202e`), so an escape sequence prints as inert, visible text; a CRLF line end is a
    newline. URL credentials are redacted (`redact_secrets`). Rich markup is left as text:
    print the result as `rich.text.Text` or with `markup=False`.

    Args:
        text: untrusted text (anything; None is "").

    Returns:
        The text with nothing a terminal would act on.
    """
    if text is None:
        return ""
    text = str(text).replace("\r\n", "\n")
    return redact_secrets(_INVISIBLE.sub(_visible, text))


def secret_values(environ: dict | None = None) -> list[str]:
    """Values of the variables whose names look secret, longest first."""
    environ = os.environ if environ is None else environ
    values = {v for k, v in environ.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)


def clean(text: str | None, limit: int = 8192, secrets: list[str] | None = None) -> str | None:
    """`text` made `printable`, secrets redacted, truncated.

    Args:
        text: untrusted text, or None.
        limit: the most characters kept (the cut is marked).
        secrets: values to redact; default: secret_values() of this process's environment.

    Returns:
        The cleaned text (None stays None).
    """
    if text is None:
        return None
    text = printable(text)
    for secret in secret_values() if secrets is None else secrets:
        text = text.replace(secret, "[redacted]")
    if len(text) > limit:
        text = text[: limit - 40] + f" ... [{len(text) - limit + 40} characters cut]"
    return text


def _redact_param(match: re.Match) -> str:
    separator, name, value = match.groups()
    if value and _SECRET_PARAM.search(name):
        value = REDACTED
    return f"{separator}{name}={value}"


def redact_url(url: str) -> str:
    """`url` without credentials: its userinfo and secret-named parameters become `***`.

    `http://alice:pw@host:8000/v1?api_key=k&x=1` -> `http://***@host:8000/v1?api_key=***&x=1`.

    Args:
        url: one URL (`scheme://...`); anything else is returned unchanged.

    Returns:
        The URL, safe to archive, log and print.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        authority = REDACTED + authority[authority.rfind("@") :]
    return f"{scheme}://{authority}{_PARAM.sub(_redact_param, tail)}"


def url_secrets(url: str | None) -> list[str]:
    """The credentials a URL carries, as literal strings (also percent-decoded), longest first:
    its userinfo, user and password, and its secret-named parameters' values. For redacting a
    text that may quote them outside the URL (an HTTP library's error message).

    Args:
        url: a URL, or None.

    Returns:
        The values of at least MIN_URL_SECRET_CHARS characters.
    """
    if not url or "://" not in url:
        return []
    rest = url.partition("://")[2]
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    found: set[str] = set()
    if "@" in authority:
        userinfo = authority[: authority.rfind("@")]
        found.update([userinfo, *userinfo.split(":", 1)])
    for _, name, value in _PARAM.findall(tail):
        if value and _SECRET_PARAM.search(name):
            found.add(value)
    found |= {unquote(value) for value in found}
    return sorted((v for v in found if len(v) >= MIN_URL_SECRET_CHARS), key=len, reverse=True)


def redact_secrets(text: str, values: Iterable[str | None] = ()) -> str:
    """`text` with every URL's credentials redacted (`redact_url`) and every one of `values`
    replaced by `***`.

    Args:
        text: any text (an error message, a log record, a config value).
        values: literal secrets to remove as well (a request's api_key, `url_secrets(...)`);
            None and values shorter than MIN_URL_SECRET_CHARS are ignored.

    Returns:
        The redacted text.
    """
    text = _URL.sub(lambda m: redact_url(m.group()), text)
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        if len(value) >= MIN_URL_SECRET_CHARS:
            text = text.replace(value, REDACTED)
    return text


def redact_config(value: Any) -> Any:
    """A config (dicts, lists, strings, numbers) as it may be archived, logged or shown: every
    string `redact_secrets`-ed, and the string value of a key named like a credential
    (`api_key`, `token`, `password`, ...) replaced by `***`.

    Args:
        value: a JSON-like value.

    Returns:
        A redacted copy (the input is not changed).
    """
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, dict):
        return {
            key: REDACTED
            if isinstance(item, str) and item and _SECRET_KEY.search(str(key))
            else redact_config(item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_config(item) for item in value]
    return value


def has_redactions(value: Any) -> bool:
    """Whether a (config) value holds a string that `redact_config` redacted: a resumed run
    needs the real value given again."""
    if isinstance(value, str):
        return REDACTED in value
    if isinstance(value, dict):
        return any(has_redactions(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_redactions(item) for item in value)
    return False
