"""The trainer's slots: PPO's loss is written once, each trainer reads every slot it claims
(and no other), and each registered task's candidate lands in its slot of every trainer that
scores it — RL² included, which once ignored a new slot without a word.

A slot is poisoned by a candidate whose output is NaN: a trainer that reads the slot records a
non-finite update, one that does not gives the default run's numbers exactly.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from metarl.rl import ppo, trainers
from metarl.rl.components import SLOT_NAMES, Components, ppo_clip_drift
from metarl.rl.configs import default_config
from metarl.rl.loss import ppo_loss
from metarl.rl.meta import maml, rl2
from metarl.rl.meta.names import METHOD_SLOTS
from metarl.rl.networks import entropy, log_prob
from metarl.tasks import get_task, task_names
from metarl.tasks.candidate import load_function


def _tiny(env: str):
    config = default_config(env)
    if env.startswith("Meta-"):
        return config.replace(total_timesteps=config.batch_size)
    return config.replace(total_timesteps=256, num_envs=4, num_steps=32, num_minibatches=2)


TRAINERS = {
    "ppo": (_tiny("CartPole-v1"), ppo.SLOTS),
    "rl2": (_tiny("Meta-rl2/bandit-tasks/train"), rl2.SLOTS),
    "maml": (_tiny("Meta-maml/bandit-tasks/train"), maml.SLOTS),
}

POISON = {
    "drift": lambda ratio, advantage, epsilon: ratio * jnp.nan,
    "value_loss": lambda value, old_value, target, epsilon: value * jnp.nan,
    "make_optimizer": lambda schedule, config: optax.scale(jnp.nan),
}


def _train(trainer: str, components: Components):
    config, _ = TRAINERS[trainer]
    return jax.jit(trainers.make_train(config, components))(jax.random.PRNGKey(0))


@functools.cache
def _default_run(trainer: str):
    return _train(trainer, Components())


def _marks(trainer: str):
    # a meta-learner's tiny run compiles in 15-25 s on 2 cores: CI's slow pass
    return [pytest.mark.slow] if trainer != "ppo" else []


def _poisoned_candidate(task_name: str):
    """The task's baseline program with every output multiplied by NaN."""
    task = get_task(task_name)
    baseline = load_function(task.baseline_program().source, task.function_name)

    def candidate(*args):
        return jax.tree.map(lambda x: x * jnp.nan, baseline(*args))

    return candidate


def test_every_slot_has_a_poison_and_the_meta_learners_claims_are_theirs():
    assert set(POISON) == set(SLOT_NAMES)
    assert rl2.SLOTS == METHOD_SLOTS["rl2"] and maml.SLOTS == METHOD_SLOTS["maml"]
    assert set(ppo.SLOTS) == set(SLOT_NAMES)  # PPO reads every slot


@pytest.mark.parametrize("task_name", task_names())
def test_a_task_fills_exactly_its_slot(task_name):
    task = get_task(task_name)
    assert task.slot in SLOT_NAMES
    plugged, default = task.plug(POISON[task.slot]), Components()
    for slot in SLOT_NAMES:
        same = getattr(plugged, slot) is getattr(default, slot)
        assert same == (slot != task.slot), slot


@pytest.mark.parametrize(
    "task_name,trainer",
    [
        pytest.param(name, trainer, marks=_marks(trainer))
        for name in task_names()
        for trainer in ("ppo",) + get_task(name).meta_learners
    ],
)
def test_a_tasks_candidate_reaches_every_trainer_that_scores_it(task_name, trainer):
    task = get_task(task_name)
    assert task.slot in TRAINERS[trainer][1]
    result = _train(trainer, task.plug(_poisoned_candidate(task_name)))
    assert int(result.first_nonfinite_update) == 0


@pytest.mark.parametrize(
    "trainer,slot",
    [
        pytest.param(t, s, marks=_marks(t))
        for t, (_, slots) in TRAINERS.items()
        for s in SLOT_NAMES
        if s not in slots
    ],
)
def test_a_slot_a_trainer_does_not_claim_leaves_its_run_unchanged(trainer, slot):
    default = _default_run(trainer)
    poisoned = _train(trainer, dataclasses.replace(Components(), **{slot: POISON[slot]}))
    assert int(poisoned.first_nonfinite_update) == -1
    for a, b in zip(jax.tree.leaves(default), jax.tree.leaves(poisoned)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_default_loss_is_the_trainers_former_loss_bit_for_bit():
    """The loss as ppo.py wrote it before loss.py, against loss.py with the default components:
    the same bits in value and gradient (a tiny PPO, RL² and MAML run gave identical results
    before and after the move; test_trainer.py checks the drift form against PPO's paper)."""
    config = default_config("CartPole-v1")
    keys = jax.random.split(jax.random.PRNGKey(3), 7)
    n = 256
    logits = jax.random.normal(keys[0], (n, 2))
    value = jax.random.normal(keys[1], (n,))
    action = jax.random.randint(keys[2], (n,), 0, 2)
    old_log_prob = log_prob(logits, action) + 0.3 * jax.random.normal(keys[3], (n,))
    old_value = value + 0.5 * jax.random.normal(keys[4], (n,))
    advantage = 2.0 * jax.random.normal(keys[5], (n,)) + 0.4
    target = jax.random.normal(keys[6], (n,))

    def former(logits, value):
        ratio = jnp.exp(log_prob(logits, action) - old_log_prob)
        a = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        actor = -jnp.mean(ratio * a - ppo_clip_drift(ratio, a, config.clip_eps))
        clipped = old_value + jnp.clip(value - old_value, -config.clip_eps, config.clip_eps)
        critic = 0.5 * jnp.mean(
            jnp.maximum(jnp.square(value - target), jnp.square(clipped - target))
        )
        return actor + config.vf_coef * critic - config.ent_coef * jnp.mean(entropy(logits))

    def shared(logits, value):
        return ppo_loss(
            Components(), config, logits, value, action, old_log_prob, old_value, advantage, target
        )[0]

    for transform in (lambda f: f, lambda f: jax.grad(f, argnums=(0, 1))):
        ours = jax.jit(transform(shared))(logits, value)
        theirs = jax.jit(transform(former))(logits, value)
        for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
