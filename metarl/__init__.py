"""metarl: discover reinforcement-learning algorithms with language models."""

import os

__version__ = "0.1.0"

# jax/jaxlib 0.10.x deadlocked here under jit(vmap(train)) with XLA's concurrency-optimised CPU
# scheduler (hangs in block_until_ready, measured on a 2-core CPU). We pin jax 0.9.2, which did
# not hang, and switch the scheduler off as well. The flag must be set before XLA initialises,
# so it lives in the package root, which every metarl module imports first.
_XLA_SAFE_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def _configure_xla() -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_enable_concurrency_optimized_scheduler" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_XLA_SAFE_FLAG}".strip()


_configure_xla()
