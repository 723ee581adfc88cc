"""CLI start-up: what `metarl --help`, a command's help and a usage error cost, and whether they
import jax.

    python benchmarks/cli_startup.py                  # 5 runs of each command, medians
    python benchmarks/cli_startup.py --runs 9
    python benchmarks/cli_startup.py --before HEAD~1  # the same commands on an older commit

Each run is a fresh interpreter running the CLI's `main()` with the command's arguments, as the
`metarl` script does; at exit it reports which heavy modules got imported (jax, scipy,
sqlite_utils, ...). CPU is user + sys of the child (`resource.getrusage(RUSAGE_CHILDREN)`
deltas), wall the time until it exited; both are medians over the runs. Target (issue): every
row under 1 s of CPU, with no jax. Two floors come first: the interpreter alone, and a
one-command Typer app's `cmd --help` (Typer, Click, rich and pydantic: what any help costs).

`--before REF` checks REF out into a temporary git worktree and runs this script again with
that commit's package first on PYTHONPATH, then prints both tables: the machine is shared and
noisy, so compare rows from one invocation only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from worktree import run_at_commit

COMMANDS = (
    ("--help",),
    ("discover", "--help"),
    ("discover", "--bogus"),
    ("leaderboard", "--help"),
)
# the modules a help or a usage error should never need (the list)
HEAVY = ("jax", "scipy", "rliable", "pandas", "sqlite_utils", "gymnax", "flax", "optax")
MARK = "cli_startup: heavy="

# a one-command Typer app: the floor under any command's help
TYPER_FLOOR = """
import typer
app = typer.Typer(add_completion=False)
@app.callback()
def root() -> None:
    "The group."
@app.command()
def cmd(count: int = typer.Option(1, help="A number.")) -> None:
    "The command."
app()
"""
FLOORS = {
    "python (interpreter alone)": ["-c", "pass"],
    "typer (a one-command app: cmd --help)": ["-c", TYPER_FLOOR, "cmd", "--help"],
}

# the CLI as the `metarl` script runs it, reporting at exit (after SystemExit) what it imported
WRAPPER = f"""
import atexit, sys
heavy = {HEAVY!r}
atexit.register(
    lambda: print({MARK!r} + ",".join(m for m in heavy if m in sys.modules), file=sys.stderr)
)
sys.argv = ["metarl", *sys.argv[1:]]
from metarl.cli.app import main
main()
"""


def run_once(arguments: list[str], scratch: str, probe: bool) -> dict:
    """One fresh interpreter with `arguments`: CPU and wall seconds, exit status, and (`probe`:
    the metarl wrapper's report) the heavy modules it imported."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *arguments],
        capture_output=True,
        text=True,
        cwd=scratch,  # never the checkout: its metarl/ would shadow PYTHONPATH's
        env=dict(os.environ, COLUMNS="100", TERM="dumb"),
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    marks = [line for line in done.stderr.splitlines() if line.startswith(MARK)]
    if (probe and not marks) or (not probe and done.returncode != 0):
        raise SystemExit(f"{arguments[-2:]} did not finish:\n{done.stderr[-2000:]}")
    heavy = marks[-1][len(MARK) :].split(",") if marks and marks[-1] != MARK else []
    return {"cpu_s": cpu, "wall_s": wall, "exit": done.returncode, "heavy": heavy}


def measure(runs: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="metarl-cli-startup-") as scratch:
        cases = [(name, arguments, False) for name, arguments in FLOORS.items()]
        cases += [(f"metarl {' '.join(argv)}", ["-c", WRAPPER, *argv], True) for argv in COMMANDS]
        for name, arguments, probe in cases:
            samples = [run_once(arguments, scratch, probe) for _ in range(runs)]
            rows.append(
                {
                    "command": name,
                    "cpu_s": statistics.median(s["cpu_s"] for s in samples),
                    "wall_s": statistics.median(s["wall_s"] for s in samples),
                    "exit": sorted({s["exit"] for s in samples}),
                    "heavy": sorted({m for s in samples for m in s["heavy"]}),
                    "jax": any("jax" in s["heavy"] for s in samples) if probe else None,
                }
            )
    return rows


def measure_commit(ref: str, argv: list[str]) -> list[dict]:
    """This script with `argv` on `ref`'s package (a temporary worktree); its JSON rows."""
    out = run_at_commit(ref, os.path.abspath(__file__), [*argv, "--json"])
    rows = json.loads(out[out.index("\n[") + 1 :])
    for row in rows:
        row["command"] = f"{row['command']} @ {ref}"
    return rows


JAX_CELL = {True: "yes", False: "no", None: "-"}  # None: a floor, not probed


def table(rows: list[dict], runs: int) -> str:
    lines = [
        f"| command | CPU s (median of {runs}) | wall s | exit | jax imported | heavy modules |",
        "|---|---:|---:|---:|:---:|---|",
    ]
    for row in rows:
        lines.append(
            f"| `{row['command']}` | {row['cpu_s']:.2f} | {row['wall_s']:.2f} | "
            f"{'/'.join(map(str, row['exit']))} | {JAX_CELL[row['jax']]} | "
            f"{', '.join(row['heavy']) or '-'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per command")
    parser.add_argument("--json", action="store_true", help="also print the raw rows as JSON")
    parser.add_argument(
        "--before", metavar="REF", help="also run this script on REF's package (git worktree)"
    )
    args = parser.parse_args()

    rows = measure(args.runs)
    if args.before:
        argv = [a for a in sys.argv[1:] if a not in ("--json", "--before", args.before)]
        rows.extend(measure_commit(args.before, argv))
    print(table(rows, args.runs))
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
