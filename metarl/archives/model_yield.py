"""What each LLM of a run yielded, generation by generation: the rows of the report's "Models"
section (report/models.py).

A run with several `--model`s picks each proposal's model by fixed weights or by a bandit on
improvement per cost (discovery/proposers/llm/bandit.py). Whether that spent the budget well is
read from the archive alone: a child's model is its `proposer` ("llm:<model>"), it *improved*
when it passed with a training fitness above its best parent's (the `parents` edges), and the
`calls` table says what each model's calls cost (a call is charged to its own model, so a
re-proposal by another model after a duplicate costs that model). Two narrow queries, summed
here, so the SQL stays in the archive layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from metarl.archives.store import Archive

LLM_PREFIX = "llm:"


@dataclass
class ModelGeneration:
    """One model's proposals and calls in one generation of a run.

    Attributes:
        generation: the generation.
        model: the model's name, e.g. "openai/gpt-4o-mini".
        proposals: children proposed by it.
        passed: those that passed every stage.
        improved: those that passed with a training fitness above their best parent's.
        improvement: the fitness gained by those, summed.
        calls: its LLM calls in the generation (retries, repairs and re-proposals included).
        cost_usd: their USD; None when none of them had a known price.
        latency_s: their summed latency.
    """

    generation: int
    model: str
    proposals: int = 0
    passed: int = 0
    improved: int = 0
    improvement: float = 0.0
    calls: int = 0
    cost_usd: float | None = None
    latency_s: float = 0.0


_CHILDREN = """
SELECT c.id, c.generation, c.proposer, c.status, c.fitness,
       (SELECT max(p.fitness) FROM parents e JOIN candidates p ON p.id = e.parent_id
        WHERE e.child_id = c.id) AS parent_fitness
FROM candidates c
WHERE c.run_id = ? AND c.is_seed = 0 AND c.proposer LIKE 'llm:%'
ORDER BY c.seq
"""

_CALLS = """
SELECT c.generation, k.model, count(*) AS calls, sum(k.cost_usd) AS cost_usd,
       sum(coalesce(k.latency_s, 0)) AS latency_s
FROM calls k JOIN candidates c ON c.id = k.candidate_id
WHERE k.run_id = ?
GROUP BY c.generation, k.model
"""


def model_yield(archive: Archive, run_id: str) -> list[ModelGeneration]:
    """Per generation and model, what run `run_id`'s LLM proposals yielded and cost.

    Args:
        archive: the archive holding the run.
        run_id: the run.

    Returns:
        One row per (generation, model) with a proposal or a call, by generation, then in
        the order the models first proposed; [] for a run without LLM proposals.
    """
    rows: dict[tuple[int, str], ModelGeneration] = {}

    def row(generation: int | None, model: str) -> ModelGeneration:
        key = (int(generation or 0), model)
        if key not in rows:
            rows[key] = ModelGeneration(generation=key[0], model=model)
        return rows[key]

    for child in archive.query(_CHILDREN, (run_id,)):
        entry = row(child["generation"], child["proposer"][len(LLM_PREFIX) :])
        entry.proposals += 1
        if child["status"] != "passed":
            continue
        entry.passed += 1
        fitness, parent = child["fitness"], child["parent_fitness"]
        if fitness is not None and parent is not None and fitness > parent:
            entry.improved += 1
            entry.improvement += fitness - parent
    order = list(dict.fromkeys(model for _, model in rows))
    for call in archive.query(_CALLS, (run_id,)):
        entry = row(call["generation"], call["model"] or "?")
        entry.calls += call["calls"]
        entry.cost_usd = call["cost_usd"]  # SQL's sum: None when no call had a price
        entry.latency_s += call["latency_s"] or 0.0
    order = list(dict.fromkeys([*order, *(model for _, model in rows)]))
    return sorted(rows.values(), key=lambda r: (r.generation, order.index(r.model)))
