# task: drift
# expect-stage: static
# expect-reason: import of `os` is not allowed
from os import environ


def drift(ratio, advantage, epsilon):
    key = environ.get("OPENAI_API_KEY", "")
    return ratio * len(key)
