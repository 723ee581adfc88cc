"""The `value_loss` task: the critic's per-sample loss inside PPO's loss (rl/loss.py).

Its candidate fills the trainer's `value_loss` slot, which PPO and RL²'s outer loop read (MAML
has no critic in its inner step, so `--meta maml` refuses the task). The baseline is PPO's
clipped value loss: with it the trainer is exactly PPO.
"""

from __future__ import annotations

from metarl.tasks.base import Task
from metarl.tasks.elementwise import elementwise_plumbing
from metarl.tasks.value_loss.probes import EPSILON, fingerprint_inputs, probes
from metarl.tasks.vocabulary import AVAILABLE

CONTRACT = f"""\
Write a Python function `value_loss(value, old_value, target, epsilon)` that defines the
critic's loss of PPO, per sample.

PPO's loss on a minibatch is
    actor_loss + vf_coef * mean(value_loss(value, old_value, target, epsilon)) - ent_coef * entropy
and training follows its gradient with respect to the critic's `value`.

Inputs (all float32 JAX arrays of the same shape, one element per sample in a minibatch):
- value: the critic's current prediction V(s) (being trained);
- old_value: the prediction V_old(s) recorded when the rollout was collected;
- target: the regression target, GAE's advantage + V_old(s) (a return estimate);
- epsilon: a Python float, PPO's clip range ({EPSILON} by default); use it or ignore it.

Output: a float32 array with exactly the shape of `value` (elementwise; no reductions).

Constraints (a value loss trains the critic toward its targets):
- value_loss >= 0 everywhere;
- it pulls toward the target: d value_loss / d value has the sign of (value - target) or is
  0, and is not 0 where value == old_value and value is at least 0.1 away from the target;
- finite values and finite gradients for any finite inputs (|values| up to 1e3).

{AVAILABLE} Write pure, jit-compatible code: no Python `if` on
array values (use jnp.where), no numpy, no I/O, no global state.

Example (PPO's clipped value loss):
    def value_loss(value, old_value, target, epsilon):
        clipped = old_value + jnp.clip(value - old_value, -epsilon, epsilon)
        return 0.5 * jnp.maximum(jnp.square(value - target), jnp.square(clipped - target))

Before any training the function is checked on random inputs: it must compile under jax.jit
and jax.vmap, return float32 with exactly value's shape, give finite values and gradients, be
elementwise, have as gradient the slope of its own values (no jax.lax.stop_gradient or custom
gradients), be >= 0 and pull toward the target as above. A program that breaks any of these is
rejected.
"""

# epsilon is a Python float in the contract, so it is baked into the exported program: one
# variant per clip range the trainer's configs use (PPOConfig.clip_eps)
PLUMBING = elementwise_plumbing("value loss", arrays=3, statics=(EPSILON,))


TASK = Task(
    name="value_loss",
    function_name="value_loss",
    signature="value_loss(value, old_value, target, epsilon) -> array",
    contract=CONTRACT,
    baseline_name="ppo_clip",
    slot="value_loss",
    probes=probes,
    fingerprint_inputs=fingerprint_inputs,
    **PLUMBING._asdict(),
)
