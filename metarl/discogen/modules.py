"""A candidate written as the DiscoGen module it replaces: a drift as `loss.py`, an update rule
as `optim.py` (DiscoGen 1.3.0's `OnPolicyRL` contracts).

DiscoGen runs these modules in its own process with nothing of metarl installed, so each one
is self-contained: the candidate's source verbatim, the names the candidate contract provides
(`jax`, `jnp`, `lax`, `nn`, `math`), then the function DiscoGen imports, written around it.
The wrapper keeps its own references under private names bound *after* the candidate's code,
so a candidate that rebinds `jnp` or defines `loss_actor_and_critic` changes nothing but its
own function.

What is exact:
- **drift**: DiscoGen's `loss_actor_and_critic` with the actor term
  `-mean(ratio * A - drift(ratio, A, CLIP_EPS))`, A the minibatch-normalised GAE; the value
  loss (clipped, 0.5 x max of the squared errors), the entropy bonus and the coefficients are
  DiscoGen's base loss's, term for term (metarl's trainer has the same loss). For PPO-clip's
  drift the actor term equals `-mean(min(ratio*A, clip(ratio)*A))` algebraically; in float32
  the two can differ in the last bits of a step (tests/test_discogen.py measures it).
- **update rule**: metarl's rule returns the step it adds to the parameters, learning rate
  included; DiscoGen multiplies a transform's output by `-lr` outside it (with its own linear
  schedule). The wrapper calls the rule with `lr = 1` and negates it, so the step DiscoGen
  applies is `lr_t * rule(..., lr=1)`: exactly the rule's step for rules linear in `lr` (Adam,
  SGD and any `-lr * f(...)`), and a different rule for one that uses `lr` otherwise (a
  threshold on it, `lr ** 2`). Gradients are clipped to `MAX_GRAD_NORM` first, momentum
  (decays 0.1..0.999) and the four state slots are kept as in metarl, and `progress` is the
  optimizer step over DiscoGen's total steps (`NUM_UPDATES x UPDATE_EPOCHS x NUM_MINIBATCHES`).
"""

from __future__ import annotations

from metarl.errors import USAGE, MetarlError
from metarl.tasks.optimizer.plug import MOMENTUM_DECAYS, NUM_STATE_SLOTS

# which DiscoGen module each metarl task replaces (its `change_<module>` config key)
MODULE_OF_TASK = {"drift": "loss", "optimizer": "optim"}


class NotExportable(MetarlError, ValueError):
    """A candidate of a task DiscoGen has no module for; the message is one line."""

    exit_code = USAGE


_PROVIDED = """\
import math

import jax
import jax.numpy as jnp
from jax import lax, nn
"""

_DRIFT_LOSS = '''

# ---- DiscoGen's loss contract, around the drift above (written by metarl) ----
import jax.numpy as _jnp

_drift = drift


def loss_actor_and_critic(params, traj_batch, gae, targets, network, config):
    """PPO's loss with the actor term of mirror learning: -mean(ratio*A - drift(ratio, A))."""
    pi, value = network.apply(params, traj_batch.obs)
    log_prob = pi.log_prob(traj_batch.action)

    clip = config["CLIP_EPS"]
    value_clipped = traj_batch.value + _jnp.clip(value - traj_batch.value, -clip, clip)
    value_loss = 0.5 * _jnp.maximum(
        _jnp.square(value - targets), _jnp.square(value_clipped - targets)
    ).mean()

    ratio = _jnp.exp(log_prob - traj_batch.log_prob)
    advantage = (gae - gae.mean()) / (gae.std() + 1e-8)
    actor_loss = -(ratio * advantage - _drift(ratio, advantage, clip)).mean()
    entropy = pi.entropy().mean()

    total = actor_loss + config["VF_COEF"] * value_loss - config["ENT_COEF"] * entropy
    return total, (value_loss, actor_loss, entropy)
'''

_RULE_OPTIMIZER = '''

# ---- DiscoGen's optimizer contract, around the update rule above (written by metarl) ----
from typing import NamedTuple as _NamedTuple

import jax as _jax
import jax.numpy as _jnp
import optax as _optax

_rule = optimizer
_DECAYS = {decays}
_SLOTS = {slots}


class RuleState(_NamedTuple):
    count: _jax.Array  # optimizer steps taken so far
    momentum: _optax.Params  # per leaf [len(_DECAYS), *shape]
    slots: _optax.Params  # per leaf [_SLOTS, *shape], owned by the rule


def make_optimizer(config):
    """The update rule as a transform whose output DiscoGen scales by -lr (see metarl's
    metarl/discogen/modules.py for what is exact)."""
    total_steps = config["NUM_UPDATES"] * config["UPDATE_EPOCHS"] * config["NUM_MINIBATCHES"]
    decays = _jnp.asarray(_DECAYS, _jnp.float32)

    def rule_transform():
        def init_fn(params):
            return RuleState(
                count=_jnp.zeros([], _jnp.int32),
                momentum=_jax.tree.map(
                    lambda p: _jnp.zeros((len(_DECAYS),) + p.shape, p.dtype), params
                ),
                slots=_jax.tree.map(lambda p: _jnp.zeros((_SLOTS,) + p.shape, p.dtype), params),
            )

        def update_fn(gradients, state, params=None):
            step = _optax.safe_increment(state.count)
            progress = _jnp.minimum(step / total_steps, 1.0).astype(_jnp.float32)
            one = _jnp.ones([], _jnp.float32)

            def leaf(g, p, m, s):
                shape = (-1,) + (1,) * g.ndim
                m = decays.reshape(shape) * m + (1 - decays.reshape(shape)) * g[None]
                u, s = _rule(g, p, m, s, step, progress, one)
                return -u, m, s

            out = _jax.tree.map(leaf, gradients, params, state.momentum, state.slots)
            treedef = _jax.tree.structure(gradients)
            leaves = treedef.flatten_up_to(out)
            updates = treedef.unflatten([u for u, _, _ in leaves])
            momentum = treedef.unflatten([m for _, m, _ in leaves])
            slots = treedef.unflatten([s for _, _, s in leaves])
            return updates, RuleState(count=step, momentum=momentum, slots=slots)

        return _optax.chain(
            _optax.clip_by_global_norm(config["MAX_GRAD_NORM"]),
            _optax.GradientTransformation(init_fn, update_fn),
        )

    return rule_transform
'''


def module_name(task: str) -> str:
    """The DiscoGen module (`loss` or `optim`) a candidate of `task` replaces.

    Raises:
        NotExportable: DiscoGen has no module for `task`.
    """
    if task not in MODULE_OF_TASK:
        known = ", ".join(MODULE_OF_TASK)
        raise NotExportable(f"DiscoGen has no module for task {task!r}; exportable: {known}")
    return MODULE_OF_TASK[task]


def module_source(source: str, task: str) -> str:
    """The text of the DiscoGen module that is the candidate `source` of `task`.

    Args:
        source: the candidate's program (defines `drift` or `optimizer`).
        task: "drift" or "optimizer".

    Returns:
        A self-contained Python module: DiscoGen's `loss.py` or `optim.py`.

    Raises:
        NotExportable: DiscoGen has no module for `task`.
    """
    module = module_name(task)
    header = (
        f"# A metarl {task} candidate as DiscoGen's `{module}.py` (OnPolicyRL); the candidate's\n"
        f"# program is verbatim between the two marked lines.\n{_PROVIDED}\n"
        "# ---- the candidate ----\n"
    )
    body = source.rstrip() + "\n"
    if module == "loss":
        return header + body + _DRIFT_LOSS
    wrapper = _RULE_OPTIMIZER.format(decays=repr(tuple(MOMENTUM_DECAYS)), slots=NUM_STATE_SLOTS)
    return header + body + wrapper
