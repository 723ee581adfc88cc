"""`metarl report` and `metarl leaderboard --all-runs` on real archives made by short runs.

One archive, three real runs on the smoke suite: the drift seeds evaluated (r1, budget 0, the
session's seeded archive), a mutation discovery run with `--report` (r2, one training seed: the
main job end to end), and the seeds scored on two training seeds (r3, budget 0: not comparable
with r2). The ES and GRPO sections are checked where those runs are made (test_es.py,
test_grpo_train.py). Every check compares a number on the page with the same number read from
the archive. The pure parts (funnel, incumbent, sampling) are checked on hand-made points.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from browser import ensure_chromium, render_report, why_no_chromium
from conftest import TINY_DISCOVER, invoke
from PIL import Image
from report_pages import rows, sections

from metarl.archives.queries import Setting, leaderboard, reference_setting
from metarl.archives.store import Archive, outcome_columns
from metarl.evaluation.outcome import Outcome
from metarl.report.comparison import compare_runs
from metarl.report.figures import generalisation_gap, sample
from metarl.report.page import write_report
from metarl.report.points import Point, funnel_of, incumbent_of
from metarl.report.settings import ReportSettings
from metarl.report.story import run_story

METARL = [sys.executable, "-c", "from metarl.cli.app import main; main()"]
# r3: the seed programs scored on two training seeds (budget 0): another setting than r2's
TWO_SEEDS = ["--suite", "smoke", "--timesteps", "8192", "--seed-values", "0,1", "--no-live"]


def metarl(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [*METARL, *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=os.environ
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def runs(seeded_archive_template, tmp_path_factory):
    """(folder, archive, discover's stdout): r1 seeds, r2 discovery with --report, r3 the seeds
    on two training seeds."""
    folder = tmp_path_factory.mktemp("report")
    db = folder / "metarl.db"
    db.write_bytes(Path(seeded_archive_template).read_bytes())
    found = metarl(
        folder, "discover", *TINY_DISCOVER, "--budget", "3", "--report", "--archive", str(db)
    )
    assert "Traceback" not in found.stderr
    metarl(folder, "discover", *TWO_SEEDS, "--budget", "0", "--archive", str(db))
    return folder, db, found.stdout


@pytest.fixture(scope="module")
def page(runs):
    """The report of r2 that `discover --report` wrote."""
    folder, _, _ = runs
    return (folder / "report-r2.html").read_text()


def query(db: Path, sql: str, params=()) -> list[dict]:
    with Archive(db, must_exist=True) as archive:
        return archive.query(sql, params)


def test_discover_with_report_writes_the_page_and_prints_its_path(runs):
    folder, _, stdout = runs
    assert f"report: {(folder / 'report-r2.html').resolve()}" in stdout
    text = (folder / "report-r2.html").read_text()
    assert (folder / "report-r2.html").stat().st_mode & 0o044  # readable by others: to share
    # self-contained: plotly.js is inside, nothing is fetched from anywhere
    assert "Plotly" in text and not re.search(r'<script[^>]+src=|<link[^>]+href="http', text)


def test_discover_scores_its_children_and_prints_the_leaderboard(runs):
    """The main job through the CLI (r2): the seeds reused from the archive, children evaluated
    and archived with their lineage, the leaderboard printed."""
    _, db, stdout = runs
    assert "leaderboard" in stdout and "ppo_clip" in stdout and "seed" in stdout
    with Archive(db, must_exist=True) as archive:
        run = archive.get_run("r2")
        assert run["status"] == "finished" and run["candidates_count"] == 3
        assert run["state"]["plan"] is None and run["state"]["generation"] == 1
        rows = archive.run_candidates("r2")
        seeds = [r for r in rows if r["is_seed"]]
        children = [r for r in rows if not r["is_seed"]]
        assert [s["cached_from"] for s in seeds] == ["r1-0", "r1-1"]  # evaluated once per archive
        assert len(children) == 3
        for child in children:
            assert child["generation"] == 1 and child["parent_ids"]
            assert set(child["parent_ids"]) <= {r["id"] for r in rows}
            assert child["status"] == "passed" or (child["stage"] and child["reason"])
            assert child["versions"]["jax"] and child["device"] and child["eval_key"]
        board = leaderboard(archive, run_id="r2")
        assert any(r.is_seed for r in board.rows)
        assert any(not r.is_seed for r in board.rows), "no discovered candidate on the leaderboard"
        assert run["best_id"] in {r["id"] for r in rows}
        assert archive.integrity_check() == "ok"


def test_a_run_report_has_every_section_of_a_discovery_run(page):
    found = {name for run, name in sections(page) if run == "r2"}
    expected = {"header", "fitness", "generalisation", "curves", "scores", "funnel", "lineage"}
    assert expected | {"code"} <= found
    assert not found & {"es", "grpo", "llm"}  # a mutation run has no ES, GRPO or LLM calls


def test_the_header_and_the_incumbent_are_the_archives(runs, page):
    _, db, _ = runs
    run = query(db, "SELECT * FROM runs WHERE id = 'r2'")[0]
    header = sections(page)[("r2", "header")]
    counted = query(
        db,
        "SELECT sum(is_seed = 0) AS children, sum(is_seed) AS seeds, "
        "sum(status = 'passed' AND fitness IS NOT NULL) AS scored FROM candidates "
        "WHERE run_id = 'r2'",
    )[0]
    assert counted["children"] == run["candidates_count"] == 3 and counted["seeds"] > 1
    counts = f"3 children + {counted['seeds']} seed programs, {counted['scored']} scored"
    assert f'data-value="candidates">{counts}<' in header
    assert f'data-value="fitness-counts">{counts}' in sections(page)[("r2", "fitness")]
    assert "drift on smoke, 1 seed, 8,192 steps per env" in header
    # the incumbent is the one the run recorded (validation races decide it), not the best
    # train score: the header names it and the incumbent line ends at it, at its score
    best = query(
        db,
        "SELECT id, coalesce(confirmed_fitness, fitness) AS score FROM candidates WHERE id = ?",
        (run["best_id"],),
    )[0]
    assert f'data-value="incumbent">{best["id"]} ' in header
    incumbents = rows(sections(page)[("r2", "fitness")], "candidate")
    last = list(incumbents.values())[-1]
    assert last[1] == best["id"] and last[2] == f"{best['score']:.3f}"
    assert "LLM cost" not in header  # a mutation run: no LLM, no "$0.0000"


def test_the_funnel_counts_where_each_proposal_stopped(runs, page):
    _, db, _ = runs
    stopped = {
        r["stage"]: r["n"]
        for r in query(
            db,
            "SELECT stage, count(*) AS n FROM candidates WHERE run_id = 'r2' AND is_seed = 0 "
            "AND status != 'passed' GROUP BY stage",
        )
    }
    total = query(db, "SELECT count(*) AS n FROM candidates WHERE run_id = 'r2' AND is_seed = 0")
    passed = query(
        db,
        "SELECT count(*) AS n FROM candidates WHERE run_id = 'r2' AND is_seed = 0 "
        "AND status = 'passed'",
    )
    table = rows(sections(page)[("r2", "funnel")], "stage")
    entered = total[0]["n"]
    for stage in ("propose", "dedup", "static", "probes", "short", "full"):
        assert table[stage][1:] == [str(entered), str(stopped.get(stage, 0))], stage
        entered -= stopped.get(stage, 0)
    assert table["passed"][1] == str(passed[0]["n"]) == str(entered)


def test_per_environment_scores_are_the_archives_with_the_baseline(runs, page):
    _, db, _ = runs
    table = sections(page)[("r2", "scores")]
    shown = re.findall(r'data-candidate="([^"]+)" data-env="([^"]+)"', table)
    assert shown and "(baseline)" in table
    for candidate, env in shown:
        ev = query(
            db,
            "SELECT normalised, normalised_low, normalised_high FROM evaluations WHERE "
            "candidate_id = ? AND env = ? AND purpose = 'selection' AND stage = 'full'",
            (candidate, env),
        )[0]
        row = re.search(
            rf'data-candidate="{candidate}" data-env="{env}">(.*?)</tr>', table, re.S
        ).group(1)
        assert f"{ev['normalised']:.3f}" in row


def test_the_learning_curves_draw_the_seed_spread(runs):
    _, db, _ = runs
    spread = query(
        db,
        "SELECT curve, curve_std FROM evaluations WHERE run_id = 'r3' AND stage = 'full' "
        "AND purpose = 'selection' LIMIT 1",
    )[0]
    # two training seeds: the spread is recorded point for point beside the mean curve
    curve, std = json.loads(spread["curve"]), json.loads(spread["curve_std"] or "[]")
    assert std and len(std) == len(curve) and any(s > 0 for s in std if s is not None)


def test_the_code_section_shows_the_top_programs_and_their_diff(runs, page):
    _, db, _ = runs
    code = sections(page)[("r2", "code")]
    shown = re.findall(r'<h3 data-candidate="([^"]+)"', code)
    assert shown
    text = html.unescape(re.sub(r"<[^>]+>", "", code))
    for cid in shown:
        row = query(db, "SELECT code, parent_ids FROM candidates WHERE id = ?", (cid,))[0]
        assert row["code"].strip().splitlines()[-1].strip() in text
        parents = re.findall(r'"([^"]+)"', row["parent_ids"] or "[]")
        if (
            parents
            and query(db, "SELECT code FROM candidates WHERE id = ?", (parents[0],))[0]["code"]
            != row["code"]
        ):
            assert f"--- {parents[0]}" in text and f"+++ {cid}" in text


def test_the_lineage_reaches_the_seed_programs(page):
    lineage = sections(page)[("r2", "lineage")]
    assert 'class="node seed"' in lineage


def test_a_comparison_marks_runs_scored_in_another_setting(runs, tmp_path):
    folder, db, _ = runs
    out = tmp_path / "compare.html"
    result = invoke("report", "r2", "r3", "--out", str(out), "--archive", str(db))
    assert result.exit_code == 0, result.output
    assert "2 runs" in result.output
    compare = sections(out.read_text())[("", "compare")]
    table = rows(compare, "run")
    assert set(table) == {"r2", "r3"}
    # one run per setting: the tie goes to the first run listed (r2)
    assert table["r2"][-1] == "yes" and table["r3"][-1] == "≠ seeds"
    best = query(
        db,
        "SELECT max(coalesce(confirmed_fitness, fitness)) AS best FROM candidates "
        "WHERE run_id = 'r2' AND is_seed = 0 AND status = 'passed'",
    )[0]["best"]
    assert table["r2"][5].startswith(f"{best:.3f}")
    assert table["r3"][4] == "0" and table["r3"][5] == "—"  # no proposals: nothing to beat
    board = rows(compare, "candidate")
    assert board and all(cells[2] in ("r2", "r3") for cells in board.values())


def test_leaderboard_all_runs_says_which_rows_are_comparable(runs, restore_logging):
    _, db, _ = runs
    shown = invoke("leaderboard", "--all-runs", "--json", "--archive", str(db))
    assert shown.exit_code == 0, shown.output
    board = json.loads(shown.output)
    by_run = {row["run_id"]: row["differs"] for row in board}
    # most rows are the one-seed discovery candidates; r3 scored the seeds on two
    assert by_run["r2"] == [] and by_run["r3"] == ["seeds"]
    table = invoke("leaderboard", "--all-runs", "--archive", str(db))
    assert "comparable" in table.output and "≠ seeds" in table.output


def test_report_errors_are_one_line_and_write_nothing(runs, tmp_path, restore_logging):
    _, db, _ = runs
    unknown = invoke("report", "r9", "--out", str(tmp_path / "x.html"), "--archive", str(db))
    assert unknown.exit_code != 0 and "no run 'r9'" in unknown.output
    both = invoke("report", "r2", "--all-runs", "--archive", str(db))
    assert both.exit_code == 2 and "not both" in both.output
    folder = invoke("report", "r2", "--out", str(tmp_path / "no" / "x.html"), "--archive", str(db))
    assert folder.exit_code == 1 and "does not exist" in folder.output
    missing = invoke("report", "--archive", str(tmp_path / "none.db"))
    assert missing.exit_code == 1 and not (tmp_path / "none.db").exists()
    assert not list(tmp_path.glob("*.html")) and not list(tmp_path.glob(".report-*"))


# -- in a browser ---------------------------------------------------------------------------

RUN_SECTIONS = ("header", "fitness", "curves", "scores", "funnel", "lineage", "code")
DOCS_MAX_BYTES = 400_000
DOCS_WIDTH = 1100


def test_the_reports_render_in_a_browser_without_errors(runs, tmp_path):
    """r2's report (discover --report) and r2 compared with the ES run r3, opened in headless
    Chromium: no JavaScript errors, every plot drawn, no blank section. With
    METARL_SCREENSHOTS_DIR set, the screenshots are also kept there as the README's pictures
    (`METARL_SCREENSHOTS_DIR=docs/report pytest tests/test_report.py -k browser`)."""
    folder, db, _ = runs
    if ensure_chromium() is None:
        pytest.skip(f"chromium is not installed and apt-get cannot install it: {why_no_chromium()}")
    compare = tmp_path / "compare.html"
    with Archive(db, must_exist=True) as archive:
        write_report(archive, ["r2", "r3"], compare)
    expected = {
        folder / "report-r2.html": [f"r2-{s}" for s in RUN_SECTIONS],
        compare: ["compare", "r3-fitness", *(f"r2-{s}" for s in RUN_SECTIONS)],
    }
    shots: dict[str, Path] = {}
    for page_path, sections_expected in expected.items():
        rendered = render_report(page_path, tmp_path / page_path.stem)
        assert not rendered.errors, "JavaScript errors:\n" + "\n".join(rendered.errors)
        assert rendered.plots > 0 and rendered.rendered_plots == rendered.plots, rendered
        for key in sections_expected:
            path = rendered.screenshots.get(key)
            assert path is not None, f"no screenshot of {key}: {sorted(rendered.screenshots)}"
            with Image.open(path) as image:
                assert image.width >= 600 and image.height >= 100, (key, image.size)
                assert _drawn_fraction(image) > 0.02, f"the {key} screenshot is blank"
        shots.update({key: rendered.screenshots[key] for key in sections_expected})
    target = os.environ.get("METARL_SCREENSHOTS_DIR")
    if target:
        _save_for_docs(shots, Path(target))


def _drawn_fraction(image: Image.Image) -> float:
    """The share of pixels that differ from the most common colour (the background)."""
    total = image.width * image.height
    background = max(count for count, _ in image.convert("RGB").getcolors(total))
    return 1 - background / total


def _save_for_docs(screenshots: dict[str, Path], target: Path) -> None:
    """TARGET/<section>.png for each section; one over DOCS_MAX_BYTES is scaled down to
    DOCS_WIDTH pixels wide."""
    target.mkdir(parents=True, exist_ok=True)
    for key, path in screenshots.items():
        name = key.split("-", 1)[-1]
        if key == "r3-fitness":
            continue  # the docs show the discovery run's fitness plot
        out = target / f"{name}.png"
        if path.stat().st_size <= DOCS_MAX_BYTES:
            shutil.copyfile(path, out)
            continue
        with Image.open(path) as image:
            height = round(image.height * DOCS_WIDTH / image.width)
            image.resize((DOCS_WIDTH, height), Image.LANCZOS).save(out, optimize=True)


# -- the pure parts -------------------------------------------------------------------------


def point(seq: int, fitness=None, status="passed", stage="full", seed=False, confirmed=None):
    return Point(
        id=f"r1-{seq}",
        seq=seq,
        name="",
        label="x",
        status=status if fitness is not None or status != "passed" else "failed",
        stage=stage,
        reason=None if status == "passed" else f"{stage} broke",
        fitness=fitness,
        fitness_ci=None,
        confirmed=confirmed,
        heldout=None,
        is_seed=seed,
    )


def test_the_incumbent_steps_up_only_on_a_better_score_and_prefers_the_confirmed_one():
    points = [
        point(0, 1.0, seed=True),
        point(1, 0.5),
        point(2, 1.4, confirmed=1.1),
        point(3, 1.2),
        point(4, None, status="failed", stage="probes"),
        point(5, 1.3),
    ]
    incumbent = incumbent_of(points)
    assert incumbent.ids == ["r1-0", "r1-2", "r1-3", "r1-5"]
    assert incumbent.score == [1.0, 1.1, 1.2, 1.3]


def test_the_funnel_counts_proposals_not_seed_programs():
    points = [
        point(0, 1.0, seed=True),
        point(1, None, status="no_code", stage="propose"),
        point(2, None, status="duplicate", stage="dedup"),
        point(3, None, status="failed", stage="probes"),
        point(4, None, status="failed", stage="probes"),
        point(5, 0.9),
    ]
    funnel = funnel_of(points, reasons=10)
    assert funnel.total == 5 and funnel.passed == 1
    assert [(s.stage, s.entered, s.stopped) for s in funnel.stages] == [
        ("propose", 5, 1),
        ("dedup", 4, 1),
        ("static", 3, 0),
        ("probes", 3, 2),
        ("short", 1, 0),
        ("full", 1, 0),
    ]
    assert funnel.reasons[0] == ("probes", "probes broke", 2)


def test_evaluator_faults_are_their_own_row_of_the_funnel_not_a_stage_that_stopped_them():
    fault = outcome_columns(Outcome.evaluator_fault("malformed result", "short"))
    assert fault["status"] == "fault"
    legacy = point(3, None, status="failed", stage="probes")  # from before the fault status
    legacy.reason = "internal evaluator error: malformed result"
    points = [
        point(1, None, status="fault", stage="short"),
        point(2, None, status="failed", stage="probes"),
        legacy,
        point(4, 0.9),
    ]
    funnel = funnel_of(points, reasons=10)
    assert funnel.total == 4 and funnel.faults == 2 and funnel.passed == 1
    assert [(s.stage, s.entered, s.stopped) for s in funnel.stages if s.stopped] == [
        ("probes", 2, 1)
    ]
    assert funnel.stages[0].entered == 2  # the judged proposals
    assert ("evaluator fault", "short broke", 1) in funnel.reasons


def test_a_sample_keeps_every_incumbent_and_stays_under_the_limit():
    points = [point(i, i / 1000) for i in range(10_000)]
    keep = {"r1-9999", "r1-17"}
    drawn = sample(points, keep, limit=500)
    ids = [p.id for p in drawn]
    assert len(drawn) <= 500 and keep <= set(ids)
    assert ids == sorted(ids, key=lambda i: int(i.split("-")[1]))  # proposal order kept
    assert sample(points[:100], set(), limit=500) == points[:100]


def test_the_reference_setting_is_the_one_most_rows_share():
    a, b = Setting("drift", "smoke", 1, 8192), Setting("drift", "smoke", 2, 8192)
    assert reference_setting([b, a, a]) == a and reference_setting([b, a]) == b
    assert a.differences(Setting("drift", "classic", 2, 4096)) == ["suite", "seeds", "budget"]
    assert reference_setting([]) is None


def test_report_settings_refuse_nonsense():
    with pytest.raises(Exception, match="top must be at least 1"):
        ReportSettings(top=0)


# -- train against test, on an archive written by hand -------------------------------------


def _candidate(archive: Archive, run_id: str, seq: int, fitness=None, **columns) -> None:
    """Candidate `{run_id}-{seq}` recorded directly (no training), with the given scores: a
    passed one when it has a fitness, else one that failed its probes."""
    archive.record_candidate(
        {
            "id": f"{run_id}-{seq}",
            "run_id": run_id,
            "seq": seq,
            "task": "drift",
            "suite": "minatar",
            "hash": f"{run_id}-{seq}-hash",
            "name": f"program{seq}",
            "code": f"def drift(ratio, advantage, epsilon):\n    return ratio * {seq}\n",
            "seeds": [0, 1, 2, 3],
            "total_timesteps": 8192,
            "eval_key": "k",
            "generation": 0 if columns.get("is_seed") else 1,
            "is_seed": 0,
            "proposer": "seed" if columns.get("is_seed") else "mutation",
            "parent_ids": [],
            "status": "passed" if fitness is not None else "failed",
            "stage": "full" if fitness is not None else "probes",
            "reason": None if fitness is not None else "probes broke",
            "fitness": fitness,
            **columns,
        },
        None,
    )


def _ci(column: str, *values: float) -> dict:
    """`column`'s interval columns (`_low`, `_high`) and, given three values, the score itself:
    _ci("heldout", 0.8, 0.7, 1.02) or _ci("fitness", 0.9, 1.1) (the fitness passed apart)."""
    *score, low, high = values
    return {f"{column}_low": low, f"{column}_high": high, **({column: score[0]} if score else {})}


@pytest.fixture(scope="module")
def gap_archive(tmp_path_factory) -> Path:
    """r1 (protocol discobench, incumbent r1-2): a seed program tested with itself, children
    whose test score is final, confirmed, measured with them or missing, one failed; r2: a
    run whose config alone names its protocol (quick); r3: a run from before protocols."""
    path = tmp_path_factory.mktemp("gap") / "gap.db"
    with Archive(path) as archive:
        run = archive.create_run(
            task="drift",
            suite="minatar",
            proposer="mutation",
            protocol="discobench",
            config={"protocol": "discobench"},
            best_id="r1-2",
        )
        _candidate(
            archive,
            run,
            0,
            1.0,
            is_seed=1,
            **_ci("fitness", 0.9, 1.1),
            **_ci("heldout", 1.0, 0.95, 1.05),
        )
        _candidate(archive, run, 1, 1.5, **_ci("fitness", 1.3, 1.7))  # never tested
        _candidate(
            archive,
            run,
            2,
            1.4,
            **_ci("fitness", 1.2, 1.6),
            **_ci("heldout", 1.1, 1.0, 1.2),
            **_ci("confirmed_heldout", 0.9, 0.8, 1.0),
            **_ci("final_heldout", 0.7, 0.6, 0.8),
            **_ci("validation", 1.2, 1.1, 1.3),
            final_seeds=list(range(100, 108)),
        )
        _candidate(
            archive,
            run,
            3,
            1.2,
            **_ci("heldout", 1.05, 0.97, 1.2),
            **_ci("confirmed_heldout", 0.85, 0.7, 0.95),
        )
        _candidate(archive, run, 4, 1.1, **_ci("heldout", 0.8, 0.7, 1.02))
        _candidate(archive, run, 5)  # failed its probes: not scored
        _candidate(archive, run, 6, 0.5, heldout=0.4)  # a test score without an interval
        quick = archive.create_run(
            task="drift", suite="minatar", proposer="mutation", config={"protocol": "quick"}
        )
        _candidate(archive, quick, 0, 1.0, is_seed=1, heldout=1.0)
        old = archive.create_run(task="drift", suite="minatar", proposer="mutation", config={})
        _candidate(archive, old, 0, 1.0, is_seed=1)
    return path


@pytest.fixture(scope="module")
def gap_page(gap_archive, tmp_path_factory) -> str:
    """The report of r1, r2 and r3 compared (each drawn in full)."""
    out = tmp_path_factory.mktemp("gap-page") / "gap.html"
    with Archive(gap_archive, must_exist=True) as archive:
        write_report(archive, ["r1", "r2", "r3"], out)
    return out.read_text()


def _gap(db: Path, run_id: str = "r1"):
    with Archive(db, must_exist=True) as archive:
        return run_story(archive, run_id, ReportSettings()).generalisation


def test_the_gap_scatter_prefers_final_over_confirmed_over_selection_test_scores(gap_archive):
    points = {p.id: p for p in _gap(gap_archive).points}
    final, confirmed, selection = points["r1-2"], points["r1-3"], points["r1-4"]
    assert (final.test, final.test_ci, final.test_source) == (0.7, [0.6, 0.8], "final")
    assert final.test_seeds == 8 and (final.validation, final.validation_ci) == (1.2, [1.1, 1.3])
    assert (final.train, final.train_ci) == (1.4, [1.2, 1.6])
    assert (confirmed.test, confirmed.test_ci, confirmed.test_source) == (
        0.85,
        [0.7, 0.95],
        "confirmed",
    )
    assert (selection.test, selection.test_source, selection.validation) == (0.8, "selection", None)
    assert points["r1-0"].is_seed and points["r1-0"].test_source == "selection"


def test_the_page_lists_each_test_score_with_where_it_was_measured(gap_page):
    table = rows(sections(gap_page)[("r1", "generalisation")], "candidate")
    assert table["r1-2"][2:7] == [
        "1.400 [1.20, 1.60]",
        "1.200 [1.10, 1.30]",
        "0.700 [0.60, 0.80]",
        "final (8 fresh seeds)",
        "-0.700",
    ]
    assert table["r1-3"][4:6] == ["0.850 [0.70, 0.95]", "confirmed"]
    assert table["r1-0"][4:6] == ["1.000 [0.95, 1.05]", "selection"]
    assert list(table)[0] == "r1-2"  # the incumbent first


def test_a_candidate_whose_test_interval_lies_below_the_baseline_is_marked(gap_archive, gap_page):
    gap = _gap(gap_archive)
    # r1-4's interval reaches 1.02 and r1-6 has none: neither is significantly worse
    assert [p.id for p in gap.worse] == ["r1-2", "r1-3"]
    figure, drawn = generalisation_gap([gap], limit=100)
    marked = next(t for t in figure.data if t.name == "test interval below the baseline")
    assert (list(marked.x), list(marked.y)) == ([1.4, 1.2], [0.7, 0.85])
    assert marked.marker.symbol.startswith("x") and drawn == len(gap.points)
    star = next(t for t in figure.data if t.name == "incumbent")
    assert list(star.text) == ["r1-2"] and star.marker.symbol == "star"
    section = sections(gap_page)[("r1", "generalisation")]
    worse = re.search(r'data-value="worse">(.*?)</p>', section, re.S).group(1)
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", worse)).split())
    assert "2 candidates significantly worse than PPO on the test envs" in text
    assert text.endswith("r1-2, r1-3.")
    table = rows(section, "candidate")
    assert "worse than PPO on test" in table["r1-3"][-1]
    assert "worse than PPO on test" not in table["r1-0"][-1]


def test_candidates_without_a_test_score_are_left_out_of_the_scatter_and_counted(
    gap_archive, gap_page
):
    gap = _gap(gap_archive)
    assert [p.id for p in gap.points] == ["r1-0", "r1-2", "r1-3", "r1-4", "r1-6"]
    assert gap.untested == 1 and gap.scored == 6  # r1-1 untested; the failed r1-5 not scored
    figure, _ = generalisation_gap([gap], limit=100)
    drawn = {t for trace in figure.data if trace.text is not None for t in trace.text}
    assert not any(text.startswith("r1-1 ") for text in drawn)
    caption = sections(gap_page)[("r1", "generalisation")]
    assert 'data-value="untested">1<' in caption and "6 scored candidates, 5 with" in caption
    # a run with no test score at all: no plot, the count alone
    old = sections(gap_page)[("r3", "generalisation")]
    assert "no scored candidate has a test score" in old and 'data-value="untested">1<' in old
    assert "plotly-graph-div" not in old


def test_each_run_shows_its_protocol_or_unrecorded(gap_page):
    page = sections(gap_page)
    for run_id, protocol in (("r1", "discobench"), ("r2", "quick"), ("r3", "unrecorded")):
        header = page[(run_id, "header")]
        assert f'data-value="protocol">{protocol}<' in header, run_id
        assert f"under protocol {protocol}: normalised scores" in header
    assert {run: cells[-2] for run, cells in rows(page[("", "compare")], "run").items()} == {
        "r1": "discobench",
        "r2": "quick",
        "r3": "unrecorded",
    }
    assert "protocol discobench, quick, unrecorded</p>" in " ".join(gap_page.split())
    assert "protocol discobench: 6 scored candidates" in page[("r1", "generalisation")]


def test_the_comparison_draws_every_runs_candidates_with_each_runs_incumbent(gap_archive):
    with Archive(gap_archive, must_exist=True) as archive:
        comparison = compare_runs(archive, ["r1", "r2"], limit=10)
    figure, drawn = generalisation_gap(comparison.generalisation, limit=100)
    assert drawn == 6 and {t.name for t in figure.data} >= {"run r1", "run r2"}
    stars = next(t for t in figure.data if t.name == "each run's incumbent")
    # r1's recorded best; r2 recorded none: its best score so far, the seed program
    assert list(stars.text) == ["r1-2", "r2-0"]
