"""The `drift` task: a policy-objective drift in the style of mirror learning / LPO."""

from __future__ import annotations

from metarl.tasks.base import Task
from metarl.tasks.drift.families import FAMILIES
from metarl.tasks.drift.probes import fingerprint_inputs, probes
from metarl.tasks.drift.terms import BLOCKS
from metarl.tasks.elementwise import elementwise_plumbing
from metarl.tasks.vocabulary import AVAILABLE

CONTRACT = f"""\
Write a Python function `drift(ratio, advantage, epsilon)` that defines the drift term of a
policy-optimisation objective (mirror learning, as in Learned Policy Optimisation).

PPO-style training maximises, for each sampled (state, action),
    ratio * advantage - drift(ratio, advantage, epsilon)
i.e. the actor loss is  -mean(ratio * advantage - drift(ratio, advantage, epsilon)).

Inputs (all float32 JAX arrays of the same shape, one element per sample in a minibatch):
- ratio: pi_new(a|s) / pi_old(a|s), strictly positive, typically in [0.5, 2].
- advantage: the GAE advantage, normalised to mean 0 and std 1 over the minibatch.
- epsilon: a Python float, PPO's clip range (0.2 by default); you may use it or ignore it.

Output: a float32 array with exactly the shape of `ratio` (elementwise; no reductions).

Constraints (a drift keeps the new policy close to the old one):
- drift >= 0 everywhere;
- drift == 0 and d drift / d ratio == 0 at ratio == 1 (no penalty before the policy moves);
- finite values and finite gradients for ratio in (0, inf) and any advantage.

{AVAILABLE} Write pure, jit-compatible code: no Python `if` on
array values (use jnp.where), no numpy, no I/O, no global state.

Example (PPO's clipped objective):
    def drift(ratio, advantage, epsilon):
        clipped_ratio = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)
        return jax.nn.relu((ratio - clipped_ratio) * advantage)

Before any training the function is checked on random inputs: it must compile under jax.jit
and jax.vmap, return float32 with exactly ratio's shape, give finite values and finite
gradients for ratio in [0.05, 20], be elementwise, have as gradient the slope of its own
values (no jax.lax.stop_gradient or custom gradients: training follows the gradient), be
>= 0, and be 0 with a zero slope d drift / d ratio at ratio == 1 for every advantage in the
training range (|advantage| <= 32). A program that breaks any of these is rejected, the
last two included: they are what makes the objective a drift (mirror learning's guarantee).
"""


# epsilon is a Python float in the contract, so it is baked into the exported program: one
# variant per clip range the trainer's configs use (PPOConfig.clip_eps).
EPSILONS = (0.2,)
PLUMBING = elementwise_plumbing("drift", arrays=2, statics=EPSILONS)


TASK = Task(
    name="drift",
    function_name="drift",
    signature="drift(ratio, advantage, epsilon) -> array",
    contract=CONTRACT,
    baseline_name="ppo_clip",
    slot="drift",
    # Invariant policy (see probes.py): a negative drift beyond 1e-5, a value beyond 1e-5 or a
    # slope beyond 1e-4 at ratio = 1, and a gradient that is not the slope of the values are
    # failures.
    probes=probes,
    fingerprint_inputs=fingerprint_inputs,
    **PLUMBING._asdict(),
    distillable=True,
    families=FAMILIES,
    building_blocks=BLOCKS,
)
