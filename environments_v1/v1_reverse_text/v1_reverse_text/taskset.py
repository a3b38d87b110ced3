"""Reverse a short phrase character by character: one turn, scored by how close the answer is.

The shape of verifiers' hub environments (its repository's environments/, e.g. reverse-text, and what `vf-init`
scaffolds): a package that exports a `Taskset` and no `Harness`, so verifiers plays it with its default harness,
`bash` (verifiers.v1.utils.loaders.default_harness_id), a PEP 723 chat program that the runtime installs with
`uv sync --script`. rlvr's bridge runs that program offline (docs/v1.md, "Hub-shaped environments"). The phrases
are drawn from a seeded word list instead of a dataset, so nothing is downloaded.
"""

from __future__ import annotations

import random
import re
from difflib import SequenceMatcher

import verifiers.v1 as vf

SYSTEM = "Reverse the text character by character. Put your answer in <reversed> tags."
ANSWER = re.compile(r"<reversed>(.*?)</reversed>", re.DOTALL)
WORDS = ("amber", "basin", "cedar", "delta", "ember", "fjord", "grove", "harbor", "island", "juniper", "kettle",
         "lantern", "meadow", "nectar", "orbit", "pebble", "quartz", "river", "saddle", "timber", "umbra", "valley",
         "willow", "yonder", "zephyr")


class ReverseTextData(vf.TaskData):
    answer: str
    """The phrase, reversed."""


def reply_answer(reply: str) -> str:
    """What the reply put between the last pair of <reversed> tags, stripped; empty without tags."""
    found = ANSWER.findall(reply)
    return found[-1].strip() if found else ""


class ReverseTextTask(vf.Task[ReverseTextData]):
    @vf.stop
    async def one_turn(self, trace: vf.Trace) -> bool:
        return trace.num_turns >= 1

    @vf.reward(weight=1.0)
    async def similarity(self, trace: vf.Trace) -> float:
        """difflib's ratio (2 x matched characters / both lengths) of the tagged answer and the reversal."""
        return SequenceMatcher(None, reply_answer(trace.last_reply or ""), self.data.answer).ratio()

    @vf.metric
    async def exact(self, trace: vf.Trace) -> float:
        return float(reply_answer(trace.last_reply or "") == self.data.answer)


class ReverseTextConfig(vf.TasksetConfig):
    num_tasks: int = 64
    """How many phrases."""
    seed: int = 0
    """The seed of the phrases."""
    max_words: int = 3
    """Words per phrase (1 to max_words)."""


class ReverseTextTaskset(vf.Taskset[ReverseTextTask, ReverseTextConfig]):
    def load(self) -> list[ReverseTextTask]:
        rng = random.Random(self.config.seed)
        tasks = []
        for i in range(self.config.num_tasks):
            phrase = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, self.config.max_words)))
            data = ReverseTextData(id=f"reverse-{i}", prompt=phrase, system_prompt=SYSTEM, answer=phrase[::-1])
            tasks.append(ReverseTextTask(data, self.config.task))
        return tasks
