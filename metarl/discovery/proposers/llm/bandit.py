"""Which model writes the next proposal: a bandit on improvement per unit of cost.

With several `--model`s, fixed weights spend the budget on a model whatever it yields. The
bandit (as in ShinkaEvolve) learns from the run which model buys the most improvement for its
cost, and shifts proposals towards it while still trying the others now and then.

**What an arm earns.** Arms are model names. Each proposal, once evaluated, is one observation:
its *improvement*, max(0, the child's training fitness - its best parent's), is 0 for a
proposal that failed any stage or had no program (a failure still costs the model), and its
*cost* is what its calls cost: USD when every call that answered was priced (> 0), else the
calls' latency in seconds (a local or unpriced model). A call that never answered (a transport
fault) is not billed by a provider, so it adds no USD, only its seconds. An arm's cost is kept
in USD while all its proposals were priced, in seconds from its first unpriced one (both sums
are kept, so the switch loses nothing).

**Why Thompson sampling, not UCB1.** A generation's proposals are requested concurrently,
before any of them is evaluated, so every request of a generation sees the same bandit state.
UCB1 is deterministic given the state: all of a generation's children would go to one model.
Thompson sampling draws a plausible rate per arm for each request and picks the best draw, so a
generation's requests spread over the models in proportion to how likely each is the best. The
draw uses a `random.Random` seeded from (rng_seed, request seed, attempt), never a shared
mutable RNG: the choice is reproducible from (state, rng_seed, request seed) whatever order the
threads run in, and a resumed run chooses as the uninterrupted one would.

**The posterior.** Improvement arriving at a rate λ_a per unit of cost (a Poisson process with
the cost as exposure) has the conjugate Gamma posterior
    λ_a ~ Gamma(shape = α0 + I_a / ī, rate = β0 + C_a / c̄_u(a))
with I_a the arm's summed improvement and C_a its summed cost in its unit u(a). Both are
normalised so that dollars, seconds and fitness scales are comparable:
- ī: the mean improvement of the proposals that improved (over all arms); 1 before any did.
- c̄_u: the mean cost of one proposal among the arms whose cost is in unit u; 1 before any.
So λ reads "typical improvements per typical proposal's cost": arms of one unit compare by
improvement per dollar (or per second) exactly, and a local model is compared with a priced one
by how cheap it is among its own kind, since there is no exchange rate between a second of a
local GPU and a dollar of an API. The prior α0 = β0 = 1 (one typical improvement per typical
proposal) is optimistic on purpose: an arm must fail a few times before it is left alone, and
an arm that only fails sees its mean fall as 1 / (1 + proposals).

Every arm is tried once first: while an arm has no observation, a request picks uniformly among
the untried arms. Fixed weights (`--model-choice weights`) are the other choice; the weights
of `provider/model:weight` are not read by the bandit.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol, Sequence

logger = logging.getLogger(__name__)

MODEL_CHOICES = ("bandit", "weights")  # how each call's model is picked among several
PRIOR_SHAPE = 1.0  # α0: prior improvements, in typical improvements
PRIOR_RATE = 1.0  # β0: prior cost, in typical proposals' costs
USD, SECONDS = "usd", "s"


class Call(Protocol):
    """What the bandit reads of one LLM call (base.LLMCall)."""

    model: str
    reply: str | None
    cost_usd: float | None
    latency_s: float


@dataclass(frozen=True)
class Spend:
    """What one proposal's calls to one model cost.

    Attributes:
        usd: their USD, or None when a call that answered had no known positive price.
        seconds: their summed latency.
    """

    usd: float | None
    seconds: float


def spends(calls: Iterable[Call]) -> dict[str, Spend]:
    """Per model, what a proposal's calls cost (dedup re-proposals may use several models).

    Args:
        calls: the proposal's LLM calls, retries and repairs included.

    Returns:
        Model -> Spend, in the order the models were first called.
    """
    usd: dict[str, float | None] = {}
    seconds: dict[str, float] = {}
    for call in calls:
        model = call.model
        seconds[model] = seconds.get(model, 0.0) + _finite(call.latency_s)
        spent = usd.setdefault(model, 0.0)
        if call.reply is None:  # never answered: a provider does not bill it
            continue
        cost = call.cost_usd
        if spent is None or cost is None or not _finite(cost) > 0:
            usd[model] = None
        else:
            usd[model] = spent + float(cost)
    return {model: Spend(usd[model], seconds[model]) for model in seconds}


def improvement_of(child: float | None, parent: float | None) -> float:
    """max(0, child - parent); 0 when either is unknown (a failed child, nothing to beat)."""
    if child is None or parent is None:
        return 0.0
    gain = float(child) - float(parent)
    return gain if math.isfinite(gain) and gain > 0 else 0.0


@dataclass
class Arm:
    """One model's record.

    Attributes:
        pulls: proposals observed.
        improved: those that improved on their parent.
        improvement: their improvements summed (training fitness).
        usd: the USD of its priced proposals, summed.
        seconds: the latency of all its proposals, summed.
        unpriced: proposals with an answered call of unknown price.
    """

    pulls: int = 0
    improved: int = 0
    improvement: float = 0.0
    usd: float = 0.0
    seconds: float = 0.0
    unpriced: int = 0

    @property
    def unit(self) -> str:
        """USD while every proposal was priced (and something was paid), else seconds."""
        return USD if self.unpriced == 0 and self.usd > 0 else SECONDS

    @property
    def cost(self) -> float:
        """Its summed cost in its `unit`."""
        return self.usd if self.unit == USD else self.seconds


@dataclass
class ModelBandit:
    """Thompson sampling over models on improvement per unit of cost (see the module's
    docstring for the rule). Thread-safe; `to_dict`/`from_dict` carry it through a resume.

    Attributes:
        arms: model -> its record, in the order the models were given.
        prior_shape, prior_rate: the Gamma prior (α0, β0).
    """

    arms: dict[str, Arm]
    prior_shape: float = PRIOR_SHAPE
    prior_rate: float = PRIOR_RATE
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    @classmethod
    def for_models(cls, models: Sequence[str]) -> "ModelBandit":
        """A bandit with no observation over `models` (each once, in order)."""
        return cls({model: Arm() for model in dict.fromkeys(models)})

    # -- choosing ------------------------------------------------------------------------------
    def choose(self, rng_seed: int, request_seed: int, attempt: int = 0) -> str:
        """The model for one call, reproducible from (state, rng_seed, request_seed, attempt).

        Args:
            rng_seed: the run's search seed.
            request_seed: the request's seed (ProposalRequest.rng_seed).
            attempt: a further draw for the same request.

        Returns:
            An untried model (uniformly) while there is one, else the arm with the largest
            draw from its posterior (the first given on a tie).
        """
        rng = random.Random(f"{rng_seed}:{request_seed}:{attempt}:bandit")
        with self._lock:
            untried = [model for model, arm in self.arms.items() if arm.pulls == 0]
            posterior = self._posterior()
        if untried:
            return rng.choice(untried)
        draws = {
            model: rng.gammavariate(shape, 1.0 / rate) for model, (shape, rate) in posterior.items()
        }
        return max(draws, key=lambda model: draws[model])

    def posterior(self) -> dict[str, tuple[float, float]]:
        """Model -> (shape, rate) of its Gamma posterior on normalised improvement per cost."""
        with self._lock:
            return self._posterior()

    def means(self) -> dict[str, float]:
        """Model -> its posterior mean (shape / rate): what the bandit expects of it."""
        return {model: shape / rate for model, (shape, rate) in self.posterior().items()}

    def _posterior(self) -> dict[str, tuple[float, float]]:
        arms = self.arms.values()
        improved = sum(arm.improved for arm in arms)
        total = sum(arm.improvement for arm in arms)
        typical_gain = total / improved if improved and total > 0 else 1.0
        typical_cost = {}
        for unit in (USD, SECONDS):
            kind = [arm for arm in arms if arm.unit == unit]
            pulls, cost = sum(a.pulls for a in kind), sum(a.cost for a in kind)
            typical_cost[unit] = cost / pulls if pulls and cost > 0 else 1.0
        return {
            model: (
                self.prior_shape + arm.improvement / typical_gain,
                self.prior_rate + arm.cost / typical_cost[arm.unit],
            )
            for model, arm in self.arms.items()
        }

    # -- learning ------------------------------------------------------------------------------
    def observe(self, model: str, improvement: float, spend: Spend) -> None:
        """Record one proposal of `model`: its improvement over its best parent (0 for a
        failure) and what its calls cost. A model the bandit does not know is logged and left
        out (a resumed run's models cannot change, so it is a caller's bug)."""
        gain = _finite(improvement) if improvement > 0 else 0.0
        with self._lock:
            arm = self.arms.get(model)
            if arm is None:
                logger.warning("the model bandit has no arm %r; observation left out", model)
                return
            arm.pulls += 1
            arm.improved += gain > 0
            arm.improvement += gain
            arm.seconds += _finite(spend.seconds)
            if spend.usd is None:
                arm.unpriced += 1
            else:
                arm.usd += _finite(spend.usd)
        logger.debug("model bandit: %s improved %.4g for %s", model, gain, spend)

    # -- state ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON-serialisable state."""
        with self._lock:
            return {
                "arms": {model: vars(arm).copy() for model, arm in self.arms.items()},
                "prior_shape": self.prior_shape,
                "prior_rate": self.prior_rate,
            }

    @classmethod
    def from_dict(cls, data: dict[str, Any], models: Sequence[str] | None = None) -> "ModelBandit":
        """The bandit stored as `data` (`to_dict`).

        Args:
            data: the stored state.
            models: the arms to have, in order (a stored arm not among them is dropped, a
                missing one starts untried); None: the stored ones.

        Returns:
            The bandit.
        """
        stored = {
            model: Arm(**{k: v for k, v in values.items() if k in Arm.__dataclass_fields__})
            for model, values in (data.get("arms") or {}).items()
        }
        names = list(models) if models is not None else list(stored)
        return cls(
            {model: stored.get(model) or Arm() for model in dict.fromkeys(names)},
            prior_shape=float(data.get("prior_shape", PRIOR_SHAPE)),
            prior_rate=float(data.get("prior_rate", PRIOR_RATE)),
        )


def _finite(value: float | None) -> float:
    """`value` as a float, 0 when it is None, NaN or infinite (a cost or latency gone wrong)."""
    try:
        number = float(value) if value is not None else 0.0
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0
