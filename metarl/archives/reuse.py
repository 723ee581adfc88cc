"""One path from a program to its verdict for every method: reuse an archived evaluation of the
same program under the same evaluation key, or evaluate it.

A program's evaluation key (archives/keys.py) says everything that decides its scores, so an
earlier real evaluation under that key anywhere in the archive *is* its evaluation: discovery,
ES exports, distilled and symbolic students and the GRPO reward all ask here first, and the row
they write says `cached_from`, so a number is never trained twice nor counted twice. Before, only
discovery looked: the ES mean exported twice, a student identical to an earlier one, or a GRPO
completion repeating another run's program was trained again (and a second baseline too).

A reused verdict carries the drawn training seeds it was earned on (recorded with its scores);
drawn seeds are a sample of the same protocol, pinned ones another key.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

from metarl.archives.columns import decode_outcome
from metarl.archives.store import Archive
from metarl.evaluation.outcome import Outcome
from metarl.tasks.candidate import source_hash


class Scored(NamedTuple):
    """A program's outcome and, when it was reused, the candidate that earned it."""

    outcome: Outcome
    cached_from: str | None = None


def archived_score(
    archive: Archive, code: str, eval_key: str, exclude_run: str | None = None
) -> Scored | None:
    """The archived evaluation of `code` under `eval_key`, if there is one.

    Args:
        archive: the archive to look in.
        code: the program's source (compared by its normalised-source hash).
        eval_key: the key its evaluation would have (`archives.keys.eval_settings_key`).
        exclude_run: a run whose own rows do not count (discovery treats a repeat inside its
            run as a duplicate, not a cache hit).

    Returns:
        The earlier real evaluation's outcome and candidate id, or None.
    """
    row = archive.find_cached(source_hash(code), eval_key)
    if row is None or (exclude_run is not None and row["run_id"] == exclude_run):
        return None
    outcome = decode_outcome(row)
    return Scored(outcome, row["id"]) if outcome is not None else None


def evaluate_or_reuse(
    archive: Archive,
    evaluate: Callable[[list[str]], list[Outcome]],
    sources: Sequence[str],
    eval_key: str,
    exclude_run: str | None = None,
) -> list[Scored]:
    """Each program's verdict: reused from the archive where it can be, the rest evaluated in
    one batch (`evaluate`, e.g. `lambda s: evaluator.evaluate_batch(s, task)`).

    Args:
        archive: where earlier evaluations are found.
        evaluate: scores a list of sources in one batch, outcomes in order.
        sources: the programs, in order.
        eval_key: the key every one of them is evaluated under.
        exclude_run: see `archived_score`.

    Returns:
        One Scored per source, in order.
    """
    found = [archived_score(archive, code, eval_key, exclude_run) for code in sources]
    missing = [code for code, hit in zip(sources, found) if hit is None]
    fresh = iter(evaluate(missing) if missing else [])
    return [hit if hit is not None else Scored(next(fresh)) for hit in found]
