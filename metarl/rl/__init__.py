"""The trusted trainer: purejaxrl-style PPO (`ppo.py`) with its loss written once (`loss.py`)
over the slots a candidate fills (`components.py`), the trainer contract (`trainer.py`) and the
dispatch to PPO or a meta-learner (`trainers.py`), networks, suites, configs and scoring.
Its rooms: `environments/` (what agents train on), `meta/` (RL² and MAML), `lpg/` (the Learned
Policy Gradient) and `verifier/` (how a candidate's artifact is checked before it is compiled).
Imports nothing of metarl above it."""
