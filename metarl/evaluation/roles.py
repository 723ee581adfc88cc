"""Score matrices of one role from archived evaluations: what the validation race compares.

A validation round trains a candidate on the suite's validation environments on seeds it has
not seen; the race (discovery/loop.py) adds rounds until the statistics decide
(`metarl.rl.statistics.race`). Each round is archived as evaluation rows; this module turns a
candidate's rows back into the (runs x environments) matrix of per-seed normalised scores
that rliable-style estimators take: rounds stacked as more runs, each seed's return
normalised against its own round's baseline on those seeds (the paired design), and an
environment whose score is undefined in any round (a baseline no better than random) left
out whole.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from metarl.rl.scoring import per_seed_normalised
from metarl.rl.statistics import Estimate, iqm_interval


def role_matrix(rows: Sequence[Mapping], envs: Sequence[str]) -> np.ndarray | None:
    """The (runs x envs) per-seed normalised scores of a candidate's evaluation rows.

    Args:
        rows: decoded `evaluations` rows of one candidate and role, full stage (env, seeds,
            returns, baseline_mean, random_mean), in the order they were written.
        envs: the role's environments, in the suite's order (the matrix's columns).

    Returns:
        The matrix (columns: the envs defined in every round), or None when no round covers
        every env or no env is defined.
    """
    rounds: dict[tuple[int, ...], dict[str, Mapping]] = {}
    for row in rows:
        rounds.setdefault(tuple(int(s) for s in row["seeds"]), {})[row["env"]] = row
    blocks, defined = [], set(envs)
    for by_env in rounds.values():
        if not set(envs) <= set(by_env):
            continue  # an interrupted round: not every env was scored
        block = {}
        for env in envs:
            row = by_env[env]
            values = None
            if row.get("baseline_mean") is not None and row.get("random_mean") is not None:
                values = per_seed_normalised(
                    row["returns"], row["random_mean"], row["baseline_mean"]
                )
            if values is None:
                defined.discard(env)
            else:
                block[env] = values
        blocks.append(block)
    columns = [env for env in envs if env in defined]
    if not blocks or not columns:
        return None
    return np.concatenate([np.stack([b[e] for e in columns], axis=1) for b in blocks], axis=0)


def summarise(matrix: np.ndarray | None) -> Estimate | None:
    """The IQM of a role matrix with its stratified-bootstrap 95% interval (None without one)."""
    return None if matrix is None else iqm_interval(matrix)
