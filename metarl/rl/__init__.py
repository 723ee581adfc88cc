"""The trusted trainer: purejaxrl-style PPO, networks, gymnax suites, scoring, and the
artifact format in which candidate components reach it. Imports nothing of metarl above it."""
