"""Evaluation of candidate programs: the static check, the sandbox and its workers, the cascade,
baseline caches and outcomes. Candidate code never runs in this package's parent process."""
