"""The Learned Policy Gradient network (LPG; Oh et al., NeurIPS 2020), as GROOVE uses it.

An LPG agent has a policy pi(a|s) and a *prediction vector* y(s) (a categorical over
`target_width` entries whose meaning nobody fixes: the LPG network decides what y predicts).
After each rollout the LPG network reads the trajectory backwards and says, per step, how
much to push up log pi(a_t|s_t) (pi_hat, a learned advantage) and what y(s_t) should become
(y_hat, a learned bootstrap target):

    inputs_t = [r_t, d_t, pi(a_t|s_t), phi(y(s_t)), phi(y(s_t+1)) * (1 - d_t)]
               (+ [t / lifetime, log lifetime] for TA-LPG, lifetime conditioning)
    h_t      = GRU(inputs_t, h_t+1 * (1 - d_t))        run from the last step to the first
    pi_hat_t = w_pi . relu(h_t)        y_hat_t = softmax(W_y relu(h_t))

phi is a small shared MLP embedding y into one number, so the network is the same for any
action count or observation (which is what lets an LPG meta-trained on grid worlds train
agents on CartPole or MinAtar). Backward in time, so pi_hat can depend on everything that
followed a step, the way a return does; the state is reset at episode ends so no future
episode leaks in.

Sizes: GROOVE uses an embedding of 16, a GRU of 256 and y of width 8. On the 2-core CPU a GRU
of 256 over a population of 16 agents x 16 envs x 20 steps dominates a generation, so the CPU
default is 32 (`LPGConfig.gru_width`); the paper's width is one option away.

The parameters are a plain pytree (flax modules' `init`, applied with `apply`), which is what
evosax searches and `encode_lpg_weights` archives.
"""

from __future__ import annotations

import base64
import io
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

LPGParams = Any  # {"embed": ..., "gru": ..., "pi": ..., "y": ...}, flax parameter dicts


class LPGShape(NamedTuple):
    """The LPG network's sizes (static: they shape the parameters)."""

    embedding_width: int = 16
    gru_width: int = 32  # GROOVE: 256 (see the module docstring)
    target_width: int = 8
    lifetime_conditioning: bool = False  # TA-LPG

    @property
    def input_width(self) -> int:
        return 5 + (2 if self.lifetime_conditioning else 0)


class LPGInputs(NamedTuple):
    """One rollout as the LPG network reads it; arrays are [time, batch(, ...)]."""

    reward: jax.Array
    done: jax.Array  # the episode ended at this step (terminated or cut by the time limit)
    pi: jax.Array  # probability of the action taken, under the current policy
    y: jax.Array  # y(s_t) [T, B, target_width]
    y_next: jax.Array  # y(s_t+1) [T, B, target_width]


class LPGTargets(NamedTuple):
    pi_hat: jax.Array  # [T, B]: how much to raise log pi(a_t|s_t)
    y_hat: jax.Array  # [T, B, target_width]: the target of y(s_t) (a distribution)


class _Embedding(nn.Module):
    width: int

    @nn.compact
    def __call__(self, y: jax.Array) -> jax.Array:
        return nn.Dense(1)(nn.relu(nn.Dense(self.width)(y)))[..., 0]


def _modules(shape: LPGShape) -> dict[str, nn.Module]:
    return {
        "embed": _Embedding(shape.embedding_width),
        "gru": nn.GRUCell(features=shape.gru_width),
        "pi": nn.Dense(1),
        "y": nn.Dense(shape.target_width),
    }


def init_lpg(key: jax.Array, shape: LPGShape) -> LPGParams:
    """Initial LPG parameters (flax's default initialisers).

    Args:
        key: the initialisation key.
        shape: the network's sizes.

    Returns:
        The parameter pytree `lpg_targets` takes.
    """
    modules = _modules(shape)
    k_embed, k_gru, k_pi, k_y = jax.random.split(key, 4)
    carry = jnp.zeros((1, shape.gru_width))
    return {
        "embed": modules["embed"].init(k_embed, jnp.zeros((1, shape.target_width))),
        "gru": modules["gru"].init(k_gru, carry, jnp.zeros((1, shape.input_width))),
        "pi": modules["pi"].init(k_pi, carry),
        "y": modules["y"].init(k_y, carry),
    }


def lpg_targets(
    params: LPGParams,
    shape: LPGShape,
    inputs: LPGInputs,
    progress: jax.Array | float = 0.0,
    lifetime: jax.Array | float = 1.0,
) -> LPGTargets:
    """The LPG network's targets for one rollout (see the module docstring).

    Args:
        params: `init_lpg`'s pytree (or an ES member).
        shape: the network's sizes.
        inputs: the rollout, [time, batch] arrays.
        progress: the agent's update count / its lifetime (read only by TA-LPG).
        lifetime: the agent's lifetime in updates (read only by TA-LPG).

    Returns:
        pi_hat [T, B] and y_hat [T, B, target_width].
    """
    modules = _modules(shape)
    done = inputs.done.astype(jnp.float32)
    embed = lambda y: modules["embed"].apply(params["embed"], y)  # noqa: E731
    features = [
        inputs.reward,
        done,
        inputs.pi,
        embed(inputs.y),
        embed(inputs.y_next) * (1.0 - done),
    ]
    if shape.lifetime_conditioning:
        ones = jnp.ones_like(inputs.reward)
        features += [ones * progress, ones * jnp.log(jnp.asarray(lifetime, jnp.float32))]
    x = jnp.stack(features, axis=-1)

    def backwards(carry, step):
        x_t, done_t = step
        carry = carry * (1.0 - done_t)[:, None]  # nothing from the next episode
        carry, h = modules["gru"].apply(params["gru"], carry, x_t)
        return carry, h

    carry = jnp.zeros((x.shape[1], shape.gru_width), x.dtype)
    _, hidden = jax.lax.scan(backwards, carry, (x, done), reverse=True)
    hidden = nn.relu(hidden)
    pi_hat = modules["pi"].apply(params["pi"], hidden)[..., 0]
    y_hat = jax.nn.softmax(modules["y"].apply(params["y"], hidden), axis=-1)
    return LPGTargets(pi_hat, y_hat)


# -- archiving --------------------------------------------------------------------------------


def encode_lpg_weights(params: LPGParams) -> str:
    """The parameters as one base64 string (numpy's .npz of the flattened leaves, in order)."""
    leaves = [np.asarray(leaf, np.float32) for leaf in jax.tree.leaves(params)]
    buffer = io.BytesIO()
    np.savez(buffer, *leaves)
    return base64.b64encode(buffer.getvalue()).decode()


def decode_lpg_weights(text: str, shape: LPGShape) -> LPGParams:
    """Parameters written by `encode_lpg_weights` for a network of `shape`.

    Raises:
        ValueError: the text is not such an encoding, or for another shape.
    """
    template = init_lpg(jax.random.PRNGKey(0), shape)
    flat, treedef = jax.tree.flatten(template)
    try:
        with np.load(io.BytesIO(base64.b64decode(text, validate=True)), allow_pickle=False) as npz:
            leaves = [npz[f"arr_{i}"] for i in range(len(npz.files))]
    except Exception as error:  # base64, zip and npy errors all mean "not our encoding"
        raise ValueError(f"not an encoded LPG network ({error})") from error
    if len(leaves) != len(flat) or any(a.shape != b.shape for a, b in zip(leaves, flat)):
        raise ValueError("the encoded LPG network has other sizes than this configuration")
    if not all(np.isfinite(leaf).all() for leaf in leaves):
        raise ValueError("the encoded LPG network has non-finite weights")
    return jax.tree.unflatten(treedef, [jnp.asarray(leaf, jnp.float32) for leaf in leaves])


# -- the candidate's source -------------------------------------------------------------------

SOURCE_TEMPLATE = '''"""{title}

A Learned Policy Gradient network (metarl.rl.lpg): data, not code. metarl reads the two
assignments below without executing this file and trains agents with the network.
"""

LPG_SHAPE = {shape!r}
LPG_WEIGHTS = "{weights}"
'''


def lpg_source(params: LPGParams, shape: LPGShape, title: str) -> str:
    """An LPG network as an archivable candidate: a module of two literal assignments.

    Args:
        params: the network's parameters.
        shape: its sizes.
        title: the first line of its docstring (what produced it).

    Returns:
        The source text (`read_lpg_source` reads it back without executing it).
    """
    title = " ".join(title.replace('"""', "'''").split())
    return SOURCE_TEMPLATE.format(
        title=title, shape=dict(shape._asdict()), weights=encode_lpg_weights(params)
    )


def read_lpg_source(source: str) -> tuple[LPGShape, LPGParams]:
    """The network an `lpg_source` text holds, read with `ast` (never executed).

    Raises:
        ValueError: the text is not such a module (one line saying what is wrong).
    """
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise ValueError(f"not Python: {error.msg} (line {error.lineno})") from None
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in ("LPG_SHAPE", "LPG_WEIGHTS"):
                try:
                    values[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    raise ValueError(f"{target.id} is not a literal") from None
    if set(values) != {"LPG_SHAPE", "LPG_WEIGHTS"}:
        raise ValueError("an LPG candidate assigns LPG_SHAPE (a dict) and LPG_WEIGHTS (a str)")
    shape_fields, weights = values["LPG_SHAPE"], values["LPG_WEIGHTS"]
    if not isinstance(shape_fields, dict) or not isinstance(weights, str):
        raise ValueError("LPG_SHAPE must be a dict and LPG_WEIGHTS a str")
    unknown = set(shape_fields) - set(LPGShape._fields)
    if unknown:
        raise ValueError(f"LPG_SHAPE has unknown fields: {', '.join(sorted(unknown))}")
    try:
        shape = LPGShape(**shape_fields)
        sizes = (shape.embedding_width, shape.gru_width, shape.target_width)
        if not all(isinstance(v, int) and 1 <= v <= 4096 for v in sizes):
            raise TypeError("sizes")
        if not isinstance(shape.lifetime_conditioning, bool):
            raise TypeError("lifetime_conditioning")
    except TypeError as error:
        raise ValueError(f"LPG_SHAPE has a bad value ({error})") from None
    return shape, decode_lpg_weights(weights, shape)
