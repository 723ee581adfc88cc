"""metarl: discover reinforcement-learning algorithms with language models."""

import importlib.util
import os

__version__ = "0.1.0"

# XLA flags, set here because they must be in place before XLA initialises and every metarl
# module imports this package first. A flag the user already set is left alone.
#
# - jax/jaxlib 0.10.x deadlocked here under jit(vmap(train)) with XLA's concurrency-optimised
#   CPU scheduler (hangs in block_until_ready on a 2-core CPU). We pin jax 0.9.2, which did not
#   hang, and switch that scheduler off as well: it costs ~14% of CartPole throughput and
#   nothing on MinAtar (benchmarks/RESULTS.md), and a hang would cost a whole timeout.
# - Every candidate is a new XLA program, so compile time is paid per candidate per env. On CPU,
#   LLVM optimisation level 1 without its expensive passes compiles ~30% faster with the same
#   training throughput (measured: CartPole 4 seeds 6.6 s -> 4.5 s compile, 12.9 s -> 11.4 s run).
#   Results differ in the last bits from level 2, so the flags are part of the baseline cache key.
_SAFE_FLAGS = {"xla_cpu_enable_concurrency_optimized_scheduler": "false"}
_CPU_COMPILE_FLAGS = {
    "xla_backend_optimization_level": "1",
    "xla_llvm_disable_expensive_passes": "true",
}


def _has_accelerator_plugin() -> bool:
    return any(
        importlib.util.find_spec(name) is not None
        for name in ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin")
    )


def _configure_xla() -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    wanted = dict(_SAFE_FLAGS)
    if not _has_accelerator_plugin():
        wanted.update(_CPU_COMPILE_FLAGS)
    extra = [f"--{name}={value}" for name, value in wanted.items() if name not in flags]
    if extra:
        os.environ["XLA_FLAGS"] = " ".join([flags, *extra]).strip()


_configure_xla()
