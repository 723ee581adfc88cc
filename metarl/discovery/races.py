"""Who may replace the incumbent: a validation race, then a stability check past the budget.

Training scores only nominate. The nominee races the incumbent on the suite's validation envs,
on fresh seeds, round by round (`Races.race`), and must be significantly better there. A race
is run at the protocol's budget, and a short budget rewards early learning speed: at the demo's
1e5 steps a drift that drops PPO's lower trust region,
`relu((ratio - clip(ratio, 0 - eps, 1 + eps)) * A)`, won its race (1.168 over 4 seeds,
P(better) 0.84) and then collapsed at 5x the budget in DiscoGen's own harness (2.3 +- 1.3 on
SpaceInvaders-MinAtar against LPO's 63.1). So a race's winner is also trained, paired with the
incumbent on fresh seeds, at `stability` times the budget on the validation envs
(`Races.stable`), and is refused when it is significantly worse there.

Why a paired comparison and not a learning-curve rule ("refuse a curve that peaks and
decays"): PPO's own curve decays on some games at the tuned, unannealed MinAtar rates, so an
absolute rule would refuse PPO; against the incumbent on the same seeds, only what is worse
than what the run already has is refused. Why "significantly worse" and not "also better":
the race has already shown the nominee better at the budget the protocol scores; the check
only refuses what gives that back past it. A refusal spends none of the run's false-BETTER
budget (`selection_error`): it can only keep the incumbent, so it is tested at the bootstrap's
own 0.95 (Bonferroni over the validation envs: a collapse on any one of them refuses).

A contest that an evaluator fault stopped (a round that scored nothing because the evaluator
failed: on minatar-cpu both of the long run's first races ended so, their Seaquest baseline
timed out) says nothing about the challenger, so it is not a loss: the challenger is raced
again after the next generation (a resumed run included), against the same incumbent, up to
`CONTEST_ATTEMPTS` times in all; its archived rounds count, so the race goes on where it stood.
"""

from __future__ import annotations

import logging
from typing import Callable

from metarl.archives.store import Archive
from metarl.discovery.batches import Batches
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.runs import RunBook
from metarl.evaluation import roles, statistics
from metarl.evaluation.outcome import evaluator_fault
from metarl.rl.scoring import BOOTSTRAP_CONFIDENCE

logger = logging.getLogger(__name__)

# how many times a challenger is raced when evaluator faults stop its contest: the first
# attempt and one retry (a fault that persists, such as a limit too short, stops there)
CONTEST_ATTEMPTS = 2


class Races:
    """The validation races and stability checks of one run.

    Args:
        archive: the run's archive (rounds are archived as they end: a resumed run continues a
            race, or re-reads a stability check, where it stood).
        config: the run's resolved config.
        batches: the run's evaluators ("confirm" for races, "stability" for the checks).
        book: the run's bookkeeping (time budget, state, the update saved with each round).
        run_id: the run's id.
        validation_envs: the envs a validation round scores, in the suite's order.
        emit: the live display's `(kind, data)` callback.
    """

    def __init__(
        self,
        archive: Archive,
        config: DiscoverConfig,
        batches: Batches,
        book: RunBook,
        run_id: str,
        validation_envs: list[str],
        emit: Callable[[str, dict], None],
    ):
        self.archive, self.config, self.batches, self.book = archive, config, batches, book
        self.run_id, self.envs, self.emit = run_id, list(validation_envs), emit
        self._faulted = False  # whether a round of the current contest hit an evaluator fault

    def contest(self, incumbent: str, challenger: str) -> bool:
        """Whether `challenger` takes the incumbent's place: it wins its validation race and
        holds past the budget. A contest an evaluator fault stopped is recorded in the run's
        state (`voided`) to be attempted again (`retries`)."""
        self._faulted = False
        won = self.race(incumbent, challenger) and self.stable(incumbent, challenger)
        voided = self.book.state.voided
        if won or not self._faulted:
            voided.pop(challenger, None)
            return won
        attempts = voided.get(challenger, {}).get("attempts", 0) + 1
        voided[challenger] = {"incumbent": incumbent, "attempts": attempts}
        again = (
            "it races again after the next generation"
            if attempts < CONTEST_ATTEMPTS
            else f"not raced again ({attempts} attempts)"
        )
        logger.warning("the contest of %s was stopped by an evaluator fault: %s", challenger, again)
        self.emit("status", {"text": f"{challenger}'s race hit an evaluator fault: {again}"})
        return False

    def retries(self, incumbent: str) -> list[str]:
        """The challengers whose contest against `incumbent` an evaluator fault stopped, with
        attempts left, oldest first. A challenger of an incumbent since replaced is dropped:
        it must now beat the new one, which its training score no longer says."""
        voided = self.book.state.voided
        for cid in [c for c, entry in voided.items() if entry["incumbent"] != incumbent]:
            del voided[cid]
        return [c for c, entry in voided.items() if entry["attempts"] < CONTEST_ATTEMPTS]

    # -- the race ---------------------------------------------------------------------------
    def race(self, incumbent: str, challenger: str) -> bool:
        """Race `challenger` against `incumbent` on validation, round by round, on fresh seeds.

        A round trains both (one batch: the same fresh seeds) or only the one with fewer
        validation runs; after each, `statistics.race` compares their validation score
        matrices: BETTER wins, WORSE, TIE (the plan's cap reached, undecided) or UNWINNABLE
        (no later look could call it BETTER, whatever its remaining seeds return) keeps the
        incumbent, UNDECIDED runs another round. Every look is tested at the level that
        keeps the run's chance of any lucky BETTER below `selection_error` (the race's number
        in the run spends it, and sets its cap: statistics.race_plan). Every round is archived,
        so a resumed run continues the race where it stood.

        Returns:
            Whether the challenger won.
        """
        enough = int(self.config.confirm_seeds)
        state = self.book.state
        if challenger not in state.races:  # a resumed race keeps its number
            state.races.append(challenger)
        plan = statistics.race_plan(
            state.races.index(challenger) + 1,
            enough,
            int(self.config.race_seeds),
            float(self.config.selection_error),
        )
        cap = plan.cap
        while True:
            if self._same_behaviour(incumbent, challenger):
                return False
            tables = {cid: self.table(cid, "validation") for cid in (incumbent, challenger)}
            runs = {cid: 0 if m is None else m.shape[0] for cid, (m, _) in tables.items()}
            if runs[incumbent] >= enough and runs[challenger] >= enough:
                paired = roles.comparable(tables[incumbent], tables[challenger])
                if paired is None:  # no env both define: nothing to compare on
                    return False
                level = plan.level(runs[challenger])
                decision = statistics.race(
                    paired[0],
                    {challenger: paired[1]},
                    max_runs=cap,
                    level=level,
                    later=plan.later(runs[challenger]),
                )
                verdict = decision.verdicts[challenger]
                self._emit_race(
                    challenger,
                    incumbent,
                    verdict,
                    decision.poi[challenger],
                    runs[challenger],
                    {"p": decision.p_better[challenger], "level": level, "cap": cap},
                )
                if verdict != statistics.UNDECIDED:
                    return verdict == statistics.BETTER
            behind = [c for c in (incumbent, challenger) if runs[c] <= runs[challenger]]
            cids = [c for c in behind if runs[c] < cap] or [challenger]
            seeds = self._incumbent_round(incumbent, challenger) if cids == [challenger] else None
            if not self._round("confirm", cids, seeds):
                return False

    def table(self, cid: str, purpose: str):
        """The candidate's (runs x envs matrix or None, its envs) of `purpose`'s rounds so far
        ("validation" or "stability")."""
        rows = self.archive.role_evaluations(cid, purpose)
        return roles.role_table(rows, self.envs, self.config.lr_aggregation)

    def _incumbent_round(self, incumbent: str, challenger: str) -> list[int] | None:
        """The seeds of the incumbent's first validation round that the challenger has not
        run and whose seeds are fresh to it, for a round that trains the challenger alone:
        paired with the incumbent's runs (same seeds, same layout: comparable return by
        return, so a copy in behaviour shows at once), and the baseline's runs on them are
        cached. A round holding a seed the challenger was trained on is skipped (the run's
        seed pool is shared: on minatar-cpu a generation drew one of the first race's
        validation seeds, and the next race drew fresh seeds, so it trained the baseline on
        4 Seaquest seeds again, 5 of its 10.6 minutes). None when no round is left: then the
        round draws fresh seeds."""
        theirs = self.archive.role_evaluations(incumbent, "validation")
        mine = self.archive.role_evaluations(challenger, "validation")
        done = {tuple(row["seeds"]) for row in mine}
        seen = self._seen([challenger])
        for seeds in dict.fromkeys(tuple(int(s) for s in r["seeds"]) for r in theirs):
            if seeds not in done and not seen & set(seeds):
                return list(seeds)
        return None

    def _same_behaviour(self, incumbent: str, challenger: str) -> bool:
        """Whether the challenger's validation runs return exactly what the incumbent's do
        wherever both trained on the same seeds: a copy in behaviour (a constant changed where
        training never reaches), whose race could only end in a tie. Checked before each
        round, so a copy stops after the first paired round (`_incumbent_round`)."""
        shared = roles.identical_returns(
            self.archive.role_evaluations(incumbent, "validation"),
            self.archive.role_evaluations(challenger, "validation"),
        )
        if shared < roles.MIN_IDENTICAL:
            return False
        logger.info(
            "%s returns what %s returns on %d runs: not raced", challenger, incumbent, shared
        )
        self.emit("duplicate", {"id": challenger, "incumbent": incumbent, "runs": shared})
        return True

    # -- past the budget --------------------------------------------------------------------
    def stable(self, incumbent: str, challenger: str) -> bool:
        """Whether the race's winner holds at `stability` times the budget: one round of both,
        paired on fresh seeds, on the validation envs; refused when it is significantly worse
        on any of them (`statistics.compare` on that env alone: its P(better) bootstrap
        interval below 0.5, each env at 1 - 0.05 / envs), or when the round scored nothing.
        The bootstrap, not the race's exact test: the check is one round of `confirm_seeds`
        (4 at the demo scale), where the exact test's smallest p-value (1/70) lies above the
        one-sided 0.0125 of two envs, so it could never refuse; a bootstrap too narrow at 4
        runs refuses more often, the safe side for a check that can only keep the incumbent.
        Env by env, not their mean: measured on the demo suite, the collapsing drift scored 0.28 x
        PPO on Breakout-MinAtar at 5x the budget (LPO 1.17) and 1.00 on Catch, which every
        program solves, and the mean's P(better) interval reached 0.5 (a tie). A resumed run
        re-reads an archived round instead of training it again.

        Returns:
            True when the check is off (`stability` 0) or the challenger is worse nowhere.
        """
        factor = float(self.config.stability or 0.0)
        if factor <= 0:
            return True
        paired = self._stability_pair(incumbent, challenger)
        if paired is None:
            names = f"{challenger} and {incumbent}"
            steps = int(round(factor * int(self.config.timesteps)))
            self.emit("status", {"text": f"checking {names} at {factor:g}x the budget ({steps})"})
            if self._round("stability", [incumbent, challenger]):
                paired = self._stability_pair(incumbent, challenger)
            if paired is None:
                self._emit_stability(challenger, incumbent, factor, None, None, 0, None)
                return False
        ours, theirs, envs = paired
        confidence = 1.0 - (1.0 - BOOTSTRAP_CONFIDENCE) / len(envs)
        verdicts = []
        for column, env in enumerate(envs):
            comparison = statistics.compare(
                theirs[:, [column]], ours[:, [column]], confidence=confidence
            )
            verdicts.append((comparison.verdict, comparison.poi, env))
        worse = [entry for entry in verdicts if entry[0] == statistics.WORSE]
        verdict, poi, env = min(worse or verdicts, key=lambda entry: entry[1].point)
        if verdict == statistics.UNDECIDED:  # one round is all the check spends
            verdict = statistics.TIE
        self._emit_stability(challenger, incumbent, factor, verdict, poi, theirs.shape[0], env)
        return not worse

    def _stability_pair(self, incumbent: str, challenger: str):
        """The (incumbent, challenger) score matrices of their stability runs on the same
        seeds (the rounds that trained both in one batch) and the envs of their columns; None
        when there is none."""
        mine = self.archive.role_evaluations(challenger, "stability")
        theirs = self.archive.role_evaluations(incumbent, "stability")
        key = lambda row: (row["env"], row.get("lr"), tuple(int(s) for s in row["seeds"]))  # noqa: E731
        shared = {key(row) for row in mine} & {key(row) for row in theirs}
        if not shared:
            return None
        agg = self.config.lr_aggregation
        tables = [
            roles.role_table([r for r in rows if key(r) in shared], self.envs, agg)
            for rows in (theirs, mine)
        ]
        paired = roles.comparable(*tables)
        if paired is None or min(m.shape[0] for m in paired) < 2:
            return None
        envs = [env for env in tables[0][1] if env in tables[1][1]]
        return paired[0], paired[1], envs

    # -- rounds -----------------------------------------------------------------------------
    def _seen(self, cids: list[str]) -> set[int]:
        """Every seed `cids` were selected or validated on: a round's seeds are fresh to all of
        them (a stability round's too: the winner was chosen on those)."""
        seen = set()
        for cid in cids:
            row = self.archive.candidate(cid)
            seen |= {int(s) for key in ("seeds", "validation_seeds") for s in row.get(key) or []}
        return seen

    def _round(self, purpose: str, cids: list[str], seeds: list[int] | None = None) -> bool:
        """One round of `cids` (one batch: shared fresh seeds, or `seeds`): a validation round
        ("confirm") or a stability check ("stability"), archived. False when it scored
        nothing (a fault or a failure: the contest cannot go on)."""
        self.book.check_time()
        rows = [self.archive.candidate(cid) for cid in cids]
        seen = sorted(self._seen(cids))
        if purpose == "confirm":
            names = ", ".join(cids)
            where = f"the incumbent's {len(seeds)} seeds" if seeds else "fresh seeds"
            self.emit("status", {"text": f"validating {names} on {where}"})
        outcomes = self.batches.evaluate(purpose, rows, exclude_seeds=seen, seeds=seeds)
        scored = True
        for cid, outcome in zip(cids, outcomes):
            if purpose == "confirm":
                estimate = self.archive.record_validation(
                    cid,
                    outcome,
                    self.envs,
                    aggregation=self.config.lr_aggregation,
                    run_id=self.run_id,
                    run_update=self.book.update(),
                )
                scored = scored and outcome.passed and estimate is not None
            else:
                self.archive.record_stability(
                    cid, outcome, run_id=self.run_id, run_update=self.book.update()
                )
                scored = scored and outcome.passed
            if not outcome.passed:
                logger.warning("a %s round of %s scored nothing: %s", purpose, cid, outcome.reason)
                self._faulted = self._faulted or evaluator_fault(outcome)
        return scored

    # -- events -----------------------------------------------------------------------------
    def _emit_race(self, cid, incumbent, verdict, poi, runs, test) -> None:
        row = self.archive.candidate(cid)
        data = {"id": cid, "name": row["name"], "fitness": row["fitness"]}
        data.update(
            confirmed=row.get("validation"),
            incumbent=incumbent,
            verdict=verdict,
            poi=poi.point,
            poi_low=poi.low,
            poi_high=poi.high,
            runs=runs,
            **test,
        )
        self.emit("confirm", data)

    def _emit_stability(self, cid, incumbent, factor, verdict, poi, runs, env) -> None:
        """The check's verdict (None: its round scored nothing) on `env`, the validation env
        where the challenger did worst, logged and shown."""
        logger.info(
            "stability of %s against %s at %gx the budget: %s (%s)",
            cid,
            incumbent,
            factor,
            verdict,
            env or "no env scored",
        )
        data = {"id": cid, "incumbent": incumbent, "factor": factor, "verdict": verdict}
        if poi is not None:
            data.update(poi=poi.point, poi_low=poi.low, poi_high=poi.high)
        self.emit("stability", {**data, "runs": runs, "env": env})
