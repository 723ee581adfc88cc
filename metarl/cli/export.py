"""`metarl export`: a run as JSON or CSV (everything it archived), as a training dataset for
trl's trainers (sft, dpo, grpo: JSON lines that `datasets.load_dataset("json", ...)` reads), or
one candidate as a DiscoGen task directory (discogen: metarl.cli.discogen), which must pass
metarl's static check unless `--unsafe-export-refused` asks for a refused one, loudly.

The JSON and CSV exports are `metarl.cli.archive.export`'s; the datasets are built by
`metarl.grpo.export`, imported only when one is asked for (it imports the task layer: jax), so
`metarl --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from metarl.cli import archive as archive_commands
from metarl.cli.console import say
from metarl.cli.errors import UserError
from metarl.cli.options import EXPORT_FORMATS, archive_option, task_list

DATASET_FORMATS = ("sft", "dpo", "grpo")  # metarl.grpo.export.FORMATS
DISCOGEN = "discogen"  # a candidate as a DiscoGen task directory (metarl.cli.discogen)


# `metarl export`'s options, as Typer reads them
RunArgument = Annotated[
    str,
    typer.Argument(
        help="The run to export, e.g. r1; with --format discogen, a candidate: its id (r1-7), "
        "a prefix of its source hash, or a candidate file."
    ),
]
FmtNameOption = Annotated[
    str,
    typer.Option(
        "--format",
        "-f",
        help="json (everything), csv (one row per candidate), a trl dataset (JSON lines): "
        "sft (prompt/completion of passing replies), dpo (chosen/rejected siblings), grpo "
        "(prompts with the archived reward); or discogen (a candidate as a DiscoGen task "
        "directory).",
    ),
]
OutputOption = Annotated[
    Optional[Path],
    typer.Option(
        "--output",
        "-o",
        help="File to write (default: stdout for json and csv, RUN-FORMAT.jsonl for datasets).",
    ),
]
MarginOption = Annotated[
    Optional[float],
    typer.Option(
        "--margin",
        help="dpo: the least score difference of a pair, in normalised fitness (default 0.05).",
    ),
]
MinStageOption = Annotated[
    Optional[str],
    typer.Option(
        "--min-stage",
        help="sft: keep replies whose program passed this stage: parse, static, probes, short "
        "or full (default full: passed every stage).",
    ),
]
TaskOption = Annotated[
    Optional[str],
    typer.Option(
        "--task",
        "-t",
        help=f"discogen, a candidate file: {task_list()} (default: the task whose function "
        "the file defines).",
    ),
]
TestOption = Annotated[
    bool, typer.Option("--test", help="discogen: DiscoGen's test side (Asterix, SpaceInvaders).")
]
EnvsOption = Annotated[
    Optional[str],
    typer.Option(
        "--envs",
        help="discogen: games instead of the side's own, e.g. Breakout-MinAtar or "
        "MinAtar/Breakout,MinAtar/Freeway.",
    ),
]
DiscogenPythonOption = Annotated[
    Optional[str],
    typer.Option(
        "--discogen-python",
        help="discogen: the Python with DiscoGen (default: $METARL_DISCOGEN_PYTHON, else this "
        "one when it has DiscoGen).",
    ),
]
SettingsOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--set",
        help="discogen: KEY=VALUE replacing a value of every game's config, e.g. "
        "TOTAL_TIMESTEPS=100000 (repeatable; recorded in metarl.json).",
    ),
]
UnsafeExportRefusedOption = Annotated[
    bool,
    typer.Option(
        "--unsafe-export-refused",
        help="discogen: export a candidate metarl's static check refuses (for research on "
        "refused code). Its module then runs code metarl never lets run: run the task only "
        "inside a sandbox.",
    ),
]


def export(
    run: RunArgument,
    fmt_name: FmtNameOption = EXPORT_FORMATS[0],
    output: OutputOption = None,
    margin: MarginOption = None,
    min_stage: MinStageOption = None,
    task: TaskOption = None,
    test: TestOption = False,
    envs: EnvsOption = None,
    discogen_python: DiscogenPythonOption = None,
    settings: SettingsOption = None,
    unsafe_export_refused: UnsafeExportRefusedOption = False,
    archive: str = archive_option(),
) -> None:
    """Export a run: JSON with the run, candidates, evaluations, calls and messages; CSV; or a
    dataset for trl's SFTTrainer, DPOTrainer or GRPOTrainer.

    Dataset rows are conversational (chat messages). A candidate an LLM wrote gives its
    archived prompt and reply (source "call"); one no model wrote (seeds, the mutation
    proposer, ES) gets the prompt train-proposer would ask and its program in the reply format
    (source "rendered"). dpo pairs are siblings of one parent, compared on the validation
    score, else the confirmed or the training fitness; test scores are never read.

    On stdout, control characters in archived text (a candidate's code, an LLM's reply) are
    written as visible escapes (\\x1b), never raw; --output writes the archive's text as is.
    Datasets escape them in JSON (\\u001b).

    Examples:

      metarl export r1 --format csv -o r1.csv

      metarl export r1 > r1.json

      metarl export r3 --format sft -o r3-sft.jsonl

      metarl export r3 --format dpo --margin 0.1

      metarl export r3 --format grpo --archive results/metarl.db

      metarl export r3-12 --format discogen -o r3-12-discogen
      # then: metarl evaluate r3-12 --harness discogen     (sandboxed)

      metarl export my_drift.py -f discogen -o t --set TOTAL_TIMESTEPS=100000

    A discogen export must pass metarl's static check, as an evaluation
    must: a plain `python run_main.py` in the task imports the candidate
    unsandboxed on this machine.
    """
    if fmt_name == DISCOGEN:
        # lazy: the exporter imports the task layer (jax)
        from metarl.cli.discogen import export_discogen

        if margin is not None or min_stage is not None:
            raise UserError("--margin and --min-stage are options of the dataset formats")
        export_discogen(
            *(run, output, archive, task, test, envs, discogen_python, settings),
            unsafe_export_refused=unsafe_export_refused,
        )
        return
    if task or test or envs or discogen_python or settings or unsafe_export_refused:
        raise UserError(
            "--task, --test, --envs, --discogen-python, --set and --unsafe-export-refused are "
            "options of --format discogen"
        )
    if fmt_name in EXPORT_FORMATS:
        if margin is not None or min_stage is not None:
            raise UserError("--margin and --min-stage are options of the dataset formats")
        archive_commands.export(run=run, fmt_name=fmt_name, output=output, archive=archive)
        return
    if fmt_name not in DATASET_FORMATS:
        known = ", ".join((*EXPORT_FORMATS, *DATASET_FORMATS, DISCOGEN))
        raise UserError(f"unknown format {fmt_name!r}; choose one of: {known}")
    if margin is not None and fmt_name != "dpo":
        raise UserError("--margin is an option of --format dpo")
    if min_stage is not None and fmt_name != "sft":
        raise UserError("--min-stage is an option of --format sft")
    path = output if output is not None else Path(f"{run}-{fmt_name}.jsonl")
    if not path.parent.exists():
        raise UserError(f"cannot write {path}: folder {path.parent} does not exist")
    if path.is_dir():
        raise UserError(f"cannot write {path}: it is a folder")
    # lazy: the dataset builder imports the archive and the tasks (jax); `--help` stays fast
    from metarl.archives.store import Archive
    from metarl.grpo import export as dataset_export

    options = {}
    if margin is not None:
        options["margin"] = margin
    if min_stage is not None:
        options["min_stage"] = min_stage
    with Archive(archive, must_exist=True) as store:
        result = dataset_export.export_dataset(store, run, fmt_name, path, **options)
    say(
        f"wrote {result.rows} {fmt_name} rows to {result.path} ({result.from_calls} from LLM "
        f"calls, {result.rendered} rendered)"
    )
