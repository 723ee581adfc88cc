"""An agent trained by a Learned Policy Gradient, and the actor-critic it is measured against.

`make_lpg_train(config, env)` returns `train(rng, lpg_params, env_params, lifetime)`: a pure
function (jit it, vmap it over seeds, ES members and levels: the level is `env_params`) that
mirrors the algorithm:

    for update in 0 .. max_updates-1                      (lax.scan; frozen after `lifetime`)
        collect rollout_len x num_envs transitions        (lax.scan over env steps)
        pi_hat, y_hat = LPG(rollout)                       (network.py, backwards over time)
        loss = -mean(pi_hat * log pi(a|s)) + alpha_y * mean(KL(y_hat || y(s)))
        actor, y-net <- optimizer(clip_by_global_norm(grad))
    final return = mean return of one episode per env with the final policy

`make_a2c_train(config, env)` is the same agent and loop with the textbook targets instead:
pi_hat = GAE advantages of a scalar critic, trained by squared error, plus an entropy bonus.
With `pi_hat` equal to those advantages and `y_hat = y` (an "identity" target network) the LPG
loss has exactly the actor-critic's policy gradient and no prediction gradient
(tests/test_lpg.py checks it on gradients): LPG generalises actor-critic, the property that
makes the comparison in GROOVE meaningful. The actor-critic is the reference of GROOVE's
algorithmic regret and the "tuned actor-critic" of benchmarks/groove.py.

Lifetimes vary per task (TA-LPG; log-uniform lifetimes in GROOVE) while a compiled scan has one
length, so the loop always runs `max_updates` and stops changing the agent after `lifetime`
(the same mask GROOVE applies).

Agents follow GROOVE's grid-world agents: linear ("tabular": no hidden layer) policy and
y-network trained by SGD on grid levels; one hidden layer of 32 with Adam 1e-3 elsewhere
(`agent_config_for`). The SGD rates are tuned here, on the training distribution only:
GROOVE's 40 (actor) / 4 (critic) suit its one-hot encoding of whole states, but our
observation has several active features (the agent and every present object), and the
actor-critic at 250 updates on eight `grid-random` training draws (3 seeds) gained over the
random policy 1.34 at 40/4, 2.43 at 10/1, 2.26 at 3/0.3 and 2.07 at 1/0.1 (mean return;
10/1 also best by mean rank), so 10/1 it is (benchmarks/RESULTS.md, "LPG agents").
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from metarl.rl.lpg.network import LPGInputs, LPGShape, LPGTargets, lpg_targets
from metarl.rl.networks import MLP, entropy

Targets = Callable[[LPGInputs, jax.Array, jax.Array], LPGTargets]


class AgentConfig(NamedTuple):
    """The agent an LPG (or the reference actor-critic) trains, and how it collects data."""

    num_envs: int = 16  # GROOVE: 64 env workers per agent
    rollout_len: int = 20  # GROOVE: 20
    hidden: tuple[int, ...] = ()  # () is linear: GROOVE's tabular agents
    optimizer: str = "sgd"  # sgd | adam
    actor_lr: float = 10.0  # tuned on training draws (module docstring); GROOVE: 40
    critic_lr: float = 1.0  # GROOVE: 4
    max_grad_norm: float = 0.5
    max_updates: int = 250  # the scan length; a task's lifetime is at most this
    eval_steps: int = 100  # steps of the final evaluation (at least the longest episode)
    # the LPG agent's loss
    target_coef: float = 0.5  # alpha_y: weight of KL(y_hat || y)
    # the reference actor-critic
    gamma: float = 0.99
    gae_lambda: float = 0.95
    entropy_coef: float = 0.01
    value_coef: float = 0.5


class AgentParams(NamedTuple):
    actor: Any  # obs -> action logits
    critic: Any  # obs -> y logits (LPG) or obs -> value (actor-critic)


class Rollout(NamedTuple):
    obs: jax.Array  # [T, B, obs]
    action: jax.Array  # [T, B]
    reward: jax.Array  # [T, B]
    done: jax.Array  # [T, B] the episode ended at this step
    next_obs: jax.Array  # [T, B, obs] (after an end: the next episode's first observation)


class AgentResult(NamedTuple):
    final_return: jax.Array  # mean over envs of one episode's return with the final policy
    positive_value_loss: jax.Array  # actor-critic only: mean max(GAE, 0) of its last 10%
    nonfinite: jax.Array  # the loss or the parameters went non-finite during the lifetime


def _flat(obs: jax.Array) -> jax.Array:
    return jnp.reshape(obs, (-1,)).astype(jnp.float32)


def _optimizer(config: AgentConfig, lr: float) -> optax.GradientTransformation:
    inner = optax.sgd(lr) if config.optimizer == "sgd" else optax.adam(lr)
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), inner)


def _networks(config: AgentConfig, num_actions: int, critic_out: int) -> tuple[MLP, MLP]:
    actor = MLP(config.hidden, num_actions, 0.01, "relu")
    critic = MLP(config.hidden, critic_out, 1.0, "relu")
    return actor, critic


def _log_pi(logits: jax.Array, action: jax.Array) -> jax.Array:
    log_p = jax.nn.log_softmax(logits)
    return jnp.take_along_axis(log_p, action[..., None], axis=-1)[..., 0]


def lpg_loss(
    params: AgentParams,
    actor: MLP,
    critic: MLP,
    rollout: Rollout,
    targets: LPGTargets,
    target_coef: float,
) -> jax.Array:
    """The agent's loss under LPG targets (held fixed: no gradient flows into them).

    Args:
        params: the agent's policy and y-network.
        actor: obs -> action logits.
        critic: obs -> logits of y.
        rollout: the transitions the targets were computed on.
        targets: pi_hat [T, B] and y_hat [T, B, m].
        target_coef: alpha_y, the weight of the prediction loss.

    Returns:
        -mean(pi_hat * log pi(a|s)) + alpha_y * mean(KL(y_hat || y(s))).
    """
    targets = jax.lax.stop_gradient(targets)
    log_pi = _log_pi(actor.apply(params.actor, rollout.obs), rollout.action)
    log_y = jax.nn.log_softmax(critic.apply(params.critic, rollout.obs))
    y_hat = targets.y_hat
    kl = jnp.sum(y_hat * (jnp.log(jnp.clip(y_hat, 1e-8)) - log_y), axis=-1)
    return -jnp.mean(targets.pi_hat * log_pi) + target_coef * jnp.mean(kl)


def lpg_inputs(params: AgentParams, actor: MLP, critic: MLP, rollout: Rollout) -> LPGInputs:
    """What the LPG network reads of a rollout under the agent's current networks."""
    probs = jnp.exp(_log_pi(actor.apply(params.actor, rollout.obs), rollout.action))
    y = jax.nn.softmax(critic.apply(params.critic, rollout.obs))
    y_next = jax.nn.softmax(critic.apply(params.critic, rollout.next_obs))
    return LPGInputs(rollout.reward, rollout.done, probs, y, y_next)


def gae(
    reward: jax.Array, value: jax.Array, next_value: jax.Array, done: jax.Array, config
) -> jax.Array:
    """Generalised advantage estimates over [T, B] arrays (no bootstrap across an end)."""
    not_done = 1.0 - done.astype(jnp.float32)
    delta = reward + config.gamma * next_value * not_done - value

    def backwards(carry, step):
        delta_t, not_done_t = step
        carry = delta_t + config.gamma * config.gae_lambda * not_done_t * carry
        return carry, carry

    _, advantages = jax.lax.scan(
        backwards, jnp.zeros_like(delta[0]), (delta, not_done), reverse=True
    )
    return advantages


def a2c_loss(
    params: AgentParams, actor: MLP, critic: MLP, rollout: Rollout, config: AgentConfig
) -> tuple[jax.Array, jax.Array]:
    """The actor-critic loss: -mean(A log pi) + c_v mean((V - (A + V))^2) - c_e mean(H).

    Returns:
        (the loss, the GAE advantages it used).
    """
    logits = actor.apply(params.actor, rollout.obs)
    value = critic.apply(params.critic, rollout.obs)[..., 0]
    next_value = critic.apply(params.critic, rollout.next_obs)[..., 0]
    advantages = jax.lax.stop_gradient(gae(rollout.reward, value, next_value, rollout.done, config))
    returns = advantages + jax.lax.stop_gradient(value)
    policy = -jnp.mean(advantages * _log_pi(logits, rollout.action))
    value_loss = jnp.mean(jnp.square(value - returns))
    bonus = jnp.mean(entropy(logits))
    return policy + config.value_coef * value_loss - config.entropy_coef * bonus, advantages


# -- the loop ---------------------------------------------------------------------------------


class _Runner(NamedTuple):
    params: AgentParams
    opt_actor: Any
    opt_critic: Any
    obs: jax.Array
    env_state: Any
    update: jax.Array
    nonfinite: jax.Array
    pvl_sum: jax.Array
    pvl_count: jax.Array


def _make_loop(
    config: AgentConfig,
    env,
    critic_out: int,
    update_fn: Callable,
) -> Callable:
    """The shared loop of both agents; `update_fn(params, rollout, update, lifetime, extra)
    -> (grads, positive value loss or 0)` is what differs."""
    num_actions = env.num_actions
    actor, critic = _networks(config, num_actions, critic_out)
    opt_actor = _optimizer(config, config.actor_lr)
    opt_critic = _optimizer(config, config.critic_lr)

    def collect(key, params, obs, env_state, env_params):
        def step(carry, key):
            obs, env_state = carry
            k_act, k_env = jax.random.split(key)
            logits = actor.apply(params.actor, obs)
            action = jax.random.categorical(k_act, logits)
            keys = jax.random.split(k_env, config.num_envs)
            next_obs, env_state, reward, terminated, truncated, _ = jax.vmap(
                env.step, in_axes=(0, 0, 0, None)
            )(keys, env_state, action, env_params)
            next_obs = jax.vmap(_flat)(next_obs)
            done = jnp.logical_or(terminated, truncated)
            transition = Rollout(obs, action, reward.astype(jnp.float32), done, next_obs)
            return (next_obs, env_state), transition

        keys = jax.random.split(key, config.rollout_len)
        (obs, env_state), rollout = jax.lax.scan(step, (obs, env_state), keys)
        return rollout, obs, env_state

    def evaluate(key, params, env_params):
        """One episode per env with the final policy: the mean of their returns."""
        k_reset, k_run = jax.random.split(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(k_reset, config.num_envs), env_params
        )
        obs = jax.vmap(_flat)(obs)

        def step(carry, key):
            obs, state, total, running = carry
            k_act, k_env = jax.random.split(key)
            action = jax.random.categorical(k_act, actor.apply(params.actor, obs))
            obs, state, reward, terminated, truncated, _ = jax.vmap(
                env.step, in_axes=(0, 0, 0, None)
            )(jax.random.split(k_env, config.num_envs), state, action, env_params)
            total = total + reward * running
            running = running * (1.0 - jnp.logical_or(terminated, truncated))
            return (jax.vmap(_flat)(obs), state, total, running), None

        zeros = jnp.zeros(config.num_envs)
        (_, _, total, _), _ = jax.lax.scan(
            step, (obs, state, zeros, zeros + 1.0), jax.random.split(k_run, config.eval_steps)
        )
        return jnp.mean(total)

    def train(rng, extra, env_params, lifetime) -> AgentResult:
        lifetime = jnp.asarray(lifetime, jnp.int32)
        k_actor, k_critic, k_reset, k_run, k_eval = jax.random.split(rng, 5)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(k_reset, config.num_envs), env_params
        )
        obs = jax.vmap(_flat)(obs)
        params = AgentParams(actor.init(k_actor, obs[0]), critic.init(k_critic, obs[0]))
        tail_start = lifetime - jnp.maximum(1, lifetime // 10)
        runner = _Runner(
            params,
            opt_actor.init(params.actor),
            opt_critic.init(params.critic),
            obs,
            env_state,
            jnp.int32(0),
            jnp.bool_(False),
            jnp.float32(0.0),
            jnp.float32(0.0),
        )

        def update(runner: _Runner, key) -> tuple[_Runner, None]:
            rollout, obs, env_state = collect(
                key, runner.params, runner.obs, runner.env_state, env_params
            )
            grads, pvl = update_fn(runner.params, rollout, runner.update, lifetime, extra)
            step_a, opt_a = opt_actor.update(grads.actor, runner.opt_actor, runner.params.actor)
            step_c, opt_c = opt_critic.update(grads.critic, runner.opt_critic, runner.params.critic)
            new = AgentParams(
                optax.apply_updates(runner.params.actor, step_a),
                optax.apply_updates(runner.params.critic, step_c),
            )
            finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(new)]))
            learning = runner.update < lifetime
            keep = lambda a, b: jax.tree.map(lambda x, y: jnp.where(learning, x, y), a, b)  # noqa: E731
            in_tail = learning & (runner.update >= tail_start)
            runner = _Runner(
                keep(new, runner.params),
                keep(opt_a, runner.opt_actor),
                keep(opt_c, runner.opt_critic),
                obs,
                env_state,
                runner.update + 1,
                runner.nonfinite | (learning & ~finite),
                runner.pvl_sum + jnp.where(in_tail, pvl, 0.0),
                runner.pvl_count + in_tail,
            )
            return runner, None

        runner, _ = jax.lax.scan(update, runner, jax.random.split(k_run, config.max_updates))
        final = evaluate(k_eval, runner.params, env_params)
        pvl = runner.pvl_sum / jnp.maximum(runner.pvl_count, 1.0)
        return AgentResult(jnp.where(runner.nonfinite, jnp.nan, final), pvl, runner.nonfinite)

    return train, actor, critic


def make_lpg_train(config: AgentConfig, shape: LPGShape, env) -> Callable:
    """`train(rng, lpg_params, env_params, lifetime) -> AgentResult`: an agent trained by LPG.

    Args:
        config: the agent and its data collection.
        shape: the LPG network's sizes.
        env: a gymnax environment with discrete actions (`env_params` is its level).

    Returns:
        The pure training function; jit and vmap it as needed.
    """

    def update_fn(params, rollout, update, lifetime, lpg_params):
        inputs = lpg_inputs(params, actor, critic, rollout)
        progress = update.astype(jnp.float32) / jnp.maximum(lifetime, 1)
        targets = lpg_targets(lpg_params, shape, inputs, progress, lifetime)
        grads = jax.grad(lpg_loss)(params, actor, critic, rollout, targets, config.target_coef)
        return grads, jnp.float32(0.0)

    train, actor, critic = _make_loop(config, env, shape.target_width, update_fn)
    return train


def make_a2c_train(config: AgentConfig, env) -> Callable:
    """`train(rng, env_params, lifetime) -> AgentResult`: the reference actor-critic (same
    agent, loop and budget as `make_lpg_train`; its `positive_value_loss` is PLR's score)."""

    def update_fn(params, rollout, update, lifetime, _):
        grads, advantages = jax.grad(a2c_loss, has_aux=True)(params, actor, critic, rollout, config)
        return grads, jnp.mean(jnp.maximum(advantages, 0.0))

    loop, actor, critic = _make_loop(config, env, 1, update_fn)

    def train(rng, env_params, lifetime) -> AgentResult:
        return loop(rng, None, env_params, lifetime)

    return train


def agent_networks(config: AgentConfig, num_actions: int, critic_out: int) -> tuple[MLP, MLP]:
    """The agent's (actor, critic) modules, for tests and tools that inspect an update."""
    return _networks(config, num_actions, critic_out)


def lifetime_from_seed(seed: int, lifetimes: tuple[int, int]) -> int:
    """A level's lifetime (agent updates), log-uniform in `lifetimes` and fixed by its seed.

    A task is a (level, lifetime) pair (TA-LPG); both come from the level's seed, so a level
    replayed by a curriculum is the same task.

    Args:
        seed: the level's seed.
        lifetimes: (shortest, longest), inclusive.

    Returns:
        The lifetime.
    """
    low, high = lifetimes
    if low == high:
        return int(low)
    u = jax.random.uniform(jax.random.fold_in(jax.random.PRNGKey(seed), 1))
    return int(round(float(jnp.exp(jnp.log(low) + u * (jnp.log(high) - jnp.log(low))))))


def agent_config_for(
    env_name: str, max_updates: int, num_envs: int = 16, eval_steps: int | None = None
) -> AgentConfig:
    """The agent an LPG trains on `env_name` (GROOVE's agents): linear with SGD (actor 10,
    critic 1; see the module docstring) on grid levels, one hidden layer of 32 with Adam 1e-3
    elsewhere.

    Args:
        env_name: the environment (a grid level name or a gymnax name).
        max_updates: the scan length (the longest lifetime it will be given).
        num_envs: parallel environments per agent.
        eval_steps: steps of the final evaluation; None: 1000.

    Returns:
        The agent configuration.
    """
    steps = eval_steps or 1000
    if env_name.startswith("Grid-"):
        return AgentConfig(num_envs=num_envs, max_updates=max_updates, eval_steps=steps)
    return AgentConfig(
        num_envs=num_envs,
        hidden=(32,),
        optimizer="adam",
        actor_lr=1e-3,
        critic_lr=1e-3,
        max_updates=max_updates,
        eval_steps=steps,
    )


def make_random_return(config: AgentConfig, env) -> Callable:
    """`random_return(rng, env_params) -> mean return` of the uniform policy: one episode per
    env over `config.eval_steps` steps (the 0 of normalised scores)."""

    def random_return(rng, env_params):
        k_reset, k_run = jax.random.split(rng)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(k_reset, config.num_envs), env_params
        )

        def step(carry, key):
            state, total, running = carry
            k_act, k_env = jax.random.split(key)
            action = jax.random.randint(k_act, (config.num_envs,), 0, env.num_actions)
            _, state, reward, terminated, truncated, _ = jax.vmap(
                env.step, in_axes=(0, 0, 0, None)
            )(jax.random.split(k_env, config.num_envs), state, action, env_params)
            total = total + reward * running
            running = running * (1.0 - jnp.logical_or(terminated, truncated))
            return (state, total, running), None

        zeros = jnp.zeros(config.num_envs)
        (_, total, _), _ = jax.lax.scan(
            step, (state, zeros, zeros + 1.0), jax.random.split(k_run, config.eval_steps)
        )
        return jnp.mean(total)

    return random_return
