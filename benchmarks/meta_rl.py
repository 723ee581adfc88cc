"""Meta-RL adaptation curves on held-out tasks: RL² and MAML against the baselines their papers
read them against.

Why: a meta-RL suite scores a candidate by the area under its adaptation curve on test-role
tasks (rl/meta/loop.py). That number means something only if the learners behind it show what
their papers showed: RL² (Duan et al. 2016) gets better over the episodes of a trial and beats a
policy without memory; MAML (Finn et al. 2017) does better after one inner step than a policy
jointly trained on all tasks and then given the same step ("pretrained"). This prints, per task
family, the test-role curves over training seeds of:

- RL²: `make_rl2_learner(memory=True)`, PPO-clip + Adam, `Meta-rl2/<family>/test` config;
- memoryless: the same trainer with `memory=False` (cannot adapt: the RL² paper's baseline);
- MAML: canonical (second order, inner rule SGD at `SGD_INNER_LR`), `Meta-maml/...` config;
- FO-MAML (Adam inner): the suites' default (first order, Adam at MAML_SETTINGS' inner_lr),
  what `--suite <family>@maml` scores;
- pretrained: `make_maml_learner(pretrained=True)` with MAML's inner rule (SGD);
- PPO from scratch with the same experience (scratch.py), on RL²'s x-axis (one episode per
  round) and on MAML's (inner steps + 1 rounds of the settings' episodes);
- random: the uniform policy's episode return (flat); best fixed action: the best policy that
  ignores everything (point-tasks: "stay" at the origin earns -20 E|goal| = -7.65, so a curve
  at -7.6 is not yet adaptation).

All learners of one seed are scored on the same `--eval-tasks` test tasks (256 by default: the
suites' 64 leave a bandit's first pull with a standard error of 0.06 per seed; training does not
depend on it); the curve key is fold_in(seed key, test salt) everywhere. The checks print
paired differences over seeds with a ±2·SE interval, "noise" when it covers 0. With 3 seeds
that interval is only ~82% (t with 2 df): a "holds" by a small margin is a smoke test, not a
p-value. The progress lines give each run's policy entropy over its last logged chunk of
meta-training (MAML: the adapted policy's, on its query rollouts; pretrained: its own).

SGD inner step: Finn et al. used 0.1 (vanilla PG, unnormalised advantages, 2x100 net); with
this REINFORCE loss (advantages normalised, 1x32 net) SGD at 0.1 barely moves the logits (the
suites' 0.1 is for Adam, whose first step moves every weight by ~0.1). It was picked on
TRAIN-role tasks only: `python benchmarks/meta_rl.py --tune-inner-lr 0.1,0.5,1,2,4,8 --eval-tasks
64` trains second-order SGD MAML at each step size (3 seeds, default scale) and prints the
train-role area; the largest mean area was taken: 1.0 on bandit-tasks, 2.0 on point-tasks
(10-20x the suites' Adam step; at 0.1 MAML gains 0.2 on point-tasks' first step, at 2.0 3.9;
the areas are in SGD_INNER_LR's comments).

CPU scale (the defaults): the suites' configs unchanged (configs.META_CONFIGS: bandit-tasks
2e5 env steps per run, point-tasks 4e5; MAML 1 inner step), 3 seeds vmapped in one program,
256 held-out tasks per curve. `--timesteps-scale 0.25` for a quick look.

    python benchmarks/meta_rl.py                          # 3-8 min on 2 cores (load)
    python benchmarks/meta_rl.py --families bandit-tasks --timesteps-scale 0.25
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

# the SGD step of canonical MAML and of pretrained: the best train-role area of
# `--tune-inner-lr 0.1,0.5,1,2,4,8` (vm, 3 seeds, x1; area mean ± sd over seeds at each step)
SGD_INNER_LR = {
    # 0.584±.011, 0.601±.019, 0.609±.014, 0.478±.041, 0.464±.030, 0.556±.037 (at 2 and 4
    # the step gains nothing: 0.48 before and after)
    "bandit-tasks": 1.0,
    # -7.70±.16, -6.70±.15, -6.01±.11, -5.88±.13, -5.90±.09, -6.16±.10 (2 ~ 4: a plateau)
    "point-tasks": 2.0,
    # --tune-inner-lr 0.1,0.5,2: -443±23, -461±40, -502±60; no step size gains anything within
    # the inner step at this budget (before = after to 1%): the least harmful was taken
    "pendulum-tasks": 0.1,
}


def sgd_components():
    import optax

    from metarl.rl.components import Components

    return Components(make_optimizer=lambda schedule, config: optax.sgd(schedule))


def scaled(name: str, scale: float):
    from metarl.rl.configs import default_config

    config = default_config(name)
    return config.replace(total_timesteps=max(1, int(config.total_timesteps * scale)))


def learner_of(kind: str, family, args, role: str, inner_lr: float | None = None):
    """(config, MetaLearner) for a learner named in the tables."""
    from metarl.rl.components import Components
    from metarl.rl.meta.envs import maml_settings
    from metarl.rl.meta.maml import make_maml_learner
    from metarl.rl.meta.rl2 import make_rl2_learner
    from metarl.rl.ppo import learning_rate_schedule

    scale, tasks = args.timesteps_scale, args.eval_tasks
    if kind in ("RL²", "memoryless"):
        config = scaled(f"Meta-rl2/{family.name}/{role}", scale)
        schedule = learning_rate_schedule(config)
        learner = make_rl2_learner(
            config, Components(), family, schedule, tasks, memory=kind == "RL²"
        )
        return config, learner
    config = scaled(f"Meta-maml/{family.name}/{role}", scale)
    schedule = learning_rate_schedule(config)
    if kind == "FO-MAML (Adam inner)":
        settings = maml_settings(family.name, eval_tasks=tasks)
        return config, make_maml_learner(config, Components(), family, settings, schedule)
    if inner_lr is None and family.name not in SGD_INNER_LR:
        raise SystemExit(
            f"no SGD inner step chosen for {family.name}: run --tune-inner-lr on its train-role "
            "tasks first and record the best in SGD_INNER_LR"
        )
    lr = SGD_INNER_LR[family.name] if inner_lr is None else inner_lr
    settings = maml_settings(family.name, inner_lr=lr, first_order=False, eval_tasks=tasks)
    pretrained = kind == "pretrained"
    return config, make_maml_learner(
        config, sgd_components(), family, settings, schedule, pretrained=pretrained
    )


def train(config, learner, role: str, seeds: list[int]):
    """Meta-train on every seed at once: (curves [S, P], compile s, run s, first NaN update,
    training entropy of the last logged chunk [S])."""
    import jax

    from metarl.rl.meta.loop import make_meta_trainer
    from metarl.rl.training import seed_keys

    trainer = make_meta_trainer(config, learner, role)
    keys = seed_keys(seeds)
    start = time.perf_counter()
    runner = jax.jit(jax.vmap(trainer.init))(keys)
    segment = jax.jit(jax.vmap(trainer.segment, in_axes=(0, None)))
    compiled = segment.lower(runner, config.num_updates).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    _, result = jax.block_until_ready(compiled(runner, config.num_updates))
    run_s = time.perf_counter() - start
    nonfinite = [int(u) for u in np.asarray(result.first_nonfinite_update) if u >= 0]
    entropy = np.asarray(result.entropy)[:, -1]
    return np.asarray(result.adaptation), compile_s, run_s, min(nonfinite, default=None), entropy


def curve_keys(seeds: list[int], role: str):
    """The curve key rl/meta/loop.py gives each seed (so scratch sees the learners' tasks)."""
    import jax

    from metarl.rl.meta.loop import ROLE_SALTS

    return [
        jax.random.fold_in(jax.random.split(jax.random.PRNGKey(s))[0], ROLE_SALTS[role])
        for s in seeds
    ]


def scratch(config, family, settings, seeds: list[int], count: int):
    """PPO from scratch on each seed's test tasks: (curves [S, P], seconds)."""
    import jax
    import jax.numpy as jnp

    from metarl.rl.scratch import scratch_adaptation_curve

    keys = jnp.stack(curve_keys(seeds, "test"))
    start = time.perf_counter()
    fn = jax.jit(jax.vmap(lambda k: scratch_adaptation_curve(config, family, settings, k, count)))
    curves = np.asarray(jax.block_until_ready(fn(keys)))
    return curves, time.perf_counter() - start


def fixed_action_returns(family, count: int = 4096) -> np.ndarray:
    """Mean episode return of always taking action a, for each a (the best open-loop policy
    without memory; on point-tasks "stay" earns -20 E|goal| = -7.65 without adapting)."""
    import jax

    from metarl.rl.meta.loop import ROLE_SALTS

    env = family.env

    def episode(key, action):
        key_task, key_reset, key_steps = jax.random.split(key, 3)
        task = family.sample_task(key_task)
        _, state = env.reset_env(key_reset, task)

        def step(state, key):
            _, state, reward, _, _ = env.step_env(key, state, action, task)
            return state, reward

        return jax.lax.scan(step, state, jax.random.split(key_steps, family.horizon))[1].sum()

    keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(0), ROLE_SALTS["test"]), count)
    per_action = jax.vmap(lambda a: jax.vmap(lambda k: episode(k, a))(keys).mean())
    return np.asarray(jax.jit(per_action)(np.arange(family.num_actions)))


def pm(values, digits: int) -> str:
    values = np.asarray(values, np.float64)
    return f"{np.mean(values):.{digits}f} ± {np.std(values):.{digits}f}"


def paired(label: str, a, b, digits: int) -> str:
    """a - b per seed, mean and a ±2·SE interval; 'noise' when it covers 0, else its sign."""
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    mean = float(np.mean(d))
    half = 2 * float(np.std(d, ddof=1)) / np.sqrt(len(d)) if len(d) > 1 else float("inf")
    if not np.isfinite(mean):
        verdict = "NaN"
    elif mean - half <= 0 <= mean + half:
        verdict = "noise"
    else:
        verdict = "> 0" if mean > 0 else "< 0"
    return (
        f"- {label}: {mean:+.{digits}f} ± {half:.{digits}f} (per seed "
        f"{', '.join(f'{x:+.{digits}f}' for x in d)}) -> {verdict}"
    )


def family_block(args, name: str, seeds: list[int]) -> None:
    from metarl.rl.meta.envs import maml_settings, random_adaptation_return
    from metarl.rl.meta.tasks import FAMILIES
    from metarl.rl.scratch import ScratchSettings

    family = FAMILIES[name]
    settings = maml_settings(name)
    digits = 3 if name == "bandit-tasks" else 2
    curves: dict[str, np.ndarray] = {}
    rows = []
    for kind in ("RL²", "memoryless", "MAML", "FO-MAML (Adam inner)", "pretrained"):
        config, learner = learner_of(kind, family, args, "test")
        c, compile_s, run_s, nan_at, ent = train(config, learner, "test", seeds)
        curves[kind] = c
        axis = "episode in trial" if kind in ("RL²", "memoryless") else "inner steps 0..K"
        wall = f"{run_s:.0f} (+{compile_s:.0f} compile)"
        if nan_at is not None:
            wall += f", NaN at update {nan_at}"
        rows.append((kind, axis, c, wall, config.total_timesteps))
        print(
            f"  {name} {kind}: {run_s:.0f} s + {compile_s:.0f} s compile; policy entropy at the "
            f"end of training {', '.join(f'{e:.3f}' for e in ent)} (uniform: "
            f"{np.log(family.num_actions):.3f})",
            flush=True,
        )
    rl2_config = scaled(f"Meta-rl2/{name}/test", args.timesteps_scale)
    maml_config = scaled(f"Meta-maml/{name}/test", args.timesteps_scale)
    for label, config, s in (
        ("PPO from scratch", rl2_config, ScratchSettings(rounds=family.episodes, episodes=1)),
        (
            "PPO from scratch",
            maml_config,
            ScratchSettings(rounds=settings.inner_steps + 1, episodes=settings.episodes),
        ),
    ):
        c, seconds = scratch(config, family, s, seeds, args.eval_tasks)
        axis = f"round of {s.episodes} episode{'s' * (s.episodes > 1)}"
        rows.append((label, axis, c, f"{seconds:.0f} (no meta-training)", 0))
        curves[f"{label} x{s.episodes}"] = c
    rand = random_adaptation_return(f"Meta-rl2/{name}/test")
    fixed = fixed_action_returns(family)

    print(
        f"\n### {name} ({family.description}); test-role tasks, {len(seeds)} seeds, "
        f"{args.eval_tasks} tasks per curve; timesteps x{args.timesteps_scale:g}; MAML SGD inner "
        f"step {SGD_INNER_LR[name]}, FO-MAML Adam inner step {settings.inner_lr}\n"
    )
    print("| learner | x-axis | curve: mean ± sd over seeds | area ± sd | meta-train s |")
    print("|---|---|---|---:|---|")
    for kind, axis, c, wall, steps in rows:
        points = " · ".join(pm(c[:, i], digits) for i in range(c.shape[1]))
        steps_txt = f" ({steps:.0e} steps)" if steps else ""
        print(f"| {kind} | {axis} | {points} | {pm(c.mean(axis=1), digits)} | {wall}{steps_txt} |")
    print(f"| random | any (flat) | {rand:.{digits}f} | {rand:.{digits}f} | — |")
    best = fixed.max()
    print(
        f"| best fixed action (action {int(fixed.argmax())}) | any (flat) | {best:.{digits}f} | "
        f"{best:.{digits}f} | — |"
    )

    rl2, memoryless = curves["RL²"], curves["memoryless"]
    maml, pre = curves["MAML"], curves["pretrained"]
    print("\nChecks (a - b over paired seeds, mean ± 2·SE):")
    print(paired("RL² later episodes (2..) - its first", rl2[:, 1:].mean(1), rl2[:, 0], digits))
    print(paired("RL² last episode - its first", rl2[:, -1], rl2[:, 0], digits))
    print(
        paired(
            "RL² first episode - best fixed action", rl2[:, 0], np.full(len(seeds), best), digits
        )
    )
    print(
        paired(
            "RL² later episodes - memoryless later",
            rl2[:, 1:].mean(1),
            memoryless[:, 1:].mean(1),
            digits,
        )
    )
    print(paired("memoryless later - its first (should be ~0)", memoryless[:, 1:].mean(1),
                 memoryless[:, 0], digits))  # fmt: skip
    print(paired("MAML after 1 step - pretrained after 1 step", maml[:, 1], pre[:, 1], digits))
    print(paired("MAML after 1 step - before it", maml[:, 1], maml[:, 0], digits))
    print(paired("pretrained after 1 step - before it", pre[:, 1], pre[:, 0], digits))
    fo = curves["FO-MAML (Adam inner)"]
    print(paired("FO-MAML (Adam) after 1 step - before it", fo[:, 1], fo[:, 0], digits))
    print(flush=True)


def tune(args, name: str, seeds: list[int]) -> None:
    """Second-order SGD MAML's train-role area at each candidate inner step."""
    from metarl.rl.meta.tasks import FAMILIES

    family = FAMILIES[name]
    print(f"\n### {name}: MAML (2nd order, SGD) inner step on TRAIN-role tasks\n")
    print("| inner lr | curve: mean ± sd | area ± sd | s |")
    print("|---:|---|---:|---:|")
    for lr in [float(x) for x in args.tune_inner_lr.split(",")]:
        config, learner = learner_of("MAML", family, args, "train", lr)
        c, compile_s, run_s, nan_at, _ = train(config, learner, "train", seeds)
        points = " · ".join(pm(c[:, i], 3) for i in range(c.shape[1]))
        flag = f" (NaN at {nan_at})" if nan_at is not None else ""
        print(f"| {lr:g} | {points} | {pm(c.mean(1), 3)}{flag} | {run_s + compile_s:.0f} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default="bandit-tasks,point-tasks")
    parser.add_argument("--seeds", type=int, default=3, help="training seeds 0..n-1")
    parser.add_argument("--timesteps-scale", type=float, default=1.0)
    parser.add_argument(
        "--eval-tasks",
        type=int,
        default=256,
        help="held-out tasks per curve (the suites score 64; training is the same either way)",
    )
    parser.add_argument(
        "--tune-inner-lr",
        default=None,
        help="comma-separated SGD inner steps: print MAML's train-role area at each and exit",
    )
    args = parser.parse_args(argv)

    import jax

    seeds = list(range(args.seeds))
    families = args.families.split(",")
    print(
        f"# {platform.node()} ({platform.machine()}, {jax.default_backend()}): families "
        f"{', '.join(families)}, seeds {seeds}, timesteps x{args.timesteps_scale:g}, "
        f"{args.eval_tasks} test tasks per curve",
        flush=True,
    )
    start = time.perf_counter()
    for name in families:
        (tune if args.tune_inner_lr else family_block)(args, name, seeds)
    print(f"\ntotal wall time {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
