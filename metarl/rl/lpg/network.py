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

import ast
import base64
import io
import zipfile
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


# An LPG candidate is untrusted data, read in the parent (README, Safety): every size is capped
# before anything of that size is allocated. GROOVE's network (GRU 256) has ~206k parameters
# (1.1 MB of base64); the caps leave room for twice its width and refuse the rest.
MAX_WIDTH = 512  # each of embedding_width, gru_width, target_width
MAX_PARAMETERS = 1_000_000  # all weights together (4 MB as float32)
MAX_SOURCE_BYTES = 8 << 20  # the whole candidate text: 1e6 float64 weights in base64, and a header
_NPY_HEADER_BYTES = 4096  # an .npy member's header (numpy writes ~128 bytes)


class LPGFormatError(ValueError):
    """The text is not an LPG network this configuration can read (one line saying why)."""


def _abstract_params(shape: LPGShape) -> LPGParams:
    """`init_lpg`'s pytree for `shape` as shapes and dtypes only: nothing is allocated."""
    return jax.eval_shape(lambda key: init_lpg(key, shape), jax.random.PRNGKey(0))


def parameter_count(shape: LPGShape) -> int:
    """How many weights a network of `shape` has, computed without allocating any."""
    return int(sum(np.prod(leaf.shape) for leaf in jax.tree.leaves(_abstract_params(shape))))


def _npy_array(data: bytes, expected: tuple[int, ...], name: str) -> np.ndarray:
    """One .npz member's array: its header is read first, so that a header claiming another
    shape or dtype is refused before numpy allocates what it claims."""
    buffer = io.BytesIO(data)
    version = np.lib.format.read_magic(buffer)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(buffer)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(buffer)
    else:
        raise LPGFormatError(f"member {name} has .npy version {version}, not 1.0 or 2.0")
    if dtype.kind != "f" or dtype.hasobject or dtype.itemsize > 8:
        raise LPGFormatError(f"member {name} holds {dtype}, not floating-point numbers")
    if tuple(shape) != expected:
        raise LPGFormatError(f"member {name} has shape {tuple(shape)}, not {expected}")
    buffer.seek(0)
    return np.lib.format.read_array(buffer, allow_pickle=False)


def decode_lpg_weights(text: str, shape: LPGShape) -> LPGParams:
    """Parameters written by `encode_lpg_weights` for a network of `shape`.

    Reads untrusted data with bounded memory: the npz is opened as a zip archive whose members
    must be exactly `arr_0.npy` ... `arr_{n-1}.npy`; each is decompressed only up to the size
    its expected shape allows (float64 at most), so a member that inflates to gigabytes costs
    no more than that; each header must declare the expected shape and a float dtype before
    numpy reads it.

    Raises:
        LPGFormatError: the text is not such an encoding, or for another shape.
    """
    flat, treedef = jax.tree.flatten(_abstract_params(shape))
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError as error:
        raise LPGFormatError(f"LPG_WEIGHTS is not base64 ({error})") from None
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
        members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as error:
        raise LPGFormatError(f"LPG_WEIGHTS is not an .npz archive ({error})") from None
    names = [f"arr_{i}.npy" for i in range(len(flat))]
    if sorted(m.filename for m in members) != sorted(names):
        raise LPGFormatError(
            f"the encoded LPG network has {len(members)} members, not the {len(flat)} arrays "
            f"arr_0.npy ... arr_{len(flat) - 1}.npy of this configuration's sizes"
        )
    leaves = []
    for name, leaf in zip(names, flat):
        limit = int(np.prod(leaf.shape)) * 8 + _NPY_HEADER_BYTES
        info = archive.getinfo(name)
        if info.file_size > limit:
            raise LPGFormatError(f"member {name} declares {info.file_size} bytes; at most {limit}")
        try:
            with archive.open(info) as member:
                data = member.read(limit + 1)
        except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError, RuntimeError) as error:
            raise LPGFormatError(f"member {name} cannot be read ({error})") from None
        if len(data) > limit:
            raise LPGFormatError(f"member {name} inflates past {limit} bytes")
        try:
            array = _npy_array(data, tuple(leaf.shape), name)
        except LPGFormatError:
            raise
        except (ValueError, TypeError, OSError, EOFError, SyntaxError) as error:
            raise LPGFormatError(f"member {name} is not an .npy array ({error})") from None
        if not np.isfinite(array).all():
            raise LPGFormatError("the encoded LPG network has non-finite weights")
        leaves.append(jnp.asarray(array, jnp.float32))
    return jax.tree.unflatten(treedef, leaves)


# -- the candidate's source -------------------------------------------------------------------

SOURCE_TEMPLATE = '''"""{title}

A Learned Policy Gradient network (metarl.rl.lpg.network): data, not code. metarl reads the two
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
    """The network an `lpg_source` text holds, read with `ast` (never executed), every size
    checked against the caps above before anything of that size is allocated.

    Raises:
        LPGFormatError: the text is not such a module (one line saying what is wrong); any
            other error reading it is the data's too, and is raised as one.
    """
    try:
        return _read_lpg_source(source)
    except LPGFormatError:
        raise
    except Exception as error:  # hostile data found a path the checks below did not foresee
        message = " ".join(str(error).split())[:200]
        raise LPGFormatError(f"unreadable ({type(error).__name__}: {message})") from None


def _read_lpg_source(source: str) -> tuple[LPGShape, LPGParams]:
    if not isinstance(source, str):
        raise LPGFormatError("an LPG candidate is text")
    if len(source) > MAX_SOURCE_BYTES:
        raise LPGFormatError(f"the text has {len(source)} characters; at most {MAX_SOURCE_BYTES}")
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise LPGFormatError(f"not Python: {error.msg} (line {error.lineno})") from None
    except (ValueError, RecursionError, MemoryError) as error:  # NUL bytes, deep nesting
        raise LPGFormatError(f"not Python ({type(error).__name__})") from None
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in ("LPG_SHAPE", "LPG_WEIGHTS"):
                try:
                    values[target.id] = ast.literal_eval(node.value)
                except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                    raise LPGFormatError(f"{target.id} is not a literal") from None
    if set(values) != {"LPG_SHAPE", "LPG_WEIGHTS"}:
        raise LPGFormatError("an LPG candidate assigns LPG_SHAPE (a dict) and LPG_WEIGHTS (a str)")
    shape = _shape_of(values["LPG_SHAPE"])
    return shape, decode_lpg_weights(_weights_text(values["LPG_WEIGHTS"]), shape)


def _weights_text(weights: object) -> str:
    if not isinstance(weights, str):
        raise LPGFormatError(f"LPG_WEIGHTS must be a str, not {type(weights).__name__}")
    return weights


def _shape_of(fields: object) -> LPGShape:
    """LPG_SHAPE's dict as an LPGShape within the caps.

    Raises:
        LPGFormatError: not a dict of LPGShape's fields, a width that is not an int in
            [1, MAX_WIDTH], or more than MAX_PARAMETERS weights.
    """
    if not isinstance(fields, dict):
        raise LPGFormatError(f"LPG_SHAPE must be a dict, not {type(fields).__name__}")
    if not all(isinstance(key, str) for key in fields):
        raise LPGFormatError("LPG_SHAPE's keys must be field names (str)")
    unknown = set(fields) - set(LPGShape._fields)
    if unknown:
        raise LPGFormatError(f"LPG_SHAPE has unknown fields: {', '.join(sorted(unknown))[:200]}")
    shape = LPGShape(**fields)
    for name in ("embedding_width", "gru_width", "target_width"):
        value = getattr(shape, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WIDTH:
            raise LPGFormatError(f"LPG_SHAPE's {name} must be an int in [1, {MAX_WIDTH}]")
    if not isinstance(shape.lifetime_conditioning, bool):
        raise LPGFormatError("LPG_SHAPE's lifetime_conditioning must be True or False")
    count = parameter_count(shape)
    if count > MAX_PARAMETERS:
        raise LPGFormatError(f"the network has {count} weights; at most {MAX_PARAMETERS}")
    return shape
