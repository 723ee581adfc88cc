"""Meta-RL learners scored by adaptation: the task families (`tasks.py`), the names of their
runs and the slots each learner reads (`names.py`, no JAX), the outer loop they share as a
`Trainer` (`loop.py`), RL² (`rl2.py`) and MAML (`maml.py`), and the trainer and references built
from a meta-RL environment name (`envs.py`)."""
