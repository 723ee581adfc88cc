"""MAML for RL (Finn et al. 2017): an initialisation meta-learned so that a few policy-gradient
steps on a new task's own rollouts adapt it.

    for each meta-update:
        draw num_envs tasks; for each task (vmap):
            theta_0 = theta
            for j in 0..K-1:                                   (inner loop, unrolled)
                D_j   = rollouts of pi(theta_j) on the task     (the *adapted* policy's data)
                theta_{j+1} = theta_j + rule(grad L(theta_j; D_j))
            D_K = query rollouts of pi(theta_K)
            meta-loss_task = L(theta_K; D_K)
        theta <- Adam(grad_theta mean meta-loss)               (through theta_K: second order)

L is REINFORCE with a per-time-step mean baseline over the task's episodes, advantages
normalised. The inner rule is the candidate's optimizer (components.py; SGD at the inner step
size is the paper's MAML, the task's Adam seed its adaptive variant), the outer optimizer is
Adam with the suite's learning rate. `first_order=True` stops the gradient through the inner
gradients (FO-MAML); the default differentiates through them. Like Finn et al., the gradient of
the *sampling* of the inner rollouts with respect to theta is not taken (DiCE/ProMP add it).

What the seed notebook got wrong, and the tests check here: its support and query sets were
the pre-update policy's own actions, so the meta-loss was exactly 0; here the query rollouts
come from the adapted policy, and the meta-loss and meta-gradient are non-zero.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from metarl.rl.components import Components
from metarl.rl.configs import PPOConfig
from metarl.rl.meta.loop import MetaLearner, MetaStats
from metarl.rl.meta.names import METHOD_SLOTS
from metarl.rl.meta.tasks import Episodes, TaskFamily, run_episodes, sample_tasks
from metarl.rl.networks import MLP, entropy, log_prob, sample_action
from metarl.rl.scratch import ScratchSettings, scratch_adaptation_curve


class MAMLSettings(NamedTuple):
    """The inner loop's shape.

    Attributes:
        inner_steps: K, policy-gradient steps per task.
        inner_lr: the inner rule's step size (its constant learning rate).
        episodes: rollouts per inner step (and in the query set).
        eval_tasks: held-out tasks the adaptation curve is averaged over.
        first_order: stop gradients through the inner gradients (FO-MAML).
    """

    inner_steps: int = 1
    inner_lr: float = 0.1
    episodes: int = 10
    eval_tasks: int = 64
    first_order: bool = False


def policy_network(config: PPOConfig, family: TaskFamily) -> MLP:
    return MLP([config.hidden_size] * config.num_layers, family.num_actions, 0.01, "tanh")


def rollouts(network, params, family: TaskFamily, key, task, episodes: int) -> Episodes:
    """`episodes` episodes of `family.horizon` steps on `task` with the policy `params`.

    The parameters are only sampled from (stop_gradient): no gradient flows through the data.
    """
    params = jax.lax.stop_gradient(params)

    def act(key, obs):
        return sample_action(key, network.apply(params, obs)), ()

    return run_episodes(family, act, key, task, episodes)


def reinforce_loss(network, params, data: Episodes, gamma: float) -> jax.Array:
    """REINFORCE with a per-time-step mean baseline over the episodes (advantages normalised).

    Returns:
        The scalar loss -mean(log pi(a|s) * A).
    """

    def to_go(rewards):
        return jax.lax.scan(
            lambda g, r: (r + gamma * g, r + gamma * g), 0.0, rewards, reverse=True
        )[1]

    returns = jax.vmap(to_go)(data.reward)
    advantage = returns - returns.mean(axis=0, keepdims=True)
    advantage = advantage / (advantage.std() + 1e-8)
    logits = network.apply(params, data.obs)
    return -jnp.mean(log_prob(logits, data.action) * jax.lax.stop_gradient(advantage))


def episode_return(data: Episodes) -> jax.Array:
    return data.reward.sum(axis=-1).mean()


def adapt(network, params, family, key, task, settings: MAMLSettings, rule, gamma: float):
    """K inner steps of `rule` on fresh rollouts of the adapted policy.

    Returns:
        (theta_K, mean episode return of D_0 .. D_{K-1} as float32[K]).
    """
    state = rule.init(jax.lax.stop_gradient(params) if settings.first_order else params)
    returns = []
    for key_step in jax.random.split(key, settings.inner_steps):
        data = rollouts(network, params, family, key_step, task, settings.episodes)
        grads = jax.grad(reinforce_loss, argnums=1)(network, params, data, gamma)
        if settings.first_order:
            # FO-MAML: theta_{j+1} = theta_j + sg(update), so d theta_K / d theta = I and the
            # meta-gradient is the query gradient at theta_K; nothing differentiates through
            # the inner gradient or the rule (which may be exported without a VJP).
            updates, state = rule.update(*jax.lax.stop_gradient((grads, state, params)))
            updates = jax.lax.stop_gradient(updates)
        else:
            updates, state = rule.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        returns.append(episode_return(data))
    return params, jnp.stack(returns) if returns else jnp.zeros((0,), jnp.float32)


# the Components slots MAML uses: its inner rule is the optimizer; it has no PPO loss (its inner
# step is a policy gradient on fresh rollouts, ratio 1, where a drift is zero by its contract)
SLOTS = METHOD_SLOTS["maml"]


def make_maml_learner(
    config: PPOConfig,
    components: Components,
    family: TaskFamily,
    settings: MAMLSettings,
    outer_lr: Any,
    pretrained: bool = False,
) -> MetaLearner:
    """MAML as a `MetaLearner` (loop.py).

    Args:
        config: num_envs is the meta-batch (tasks per meta-update), gamma the inner loss's
            discount, hidden_size/num_layers the policy, max_grad_norm clips the meta-gradient.
        components: `make_optimizer` builds the inner rule (its schedule is the constant
            `settings.inner_lr`); the drift is not used (MAML has no ratio objective).
        family: the task family.
        settings: inner steps, step size, episodes, held-out tasks, first order.
        outer_lr: the outer Adam's learning-rate schedule (ppo.learning_rate_schedule).
        pretrained: train the *pretrained* baseline of Finn et al. instead: one policy by
            policy gradient on all tasks (no inner step in training), adapted by the same K
            inner steps when its curve is measured.

    Returns:
        The learner; its adaptation curve has K+1 points (return after 0..K inner steps).
    """
    network = policy_network(config, family)
    rule = components.make_optimizer(lambda count: jnp.float32(settings.inner_lr), config)
    outer = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm), optax.adam(outer_lr, eps=config.adam_eps)
    )

    train_settings = settings._replace(inner_steps=0) if pretrained else settings

    def task_loss(params, key, task):
        key_inner, key_query = jax.random.split(key)
        adapted, _ = adapt(
            network, params, family, key_inner, task, train_settings, rule, config.gamma
        )
        query = rollouts(network, adapted, family, key_query, task, settings.episodes)
        loss = reinforce_loss(network, adapted, query, config.gamma)
        ent = jnp.mean(entropy(network.apply(adapted, query.obs)))
        return loss, (episode_return(query), ent)

    def init(key):
        params = network.init(key, jnp.zeros((family.obs_size,), jnp.float32))
        return params, outer.init(params)

    def update(params, opt_state, key):
        key_tasks, key_loss = jax.random.split(key)
        tasks = sample_tasks(family, key_tasks, config.num_envs)

        def meta_loss(p):
            losses, (returns, ent) = jax.vmap(lambda k, t: task_loss(p, k, t))(
                jax.random.split(key_loss, config.num_envs), tasks
            )
            return losses.mean(), (returns.mean(), ent.mean())

        (loss, (ret, ent)), grads = jax.value_and_grad(meta_loss, has_aux=True)(params)
        updates, opt_state = outer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        stats = MetaStats(
            episode_return=ret,
            episodes=jnp.float32(config.num_envs * settings.episodes),
            actor_loss=loss,
            value_loss=jnp.float32(0.0),
            entropy=ent,
            loss=loss,
            min_drift=jnp.float32(jnp.inf),
        )
        return params, opt_state, stats

    def curve(params, key):
        key_tasks, key_runs = jax.random.split(key)
        tasks = sample_tasks(family, key_tasks, settings.eval_tasks)

        def one(key, task):
            key_inner, key_query = jax.random.split(key)
            adapted, returns = adapt(
                network, params, family, key_inner, task, settings, rule, config.gamma
            )
            query = rollouts(network, adapted, family, key_query, task, settings.episodes)
            return jnp.concatenate([returns, episode_return(query)[None]])

        return jax.vmap(one)(jax.random.split(key_runs, settings.eval_tasks), tasks).mean(axis=0)

    def reference(key):
        # as many rounds and episodes as the inner loop and its query set
        scratch = ScratchSettings(rounds=settings.inner_steps + 1, episodes=settings.episodes)
        return scratch_adaptation_curve(config, family, scratch, key, settings.eval_tasks)

    return MetaLearner(init=init, update=update, curve=curve, reference=reference)
