"""Score matrices of one role from archived evaluations: what the validation race compares.

A validation round trains a candidate on the suite's validation environments on seeds it has
not seen; the race (discovery/loop.py) adds rounds until the statistics decide
(`metarl.evaluation.statistics.race`). Each round is archived as evaluation rows; this module
turns a candidate's rows back into the (runs x environments) matrix of per-seed normalised scores
that rliable-style estimators take: rounds stacked as more runs, each seed's return
normalised against its own round's baseline on those seeds (the paired design), and an
environment whose score is undefined in any round (a baseline no better than random) left
out whole.

It also computes an outcome's aggregate per role with its interval (`score_roles`): the one
place the train, validation and test numbers are made from an outcome's env scores.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from metarl.evaluation.outcome import ROLES, EnvScore, Outcome
from metarl.evaluation.statistics import Estimate, iqm_interval
from metarl.rl.scoring import aggregate, bootstrap_interval, per_seed_normalised

# one run of an env at one learning rate: (per-seed returns, baseline mean, random mean)
RateRun = tuple[Sequence[float], "float | None", "float | None"]


def env_per_seed(runs: Sequence[RateRun], aggregation: str = "best") -> np.ndarray | None:
    """An env's per-seed normalised scores from its runs, one per swept learning rate (one
    run when unswept); their mean is the env's score.

    Unswept: `(R - R_random) / (R_baseline - R_random)` per seed. Swept: every rate is
    normalised against the baseline at *its* best rate (PPO tuned by the same sweep), then
    `best` keeps the rate whose mean is highest (DiscoBench's best-LR) and `mean` averages
    each seed over the rates (robustness to the rate).

    Args:
        runs: the env's runs, in the sweep's order.
        aggregation: "best" or "mean".

    Returns:
        The per-seed scores, or None when undefined (a missing reference, a non-finite return,
        a baseline no better than random).
    """
    if not runs or any(base is None or rand is None for _, base, rand in runs):
        return None
    random_mean = runs[0][2]
    baseline = max(base for _, base, _ in runs)
    per_rate = [per_seed_normalised(returns, random_mean, baseline) for returns, _, _ in runs]
    if any(values is None for values in per_rate):
        return None
    if len(per_rate) == 1:
        return per_rate[0]
    if aggregation == "mean":
        return np.mean(np.stack(per_rate), axis=0)
    return max(per_rate, key=lambda values: float(np.mean(values)))


def role_table(
    rows: Sequence[Mapping], envs: Sequence[str], aggregation: str = "best"
) -> tuple[np.ndarray | None, list[str]]:
    """The (runs x envs) per-seed normalised scores of a candidate's evaluation rows, and the
    envs its columns are.

    Args:
        rows: decoded `evaluations` rows of one candidate and role, full stage (env, seeds,
            returns, baseline_mean, random_mean; several per env and round when learning
            rates were swept), in the order they were written.
        envs: the role's environments, in the suite's order.
        aggregation: how a swept env's rates combine (`env_per_seed`).

    Returns:
        (the matrix, its columns: the envs defined in every round), or (None, []) when no
        round covers every env or no env is defined.
    """
    rounds: dict[tuple[int, ...], dict[str, list[RateRun]]] = {}
    for row in rows:
        run = (row["returns"], row.get("baseline_mean"), row.get("random_mean"))
        by_env = rounds.setdefault(tuple(int(s) for s in row["seeds"]), {})
        by_env.setdefault(row["env"], []).append(run)
    blocks, defined = [], set(envs)
    for by_env in rounds.values():
        if not set(envs) <= set(by_env):
            continue  # an interrupted round: not every env was scored
        block = {}
        for env in envs:
            values = env_per_seed(by_env[env], aggregation)
            if values is None:
                defined.discard(env)
            else:
                block[env] = values
        blocks.append(block)
    columns = [env for env in envs if env in defined]
    if not blocks or not columns:
        return None, []
    matrix = np.concatenate([np.stack([b[e] for e in columns], axis=1) for b in blocks], axis=0)
    return matrix, columns


def role_matrix(
    rows: Sequence[Mapping], envs: Sequence[str], aggregation: str = "best"
) -> np.ndarray | None:
    """`role_table`'s matrix alone."""
    return role_table(rows, envs, aggregation)[0]


def comparable(
    first: tuple[np.ndarray | None, list[str]], second: tuple[np.ndarray | None, list[str]]
) -> tuple[np.ndarray, np.ndarray] | None:
    """Two role tables restricted to the envs both define (a paired comparison needs the same
    columns: an env undefined in one candidate's earlier round leaves both); None without any."""
    (a, columns_a), (b, columns_b) = first, second
    common = [env for env in columns_a if env in columns_b]
    if a is None or b is None or not common:
        return None
    pick = lambda matrix, columns: matrix[:, [columns.index(env) for env in common]]  # noqa: E731
    return pick(a, columns_a), pick(b, columns_b)


def summarise(matrix: np.ndarray | None) -> Estimate | None:
    """The IQM of a role matrix with its stratified-bootstrap 95% interval (None without one)."""
    return None if matrix is None else iqm_interval(matrix)


def rate_scores(rows: Sequence[Mapping], grid: Sequence[float]) -> list[float | None]:
    """The mean score at each position of a learning-rate grid over a candidate's swept
    evaluation rows (every env and round), each run normalised against the baseline at its
    env and round's best rate, so that the rates compare on one yardstick.

    Args:
        rows: decoded `evaluations` rows with `lr`, `env`, `seeds`, `returns`,
            `baseline_mean`, `random_mean`; a row's position in the grid is the rank of its
            `lr` among its env and round's rates.
        grid: the grid's labels (multipliers or rates), ascending, one per position.

    Returns:
        Per position, the mean normalised score, or None where none was defined.
    """
    groups: dict[tuple, list[Mapping]] = {}
    for row in rows:
        if row.get("lr") is not None:
            key = (row["env"], tuple(int(s) for s in row["seeds"]))
            groups.setdefault(key, []).append(row)
    sums = [0.0] * len(grid)
    counts = [0] * len(grid)
    for group in groups.values():
        if len(group) != len(grid) or any(r.get("baseline_mean") is None for r in group):
            continue  # not a whole sweep of this grid
        group = sorted(group, key=lambda r: float(r["lr"]))
        baseline = max(float(r["baseline_mean"]) for r in group)
        for position, row in enumerate(group):
            values = per_seed_normalised(row["returns"], row["random_mean"], baseline)
            if values is not None:
                sums[position] += float(np.mean(values))
                counts[position] += 1
    return [total / count if count else None for total, count in zip(sums, counts)]


MIN_IDENTICAL = 4  # shared per-seed returns two candidates must agree on to be one behaviour


def identical_returns(rows_a: Sequence[Mapping], rows_b: Sequence[Mapping]) -> int:
    """How many per-seed returns two candidates share, when every shared one is bit-identical.

    A run of an env is comparable between two candidates only when both trained it at the
    same learning rate on the same seeds in the same order (a seed's return depends on its
    batch layout): such pairs are compared return by return. Two programs that differ in
    source yet return exactly the same on every such run (a constant changed where training
    never reaches) are one behaviour: a race between them can only end in a tie.

    Args:
        rows_a, rows_b: decoded `evaluations` rows of two candidates (env, lr, seeds, returns).

    Returns:
        The number of returns compared, or 0 when any comparable pair differs (or none
        exists). Callers ask for at least MIN_IDENTICAL, so that one saturated env (every
        seed at CartPole's 500) is not taken for sameness.
    """

    def runs(rows: Sequence[Mapping]) -> dict[tuple, list[float]]:
        return {
            (row["env"], row.get("lr"), tuple(int(s) for s in row["seeds"] or ())): [
                float(r) for r in row["returns"] or ()
            ]
            for row in rows
        }

    a, b = runs(rows_a), runs(rows_b)
    shared = a.keys() & b.keys()
    if any(a[key] != b[key] for key in shared):
        return 0
    return sum(len(a[key]) for key in shared)


def _role_envs(env_scores: Sequence[EnvScore], role: str) -> dict[str, list[EnvScore]]:
    """The role's full-stage scores by env, in order (several per env when rates were swept)."""
    out: dict[str, list[EnvScore]] = {}
    for score in env_scores:
        if score.stage == "full" and score.role == role:
            out.setdefault(score.env, []).append(score)
    return out


def _env_value(scores: list[EnvScore], aggregation: str) -> tuple[float | None, object]:
    """An env's score and its per-seed scores (None when undefined): the unswept env's own
    `normalised`; a swept env's by `env_per_seed`."""
    runs = [(s.returns, s.baseline_mean, s.random_mean) for s in scores]
    per_seed = env_per_seed(runs, aggregation)
    if len(scores) == 1:
        return scores[0].normalised, per_seed
    if per_seed is None:
        return None, None
    return float(np.mean(per_seed)), per_seed


def role_intervals(
    env_scores: Sequence[EnvScore], aggregation: str = "best"
) -> dict[str, list[float] | None]:
    """The 95% bootstrap interval of each role's aggregate score.

    Over the same scores `score_roles` averages (the full-stage envs of the role whose
    normalised score is defined), from each env's per-seed scores (`env_per_seed`);
    seeds are resampled jointly across envs (`metarl.rl.scoring.bootstrap_interval`), so the
    interval is reproducible from the archive.

    Returns:
        role -> [low, high], or None (no such env, or one seed).
    """
    intervals: dict[str, list[float] | None] = {}
    for role in ROLES:
        per_seed = []
        for scores in _role_envs(env_scores, role).values():
            value, values = _env_value(scores, aggregation)
            if value is not None and values is not None:
                per_seed.append(values)
        interval = bootstrap_interval(per_seed) if per_seed else None
        intervals[role] = list(interval) if interval is not None else None
    return intervals


def aggregate_intervals(
    env_scores: Sequence[EnvScore],
) -> tuple[list[float] | None, list[float] | None]:
    """The intervals of the train and test roles (`role_intervals`): (fitness_ci, heldout_ci)."""
    intervals = role_intervals(env_scores)
    return intervals["train"], intervals["test"]


def score_roles(outcome: Outcome, aggregation: str = "best") -> None:
    """Set a passed outcome's aggregate per role from its full-stage env scores, in place:
    `fitness` (train), `validation` and `heldout` (test), each with its interval. A swept
    env counts once, its rates combined by `aggregation` ("best" or "mean").

    The one place the three numbers are computed: the trainer's report and the parent's
    re-scoring of the raw returns both call it.
    """
    intervals = role_intervals(outcome.env_scores, aggregation)
    values = {}
    for role in ROLES:
        envs = _role_envs(outcome.env_scores, role).values()
        scores = [v for v in (_env_value(s, aggregation)[0] for s in envs) if v is not None]
        value = aggregate(scores) if scores else None
        values[role] = value if value is not None and math.isfinite(value) else None
    outcome.fitness, outcome.fitness_ci = values["train"], intervals["train"]
    outcome.validation, outcome.validation_ci = values["validation"], intervals["validation"]
    outcome.heldout, outcome.heldout_ci = values["test"], intervals["test"]
    named = (("train", "fitness"), ("validation", "validation"), ("test", "heldout"))
    for role, attribute in named:
        if values[role] is None:
            setattr(outcome, f"{attribute}_ci", None)
