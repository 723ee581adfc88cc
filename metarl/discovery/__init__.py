"""The discovery loop: population and selection, prompts, proposers."""
