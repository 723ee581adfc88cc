"""Meta-RL in the JAX rl layer: MAML (maml.py), RL² (rl2.py), their shared outer loop
(rl/meta/loop.py), the task families (rl/meta/tasks.py), names and configs, and PPO from scratch.

The seed notebook these replace had two bugs the tests here must catch: MAML's support and
query sets were the pre-update policy's own actions (the meta-loss was exactly 0 every epoch),
and its "RL²" trained one policy per environment and reset the memory every episode. Besides
the mechanics, two qualitative results are checked at a small budget: RL² adapts within a
trial where a memoryless policy cannot (Duan et al. 2016; Wang et al. 2016), and MAML's
return after one inner step beats a jointly pretrained policy's (Finn et al. 2017).

Every number is deterministic (fixed PRNG keys); the thresholds sit well inside the values
observed for those keys (recorded next to each), and far from chance.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from metarl.rl.components import Components
from metarl.rl.configs import MAML_SETTINGS, META_CONFIGS, default_config
from metarl.rl.meta import maml, rl2
from metarl.rl.meta.envs import family_of, make_meta_env_trainer, maml_settings
from metarl.rl.meta.loop import ROLE_SALTS, MetaLearner, MetaStats, make_meta_trainer
from metarl.rl.meta.names import UnknownMetaEnv, parse_meta
from metarl.rl.meta.tasks import FAMILIES, BanditTask, TaskFamily, TwoArmedBandit, sample_tasks
from metarl.rl.networks import log_prob
from metarl.rl.ppo import learning_rate_schedule
from metarl.rl.scratch import ScratchSettings, scratch_curve
from metarl.rl.training import run_training, seed_keys

BANDIT = FAMILIES["bandit-tasks"]
POINT = FAMILIES["point-tasks"]
SEEDS = [0, 1, 2]
RL2_BANDIT = "Meta-rl2/bandit-tasks/validation"
MAML_BANDIT = "Meta-maml/bandit-tasks/validation"
# small budgets that still show the qualitative results (RL²: 78 updates; MAML: 97)
RL2_CONFIG = default_config(RL2_BANDIT).replace(total_timesteps=50_000)
MAML_CONFIG = default_config(MAML_BANDIT).replace(total_timesteps=50_000)
SGD = Components(make_optimizer=lambda learning_rate, config: optax.sgd(learning_rate))
LATER = slice(5, 10)  # pulls 5..9 of a 10-pull trial


def _leaves_equal(a, b) -> bool:
    return all(bool(jnp.array_equal(x, y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _maml_policy(config=MAML_CONFIG, family=BANDIT, seed=0):
    network = maml.policy_network(config, family)
    params = network.init(jax.random.PRNGKey(seed), jnp.zeros((family.obs_size,), jnp.float32))
    return network, params


def _fixed_bandit(probs) -> TaskFamily:
    """A family with a single task: arm probabilities `probs`."""
    task = BanditTask(probs=jnp.asarray(probs, jnp.float32))
    return TaskFamily("fixed-bandit", TwoArmedBandit(), lambda key: task, 1, 10, "one bandit")


def _meta_loss_fn(network, family, settings, rule, tasks, gamma):
    """The meta-loss the way MAML defines it: the mean over tasks of the REINFORCE loss of the
    adapted parameters on query rollouts of the adapted policy."""

    def task_loss(params, key, task):
        key_inner, key_query = jax.random.split(key)
        adapted, _ = maml.adapt(network, params, family, key_inner, task, settings, rule, gamma)
        query = maml.rollouts(network, adapted, family, key_query, task, settings.episodes)
        return maml.reinforce_loss(network, adapted, query, gamma)

    def meta_loss(params, key):
        keys = jax.random.split(key, jax.tree.leaves(tasks)[0].shape[0])
        return jax.vmap(lambda k, t: task_loss(params, k, t))(keys, tasks).mean()

    return meta_loss


# ---------------------------------------------------------------------------------------- MAML


@pytest.fixture(scope="module")
def meta_gradients():
    """The bandit meta-loss and its gradients, second and first order (SGD inner rule, step
    0.1), on 16 tasks, plus FO-MAML by definition: the mean over tasks of the query loss's
    gradient taken at the adapted parameters (the same keys)."""
    network, params = _maml_policy()
    tasks = sample_tasks(BANDIT, jax.random.PRNGKey(1), 16)
    gamma, rule, key = MAML_CONFIG.gamma, optax.sgd(0.1), jax.random.PRNGKey(2)
    second = maml_settings("bandit-tasks", first_order=False)
    first = second._replace(first_order=True)

    @jax.jit
    def compute(params):
        loss_second, grad_second = jax.value_and_grad(
            _meta_loss_fn(network, BANDIT, second, rule, tasks, gamma)
        )(params, key)
        loss_first, grad_first = jax.value_and_grad(
            _meta_loss_fn(network, BANDIT, first, rule, tasks, gamma)
        )(params, key)

        def at_adapted(k, task):
            key_inner, key_query = jax.random.split(k)
            adapted, _ = maml.adapt(network, params, BANDIT, key_inner, task, first, rule, gamma)
            query = maml.rollouts(network, adapted, BANDIT, key_query, task, first.episodes)
            return jax.grad(maml.reinforce_loss, argnums=1)(network, adapted, query, gamma)

        per_task = jax.vmap(at_adapted)(jax.random.split(key, 16), tasks)
        definition = jax.tree.map(lambda g: g.mean(axis=0), per_task)
        return {
            "second": (loss_second, grad_second),
            "first": (loss_first, grad_first),
            "definition": definition,
        }

    return compute(params)


@pytest.mark.parametrize("order", ["second", "first"])
def test_maml_meta_loss_and_meta_gradient_are_not_zero(meta_gradients, order):
    # The seed notebook's meta-loss was exactly 0 (its query set was the pre-update policy's
    # actions). Observed: loss -0.041 (both orders), gradient norm 0.404 (second order) and
    # 0.401 (first order).
    loss, grads = meta_gradients[order]
    assert abs(float(loss)) > 0.01
    assert float(optax.tree.norm(grads)) > 0.1


def test_maml_second_order_differs_from_first_order_which_is_the_query_gradient_at_theta_k(
    meta_gradients,
):
    (_, grad_second), (_, grad_first) = meta_gradients["second"], meta_gradients["first"]
    definition = meta_gradients["definition"]
    difference = jax.tree.map(lambda a, b: a - b, grad_second, grad_first)
    # observed: |second - first| = 0.0249 against |first| = 0.401
    assert float(optax.tree.norm(difference)) > 0.005
    error = jax.tree.map(lambda a, b: a - b, grad_first, definition)
    assert float(optax.tree.norm(error)) < 1e-5 * float(optax.tree.norm(definition))


def test_the_suites_maml_update_reports_a_non_zero_meta_loss_and_moves_the_initialisation():
    # the suite's learner (first order, the default Adam inner rule) on fresh bandit tasks
    settings = maml_settings("bandit-tasks")
    learner = maml.make_maml_learner(
        MAML_CONFIG, Components(), BANDIT, settings, learning_rate_schedule(MAML_CONFIG)
    )
    params, opt_state = learner.init(jax.random.PRNGKey(0))
    new_params, _, stats = jax.jit(learner.update)(params, opt_state, jax.random.PRNGKey(3))
    assert abs(float(stats.loss)) > 0.05  # observed -0.275
    assert not _leaves_equal(new_params, params)


def test_maml_query_rollouts_come_from_the_adapted_policy():
    # One task, arm 0 always pays and arm 1 never does, and a large SGD inner step: the adapted
    # policy all but always pulls arm 0 (observed p = 0.9994), the initial one is uniform.
    family = _fixed_bandit([1.0, 0.0])
    network, params = _maml_policy(family=family)
    settings = maml_settings("bandit-tasks", inner_lr=3.0)
    task = family.sample_task(jax.random.PRNGKey(0))
    gamma = MAML_CONFIG.gamma

    @jax.jit
    def arm0_shares(params):
        adapted, _ = maml.adapt(
            network, params, family, jax.random.PRNGKey(3), task, settings, optax.sgd(3.0), gamma
        )
        before = maml.rollouts(network, params, family, jax.random.PRNGKey(4), task, 200)
        after = maml.rollouts(network, adapted, family, jax.random.PRNGKey(4), task, 200)
        return (before.action == 0).mean(), (after.action == 0).mean()

    before, after = arm0_shares(params)
    assert 0.4 < float(before) < 0.65  # observed 0.56 (200 pulls of a uniform policy)
    assert float(after) >= 0.95  # observed 1.0

    # the learner's own curve and update: their query returns (the share of arm-0 pulls on this
    # task) are the adapted policy's, not the initial policy's ~0.5
    learner = maml.make_maml_learner(
        MAML_CONFIG, SGD, family, settings, learning_rate_schedule(MAML_CONFIG)
    )
    curve = jax.jit(learner.curve)(params, jax.random.PRNGKey(5))
    assert 0.4 < float(curve[0]) < 0.6 and float(curve[1]) >= 0.95
    _, opt_state = learner.init(jax.random.PRNGKey(0))
    _, _, stats = jax.jit(learner.update)(params, opt_state, jax.random.PRNGKey(6))
    assert float(stats.episode_return) >= 0.95  # observed 1.0 (curve: 0.509 -> 1.0)
    # what a query set of the pre-update policy gives (the seed notebook's bug): ~0.5
    unadapted = maml.make_maml_learner(
        MAML_CONFIG, SGD, family, settings, learning_rate_schedule(MAML_CONFIG), pretrained=True
    )
    _, _, stats = jax.jit(unadapted.update)(params, opt_state, jax.random.PRNGKey(6))
    assert float(stats.episode_return) < 0.7  # observed 0.531


@pytest.mark.parametrize(
    "rule",
    [optax.sgd(0.0), Components().make_optimizer(lambda count: jnp.float32(0.0), MAML_CONFIG)],
    ids=["sgd", "adam"],
)
def test_maml_with_a_zero_inner_step_size_leaves_the_parameters_exactly_unchanged(rule):
    network, params = _maml_policy()
    settings = maml_settings("bandit-tasks", inner_lr=0.0, inner_steps=2)
    task = BANDIT.sample_task(jax.random.PRNGKey(1))
    adapted, returns = jax.jit(
        lambda p: maml.adapt(
            network, p, BANDIT, jax.random.PRNGKey(2), task, settings, rule, MAML_CONFIG.gamma
        )
    )(params)
    assert returns.shape == (2,)
    assert _leaves_equal(adapted, params)


# ----------------------------------------------------------------------------------------- RL²


def _rl2_setup(family: TaskFamily, seed: int = 0):
    config = default_config(f"Meta-rl2/{family.name}/train")
    network = rl2.RL2Network(family.num_actions, family.obs_size, config.hidden_size)
    params = network.init(
        jax.random.PRNGKey(seed),
        jnp.zeros((config.hidden_size,), jnp.float32),
        jnp.zeros((rl2.input_size(family),), jnp.float32),
    )
    return config, network, params


def test_rl2_memory_is_carried_across_the_episodes_of_a_trial_and_starts_at_zero_in_each():
    # point-tasks: 3 episodes of 20 steps, so the episode boundaries are inside the trial
    config, network, params = _rl2_setup(POINT)
    horizon, obs_size, actions = POINT.horizon, POINT.obs_size, POINT.num_actions
    tasks = sample_tasks(POINT, jax.random.PRNGKey(6), 4)

    @jax.jit
    def compute(params):
        keys = jax.random.split(jax.random.PRNGKey(5), 4)
        batch = jax.vmap(lambda k, t: rl2.run_trial(network, params, POINT, k, t))(keys, tasks)
        trial = jax.tree.map(lambda x: x[0], batch)
        next_hidden = jax.vmap(lambda h, x: network.apply(params, h, x)[0])(
            trial.hidden[:-1], trial.inputs[:-1]
        )
        logits, values = rl2.replay(network, params, trial.inputs)

        def value_from(h):  # replay's loop from another start
            def step(h, x):
                h, _, value = network.apply(params, h, x)
                return h, value

            return jax.lax.scan(step, h, trial.inputs)[1]

        advantages, targets = jax.vmap(lambda t: rl2.trial_gae(t, config.gamma, config.gae_lambda))(
            batch
        )
        _, parts = rl2.rl2_loss(network, params, batch, advantages, targets, Components(), config)
        return {
            "batch": batch,
            "trial": trial,
            "next_hidden": next_hidden,
            "replay_log_prob": log_prob(logits, trial.action),
            "replay_value": values,
            "value_from_half": value_from(jnp.full((config.hidden_size,), 0.5, jnp.float32)),
            "loss_parts": parts,
            "value_loss": 0.5 * jnp.mean(jnp.square(batch.value - targets)),
        }

    out = compute(params)
    batch, trial = out["batch"], out["trial"]
    assert trial.inputs.shape == (POINT.trial_length, rl2.input_size(POINT))

    # every trial starts from h = 0; the first steps of episodes 2 and 3 do not (observed
    # max |h| 0.24): the memory is not reset at an episode's end
    assert float(jnp.abs(batch.hidden[:, 0]).max()) == 0.0
    assert float(jnp.abs(trial.hidden[horizon]).max()) > 0.05
    assert float(jnp.abs(trial.hidden[2 * horizon]).max()) > 0.05
    # each step starts from the state the previous one left, episode boundaries included
    np.testing.assert_allclose(out["next_hidden"], trial.hidden[1:], atol=1e-6)

    # input_t = (obs_t, one_hot(a_{t-1}), r_{t-1}, episode_ended_{t-1}); zeros before step 0
    np.testing.assert_array_equal(np.asarray(trial.inputs[0, obs_size:]), 0.0)
    np.testing.assert_array_equal(
        trial.inputs[1:, obs_size : obs_size + actions],
        jax.nn.one_hot(trial.action[:-1], actions),
    )
    np.testing.assert_array_equal(trial.inputs[1:, -2], trial.reward[:-1])
    np.testing.assert_array_equal(trial.inputs[1:, -1], trial.episode_end[:-1])
    ends = np.flatnonzero(np.asarray(trial.episode_end))
    np.testing.assert_array_equal(ends, np.arange(1, POINT.episodes + 1) * horizon - 1)
    # a new episode starts at the origin (the task, and the memory, stay)
    np.testing.assert_array_equal(trial.inputs[horizon, :obs_size], 0.0)
    assert float(jnp.abs(trial.inputs[horizon - 1, :obs_size]).max()) > 0.0

    # training re-runs the GRU from h = 0 on each whole trial: replay reproduces the rollout's
    # log-probabilities and values (observed: exactly), a non-zero start does not (observed
    # value error 0.16), and the loss's replay finds the ratio 1 and the rollout's values
    np.testing.assert_allclose(out["replay_log_prob"], trial.log_prob, atol=1e-5)
    np.testing.assert_allclose(out["replay_value"], trial.value, atol=1e-5)
    assert float(jnp.abs(out["value_from_half"] - trial.value).max()) > 1e-2
    assert abs(float(out["loss_parts"].min_drift)) < 1e-6  # drift 0 everywhere: ratio 1
    np.testing.assert_allclose(float(out["loss_parts"].value), float(out["value_loss"]), rtol=1e-5)


def test_rl2_bandit_trials_record_pulls_rewards_and_episode_ends_in_the_next_input():
    _, network, params = _rl2_setup(BANDIT)
    task = BanditTask(probs=jnp.asarray([0.9, 0.1], jnp.float32))
    trial = jax.jit(lambda p: rl2.run_trial(network, p, BANDIT, jax.random.PRNGKey(1), task))(
        params
    )
    # every pull ends an episode; the memory still runs through the whole trial
    np.testing.assert_array_equal(trial.episode_end, 1.0)
    assert float(jnp.abs(trial.hidden[0]).max()) == 0.0
    assert float(jnp.abs(trial.hidden[1]).max()) > 0.05
    np.testing.assert_array_equal(trial.inputs[1:, 1:3], jax.nn.one_hot(trial.action[:-1], 2))
    np.testing.assert_array_equal(trial.inputs[1:, 3], trial.reward[:-1])
    np.testing.assert_array_equal(trial.inputs[1:, 4], 1.0)
    np.testing.assert_array_equal(rl2.episode_returns(trial, BANDIT), trial.reward)


@pytest.fixture(scope="module")
def rl2_runs():
    """RL² and the memoryless baseline on bandit-tasks, the same seeds and held-out tasks."""
    with_memory = run_training(RL2_CONFIG, Components(), SEEDS)
    trainer = make_meta_env_trainer(RL2_CONFIG, Components(), None, memory=False)
    train = jax.jit(jax.vmap(lambda k: trainer.segment(trainer.init(k), RL2_CONFIG.num_updates)[1]))
    memoryless = np.asarray(train(seed_keys(SEEDS)).adaptation, np.float64)
    return with_memory, memoryless


def test_rl2_adapts_within_a_trial_where_a_memoryless_policy_cannot(rl2_runs):
    run, memoryless = rl2_runs
    assert run.nonfinite_update is None
    curves = np.asarray(run.adaptation, np.float64)  # [seeds, pulls]
    assert curves.shape == memoryless.shape == (len(SEEDS), BANDIT.episodes)
    later, first = curves[:, LATER].mean(axis=1), curves[:, 0]
    base_later = memoryless[:, LATER].mean(axis=1)
    # observed per seed: later pulls 0.703 0.766 0.641, first pull 0.438 0.547 0.516,
    # memoryless later pulls 0.512 0.488 0.466
    assert later.mean() - first.mean() > 0.1  # observed 0.20
    assert later.mean() - base_later.mean() > 0.1  # observed 0.21
    assert np.all(later - base_later > 0.08)  # observed >= 0.175
    # a policy without memory sees a constant observation: chance on every pull, flat
    # (observed: later 0.489, first five 0.515; 960 pulls each, so 0.016 is one std)
    assert abs(base_later.mean() - 0.5) < 0.06
    assert abs(base_later.mean() - memoryless[:, :5].mean()) < 0.08


# ------------------------------------------------------------------------------ MAML vs pretrained


def test_maml_after_one_inner_step_beats_a_jointly_pretrained_policy_after_one_step():
    # Finn et al. 2017's comparison, with the suite's MAML (first order, the default Adam inner
    # rule) and the same inner rule for the pretrained policy. Observed after one step:
    # MAML 0.718 0.760 0.686; pretrained 0.478 0.463 0.511 (it collapses onto one arm, which a
    # symmetric task distribution does not penalise); untrained 0.639 0.669 0.623.
    run = run_training(MAML_CONFIG, Components(), SEEDS)
    assert run.nonfinite_update is None
    maml_after = np.asarray(run.adaptation, np.float64)[:, 1]

    family = family_of(MAML_BANDIT)
    learner = maml.make_maml_learner(
        MAML_CONFIG,
        Components(),
        family,
        maml_settings(family.name),
        learning_rate_schedule(MAML_CONFIG),
        pretrained=True,
    )
    trainer = make_meta_trainer(MAML_CONFIG, learner, parse_meta(MAML_BANDIT).role)
    curves = jax.jit(
        jax.vmap(lambda k, stop: trainer.segment(trainer.init(k), stop)[1].adaptation, (0, None))
    )
    pretrained_after = np.asarray(curves(seed_keys(SEEDS), MAML_CONFIG.num_updates))[:, 1]
    untrained_after = np.asarray(curves(seed_keys(SEEDS), 0))[:, 1]

    assert maml_after.mean() - pretrained_after.mean() > 0.15  # observed 0.24
    assert np.all(maml_after - pretrained_after > 0.1)  # observed >= 0.175
    # and MAML's initialisation adapts better than the untrained one it started from
    assert maml_after.mean() - untrained_after.mean() > 0.03  # observed 0.078


# ---------------------------------------------------------------- reproducibility and integrity


@pytest.mark.slow  # a second full compile of the same trainer (~11 s)
def test_the_same_seed_gives_bit_identical_adaptation_curves_and_the_score_is_their_mean(
    rl2_runs,
):
    first, _ = rl2_runs
    again = run_training(RL2_CONFIG, Components(), SEEDS)
    assert again.adaptation == first.adaptation
    assert again.final_returns == first.final_returns
    for score, curve in zip(first.final_returns, first.adaptation):
        assert score == pytest.approx(float(np.mean(curve)), abs=1e-6)
    # the seeds' held-out curves are not all one curve
    assert len({tuple(curve) for curve in first.adaptation}) == len(SEEDS)


@pytest.mark.slow  # another full compile of the same trainer, without the reference (~11 s)
def test_a_candidates_program_without_the_scratch_reference_trains_the_same_bits(rl2_runs):
    """The cascade leaves the from-scratch reference out of candidates' programs (it is the
    baseline's, the same seeds and tasks): that must change nothing else."""
    first, _ = rl2_runs
    trainer = make_meta_env_trainer(RL2_CONFIG, Components(), None, scratch=False)
    train = jax.jit(jax.vmap(lambda k: trainer.segment(trainer.init(k), RL2_CONFIG.num_updates)[1]))
    result = train(seed_keys(SEEDS))
    assert result.scratch is None and first.scratch  # left out, where the baseline has it
    assert np.asarray(result.adaptation, np.float64).tolist() == first.adaptation
    assert np.asarray(result.final_return, np.float64).tolist() == first.final_returns


def test_each_role_measures_adaptation_on_its_own_held_out_tasks():
    family = family_of(RL2_BANDIT)
    config = RL2_CONFIG
    learner = rl2.make_rl2_learner(
        config, Components(), family, learning_rate_schedule(config), eval_tasks=64
    )
    key = jax.random.PRNGKey(0)
    runners = {role: make_meta_trainer(config, learner, role).init(key) for role in ROLE_SALTS}
    # the same seed initialises the same parameters whatever the role...
    assert _leaves_equal(runners["train"].params, runners["test"].params)
    # ...but each role draws different held-out tasks from its own key
    tasks = {
        role: np.asarray(sample_tasks(family, jax.random.split(r.eval_key)[0], 64).probs)
        for role, r in runners.items()
    }
    curve = jax.jit(learner.curve)
    curves = {role: np.asarray(curve(r.params, r.eval_key)) for role, r in runners.items()}
    roles = list(ROLE_SALTS)
    for i, a in enumerate(roles):
        for b in roles[i + 1 :]:
            assert not np.array_equal(tasks[a], tasks[b])
            assert not np.array_equal(curves[a], curves[b])
    # and the same role's tasks again from the same seed
    again = make_meta_trainer(config, learner, "validation").init(key)
    assert bool(jnp.array_equal(again.eval_key, runners["validation"].eval_key))


def _key_recording_learner(updates: int) -> MetaLearner:
    """A stub learner whose parameters record the key each meta-update was handed."""

    def init(key):
        return jnp.zeros((updates, 2), jnp.uint32), jnp.asarray(0, jnp.int32)

    def update(params, count, key):
        zero = jnp.float32(0.0)
        stats = MetaStats(zero, jnp.float32(1.0), zero, zero, zero, zero, jnp.float32(jnp.inf))
        return params.at[count].set(jax.random.key_data(key)), count + 1, stats

    def curve(params, key):
        return jnp.zeros((2,), jnp.float32)

    return MetaLearner(
        init=init, update=update, curve=curve, reference=lambda key: jnp.zeros((2,), jnp.float32)
    )


@pytest.mark.parametrize("role", ["train", "validation", "test"])
def test_the_held_out_key_is_none_of_the_keys_the_meta_updates_train_on(role):
    # learners derive an update's tasks from its key the way the curve derives the held-out
    # tasks from the role's key (split, then the first half), so an equal key means the
    # "held-out" tasks are tasks trained on
    config = RL2_CONFIG.replace(total_timesteps=8 * RL2_CONFIG.batch_size, num_log_points=2)
    trainer = make_meta_trainer(config, _key_recording_learner(config.num_updates), role)
    runner, _ = jax.jit(lambda key: trainer.segment(trainer.init(key), config.num_updates))(
        jax.random.PRNGKey(0)
    )
    update_keys = {tuple(int(v) for v in row) for row in np.asarray(runner.params)}
    assert len(update_keys) == config.num_updates
    eval_key = tuple(int(v) for v in np.asarray(jax.random.key_data(runner.eval_key)))
    assert eval_key not in update_keys


# -------------------------------------------------------------------------------------- configs


def test_every_meta_config_has_the_steps_its_family_and_method_need():
    assert set(MAML_SETTINGS) == set(FAMILIES)
    assert {family for _, family in META_CONFIGS} == set(FAMILIES)
    for method, family_name in META_CONFIGS:
        family = FAMILIES[family_name]
        config = default_config(f"Meta-{method}/{family_name}/train")
        if method == "rl2":
            assert config.num_steps == family.trial_length
            assert config.num_envs % config.num_minibatches == 0
        else:
            settings = maml_settings(family_name)
            expected = (settings.inner_steps + 1) * settings.episodes * family.horizon
            assert config.num_steps == expected
        assert config.num_updates >= 1
        make_meta_env_trainer(config)  # builds without complaint


@pytest.mark.parametrize(
    "name",
    [
        "",
        "rl2/bandit-tasks/train",
        "Meta-",
        "Meta-rl2",
        "Meta-rl2/bandit-tasks",
        "Meta-rl2/bandit-tasks/train/extra",
        "Meta-ppo/bandit-tasks/train",
        "Meta-rl2/bandit-tasks/dev",
        "Meta-RL2/bandit-tasks/train",
    ],
)
def test_malformed_meta_names_are_rejected(name):
    with pytest.raises(UnknownMetaEnv):
        parse_meta(name)


def test_a_well_formed_name_parses_and_an_unknown_family_is_rejected():
    meta = parse_meta("Meta-maml/point-tasks/test")
    assert (meta.method, meta.family, meta.role) == ("maml", "point-tasks", "test")
    assert meta.name == "Meta-maml/point-tasks/test"
    with pytest.raises(UnknownMetaEnv):
        family_of("Meta-rl2/no-such-tasks/train")


# -------------------------------------------------------------------------------------- scratch


def test_scratch_curve_has_a_point_per_round_and_is_reproducible_from_its_key():
    config = default_config(RL2_BANDIT)
    settings = ScratchSettings(rounds=5, episodes=8)
    task = BANDIT.sample_task(jax.random.PRNGKey(1))
    curve = jax.jit(lambda key: scratch_curve(config, BANDIT, settings, key, task))
    a, b, other = (
        curve(jax.random.PRNGKey(0)),
        curve(jax.random.PRNGKey(0)),
        curve(jax.random.PRNGKey(7)),
    )
    assert a.shape == (settings.rounds,)
    assert np.all(np.isfinite(np.asarray(a)))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(np.asarray(a), np.asarray(other))


# --------------------------------------------------------------------------- broken components


def _nan_optimizer(learning_rate, config) -> optax.GradientTransformation:
    def update(grads, state, params=None):
        return jax.tree.map(lambda g: jnp.full_like(g, jnp.nan), grads), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


@pytest.mark.parametrize("name", ["Meta-rl2/bandit-tasks/train", "Meta-maml/bandit-tasks/train"])
def test_an_optimizer_that_returns_nan_is_a_non_finite_update_and_scores_nan(name):
    config = default_config(name)
    config = config.replace(total_timesteps=2 * config.batch_size, num_log_points=2)
    # RL²: the outer PPO's optimizer; MAML: the inner rule. A policy with NaN logits still
    # pulls arms (~0.49 on a bandit): its score must be NaN, never that number.
    run = run_training(config, Components(make_optimizer=_nan_optimizer), [0])
    assert run.nonfinite_update == 0
    assert run.nonfinite_seed_index == 0
    assert np.isnan(run.final_returns[0])
    assert run.adaptation == [[None] * len(run.adaptation[0])]
