# The closed form of the drift discovered by LPO and distilled as DPO (Lu et al., 2022,
# "Discovered Policy Optimisation"), with alpha=2 and beta=0.6. For positive advantages it
# penalises ratios above 1 + eps; for negative ones ratios below 1 - eps, with a tanh-shaped
# slack term inside the trust region.
def drift(ratio, advantage, epsilon):
    alpha = 2.0
    beta = 0.6
    log_ratio = jnp.log(ratio)
    positive = jax.nn.relu(
        (ratio - 1.0) * advantage - alpha * jnp.tanh((ratio - 1.0) * advantage / alpha)
    )
    negative = jax.nn.relu(
        log_ratio * advantage - beta * jnp.tanh(log_ratio * advantage / beta)
    )
    return jnp.where(advantage >= 0.0, positive, negative)
