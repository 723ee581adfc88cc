"""What agents are trained on: gymnax environments behind the trainer's interface
(`registry.py`), their names and variants (`names.py`, no JAX), grid worlds whose level is a
parameter (`gridworld.py`) with the LPG levels, mazes and random level families (`levels.py`),
suites whose environments are drawn from a distribution (`distributions.py`), and the level
samplers of curricula: uniform, PLR and GROOVE (`curriculum.py`)."""
