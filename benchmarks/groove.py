"""LPG meta-trained by ES on random grid levels: uniform level sampling against GROOVE's regret
curriculum, judged on levels neither saw (issue 24).

For each curriculum (uniform, groove) and each ES seed, the LPG network is meta-trained by
OpenAI-ES with antithetic task sampling (blackbox/lpg_es.py, GROOVE's corrected settings:
sigma 0.1, lr 1e-2) on levels drawn from the suite's distribution; then the final ES mean is
scored by the LPG evaluator (evaluation/lpg_evaluation.py) on the test role of the suite - the
five tabular LPG levels, Catch and CartPole - on the same pinned evaluation seeds for every
network, beside the reference actor-critic (same agent, lifetime and seeds: GROOVE's tuned
agent: SGD 10 / 1 on grid levels, tuned on training draws (rl/lpg/agent.py), Adam 1e-3
elsewhere), the untrained LPG network
(the ES's starting point) and the uniform random policy.

CPU scale (the defaults; state them with the numbers): population 16, 1 training seed per
member, 8 envs x 20 steps per agent update, lifetimes log-uniform in 10..250 updates,
30 generations, evaluation at 250 updates of 8 envs on 4 seeds. GROOVE's GPU scale for
comparison: 512 agents per meta-update (doubled by antithetic sampling), 64 envs per agent,
lifetimes up to 250 updates, "under 3 hours on a single GPU" (its README).

    python benchmarks/groove.py                       # ~30-40 min on 2 cores
    python benchmarks/groove.py --generations 3 --seeds 0   # a quick look

Prints one table per curriculum and a summary; paste them into benchmarks/RESULTS.md with
the machine's name.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np


def meta_train(args, curriculum: str, seed: int):
    """The ES mean after `args.generations` generations, and the seconds it took."""
    import jax

    from metarl.blackbox.config import ESConfig
    from metarl.blackbox.es import es_generation, make_strategy
    from metarl.blackbox.lpg_es import LPGFitness
    from metarl.rl.lpg.network import LPGShape, init_lpg

    config = ESConfig(
        task="lpg",
        suite=args.suite,
        population=args.population,
        member_seeds=args.member_seeds,
        env_workers=args.env_workers,
        curriculum=curriculum,
        buffer_size=args.buffer,
        rng_seed=seed,
        generations=args.generations,
    ).resolved()
    shape = LPGShape(gru_width=config.hidden)
    mean = init_lpg(jax.random.PRNGKey(0), shape)
    strategy = make_strategy(config, mean)
    rng, init_key = jax.random.split(jax.random.PRNGKey(seed))
    state = strategy.init(init_key, mean, strategy.default_params)
    fitness = LPGFitness(config, shape, None)
    start = time.perf_counter()
    for generation in range(config.generations):
        fitness.generation = generation
        state, rng, values = es_generation(
            strategy, fitness, state, rng, config.member_seeds, strategy.default_params
        )
        last = fitness.last
        regret = last["regret"]
        print(
            f"    {curriculum} seed {seed} gen {generation + 1}: pair return "
            f"{np.nanmean([r for r in last['returns'] if r is not None]):.2f}"
            + (f", regret {np.nanmean([r for r in regret if r is not None]):.2f}" if regret else "")
            + (" (replay)" if last["replay"] else ""),
            flush=True,
        )
    return strategy.get_mean(state), shape, time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="grid-random")
    parser.add_argument("--curricula", default="uniform,groove")
    parser.add_argument("--seeds", default="0,1,2", help="ES seeds (rng_seed of each run)")
    parser.add_argument("--generations", type=int, default=30)
    parser.add_argument("--population", type=int, default=16)
    parser.add_argument("--member-seeds", type=int, default=1)
    parser.add_argument("--env-workers", type=int, default=8)
    parser.add_argument("--buffer", type=int, default=64)
    parser.add_argument("--eval-seeds", default="100,101,102,103")
    parser.add_argument("--eval-updates", type=int, default=250)
    args = parser.parse_args(argv)

    import jax

    from metarl.evaluation.lpg_evaluation import LPGEvaluator
    from metarl.evaluation.seeds import SeedSource
    from metarl.rl.lpg.network import init_lpg, lpg_source
    from metarl.rl.scoring import interquartile_mean
    from metarl.rl.suites import get_suite

    suite = get_suite(args.suite)
    seeds = [int(s) for s in args.seeds.split(",")]
    eval_seeds = [int(s) for s in args.eval_seeds.split(",")]
    evaluator = LPGEvaluator(
        suite,
        SeedSource(len(eval_seeds), pinned=eval_seeds),
        updates=args.eval_updates,
        num_envs=args.env_workers,
        roles=("test",),
    )
    print(
        f"# {platform.node()} ({platform.machine()}, {jax.default_backend()}): suite "
        f"{args.suite}, population {args.population}, {args.generations} generations, "
        f"{args.env_workers} envs/agent, eval {args.eval_updates} updates x "
        f"{len(eval_seeds)} seeds",
        flush=True,
    )
    results: dict[str, list] = {}
    timings: dict[str, list[float]] = {}
    for curriculum in args.curricula.split(","):
        for seed in seeds:
            mean, shape, seconds = meta_train(args, curriculum, seed)
            outcome = evaluator.evaluate(lpg_source(mean, shape, f"{curriculum} seed {seed}"))
            assert outcome.passed, outcome.reason
            results.setdefault(curriculum, []).append(outcome)
            timings.setdefault(curriculum, []).append(seconds)
    initial = evaluator.evaluate(lpg_source(init_lpg(jax.random.PRNGKey(0), shape), shape, "init"))

    envs = [s.env for s in initial.env_scores]
    print()
    print(
        "| env | random | actor-critic | LPG init | "
        + " | ".join(f"LPG-ES {c} (mean ± sd over {len(seeds)} ES seeds)" for c in results)
        + " |"
    )
    print("|---" * (4 + len(results)) + "|")
    for i, env in enumerate(envs):
        ref = initial.env_scores[i]
        cells = [f"{ref.random_mean:.2f}", f"{ref.baseline_mean:.2f}", f"{ref.mean:.2f}"]
        for outcomes in results.values():
            values = [o.env_scores[i].mean for o in outcomes]
            cells.append(f"{np.mean(values):.2f} ± {np.std(values):.2f}")
        print(f"| {env} | " + " | ".join(cells) + " |")
    print()
    print("| network | normalised IQM over test envs, per ES seed | mean | meta-train s/run |")
    print("|---|---|---|---|")
    init_scores = [s.normalised for s in initial.env_scores if s.normalised is not None]
    print(f"| LPG init | {interquartile_mean(init_scores):.2f} | — | — |")
    for curriculum, outcomes in results.items():
        per_seed = [
            interquartile_mean([s.normalised for s in o.env_scores if s.normalised is not None])
            for o in outcomes
        ]
        print(
            f"| LPG-ES {curriculum} | {', '.join(f'{v:.2f}' for v in per_seed)} | "
            f"{np.mean(per_seed):.2f} | {np.mean(timings[curriculum]):.0f} |"
        )
    print("\n(normalised: 0 = random policy, 1 = the actor-critic on the same seeds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
