"""Why a `minatar-cpu` validation round costs an hour: where Seaquest-MinAtar spends its step.

    python benchmarks/seaquest.py                 # env-only tables, then the PPO trainer's rates
    python benchmarks/seaquest.py --no-trainer    # env-only tables (about a minute)

The protocol validates on Seaquest (DiscoGen's split), and on 2 cores a race round there took
about an hour while a training game's batch took minutes. This prints, for gymnax's own
environments (the ones DiscoGen's harness and metarl's trainer step):

1. env-only throughput of the five MinAtar games: 64 vmapped envs, uniform random actions,
   one jitted `lax.scan` of `--steps` steps (no network, no update);
2. Seaquest's step with one helper family replaced by a no-op (bullet collisions; drawing the
   observation; moving entities). These are *not* the game: they only attribute the cost;
3. Seaquest with its entity buffers (gymnax's `MAX_ENTITIES`, 100 rows per entity kind) cut to
   32 and 16 rows, with the most entities of one kind alive at once in those rollouts (random
   play only: whether a trained agent's episodes stay under a cap is not measured here);
4. gymnax's Seaquest against metarl's (`metarl/rl/environments/seaquest.py`: the same game,
   its bullet collisions found per board cell instead of per pair of rows; tests/test_seaquest.py
   checks it step for step against gymnax's);
5. (unless `--no-trainer`) metarl's PPO trainer on Seaquest as gymnax ships it, on metarl's
   Seaquest, on gymnax's with collisions skipped, and on Breakout, at the protocol's MinAtar
   config (DiscoGen's: 64 envs x 128 steps).

Every variant of 2, 3 and 5 is a monkeypatch of gymnax's module globals (or of metarl's
registry, to train on gymnax's Seaquest) made before that variant is traced and undone after it,
in this process only.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import time
from typing import Iterator, NamedTuple

import jax
import jax.numpy as jnp
from rich.console import Console
from rich.table import Table

import metarl  # noqa: F401  (sets XLA flags before jax starts)

GAMES = (
    "Asterix-MinAtar",
    "Breakout-MinAtar",
    "Freeway-MinAtar",
    "SpaceInvaders-MinAtar",
    "Seaquest-MinAtar",
)
NUM_ENVS = 64  # DiscoGen's MinAtar config steps 64 envs per seed


class EnvRate(NamedTuple):
    """One env-only measurement.

    Attributes:
        compile_s: tracing and XLA compilation of the rollout.
        steps_per_s: env steps per second over all envs, second call (compiled).
        most_entities: the most entities of one kind alive at once (Seaquest only, else -1).
    """

    compile_s: float
    steps_per_s: float
    most_entities: int


def _most_entities(state) -> jax.Array:
    """The largest entity count of one kind in a batch of Seaquest states."""
    counts = (
        state.e_fish_count,
        state.e_subs_count,
        state.divers_count,
        state.f_bullet_count,
        state.e_bullet_count,
    )
    return jnp.max(jnp.stack([jnp.max(count) for count in counts]))


def env_rate(name: str, num_steps: int, key: jax.Array, env=None) -> EnvRate:
    """Env-only throughput of `name`: NUM_ENVS envs, random actions, one scan of `num_steps`.

    Args:
        name: a gymnax environment id.
        num_steps: steps per env in the scan (the rollout is timed on a second call).
        key: PRNG key of the rollout.
        env: the environment to step (default: gymnax's own, `gymnax.make(name)`).

    Returns:
        Its EnvRate.
    """
    import gymnax

    if env is None:
        env, params = gymnax.make(name)
    else:
        params = env.default_params
    seaquest = name.startswith("Seaquest")

    def rollout(key: jax.Array) -> jax.Array:
        key, reset_key = jax.random.split(key)
        _, state = jax.vmap(env.reset, (0, None))(jax.random.split(reset_key, NUM_ENVS), params)

        def step(carry, _):
            state, key = carry
            key, action_key, step_key = jax.random.split(key, 3)
            action = jax.random.randint(action_key, (NUM_ENVS,), 0, env.num_actions)
            step_keys = jax.random.split(step_key, NUM_ENVS)
            _, state, reward, *_ = jax.vmap(env.step, (0, 0, 0, None))(
                step_keys, state, action, params
            )
            most = _most_entities(state) if seaquest else jnp.int32(-1)
            return (state, key), (reward.sum(), most)

        _, (rewards, most) = jax.lax.scan(step, (state, key), None, num_steps)
        return rewards.sum(), most.max()

    started = time.perf_counter()
    compiled = jax.jit(rollout).lower(key).compile()
    compile_s = time.perf_counter() - started
    jax.block_until_ready(compiled(key))
    started = time.perf_counter()
    _, most = jax.block_until_ready(compiled(jax.random.fold_in(key, 1)))
    run_s = time.perf_counter() - started
    return EnvRate(compile_s, NUM_ENVS * num_steps / run_s, int(most))


@contextlib.contextmanager
def patched(module, **values) -> Iterator[None]:
    """Set module globals for the block (variants are traced inside it), then restore them."""
    saved = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def _no_collisions(bullets, bullet_count, targets, target_count):
    return bullets, bullet_count, targets, target_count, jnp.float32(0.0)


def _no_drawing(observation, *_):
    return observation


def _no_moving(entities, count, *_):
    return entities, count


def knockouts() -> dict[str, contextlib.AbstractContextManager]:
    """Seaquest variants that skip one helper family (cost attribution, not the game)."""
    from gymnax.environments.minatar import seaquest

    return {
        "gymnax's Seaquest": contextlib.nullcontext(),
        "collisions skipped": patched(seaquest, collide_bullets=_no_collisions),
        "drawing skipped": patched(seaquest, draw_entities=_no_drawing),
        "moving skipped": patched(seaquest, move_entities=_no_moving, move_bullets=_no_moving),
    }


def capacity(rows: int) -> contextlib.ExitStack:
    """Seaquest with `rows` rows per entity buffer (gymnax's default is 100)."""
    from gymnax.environments.minatar import seaquest, seaquest_helpers

    stack = contextlib.ExitStack()
    stack.enter_context(patched(seaquest_helpers, MAX_ENTITIES=rows))
    stack.enter_context(patched(seaquest, MAX_ENTITIES=rows))
    return stack


def trainer_rate(name: str, timesteps: int, seeds: int) -> tuple[float, float, tuple]:
    """metarl's PPO trainer (the protocol's suite config) on `name`: (compile s, env-steps/s,
    the run's per-seed final returns and learning curve, to compare runs bit for bit)."""
    from metarl.rl.components import Components
    from metarl.rl.suites import get_suite
    from metarl.rl.training import run_training

    config = get_suite("discobench").config(name, total_timesteps=timesteps)
    run = run_training(config, Components(), seeds=list(range(seeds)))
    return run.compile_s, run.steps_per_s, (tuple(run.final_returns), tuple(run.curve))


def machine() -> str:
    return f"{platform.node()} ({jax.device_count()} {jax.devices()[0].platform} device)"


def table(title: str, columns: tuple[str, ...], rows: list[tuple]) -> None:
    out = Table(title=title)
    for i, column in enumerate(columns):
        out.add_column(column, justify="left" if i == 0 else "right")
    for row in rows:
        out.add_row(*(str(cell) for cell in row))
    Console(width=140).print(out)


def relative(measured: list[tuple[str, EnvRate]]) -> list[tuple[str, str, str]]:
    """Table rows (label, env-steps/s, ratio to the first row's rate)."""
    base = measured[0][1].steps_per_s
    return [
        (label, f"{rate.steps_per_s:,.0f}", f"{rate.steps_per_s / base:.2f}x")
        for label, rate in measured
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500, help="scan length per env (env-only)")
    parser.add_argument("--timesteps", type=int, default=163_840, help="trainer steps per seed")
    parser.add_argument("--seeds", type=int, default=2, help="trainer seeds (vmapped)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of the trainer's variants")
    parser.add_argument("--no-trainer", action="store_true")
    args = parser.parse_args()
    key = jax.random.PRNGKey(0)
    print(f"{machine()}, jax {jax.__version__}, {NUM_ENVS} envs, {args.steps} steps each")

    rates = {name: env_rate(name, args.steps, key) for name in GAMES}
    base = rates["Breakout-MinAtar"].steps_per_s
    rows = [
        (
            name,
            f"{rate.compile_s:.1f}",
            f"{rate.steps_per_s:,.0f}",
            f"{rate.steps_per_s / base:.3f}",
        )
        for name, rate in rates.items()
    ]
    table("env-only, random actions", ("game", "compile s", "env-steps/s", "vs Breakout"), rows)

    measured = []
    for label, variant in knockouts().items():
        with variant:
            measured.append((label, env_rate("Seaquest-MinAtar", args.steps, key)))
    table(
        "Seaquest's step, one helper family skipped (cost attribution, not the game)",
        ("variant", "env-steps/s", "vs gymnax's"),
        relative(measured),
    )

    rows, base = [], None
    for rows_per_buffer in (100, 32, 16):
        with capacity(rows_per_buffer):
            rate = env_rate("Seaquest-MinAtar", args.steps, key)
        base = base or rate.steps_per_s
        rows.append(
            (
                rows_per_buffer,
                f"{rate.steps_per_s:,.0f}",
                f"{rate.steps_per_s / base:.2f}x",
                rate.most_entities,
            )
        )
    table(
        "Seaquest's entity buffers (gymnax: 100 rows per kind)",
        ("rows", "env-steps/s", "vs 100", "most alive of one kind"),
        rows,
    )

    from metarl.rl.environments import registry
    from metarl.rl.environments.seaquest import Seaquest

    measured = [
        (label, env_rate("Seaquest-MinAtar", args.steps, key, env))
        for label, env in (("gymnax's", None), ("metarl's (per-cell collisions)", Seaquest()))
    ]
    table(
        "Seaquest-MinAtar: gymnax's step and metarl's (the same game)",
        ("Seaquest", "env-steps/s", "vs gymnax's"),
        relative(measured),
    )

    if args.no_trainer:
        return
    from gymnax.environments.minatar import seaquest

    def gymnaxs() -> contextlib.AbstractContextManager:
        return patched(registry, SAME_GAME={})

    def skipped() -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(gymnaxs())
        stack.enter_context(patched(seaquest, collide_bullets=_no_collisions))
        return stack

    # each variant's patches are made when it is entered (a context made early would be live
    # for the variants before it); the Seaquest variants alternate, `--repeats` rounds, so that
    # the machine's load falls on each alike
    variants = {
        "Seaquest-MinAtar, gymnax's": gymnaxs,
        "Seaquest-MinAtar, metarl's": contextlib.nullcontext,
        "Seaquest-MinAtar, gymnax's, collisions skipped": skipped,
    }
    order = [label for _ in range(args.repeats) for label in variants] + ["Breakout-MinAtar"]
    variants["Breakout-MinAtar"] = contextlib.nullcontext
    measured: dict[str, list[tuple[float, float]]] = {label: [] for label in variants}
    outcomes: dict[str, set] = {label: set() for label in variants}
    for label in order:
        with variants[label]():
            compile_s, rate, outcome = trainer_rate(label.split(",")[0], args.timesteps, args.seeds)
        measured[label].append((compile_s, rate))
        outcomes[label].add(outcome)
    rows = []
    for label, runs in measured.items():
        rates = sorted(rate for _, rate in runs)
        median = rates[len(rates) // 2]
        spread = f"{rates[0]:,.0f}-{rates[-1]:,.0f}" if len(rates) > 1 else "-"
        compile_s = min(c for c, _ in runs)
        rows.append((label, f"{compile_s:.1f}", f"{median:,.0f}", spread, f"{1e6 / median:,.0f}"))
    table(
        f"metarl's PPO trainer, {args.seeds} seeds x {args.timesteps:,} steps (DiscoGen's config),"
        f" Seaquest rows alternated {args.repeats}x",
        ("env", "compile s", "env-steps/s (median)", "range", "s per 1e6 steps"),
        rows,
    )
    theirs, mine = outcomes["Seaquest-MinAtar, gymnax's"], outcomes["Seaquest-MinAtar, metarl's"]
    verdict = "identical, bit for bit" if theirs == mine and len(mine) == 1 else "DIFFER"
    print(f"PPO on gymnax's Seaquest and on metarl's, every repeat: returns and curve {verdict}")
    for label in ("gymnax's", "metarl's"):
        for final, curve in outcomes[f"Seaquest-MinAtar, {label}"]:
            print(f"  {label}: per-seed final returns {final}, learning curve sum {sum(curve):.4f}")


if __name__ == "__main__":
    main()
