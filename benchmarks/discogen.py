"""Three drifts scored in both harnesses on one game: metarl's cascade and DiscoGen's own
`run_main.py` (in metarl's sandbox), the two rankings and their rank correlation.

    bash scripts/discogen-runtime.sh && export METARL_DISCOGEN_PYTHON=.venv-discogen/bin/python
    python benchmarks/discogen.py                          # CPU scale (below)
    python benchmarks/discogen.py --timesteps 10000000     # DiscoBench's budget (a GPU)
    python benchmarks/discogen.py --suite discobench --seeds 8   # metarl under DiscoGen's numbers

Both harnesses run through the CLI a user runs: `metarl evaluate FILES --task drift --suite
minatar --envs Breakout-MinAtar --timesteps T` (PPO's normalised score: (return - random) /
(PPO - random), on the seeds drawn for the batch) and `metarl evaluate FILES --task drift
--harness discogen --envs Breakout-MinAtar --set TOTAL_TIMESTEPS=T` (the return over DiscoGen's
base loss, DiscoGen's 8 fixed seeds x 10 rates, best rate). With three drifts a rank
correlation takes one of four values (-1, -0.5, 0.5, 1): it says whether the harnesses agree on
this order, not how much.

`--suite discobench` scores metarl's side under DiscoGen's own numbers (rl/discobench.py: lr
1e-3 on every game swept over DiscoGen's 10 rates, best rate, greedy evaluation over 16
episodes), so the two harnesses differ only in seeds and code: their *returns* should then
agree within seed noise, not just their order. The metarl return shown is its best rate's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from metarl.evaluation.protocols import DISCOBENCH_SWEEP

SEEDS = Path(__file__).resolve().parent.parent / "metarl" / "tasks" / "drift" / "seed_programs"
# a third drift unlike both seeds: a quadratic trust region on the ratio, blind to the advantage
QUADRATIC = "def drift(ratio, advantage, epsilon):\n    return 2.0 * (ratio - 1.0) ** 2\n"


def evaluate(args: list[str], timeout: float) -> list[dict]:
    """`metarl evaluate ... --json` as a list of outcomes (one per file)."""
    command = [sys.executable, "-c", "from metarl.cli.app import main; main()", "evaluate", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode not in (0, 1):
        raise SystemExit(f"metarl evaluate failed ({done.returncode}): {done.stderr[-2000:]}")
    data = json.loads(done.stdout)
    return data if isinstance(data, list) else [data]


def ranks(values: list[float]) -> list[float]:
    """1 = best; ties share their mean rank."""
    order = sorted(range(len(values)), key=lambda i: -values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (Pearson's on the ranks)."""
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return cov / var if var else float("nan")


def best_rate(env_scores: list[dict]) -> dict:
    """The env score at the best rate by mean return (one score per rate when swept)."""
    return max(env_scores, key=lambda e: e.get("mean") if e.get("mean") is not None else -1e30)


def _num(value) -> str:
    return "—" if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Breakout-MinAtar")
    parser.add_argument("--timesteps", type=int, default=100_000)
    parser.add_argument("--suite", default="minatar", choices=("minatar", "discobench"))
    parser.add_argument("--seeds", type=int, default=4, help="metarl's training seeds")
    parser.add_argument("--seed-values", default=None, help="metarl's, pinned (a re-run)")
    parser.add_argument("--num-envs", type=int, default=64, help="DiscoGen's NUM_ENVS")
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parser.parse_args()
    if not os.environ.get("METARL_DISCOGEN_PYTHON"):
        raise SystemExit("set METARL_DISCOGEN_PYTHON (bash scripts/discogen-runtime.sh)")

    folder = Path(tempfile.mkdtemp(prefix="metarl-discogen-bench-"))
    files = {"ppo_clip": SEEDS / "ppo_clip.py", "lpo": SEEDS / "lpo.py"}
    (folder / "quadratic.py").write_text(QUADRATIC)
    files["quadratic"] = folder / "quadratic.py"
    paths = [str(p) for p in files.values()]
    machine = f"{platform.node()} ({os.cpu_count()} cores)"
    print(f"machine: {machine}; {args.env}, {args.timesteps} steps, metarl suite {args.suite}")

    sweep = []
    if args.suite == "discobench":
        sweep = ["--lr-sweep", DISCOBENCH_SWEEP, "--lr-aggregation", "best"]
    start = time.perf_counter()
    ours = evaluate(
        [*paths, "--task", "drift", "--suite", args.suite, "--envs", args.env, *sweep]
        + ["--timesteps", str(args.timesteps), "--seeds", str(args.seeds), "--skip-short"]
        + ["--seed-values", args.seed_values] * bool(args.seed_values)
        + ["--no-heldout", "--no-validation", "--timeout", str(args.timeout), "--json"],
        timeout=args.timeout * 4,
    )
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    theirs = evaluate(
        [*paths, "--task", "drift", "--harness", "discogen", "--envs", args.env, "--json"]
        + ["--set", f"TOTAL_TIMESTEPS={args.timesteps}", "--set", f"NUM_ENVS={args.num_envs}"]
        + ["--timeout", str(args.timeout), "--no-record"],
        timeout=args.timeout * 5,
    )
    theirs_s = time.perf_counter() - start

    names = list(files)
    ours_fit = [o.get("fitness") for o in ours]
    theirs_fit = [o.get("fitness") for o in theirs]
    print("\n| drift | metarl (normalised, PPO = 1) | metarl return | metarl rank | "
          "DiscoGen (/ base) | DiscoGen return | DiscoGen rank |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    usable = all(v is not None for v in ours_fit + theirs_fit)
    r_ours = ranks(ours_fit) if usable else [None] * 3
    r_theirs = ranks(theirs_fit) if usable else [None] * 3
    for i, name in enumerate(names):
        game = (theirs[i].get("games") or [{}])[0]
        env = best_rate(ours[i].get("env_scores") or [{}])
        rate = f" (lr {env['lr']:.0e})" if env.get("lr") else ""
        print(
            f"| {name} | {_num(ours_fit[i])} | {_num(env.get('mean'))} ± {_num(env.get('std'))}"
            f"{rate} "
            f"| {r_ours[i]} | {_num(theirs_fit[i])} | {_num(game.get('candidate'))} ± "
            f"{_num(game.get('candidate_std'))} | {r_theirs[i]} |"
        )
    seeds = ((ours[0].get("env_scores") or [{}])[0]).get("seeds")
    print(f"\nmetarl's training seeds (drawn; --seed-values re-runs them): {seeds}")
    if usable:
        print(f"Spearman rank correlation: {spearman(ours_fit, theirs_fit):.2f}")
    for name, o, t in zip(names, ours, theirs):
        if not o.get("passed") or not t.get("passed"):
            print(f"{name}: metarl {o.get('stage')} {o.get('reason')}; DiscoGen {t.get('reason')}")
    print(f"wall time: metarl {ours_s:.0f} s, DiscoGen {theirs_s:.0f} s (its base included)")


if __name__ == "__main__":
    main()
