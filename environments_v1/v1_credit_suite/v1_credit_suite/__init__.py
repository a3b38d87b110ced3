"""v1-credit-suite: vf-credit-suite (rlvr's credit-suite LLM tier) ported to verifiers v1, a Taskset and its
in-process harness (docs/v1.md, "Moving an rlvr environment to v1")."""

from v1_credit_suite.harness import ActionWordHarness
from v1_credit_suite.taskset import CreditSuiteTaskset

__all__ = ["ActionWordHarness", "CreditSuiteTaskset"]
