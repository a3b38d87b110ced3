"""v1-reverse-text: a verifiers v1 environment in the shape hub environments take (a Taskset, no harness)."""

from v1_reverse_text.taskset import ReverseTextTaskset

__all__ = ["ReverseTextTaskset"]
