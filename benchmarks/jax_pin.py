"""One try of the jax pin re-test (benchmarks/jax_pin_retest.md): jit(vmap(train)) over seeds.

    timeout 300 python benchmarks/jax_pin.py Breakout-MinAtar 2 2e5

Run each case several times, each in a fresh process under `timeout`: a try that exits 124 hung
(the 0.10.x deadlock). Prints one `RESULT {json}` line with the jax version, compile and run
seconds, and the per-seed final returns (hex, to compare versions bit for bit).
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    start = time.perf_counter()
    import jax  # noqa: F401 - the version is reported

    # lazy: `import metarl` sets XLA_FLAGS before the backend starts
    import metarl  # noqa: F401
    from metarl.rl.components import Components
    from metarl.rl.configs import default_config
    from metarl.rl.training import run_training

    env, seeds, steps = sys.argv[1], int(sys.argv[2]), int(float(sys.argv[3]))
    run = run_training(default_config(env, total_timesteps=steps), Components(), range(seeds))
    result = {
        "jax": jax.__version__,
        "env": env,
        "seeds": seeds,
        "steps": steps,
        "xla_flags": os.environ.get("XLA_FLAGS"),
        "compile_s": run.compile_s,
        "run_s": run.run_s,
        "mean": run.mean,
        "final_returns": [float(x).hex() for x in run.final_returns],
        "total_s": time.perf_counter() - start,
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
