"""An LPG run's report: the curriculum's level buffer over generations and the best export's
held-out tabular levels, on hand-made history and a hand-written archive (no training)."""

from __future__ import annotations

import pytest
from report_pages import rows, sections

from metarl.archives.store import Archive
from metarl.evaluation.outcome import EnvScore, Outcome
from metarl.report.curriculum import curriculum_buffer, thin
from metarl.report.levels import curriculum_of, distribution_of
from metarl.report.page import write_report

GRID = distribution_of("grid-small")
TEST_ENVS = ("Grid-dense", "Grid-sparse", "Catch-bsuite")  # a few of grid-small's test role
PLAIN = [  # an ES run's history before curricula: no level buffer
    {"generation": 1, "best": 0.2, "mean": 0.1, "std": 0.05, "sigma": 0.02, "seconds": 1.0},
    {"generation": 2, "best": 0.3, "mean": 0.2, "std": 0.05, "sigma": 0.02, "seconds": 1.0},
]
# generation 1 samples levels 11 and 12 (12 scores below the buffer's top 2 snapshot: not in it);
# generation 2 replays 11 and 7
HISTORY = [
    {
        **PLAIN[0],
        "replay": False,
        "levels": [11, 12],
        "lifetimes": [100, 200],
        "returns": [0.5, 0.9],
        "regret": [0.4, 0.05],
        "buffer": [[7, 0.6, 3], [11, 0.4, 0]],
        "buffer_size": 3,
    },
    {
        **PLAIN[1],
        "replay": True,
        "levels": [11, 7],
        "lifetimes": [100, 150],
        "returns": [0.6, 0.2],
        "regret": [0.3, 0.7],
        "buffer": [[7, 0.7, 0], [11, 0.3, 0], [12, 0.05, 2]],
        "buffer_size": 3,
    },
]


def name(seed: int) -> str:
    return f"Grid-small:level={seed}"


def test_the_curriculum_names_each_buffered_and_drawn_level():
    generations = curriculum_of(HISTORY, GRID)
    assert [(g.generation, g.replay, g.buffer_size) for g in generations] == [
        (1, False, 3),
        (2, True, 3),
    ]
    first, second = generations
    assert [(b.name, b.score, b.staleness, b.drawn) for b in first.buffer] == [
        (name(7), 0.6, 3, False),
        (name(11), 0.4, 0, True),
    ]
    assert [b.drawn for b in second.buffer] == [True, True, False]
    assert [(d.name, d.lifetime, d.pair_return, d.regret) for d in first.drawn] == [
        (name(11), 100, 0.5, 0.4),
        (name(12), 200, 0.9, 0.05),
    ]


def test_a_history_without_a_level_buffer_has_no_curriculum():
    assert curriculum_of(PLAIN, GRID) == []
    uniform = [{**entry, "buffer": [], "regret": None} for entry in HISTORY]  # uniform: no buffer
    assert curriculum_of(uniform, GRID) == []


def test_the_buffer_figure_draws_every_buffered_level_with_its_name_and_outlines_the_drawn():
    figure, drawn = curriculum_buffer(curriculum_of(HISTORY, GRID), "groove", limit=100)
    assert drawn == 2
    traces = {t.name: t for t in figure.data}
    plain, outlined = traces["buffered level"], traces["buffered, drawn this generation"]
    assert len(plain.x) + len(outlined.x) == 5  # 2 + 3 buffered levels
    assert (list(plain.x), list(plain.y)) == ([1, 2], [0.6, 0.05])
    assert (list(outlined.x), list(outlined.y)) == ([1, 2, 2], [0.4, 0.7, 0.3])
    assert [t.split("<br>")[0] for t in outlined.text] == [name(11), name(7), name(11)]
    assert list(plain.text) == [
        f"{name(7)}<br>score 0.600<br>staleness 3",
        f"{name(12)}<br>score 0.050<br>staleness 2",
    ]
    assert list(outlined.marker.color) == [0, 0, 0] and outlined.marker.line.width == 2
    assert list(plain.marker.color) == [3, 2] and not plain.marker.line.width
    # level 12, drawn in generation 1 but not in that snapshot, at its regret
    outside = traces["drawn, not among the buffer's top"]
    assert (list(outside.x), list(outside.y)) == ([1], [0.05]) and name(12) in outside.text[0]
    # the strip: generation 1 sampled new levels, generation 2 replayed
    assert list(traces["generation: replayed from the buffer"].x) == [2]
    assert list(traces["generation: new levels sampled"].x) == [1]
    # PLR's score is no regret: nothing drawn at a regret
    plr, _ = curriculum_buffer(curriculum_of(HISTORY, GRID), "plr", limit=100)
    assert "drawn, not among the buffer's top" not in {t.name for t in plr.data}


def test_a_long_curriculum_draws_an_even_sample_of_generations_and_the_last():
    generations = curriculum_of([{**HISTORY[i % 2], "generation": i + 1} for i in range(11)], GRID)
    kept = thin(generations, limit=10)
    assert [g.generation for g in kept] == [1, 4, 7, 10, 11]
    assert thin(generations, limit=1000) == generations


def _score(env: str, mean: float, reference: float, rand: float, role: str) -> EnvScore:
    return EnvScore(
        env=env,
        seeds=[0, 1],
        total_timesteps=1000,
        returns=[mean, mean],
        mean=mean,
        std=0.0,
        normalised=(mean - rand) / (reference - rand),
        baseline_mean=reference,
        random_mean=rand,
        role=role,
        normalised_ci=[0.1, 0.9],
    )


@pytest.fixture(scope="module")
def lpg_page(tmp_path_factory) -> tuple[str, str, str]:
    """(page, the GROOVE run's id, the older ES run's id): an LPG run with a curriculum and a
    scored export, and one whose history has no buffer."""
    path = tmp_path_factory.mktemp("lpg") / "lpg.db"
    with Archive(path) as archive:
        groove = archive.create_run(
            task="lpg",
            suite="grid-small",
            method="es",
            proposer="es",
            config={"curriculum": "groove", "generations": 2, "population": 4},
            state={"history": HISTORY, "curriculum": {"kind": "groove"}},
            best_id="r1-1",
        )
        scores = [_score("Grid-small:level=0", 0.5, 0.6, 0.0, "train")] + [
            _score(env, 0.3 + 0.4 * i, 0.6, 0.1, "test") for i, env in enumerate(TEST_ENVS)
        ]
        outcome = Outcome(passed=True, stage="full", env_scores=scores, fitness=0.8, heldout=1.0)
        archive.record_candidate(
            {
                "id": "r1-1",
                "run_id": groove,
                "seq": 1,
                "task": "lpg",
                "suite": "grid-small",
                "hash": "lpg-hash",
                "name": "LPG network",
                "code": "LPG = {}\n",
                "method": "es",
                "proposer": "es",
                "seeds": [0, 1],
                "total_timesteps": 1000,
                "eval_key": "k",
                "generation": 2,
                "is_seed": 0,
                "parent_ids": [],
            },
            outcome,
        )
        old = archive.create_run(
            task="lpg",
            suite="grid-small",
            method="es",
            proposer="es",
            config={"generations": 2, "population": 4},
            state={"history": PLAIN},
        )
        out = path.parent / "lpg.html"
        write_report(archive, [groove], out)
        page = out.read_text()
        write_report(archive, [old], path.parent / "old.html")
        page += (path.parent / "old.html").read_text()
    return page, groove, old


def test_an_lpg_report_shows_the_curriculum_section_and_the_latest_buffer(lpg_page):
    page, groove, _ = lpg_page
    section = sections(page)[(groove, "curriculum")]
    assert f"{groove}-curriculum-plot" in section
    assert (
        "groove curriculum: 2 generations, 1 replayed from the buffer, 1 sampled new levels"
        in section
    )
    table = rows(section, "level")
    assert list(table) == [name(7), name(11), name(12)]
    assert table[name(7)][1:] == [name(7), "0.700", "0", "yes"]
    assert table[name(12)][1:] == [name(12), "0.050", "2", ""]
    drawn = rows(section, "drawn")
    assert drawn[name(7)] == [name(7), "150", "0.200", "0.700"]


def test_an_es_run_without_a_level_buffer_has_no_curriculum_section(lpg_page):
    page, _, old = lpg_page
    found = {section for run, section in sections(page) if run == old}
    assert "es" in found and not found & {"curriculum", "levels"}


def test_the_best_exports_held_out_levels_against_the_actor_critic_reference(lpg_page):
    page, groove, _ = lpg_page
    section = sections(page)[(groove, "levels")]
    assert "r1-1" in section and "reference (actor-critic) return" in section
    assert "PPO" not in section
    table = rows(section, "env")
    assert list(table) == list(TEST_ENVS)  # the test role only, not the train level
    assert table["Grid-dense"] == [
        "Grid-dense",
        "0.30",
        "0.60",
        "0.10",
        "0.400 [0.10, 0.90]",
        "no",
        "2",
    ]
    assert table["Catch-bsuite"][1:4] == ["1.10", "0.60", "0.10"]
    assert table["Catch-bsuite"][5] == "yes"
    header = sections(page)[(groove, "header")]
    assert "1 = the reference (actor-critic), trained with the same agent and budget" in header
    assert "the baseline program was not evaluated" not in header
