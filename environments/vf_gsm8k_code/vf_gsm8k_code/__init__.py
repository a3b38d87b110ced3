"""vf-gsm8k-code: GSM8K word problems solved with a sandboxed Python tool (verl-tool's MT-GRPO recipe).

Turn reward for code that runs, outcome reward for the right answer. Recipe: problems (data.py) -> a protocol
over the sandbox (protocols.py) -> verl-tool's rewards (rewards.py; answers.py reads and compares the answer).
"""

from __future__ import annotations

from typing import Any

import verifiers as vf

from rlvr.rubrics import TurnRubric
from rlvr.rubrics.parsing import XMLParser
from rlvr.sandbox import SandboxConfig
from vf_gsm8k_code import data
from vf_gsm8k_code.protocols import NATIVE_SYSTEM_PROMPT, XML_SYSTEM_PROMPT, CodeToolEnv, CodeXMLEnv
from vf_gsm8k_code.rewards import code_execution_reward, correct_answer_reward

PROTOCOLS = {"xml": (CodeXMLEnv, XML_SYSTEM_PROMPT), "native": (CodeToolEnv, NATIVE_SYSTEM_PROMPT)}


def load_environment(
    dataset: str = "synthetic",
    protocol: str = "xml",
    max_turns: int = 2,
    num_train_examples: int = 1000,
    num_eval_examples: int = 100,
    seed: int = 0,
    data_path: str | None = None,
    sandbox: dict[str, Any] | None = None,
    **kwargs,
) -> vf.Environment:
    """dataset: "synthetic" (reasoning-gym gsm_symbolic) | "hf" (openai/gsm8k main) | "jsonl" (data_path);
    protocol: "xml" (<code> / <output>) | "native" (a `python` tool call); sandbox: SandboxConfig fields."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}: choose one of {list(PROTOCOLS)}")
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    train, eval_ = data.load(dataset, num_train_examples, num_eval_examples, seed, data_path)
    parser = XMLParser(["code", "answer"], answer_field="answer")
    rubric = TurnRubric(
        turn_rewards=[(code_execution_reward, 1.0)],  # verl-tool's weights are inside the formula
        outcome_rewards=[(correct_answer_reward, 1.0)],
        parser=parser,
    )
    env_class, system_prompt = PROTOCOLS[protocol]
    return env_class(sandbox=SandboxConfig(**(sandbox or {})), system_prompt=system_prompt, dataset=train,
                     eval_dataset=eval_, rubric=rubric, parser=parser, max_turns=max_turns, **kwargs)


__all__ = ["load_environment"]
