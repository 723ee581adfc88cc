"""What the commands print, under its former one-module name: the names below now live in

    console    the consoles; `untrusted`, `say`, `cells`: the one way text reaches them
    formats    numbers, intervals, durations, costs
    board      the leaderboard and runs tables, a candidate's fate
    candidate  `metarl show` and `metarl lineage`
    progress   a discovery run's live display and its report
    verdict    `metarl evaluate`'s spinner and outcome

Import from those modules; this one re-exports them so that `display.NAME` keeps working.
"""

from __future__ import annotations

from metarl.cli.board import (
    RUN_STATUS_STYLES,
    comparable_text,
    fate_text,
    leaderboard_table,
    runs_table,
)
from metarl.cli.candidate import PROMPT_CHARS, lineage_tree, print_candidate
from metarl.cli.console import Grid, cells, console, err_console, say, untrusted
from metarl.cli.formats import (
    fmt,
    fmt_compact,
    fmt_cost,
    fmt_duration,
    fmt_interval,
    fmt_published,
    fmt_seconds,
)
from metarl.cli.progress import Display, print_interrupted, print_run_report
from metarl.cli.verdict import STAGE_LABELS, TIMING_KEYS, print_outcome, stage_spinner

__all__ = [
    "RUN_STATUS_STYLES",
    "PROMPT_CHARS",
    "STAGE_LABELS",
    "TIMING_KEYS",
    "Display",
    "Grid",
    "cells",
    "comparable_text",
    "console",
    "err_console",
    "fate_text",
    "fmt",
    "fmt_compact",
    "fmt_cost",
    "fmt_duration",
    "fmt_interval",
    "fmt_published",
    "fmt_seconds",
    "leaderboard_table",
    "lineage_tree",
    "print_candidate",
    "print_interrupted",
    "print_outcome",
    "print_run_report",
    "runs_table",
    "say",
    "stage_spinner",
    "untrusted",
]
