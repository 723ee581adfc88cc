"""Read-side queries over an archive: leaderboard, lineage, export (a run's incumbent and
counts: `incumbents`)."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from dataclasses import dataclass, field

from metarl.archives.incumbents import interval as _interval
from metarl.archives.incumbents import run_incumbents
from metarl.archives.store import Archive, ArchiveError
from metarl.evaluation.roles import env_per_seed


@dataclass
class LeaderRow:
    rank: int
    id: str
    run_id: str
    name: str
    env_scores: dict[str, float | None]  # training env -> normalised score (selection seeds)
    fitness: float | None  # normalised aggregate on the selection seeds
    confirmed: float | None  # aggregate re-evaluated on more seeds (elites only)
    # the test role's aggregate: re-measured on fresh seeds after selection when it was
    # (`final_heldout`), else the confirmed one, else the one measured with the candidate
    heldout: float | None
    generation: int
    proposer: str
    operator: str
    is_seed: bool
    task: str
    suite: str
    seeds: int
    total_timesteps: int | None
    # 95% bootstrap intervals over seeds, [low, high], of fitness, confirmed and held-out
    fitness_ci: list[float] | None = None
    confirmed_ci: list[float] | None = None
    heldout_ci: list[float] | None = None
    method: str = "discovery"  # discovery | es | distil | symbolic
    # the validation role: IQM over its validation rounds and their interval (raced ones only)
    validation: float | None = None
    validation_ci: list[float] | None = None
    protocol: str = ""  # the run's evaluation protocol ("" when unrecorded)
    heldout_source: str = ""  # final | confirmed | selection: which test number `heldout` is
    # on an all-runs board: what differs from the board's reference setting (task, suite, seeds,
    # budget); empty when the row is comparable with it
    differs: list[str] = field(default_factory=list)
    # the row is its run's incumbent (`run_incumbents`): what selection kept, which need not
    # rank first (rows rank by train score; validation races decide the incumbent)
    incumbent: bool = False

    @property
    def score(self) -> float:
        return self.confirmed if self.confirmed is not None else (self.fitness or float("-inf"))

    @property
    def setting(self) -> "Setting":
        return Setting(self.task, self.suite, self.seeds, self.total_timesteps)


@dataclass(frozen=True)
class Setting:
    """What makes two scores comparable: the same task and suite, trained on the same number of
    seeds (seeds are always 0..n-1) for the same per-environment budget."""

    task: str
    suite: str
    seeds: int
    total_timesteps: int | None

    def differences(self, other: "Setting") -> list[str]:
        """The names of what differs from `other`: task, suite, seeds, budget."""
        names = ("task", "suite", "seeds", "budget")
        mine = (self.task, self.suite, self.seeds, self.total_timesteps)
        theirs = (other.task, other.suite, other.seeds, other.total_timesteps)
        return [name for name, a, b in zip(names, mine, theirs) if a != b]

    def describe(self) -> str:
        """e.g. "drift on smoke, 2 seeds, 8,192 steps per env"."""
        steps = f"{self.total_timesteps:,}" if self.total_timesteps else "?"
        seeds = f"{self.seeds} seed" + ("s" if self.seeds != 1 else "")
        return f"{self.task} on {self.suite}, {seeds}, {steps} steps per env"


def reference_setting(settings: list[Setting]) -> Setting | None:
    """The setting most of `settings` share (on a tie, the one that comes first: the top row's
    on a ranked board); None for an empty list."""
    if not settings:
        return None
    counts = Counter(settings)
    best = max(counts.values())
    return next(s for s in settings if counts[s] == best)


def flag_comparability(rows: list[LeaderRow]) -> Setting | None:
    """Mark each row with what differs from the rows' reference setting; the reference."""
    reference = reference_setting([row.setting for row in rows])
    for row in rows:
        row.differs = row.setting.differences(reference) if reference else []
    return reference


@dataclass
class Leaderboard:
    rows: list[LeaderRow]
    envs: list[str]
    title: str
    mixed: bool = False  # rows from several tasks/suites
    notes: list[str] = field(default_factory=list)
    reference: Setting | None = None  # all-runs boards: the setting rows are compared against


def _filter_task_suite(
    where: list, params: list, task, suite, prefix: str = "", method: str | None = None
) -> None:
    """Append `task = ?` / `suite = ?` / `method = ?` conditions for the filters that are set."""
    for column, value in (("task", task), ("suite", suite), ("method", method)):
        if value:
            where.append(f"{prefix}{column} = ?")
            params.append(value)


def leaderboard(
    archive: Archive,
    *,
    run_id: str | None = None,
    all_runs: bool = False,
    task: str | None = None,
    suite: str | None = None,
    method: str | None = None,
    limit: int = 20,
    run_ids: list[str] | None = None,
) -> Leaderboard:
    """Passed candidates ranked by their confirmed score when they have one, else their
    selection fitness. Without `run_id` or `all_runs`, the most recent run (of `task`/`suite`/
    `method` if given); with `run_ids`, the candidates of those runs (an all-runs board over
    them). Every method's candidates are scored by the same cascade, so one board
    ranks them all; a method's own objective (ES fitness, fit error) never ranks anything."""
    where, params = ["c.status = 'passed'", "c.fitness IS NOT NULL"], []
    _filter_task_suite(where, params, task, suite, prefix="c.", method=method)
    if run_id:
        archive.get_run(run_id)  # a clear error for an unknown run
        where.append("c.run_id = ?")
        params.append(run_id)
        title = f"run {run_id}"
    elif not all_runs:
        filters, fparams = [], []
        _filter_task_suite(filters, fparams, task, suite, method=method)
        sql = "SELECT id FROM runs" + (" WHERE " + " AND ".join(filters) if filters else "")
        latest = archive.query(sql + " ORDER BY seq DESC LIMIT 1", fparams)
        if not latest:
            what = " matching those filters" if filters else ""
            raise ArchiveError(f"no runs{what} in {archive.path}")
        run_id = latest[0]["id"]
        where.append("c.run_id = ?")
        params.append(run_id)
        title = f"run {run_id}"
    else:
        title = "all runs"
        if run_ids:
            where.append(f"c.run_id IN ({','.join('?' * len(run_ids))})")
            params.extend(run_ids)
            title = "runs " + ", ".join(run_ids)
    # rank on narrow columns, then read the whole rows of the `limit` kept: a run of 10k
    # candidates reads 5 outcome blobs, not 4,500 (benchmarks/report.py)
    ranked = archive.query(
        "SELECT c.id, c.hash, c.eval_key FROM candidates c WHERE "
        + " AND ".join(where)
        + " ORDER BY coalesce(c.confirmed_fitness, c.fitness) DESC, c.seq",
        params,
    )
    if all_runs:
        # The same program evaluated the same way in several runs is one entry.
        seen, unique = set(), []
        for row in ranked:
            key = (row["hash"], row["eval_key"])
            if key not in seen:
                seen.add(key)
                unique.append(row)
        ranked = unique
    kept = [r["id"] for r in ranked[:limit]]
    ranks = {r["id"]: rank for rank, r in enumerate(ranked, 1)}
    # the run's incumbent is on its board even below the limit (its rank says where it is)
    incumbents = run_incumbents(
        archive, [run_id] if run_id else {r["run_id"] for r in _runs_of(archive, kept)}
    )
    for cid in incumbents.values():
        if run_id and cid in ranks and cid not in kept:
            kept.append(cid)
    by_id = {}
    if kept:
        marks = ",".join("?" * len(kept))
        by_id = {
            r["id"]: r
            for r in archive.query(f"SELECT * FROM candidates WHERE id IN ({marks})", kept)
        }
    rows = [by_id[i] for i in kept]
    ids = [r["id"] for r in rows]
    scores: dict[str, dict[str, float | None]] = {i: {} for i in ids}
    envs: list[str] = []
    if ids:
        marks = ",".join("?" * len(ids))
        swept: dict[tuple[str, str], list] = {}
        for ev in archive.query(
            "SELECT candidate_id, env, normalised, lr, returns, baseline_mean, random_mean "
            f"FROM evaluations WHERE candidate_id IN ({marks}) "
            "AND purpose = 'selection' AND stage = 'full' AND heldout = 0 "
            "AND coalesce(role, 'train') = 'train' ORDER BY id",
            ids,
        ):
            if ev["lr"] is None:
                scores[ev["candidate_id"]][ev["env"]] = ev["normalised"]
            else:  # one row per swept rate: the env's score combines them (roles.py)
                run = (json.loads(ev["returns"]), ev["baseline_mean"], ev["random_mean"])
                swept.setdefault((ev["candidate_id"], ev["env"]), []).append(run)
            if ev["env"] not in envs:
                envs.append(ev["env"])
        aggregations = run_aggregations(archive, {r["run_id"] for r in rows})
        by_candidate = {r["id"]: r["run_id"] for r in rows}
        for (cid, env), runs in swept.items():
            values = env_per_seed(runs, aggregations.get(by_candidate[cid], "best"))
            scores[cid][env] = float(values.mean()) if values is not None else None
    protocols = run_protocols(archive, {r["run_id"] for r in rows})
    out = []
    marked = set(incumbents.values())
    for row in rows:
        seeds = json.loads(row["seeds"]) if row.get("seeds") else []
        held_column, source = test_column(row)
        out.append(
            LeaderRow(
                rank=ranks[row["id"]],
                id=row["id"],
                run_id=row["run_id"],
                name=row["name"] or "",
                env_scores=scores.get(row["id"], {}),
                fitness=row["fitness"],
                confirmed=row["confirmed_fitness"],
                heldout=row[held_column] if held_column else None,
                heldout_source=source,
                validation=row.get("validation"),
                validation_ci=_interval(row, "validation"),
                protocol=protocols.get(row["run_id"], ""),
                generation=row["generation"] or 0,
                proposer=row["proposer"] or "",
                operator=row["operator"] or "",
                is_seed=bool(row["is_seed"]),
                task=row["task"] or "",
                suite=row["suite"] or "",
                seeds=len(seeds),
                total_timesteps=row["total_timesteps"],
                fitness_ci=_interval(row, "fitness"),
                confirmed_ci=_interval(row, "confirmed_fitness"),
                heldout_ci=_interval(row, held_column) if held_column else None,
                method=row.get("method") or "discovery",
                incumbent=row["id"] in marked,
            )
        )
    mixed = len({(r.task, r.suite) for r in out}) > 1
    reference = flag_comparability(out) if all_runs else None
    return Leaderboard(rows=out, envs=envs, title=title, mixed=mixed, reference=reference)


def _runs_of(archive: Archive, ids: list[str]) -> list[dict]:
    """The (id, run_id) rows of candidates `ids`."""
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    return archive.query(f"SELECT id, run_id FROM candidates WHERE id IN ({marks})", ids)


def test_column(row: dict) -> tuple[str | None, str]:
    """Which column holds a candidate's reported test score, and what it is: `final_heldout`
    (re-measured on fresh seeds after selection), `confirmed_heldout` (older archives'
    confirmation) or `heldout` (measured with the candidate); (None, "") without one."""
    for column, source in (
        ("final_heldout", "final"),
        ("confirmed_heldout", "confirmed"),
        ("heldout", "selection"),
    ):
        if row.get(column) is not None:
            return column, source
    return None, ""


def _run_configs(archive: Archive, run_ids) -> dict[str, tuple[str | None, dict]]:
    """run id -> (its protocol column, its config as a dict ({} when unreadable))."""
    ids = [r for r in run_ids if r]
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    out = {}
    for run in archive.query(f"SELECT id, protocol, config FROM runs WHERE id IN ({marks})", ids):
        try:
            config = json.loads(run["config"]) if run.get("config") else {}
        except ValueError:
            config = {}  # a config that is not JSON: nothing recorded about its protocol
        out[run["id"]] = (run.get("protocol"), config if isinstance(config, dict) else {})
    return out


def run_protocols(archive: Archive, run_ids) -> dict[str, str]:
    """run id -> its evaluation protocol as shown with its scores: the name (the column,
    else its config's, else ""), with the learning-rate sweep when the run had one."""
    out = {}
    for run_id, (protocol, config) in _run_configs(archive, run_ids).items():
        label = protocol or config.get("protocol") or ""
        if config.get("lr_sweep"):
            label += f" (lr sweep {config['lr_sweep']}, {config.get('lr_aggregation', 'best')})"
        out[run_id] = label
    return out


def run_aggregations(archive: Archive, run_ids) -> dict[str, str]:
    """run id -> how its swept learning rates combine ("best" when unrecorded)."""
    return {
        run_id: config.get("lr_aggregation") or "best"
        for run_id, (_, config) in _run_configs(archive, run_ids).items()
    }


def lineage(archive: Archive, candidate_id: str, max_depth: int = 50) -> dict:
    """The ancestry of a candidate as a nested dict; a program reached twice (crossover of
    relatives) is expanded once and referenced afterwards."""
    seen: set[str] = set()

    def node(cid: str, depth: int) -> dict:
        try:
            row = archive.candidate(cid)
        except ArchiveError:
            return {"id": cid, "missing": True, "parents": []}
        info = {
            "id": cid,
            "name": row.get("name") or "",
            "fitness": row.get("fitness"),
            "confirmed": row.get("confirmed_fitness"),
            "status": row.get("status"),
            "stage": row.get("stage"),
            "operator": row.get("operator") or "",
            "thought": row.get("thought") or "",
            "proposer": row.get("proposer") or "",
            "generation": row.get("generation") or 0,
            "is_seed": bool(row.get("is_seed")),
            "parents": [],
            "repeat": False,
        }
        if cid in seen:
            info["repeat"] = True
            return info
        seen.add(cid)
        if depth < max_depth:
            info["parents"] = [node(p, depth + 1) for p in archive.parents(cid)]
        return info

    return node(candidate_id, 0)


# -- export ---------------------------------------------------------------------------------

CSV_COLUMNS = [
    "id",
    "run_id",
    "seq",
    "name",
    "status",
    "stage",
    "reason",
    "fitness",
    "fitness_low",
    "fitness_high",
    "confirmed_fitness",
    "confirmed_fitness_low",
    "confirmed_fitness_high",
    "heldout",
    "heldout_low",
    "heldout_high",
    "confirmed_heldout",
    "confirmed_heldout_low",
    "confirmed_heldout_high",
    "validation",
    "validation_low",
    "validation_high",
    "final_heldout",
    "final_heldout_low",
    "final_heldout_high",
    "generation",
    "island",
    "is_seed",
    "proposer",
    "operator",
    "parent_ids",
    "hash",
    "fingerprint",
    "duplicate_of",
    "cached_from",
    "seeds",
    "total_timesteps",
    "eval_key",
    "eval_s",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "created_at",
    "code",
]


def export_run(archive: Archive, run_id: str) -> dict:
    run = archive.get_run(run_id)
    candidates = []
    for row in archive.run_candidates(run_id):
        row["evaluations"] = archive.evaluations(row["id"])
        row["calls"] = archive.calls(row["id"])
        candidates.append(row)
    return {
        "run": run,
        "candidates": candidates,
        "messages": archive.messages(run_id),
        "schema_version": archive.schema_version,
    }


def export_json(archive: Archive, run_id: str) -> str:
    return json.dumps(export_run(archive, run_id), indent=2, default=str)


def export_csv(archive: Archive, run_id: str) -> str:
    archive.get_run(run_id)
    rows = archive.run_candidates(run_id)
    envs: list[str] = []
    per_env: dict[str, dict[str, float | None]] = {}
    for row in rows:
        per_env[row["id"]] = {}
        for ev in archive.evaluations(row["id"]):
            if ev["purpose"] == "selection" and ev["stage"] == "full":
                column = f"score:{ev['env']}"
                per_env[row["id"]][column] = ev["normalised"]
                per_env[row["id"]][column + ":low"] = ev.get("normalised_low")
                per_env[row["id"]][column + ":high"] = ev.get("normalised_high")
                if column not in envs:
                    envs += [column, column + ":low", column + ":high"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS + envs, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        flat = {k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in row.items()}
        flat.update(per_env.get(row["id"], {}))
        writer.writerow(flat)
    return buffer.getvalue()


__all__ = [
    "LeaderRow",
    "Leaderboard",
    "Setting",
    "reference_setting",
    "flag_comparability",
    "leaderboard",
    "lineage",
    "export_run",
    "export_json",
    "export_csv",
]
