"""The one exception a configuration problem raises."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration problem; ``str()`` is one line naming the key."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config error: {key}: {problem}")
        self.key = key
        self.problem = problem
