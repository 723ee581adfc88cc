"""The meta-networks the ES can search, one per task: what the network is, how a population of
them trains (`train(rng, meta_params)`), and how one becomes candidate source.

- `drift`: the LPO meta-network (rl/lpo.py); zero weights are PPO-clip.
- `optimizer`: OPEN-lite (blackbox/open_lite.py); zero weights are Adam.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from metarl.blackbox import open_lite
from metarl.blackbox.export import lpo_source
from metarl.rl import lpo
from metarl.rl.configs import PPOConfig


class Family(NamedTuple):
    task: str
    network: str  # its name in titles and metadata
    default_hidden: int
    zero_params: Callable[[int], lpo.MetaParams]
    make_train: Callable[[PPOConfig], Callable]
    source: Callable[[lpo.MetaParams, str], str]


FAMILIES = {
    "drift": Family(
        "drift",
        "LPO meta-network",
        lpo.LPO_HIDDEN,
        lpo.zero_params,
        lpo.make_meta_train,
        lpo_source,
    ),
    "optimizer": Family(
        "optimizer",
        "OPEN-lite network",
        open_lite.OPEN_LITE_HIDDEN,
        open_lite.zero_params,
        open_lite.make_open_lite_train,
        open_lite.open_lite_source,
    ),
}
