"""v1-calculator: rlvr's verifiers v1 environment (a Taskset and its in-process harness)."""

from v1_calculator.harness import ToolLoopHarness
from v1_calculator.taskset import CalculatorTaskset

__all__ = ["CalculatorTaskset", "ToolLoopHarness"]
