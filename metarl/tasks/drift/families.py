"""Drift families (tasks/families.py): trust regions from the policy-optimisation literature.

Every member keeps the drift contract for every parameter in range: >= 0, and zero with a zero
slope at ratio 1 (each is zero on a neighbourhood of ratio 1, or is a smooth function whose
value and first derivative vanish there). tests/test_families.py draws members and runs the
task's own probes on them.
"""

from __future__ import annotations

from metarl.tasks.families import Param, ProgramFamily

ASYMMETRIC_CLIP = ProgramFamily(
    "asymmetric_clip",
    """def drift(ratio, advantage, epsilon):
    clipped = jnp.clip(ratio, 1.0 - $low, 1.0 + $high)
    return jax.nn.relu((ratio - clipped) * advantage)
""",
    (Param("low", 0.05, 0.5), Param("high", 0.05, 0.5)),
    "PPO's clip (Schulman et al. 2017) with separate lower and upper ranges",
)

DPO = ProgramFamily(
    "dpo",
    """def drift(ratio, advantage, epsilon):
    log_ratio = jnp.log(ratio)
    positive = jax.nn.relu(
        (ratio - 1.0) * advantage - $alpha * jnp.tanh((ratio - 1.0) * advantage / $alpha)
    )
    negative = jax.nn.relu(log_ratio * advantage - $beta * jnp.tanh(log_ratio * advantage / $beta))
    return jnp.where(advantage >= 0.0, positive, negative)
""",
    (Param("alpha", 0.5, 4.0), Param("beta", 0.1, 1.5)),
    "DPO (Lu et al. 2022), LPO's closed form: alpha for positive advantages, beta for negative",
)

KL_PENALTY = ProgramFamily(
    "kl_penalty",
    """def drift(ratio, advantage, epsilon):
    return $beta * (ratio - 1.0 - jnp.log(ratio))
""",
    (Param("beta", 0.01, 2.0),),
    "a KL(old || new) penalty (PPO's KL variant) with the k3 estimator r - 1 - log r",
)

CLIP_AND_KL = ProgramFamily(
    "clip_and_kl",
    """def drift(ratio, advantage, epsilon):
    clipped = jnp.clip(ratio, 1.0 - $width, 1.0 + $width)
    return jax.nn.relu((ratio - clipped) * advantage) + $beta * (ratio - 1.0 - jnp.log(ratio))
""",
    (Param("width", 0.05, 0.5), Param("beta", 0.01, 1.0)),
    "PPO's clip plus a KL penalty (as in PPO-KL-clip variants)",
)

ADVANTAGE_SCALED_CLIP = ProgramFamily(
    "advantage_scaled_clip",
    """def drift(ratio, advantage, epsilon):
    width = $width / (1.0 + $scale * jnp.abs(advantage))
    clipped = jnp.clip(ratio, 1.0 - width, 1.0 + width)
    return jax.nn.relu((ratio - clipped) * advantage)
""",
    (Param("width", 0.1, 0.5), Param("scale", 0.05, 2.0)),
    "an advantage-dependent trust region: large advantages move the policy less",
)

LOG_RATIO_CLIP = ProgramFamily(
    "log_ratio_clip",
    """def drift(ratio, advantage, epsilon):
    log_ratio = jnp.log(ratio)
    return jax.nn.relu((log_ratio - jnp.clip(log_ratio, -$low, $high)) * advantage)
""",
    (Param("low", 0.05, 0.5), Param("high", 0.05, 0.5)),
    "a clip on the log-ratio (symmetric in probability ratios, as in SPO-style objectives)",
)

SOFT_REGION = ProgramFamily(
    "soft_region",
    """def drift(ratio, advantage, epsilon):
    outside = jax.nn.relu(jnp.abs(ratio - 1.0) - $width)
    return $scale * jnp.square(outside) * (jnp.abs(advantage) + $floor)
""",
    (Param("width", 0.02, 0.4), Param("scale", 0.5, 20.0), Param("floor", 0.01, 1.0)),
    "a quadratic penalty outside a trust region (soft clipping, as in trust-region PPO variants)",
)

FAMILIES = (
    ASYMMETRIC_CLIP,
    DPO,
    KL_PENALTY,
    CLIP_AND_KL,
    ADVANTAGE_SCALED_CLIP,
    LOG_RATIO_CLIP,
    SOFT_REGION,
)
