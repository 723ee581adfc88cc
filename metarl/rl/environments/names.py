"""Environment names: a gymnax name, or a *variant* of one with some `EnvParams` changed.

Names only (no gymnax, no JAX), so grid levels (levels.py), suites and the evaluation settings
read them without the environments that registry.py builds from them.
"""

from __future__ import annotations

import re

from metarl.errors import USAGE, MetarlError


class UnknownEnvironment(MetarlError, ValueError):
    """An environment gymnax does not have, or one metarl's discrete PPO cannot train on."""

    exit_code = USAGE


VARIANT_SEPARATOR = ":"


def split_variant(name: str) -> tuple[str, dict[str, float]]:
    """A variant name's gymnax environment and parameter changes.

    A *variant* is a gymnax environment with some of its `EnvParams` changed, written
    `Base:field=value+field=value` (e.g. `CartPole-v1:gravity=15+force_mag=7`): the same
    dynamics family at another parameterisation, which is how a suite's validation role asks
    "does it generalise beyond the exact training environment" without a new code path.

    Args:
        name: an environment name, plain (`CartPole-v1`) or a variant.

    Returns:
        (the gymnax name, field -> value); the dict is empty for a plain name.

    Raises:
        UnknownEnvironment: a malformed change (not `field=number`).
    """
    base, _, changes = name.partition(VARIANT_SEPARATOR)
    params: dict[str, float] = {}
    for change in filter(None, (c.strip() for c in re.split(r"\+(?=[A-Za-z_])", changes))):
        field, equals, value = change.partition("=")
        try:
            if not equals:
                raise ValueError(change)
            params[field.strip()] = float(value)
        except ValueError:
            raise UnknownEnvironment(
                f"malformed environment variant {name!r}: write {base}:field=number+field=number"
            ) from None
    return base, params


# every grid level (levels.py) is a member of one family: one canvas, `GridLevel` arrays
GRID_FAMILY = "Grid"


def env_family(name: str) -> str | None:
    """The family an environment is a member of when members differ only in their params, so
    one compiled program trains them all with the params as an input: every grid level
    (`Grid-...`) and every variant of a gymnax env (`CartPole-v1:length=0.6` is a
    `CartPole-v1`). None for an env of its own (a plain gymnax name), whose params stay
    constants of its program.

    A curriculum draws a new level every generation; with the level a constant each draw
    compiled its own program (~10-25 s a level on the 2-core CPU)."""
    base, changes = split_variant(name)
    if base.startswith(GRID_FAMILY + "-"):
        return GRID_FAMILY
    return base if changes else None


def base_name(name: str) -> str:
    """The gymnax environment a (possibly variant) name runs."""
    return split_variant(name)[0]
