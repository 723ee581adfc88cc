"""The Learned Policy Gradient task (Oh et al. 2020; GROOVE, Jackson et al. 2023).

Its candidate is an LPG network's weights, searched by the ES on level distributions
(blackbox/lpg_es.py) and scored by training actor-critic agents whose update targets are the
network's outputs (rl/lpg/agent.py). Its scores are relative to the actor-critic trained with
the same seeds and budget. The ES schedule is GROOVE's published correction: sigma 0.1 with no
decay, learning rate 1e-2 times 0.999 per generation down to 1e-5.
"""

from metarl.tasks.network import NetworkTask

TASK = NetworkTask(
    name="lpg",
    summary="the Learned Policy Gradient network, meta-trained on level distributions",
    reference="the actor-critic",
    reference_short="actor-critic",
    default_hidden=32,
    es_schedule=(0.1, 1.0, 0.1, 0.01, 0.999, 1e-5),
)
