"""What an evaluation returns: the contract between the cascade and everything downstream
(the loop, the archive, the proposers' feedback, the CLI). Plain data, JSON round-trippable,
so it can cross the sandbox's result channel and be stored as-is."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from metarl.evaluation.near_duplicates import BEHAVIOUR_SIZE
from metarl.rl.scoring import (
    bootstrap_interval,
    normalised_score,
    per_seed_normalised,
)
from metarl.rl.suites import published_returns

# Every stage a candidate can stop at, in order: the proposer produced no program (`propose`),
# it repeats an archived one (`dedup`), then the cascade's four stages.
STAGES = ("propose", "dedup", "static", "probes", "short", "full")
# The roles of a suite's environments (rl/suites.py): `train` scores rank proposals,
# `validation` scores decide the incumbent, `test` scores are only reported.
ROLES = ("train", "validation", "test")
# the stages a sandboxed worker may report (the parent owns the others)
WORKER_STAGES = ("probes", "short", "full")


@dataclass
class EnvScore:
    env: str
    seeds: list[int]
    total_timesteps: int
    returns: list[float]  # final return per seed
    mean: float
    std: float
    normalised: float | None  # (mean - random) / (baseline - random); None when undefined
    baseline_mean: float | None
    random_mean: float | None
    curve_steps: list[int] = field(default_factory=list)
    curve: list[float | None] = field(default_factory=list)
    # the spread over seeds at each curve point (standard deviation); empty in archives from
    # before it was recorded
    curve_std: list[float | None] = field(default_factory=list)
    compile_s: float = 0.0
    run_s: float = 0.0
    steps_per_s: float = 0.0
    heldout: bool = False  # role == "test" (kept for readers of older archives)
    stage: str = "full"  # "short" or "full"
    # 95% percentile-bootstrap interval of `normalised` over the training seeds
    # (`metarl.rl.scoring.bootstrap_interval`); None with one seed or an undefined score
    normalised_ci: list[float] | None = None
    # source label -> the mean return normalised against that source's published PPO return,
    # (mean - random) / (published - random); empty for envs without published references
    published: dict[str, float | None] = field(default_factory=dict)
    # the env's role in its suite: train | validation | test (ROLES)
    role: str = ""
    # the learning rate of this run when the evaluation swept rates (one EnvScore per rate,
    # `normalised` against the baseline at the same rate); None: unswept
    lr: float | None = None
    # PLR's positive value loss (Jiang et al. 2021): per seed, the mean of max(GAE advantage, 0)
    # over the last 10% of the run's updates (the window of `returns`), computed by the trusted
    # trainer (rl/ppo.py); here its mean over seeds. None when a seed's is undefined, and in
    # archives from before it was recorded.
    positive_value_loss: float | None = None
    # a meta-RL run's adaptation curve on held-out tasks, its mean over seeds at each point
    # (RL²: the return at each episode of a trial; MAML: after 0..K inner gradient steps); a
    # point is None where no seed's value is finite. None for runs without one (PPO) and in
    # archives from before it was recorded.
    adaptation: list[float | None] | None = None
    # PPO trained from scratch with the same experience on the same held-out tasks
    # (rl/scratch.py): the adaptation curve's paired, candidate-independent reference, its mean
    # over seeds at the same points (as many as `adaptation`'s). None as `adaptation`.
    scratch: list[float | None] | None = None

    def __post_init__(self) -> None:
        if not self.role:  # rows from before roles: held out meant test
            self.role = "test" if self.heldout else "train"
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}; roles: {', '.join(ROLES)}")
        self.heldout = self.role == "test"


@dataclass
class Outcome:
    """Where a candidate's evaluation stopped, and why; its scores when it got that far."""

    passed: bool  # passed every stage
    stage: str  # the last stage attempted: one of STAGES
    reason: str | None = None  # one clear, specific reason when not passed (written for an LLM)
    warnings: list[str] = field(default_factory=list)
    env_scores: list[EnvScore] = field(default_factory=list)
    fitness: float | None = None  # aggregate normalised score over the training envs
    heldout: float | None = None  # aggregate over the test envs; never used for selection
    # 95% bootstrap intervals [low, high] of `fitness` and `heldout` over the training seeds
    # (seeds resampled jointly across envs; `roles.aggregate_intervals`); None with one seed
    fitness_ci: list[float] | None = None
    heldout_ci: list[float] | None = None
    # aggregate over the validation envs (what decides the incumbent), and its interval
    validation: float | None = None
    validation_ci: list[float] | None = None
    fingerprint: str | None = None  # hash of outputs on the task's fixed probe batch
    duplicate_of: str | None = None  # id of an archived candidate with the same fingerprint
    # its outputs on that batch, squashed and folded to <= 64 numbers, to find near-duplicates
    # (evaluation/near_duplicates.py); NaN/inf stay as they are (null in JSON)
    behaviour: list[float] | None = None
    timings: dict[str, float] = field(default_factory=dict)  # stage or phase -> seconds
    stdout: str = ""  # the candidate's captured (truncated) output, for debugging only
    # how the sandbox ran it: which network isolation held, limits, probe seed, worker exit
    sandbox: dict = field(default_factory=dict)
    # whether the training seeds (each EnvScore's `seeds`) were pinned by the user
    # (`--seed-values`) rather than drawn unpredictably (evaluation/seeds.py); set by the parent
    seeds_pinned: bool = False
    # whose failure it is (FAULTS): "candidate" (its own reason; learners score it as a
    # failure) or "evaluator" (reproducible without the candidate: a baseline that cannot
    # train, a malformed result from trusted code, a worker that never started; it says
    # nothing about the candidate). Set by the parent only (a trainer cannot declare one).
    # A passing outcome has no fault: None (a failure given none is the candidate's).
    fault: str | None = None

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"unknown stage {self.stage!r}; stages: {', '.join(STAGES)}")
        if self.fault is not None and self.fault not in FAULTS:
            raise ValueError(f"unknown fault {self.fault!r}; faults: {', '.join(FAULTS)}")
        self.fault = _fault_of(self.passed, self.fault)

    def to_dict(self) -> dict:
        """The outcome as JSON-ready data (non-finite numbers become None); a passing
        outcome's fault is None even when it was marked passed after it was made."""
        data = asdict(self)
        data["fault"] = _fault_of(self.passed, self.fault)
        return _finite_or_none(data)

    @classmethod
    def from_dict(cls, data: dict) -> "Outcome":
        """An outcome from `to_dict`'s data (trusted: the archive's own rows). Rows from
        before `fault` was recorded get the fault their reason and sandbox show."""
        data = dict(data)
        data["env_scores"] = [EnvScore(**e) for e in data.get("env_scores", [])]
        if "fault" not in data:
            data["fault"] = _legacy_fault(data)
        return cls(**data)

    def selection_view(self) -> "Outcome":
        """A copy without the test role: no test env scores, no test aggregate. What
        proposers, prompts and selection receive, so no test number can reach them."""
        view = Outcome.from_dict(self.to_dict())
        view.env_scores = [s for s in view.env_scores if s.role != "test"]
        view.heldout = view.heldout_ci = None
        return view

    @classmethod
    def failure(cls, stage: str, reason: str, **extra) -> "Outcome":
        """A candidate stopped at `stage` for `reason` (the candidate's fault)."""
        return cls(passed=False, stage=stage, reason=reason, **extra)

    @classmethod
    def evaluator_fault(cls, reason: str, stage: str = "probes", **extra) -> "Outcome":
        """The evaluator failed at `stage` for `reason`, not the candidate: the verdict says
        nothing about it (reproducible without any candidate)."""
        return cls(
            passed=False,
            stage=stage,
            reason=f"{EVALUATOR_FAULT}: {reason}",
            fault="evaluator",
            **extra,
        )


# Whose fault a failed evaluation is (Outcome.fault)
FAULTS = ("candidate", "evaluator")
# The prefix of every evaluator fault's reason (the proposer and the archive read it)
EVALUATOR_FAULT = "internal evaluator error"


def evaluator_fault(outcome: Outcome) -> bool:
    """Whether `outcome` says nothing about the candidate (`Outcome.fault` is "evaluator").
    Methods that learn from verdicts (GRPO's reward) leave such candidates out."""
    return not outcome.passed and outcome.fault == "evaluator"


def _fault_of(passed: bool, fault: str | None) -> str | None:
    """An outcome's fault: None when it passed (nothing failed), else `fault`, "candidate"
    when none was given."""
    if passed:
        return None
    return fault or "candidate"


def _legacy_fault(data: dict) -> str | None:
    """The fault of an archived outcome written before `fault` existed: None when it passed;
    an evaluator fault when its reason had the evaluator-error prefix or a sandbox worker
    never started."""
    if data.get("passed"):
        return None
    sandbox = data.get("sandbox") or {}
    if str(data.get("reason") or "").startswith(EVALUATOR_FAULT) or "startup" in (
        sandbox.get("status"),
        sandbox.get("tracer_status"),
    ):
        return "evaluator"
    return "candidate"


class MalformedResult(ValueError):
    """A result message that does not have the exact shape the parent expects."""


def _number(value, what: str, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MalformedResult(f"{what} is {type(value).__name__}, not a number")
    return float(value)


def _numbers(value, what: str, allow_none: bool = False, limit: int = 100_000) -> list:
    if not isinstance(value, list) or len(value) > limit:
        raise MalformedResult(f"{what} is not a list of at most {limit} numbers")
    return [_number(v, what, allow_none) for v in value]


def positive_value_loss_of(value, seeds: int) -> float | None:
    """The positive value loss an EnvScore records, read strictly from a result message.

    Args:
        value: either the per-seed values of a trainer's EnvRun (a list of numbers or None,
            one per seed, or empty when the run predates the number), or the mean an EnvScore
            already holds (a number or None: the parent re-scoring a parsed score); absent
            (None) in messages from before it was recorded.
        seeds: the run's number of seeds (the length a per-seed list must have).

    Returns:
        The mean over seeds, or None when absent or when any seed's value is None or not
        finite (undefined, like the mean return of a run with a non-finite return).

    Raises:
        MalformedResult: a value that is neither, a list of the wrong length, or a negative
            number (a mean of max(A, 0) never is).
    """
    if isinstance(value, list):
        values = _numbers(value, "positive_value_loss", allow_none=True, limit=max(seeds, 0))
        if values and len(values) != seeds:
            raise MalformedResult("positive_value_loss does not have one value per seed")
        if not values or any(v is None or not math.isfinite(v) for v in values):
            return None
    else:
        number = _number(value, "positive_value_loss", allow_none=True)
        if number is None or not math.isfinite(number):
            return None
        values = [number]
    if any(v < 0 for v in values):
        raise MalformedResult("positive_value_loss is negative")
    return float(np.mean(values))


# the most points an adaptation curve may have (episodes in a trial, or inner steps + 1)
MAX_ADAPTATION_POINTS = 64
# the curves an EnvScore may hold, each parsed by `curve_of`: the adaptation curve and its
# from-scratch reference (same points)
CURVES = ("adaptation", "scratch")


def _curve_points(value, what: str) -> list[float | None]:
    """One curve: a list of 1 to MAX_ADAPTATION_POINTS finite numbers or None."""
    points = _numbers(value, what, allow_none=True, limit=MAX_ADAPTATION_POINTS)
    if not points:
        raise MalformedResult(f"{what} is an empty curve")
    if any(v is not None and not math.isfinite(v) for v in points):
        raise MalformedResult(f"{what} has a value that is not finite (send None)")
    return points


def curve_of(value, seeds: int, name: str) -> list[float | None] | None:
    """A curve an EnvScore records (`name`: "adaptation" or "scratch", CURVES), read strictly
    from a result message (the candidate's process writes it: nothing but the exact shape is
    accepted).

    Args:
        value: either the per-seed curves of a trainer's EnvRun (a list of at most `seeds`
            lists of equal length, each of at most MAX_ADAPTATION_POINTS finite numbers or
            None; empty for a run without a curve), or the mean curve an EnvScore already
            holds (one such list: the parent re-scoring a parsed score); absent (None) in
            messages from before it was recorded.
        seeds: the run's number of seeds (the most per-seed curves there may be).
        name: the curve's field, as errors name it.

    Returns:
        The mean over seeds at each point (None where no seed's value is there), or None when
        absent or empty.

    Raises:
        MalformedResult: anything else: not a list, too many points or seeds, a string, a
            bool, a non-finite number, nesting other than one level of per-seed lists, or
            per-seed curves of unequal length.
    """
    if value is None:
        return None
    if not isinstance(value, list):
        raise MalformedResult(f"{name} is {type(value).__name__}, not a list")
    if not value:
        return None
    if not any(isinstance(row, list) for row in value):
        return _curve_points(value, name)
    if not all(isinstance(row, list) for row in value):
        raise MalformedResult(f"{name} mixes per-seed curves and numbers")
    if len(value) > max(seeds, 0):
        raise MalformedResult(f"{name} has {len(value)} per-seed curves for {seeds} seeds")
    rows = [_curve_points(row, name) for row in value]
    if len({len(row) for row in rows}) != 1:
        raise MalformedResult(f"{name}'s per-seed curves differ in length")
    mean = []
    for point in zip(*rows):
        known = [v for v in point if v is not None]
        mean.append(float(np.mean(known)) if known else None)
    return mean


def curves_of(data: dict, seeds: int, mean_only: bool = False) -> dict[str, list | None]:
    """Every curve of CURVES in `data` (a run's dict, or a score's) parsed by `curve_of`, and
    checked as a pair: the from-scratch reference has the adaptation curve's points.

    Args:
        data: the run or score whose fields "adaptation" and "scratch" are read.
        seeds: the run's number of seeds.
        mean_only: a score's fields: one mean curve each, never per-seed curves.

    Returns:
        Name -> the mean curve or None.

    Raises:
        MalformedResult: a curve `curve_of` rejects, per-seed curves where `mean_only`, or
            both curves present with different numbers of points.
    """
    out = {}
    for name in CURVES:
        value = data.get(name)
        if mean_only and isinstance(value, list) and any(isinstance(v, list) for v in value):
            raise MalformedResult(f"{name} is per-seed curves, not a score's mean curve")
        out[name] = curve_of(value, seeds, name)
    adaptation, scratch = out["adaptation"], out["scratch"]
    if adaptation is not None and scratch is not None and len(adaptation) != len(scratch):
        raise MalformedResult(
            f"scratch has {len(scratch)} points, the adaptation curve {len(adaptation)}"
        )
    return out


def _interval(value, what: str) -> list[float] | None:
    """None, or [low, high]: two finite numbers in order."""
    if value is None:
        return None
    numbers = _numbers(value, what, limit=2)
    if len(numbers) != 2 or not all(map(math.isfinite, numbers)) or numbers[0] > numbers[1]:
        raise MalformedResult(f"{what} is not [low, high], two finite numbers in order")
    return numbers


def _published(value) -> dict[str, float | None]:
    if not isinstance(value, dict) or len(value) > 16:
        raise MalformedResult("published is not an object of at most 16 scores")
    out = {}
    for label, score in value.items():
        if not isinstance(label, str):
            raise MalformedResult("published has a label that is not a string")
        score = _number(score, "published score", allow_none=True)
        out[label] = score if score is None or math.isfinite(score) else None
    return out


def env_score(
    run: dict,
    baseline_mean: float,
    random_mean: float,
    role: str,
    stage: str,
    lr: float | None = None,
) -> EnvScore:
    """An EnvScore computed from a run's raw returns and the parent's reference returns.

    Both the trainer and the parent call this; the parent's call, on the raw data of the result
    message and its own cached references, is the one that counts.

    Args:
        run: an EnvRun as a dict (env, seeds, total_timesteps, final_returns, curve, timings,
            positive_value_loss: per seed, or its mean; see `positive_value_loss_of`;
            adaptation and scratch: per-seed curves, or their mean curves; see `curves_of`).
        baseline_mean: the baseline program's mean final return on the same config and seeds.
        random_mean: the uniform random policy's mean return on the env.
        role: the env's role in its suite (ROLES): test scores are never used for selection.
        stage: "short" or "full".
        lr: the run's learning rate when rates were swept (None: unswept).

    Returns:
        The EnvScore; `normalised` is None when undefined (baseline no better than random);
        `normalised_ci` is its bootstrap interval over seeds (None with one seed); `published`
        normalises the mean return against each published PPO return for the env
        (`metarl.rl.suites.published_returns`), labelled by source.

    Raises:
        MalformedResult: when a field has the wrong type.
    """
    if not isinstance(run.get("env"), str):
        raise MalformedResult("env is not a string")
    # None (JSON's non-finite) is a seed with no episode ended in the scored window: e.g.
    # Freeway-MinAtar's 2,500-step episodes before a rung. Its return is undefined (NaN), so the
    # env's mean and normalised score are too; the seed is not malformed.
    returns = [
        math.nan if r is None else r
        for r in _numbers(run.get("final_returns"), "final_returns", allow_none=True)
    ]
    if not returns:
        raise MalformedResult("final_returns is empty")
    mean = float(np.mean(returns)) if all(map(math.isfinite, returns)) else math.nan
    normalised = normalised_score(mean, random_mean, baseline_mean)
    interval = None
    if math.isfinite(normalised):
        per_seed = per_seed_normalised(returns, random_mean, baseline_mean)
        interval = bootstrap_interval([per_seed]) if per_seed is not None else None
    published = {}
    for label, reference in published_returns(run["env"]).items():
        value = normalised_score(mean, random_mean, reference)
        published[label] = value if math.isfinite(value) else None
    curve = _numbers(run.get("curve", []), "curve", allow_none=True)
    curve_std = _numbers(run.get("curve_std", []), "curve_std", allow_none=True)
    if curve_std and len(curve_std) != len(curve):
        raise MalformedResult("curve_std does not match the curve")
    seeds = run.get("seeds")
    if not isinstance(seeds, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in seeds
    ):
        raise MalformedResult("seeds is not a list of integers")
    value_loss = positive_value_loss_of(run.get("positive_value_loss"), len(seeds))
    curves = curves_of(run, len(seeds))
    return EnvScore(
        env=run["env"],
        seeds=seeds,
        total_timesteps=int(_number(run.get("total_timesteps"), "total_timesteps")),
        returns=returns,
        mean=mean,
        std=float(np.std(returns)) if math.isfinite(mean) else math.nan,
        normalised=normalised if math.isfinite(normalised) else None,
        baseline_mean=baseline_mean,
        random_mean=random_mean,
        curve_steps=[int(x) for x in _numbers(run.get("curve_steps", []), "curve_steps")],
        curve=curve,
        curve_std=curve_std,
        compile_s=_number(run.get("compile_s", 0.0), "compile_s"),
        run_s=_number(run.get("run_s", 0.0), "run_s"),
        steps_per_s=_number(run.get("steps_per_s", 0.0) or 0.0, "steps_per_s"),
        heldout=role == "test",
        role=role,
        lr=None if lr is None else float(lr),
        stage=stage,
        normalised_ci=list(interval) if interval is not None else None,
        published=published,
        positive_value_loss=value_loss,
        adaptation=curves["adaptation"],
        scratch=curves["scratch"],
    )


def parse_outcome(data: object) -> Outcome:
    """An Outcome from an untrusted dict: exactly the known fields, each of the right type.

    Raises:
        MalformedResult: for anything else (unknown or missing keys, wrong types).
    """
    if not isinstance(data, dict):
        raise MalformedResult(f"the result is {type(data).__name__}, not an object")
    known = {f.name for f in fields(Outcome)}
    unknown = set(data) - known
    if unknown:
        raise MalformedResult(f"unknown keys {sorted(unknown)[:5]}")
    if not isinstance(data.get("passed"), bool) or data.get("stage") not in WORKER_STAGES:
        raise MalformedResult("passed/stage missing or of the wrong type")
    if data.get("fault") not in (None, "candidate"):
        raise MalformedResult("a worker cannot declare an evaluator fault")
    for key in ("reason", "fingerprint", "duplicate_of"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise MalformedResult(f"{key} is not a string")
    warnings = data.get("warnings", [])
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise MalformedResult("warnings is not a list of strings")
    timings = data.get("timings", {})
    if not isinstance(timings, dict):
        raise MalformedResult("timings is not an object")
    scores = data.get("env_scores", [])
    if not isinstance(scores, list) or not all(isinstance(e, dict) for e in scores):
        raise MalformedResult("env_scores is not a list of objects")
    return Outcome(
        passed=data["passed"],
        stage=data["stage"],
        reason=data.get("reason"),
        warnings=list(warnings),
        env_scores=[_parse_env_score(e) for e in scores],
        fitness=_number(data.get("fitness"), "fitness", allow_none=True),
        heldout=_number(data.get("heldout"), "heldout", allow_none=True),
        fitness_ci=_interval(data.get("fitness_ci"), "fitness_ci"),
        heldout_ci=_interval(data.get("heldout_ci"), "heldout_ci"),
        validation=_number(data.get("validation"), "validation", allow_none=True),
        validation_ci=_interval(data.get("validation_ci"), "validation_ci"),
        fingerprint=data.get("fingerprint"),
        duplicate_of=data.get("duplicate_of"),
        behaviour=None
        if data.get("behaviour") is None
        else _numbers(data["behaviour"], "behaviour", allow_none=True, limit=BEHAVIOUR_SIZE),
        timings={str(k): _number(v, "timing", allow_none=True) or 0.0 for k, v in timings.items()},
    )


_ENV_SCORE_FIELDS = {f.name for f in fields(EnvScore)}


def _parse_env_score(data: dict) -> EnvScore:
    known = {k: v for k, v in data.items() if k in _ENV_SCORE_FIELDS}
    known["normalised_ci"] = _interval(known.get("normalised_ci"), "normalised_ci")
    known["published"] = _published(known.get("published", {}))
    if known.get("role", "") not in ("", *ROLES):
        raise MalformedResult("role is not one of " + ", ".join(ROLES))
    known["lr"] = _number(known.get("lr"), "lr", allow_none=True)
    # a score holds the mean over seeds: a number or None (absent in older messages)
    value = known.get("positive_value_loss")
    if isinstance(value, list):
        raise MalformedResult("positive_value_loss is list, not a number")
    known["positive_value_loss"] = positive_value_loss_of(value, 1)
    # and the mean adaptation and scratch curves: one list of numbers or None each
    known.update(curves_of(known, 1, mean_only=True))
    return EnvScore(**known)


def _finite_or_none(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(v) for v in value]
    return value
