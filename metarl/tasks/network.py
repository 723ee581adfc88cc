"""A task whose candidate is data: a network's weights, with which metarl's own code trains agents.

A program task (tasks/base.py's `Task`) fills a trainer slot with a candidate's code. A network
task's candidate is never run: it is a parameter file that a trusted trainer reads (an LPG
network: rl/lpg/agent.py trains an agent whose update targets the network outputs). The
declaration needs no JAX, so the CLI and the report read it cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NetworkTask:
    """What the layers above need to know of a network task.

    Attributes:
        name: the task's name (`--task`).
        summary: one line for help texts.
        reference: what its scores are normalised against, in prose (no program: its baseline
            is an agent trained by a fixed rule, e.g. LPG's actor-critic).
        reference_short: the same in a table's column.
        default_hidden: the network's hidden width when a search does not set one.
        es_schedule: the ES's (sigma, sigma_decay, sigma_floor, lr, lr_decay, lr_floor).
    """

    name: str
    summary: str
    reference: str
    reference_short: str
    default_hidden: int
    es_schedule: tuple[float, float, float, float, float, float]
