"""Scoring candidates: the PPO trainer, environment suites, scores, the sandboxed cascade."""
