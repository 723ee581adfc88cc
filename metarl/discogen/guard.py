"""The static check an exported candidate must pass, as its evaluation must.

An exported task directory is run by DiscoGen's `run_main.py`, which imports the candidate's
module in a plain process: its module-level code (an `import os`, an `open(...)`, a top-level
call) runs on the machine with nothing around it. So an export applies the same first line of
defence as metarl's cascade and DiscoGen harness (evaluation/static_check.py) before anything
is written: a candidate the check refuses, an LLM proposal archived with its refusal included,
is not exported. Research on refused code can override this, loudly (`unsafe`), and the
reason is then returned so the caller can warn that the module must only run in a sandbox.

The check is ast-only and takes milliseconds, so a caller that checks first (to refuse before
it looks up DiscoGen's runtime) and `export_task`, which checks again, cost nothing that
matters next to DiscoGen's build.
"""

from __future__ import annotations

import re

from metarl.errors import FAILURE, MetarlError
from metarl.evaluation.static_check import check_task_source
from metarl.evaluation.text import clean
from metarl.tasks import get_task

REASON_CHARS = 300  # a refusal's reason is candidate text: shown inert and cut to this


class RefusedExport(MetarlError, ValueError):
    """The candidate fails metarl's static check, so it is not exported; one line."""

    exit_code = FAILURE
    hint = "--unsafe-export-refused exports it anyway, for research: run it only in a sandbox"


def static_refusal(source: str, task: str) -> str | None:
    """Why metarl's static check refuses `source` as a `task` candidate, or None.

    Args:
        source: the candidate's program (untrusted; never executed).
        task: its metarl task ("drift" or "optimizer").

    Returns:
        The check's reason, inert (control characters visible, one line, at most
        REASON_CHARS characters), or None when the check passes.

    Raises:
        UnknownTask: `task` is not a registered task.
    """
    report = check_task_source(source, get_task(task))
    if report.ok:
        return None
    folded = re.sub(r"\s+", " ", report.reason or "no reason given").strip()
    return clean(folded, REASON_CHARS)


def check_exportable(
    source: str | None, task: str, *, name: str | None = None, unsafe: bool = False
) -> str | None:
    """Refuse to export a candidate that metarl's static check refuses, unless `unsafe`.

    Args:
        source: the candidate's program; None is DiscoGen's own base module (trusted).
        task: its metarl task.
        name: how the message names the candidate (its id or file); default "the candidate".
        unsafe: export a refused candidate anyway (the caller must warn that it may only run
            inside a sandbox).

    Returns:
        None when the candidate passes (or is DiscoGen's base); the refusal's reason (inert)
        when it is refused and `unsafe` is set.

    Raises:
        RefusedExport: the check refuses it and `unsafe` is not set.
        UnknownTask: `task` is not a registered task.
    """
    if source is None:
        return None
    reason = static_refusal(source, task)
    if reason is None or unsafe:
        return reason
    label = clean(name, 200) if name else "the candidate"
    raise RefusedExport(f"{label} was refused by the static check ({reason}); not exported")
