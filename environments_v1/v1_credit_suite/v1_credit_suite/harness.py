"""The credit suite's harness: the model says one action word per turn, the environment answers with the next
observation (rlvr.suite.protocol's `Play`, vf-credit-suite's protocol), inside the rollout's own process (no program
to install, no network).

vf-credit-suite's MultiTurnEnv loop (env_response, max_turns = the task's turns, the final observation as the
final environment response) becomes this `launch`: verifiers' Harness contract lets a harness run its loop
in-process as long as every model call goes through the interception `endpoint` with its `secret`
(verifiers/v1/harness.py, `Harness.launch`), which records each reply as a sampled node of the trace.
"""

from __future__ import annotations

import json

import verifiers.v1 as vf
from openai import AsyncOpenAI

from rlvr.suite.protocol import Play
from v1_credit_suite.taskset import spec


class ActionWordHarness(vf.Harness):
    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData) -> vf.ProgramResult:
        play = Play(spec(data), data.seed)
        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            while not play.done:  # the task ends the episode: a terminal state or its last turn
                response = await client.chat.completions.create(model=ctx.model, messages=messages)
                reply = response.choices[0].message.content or ""
                turn = play.act(reply)
                messages.append({"role": "assistant", "content": reply})
                if not turn.done:  # the last observation goes to no model (the trace's info keeps it)
                    messages.append({"role": "user", "content": turn.reply})
        return vf.ProgramResult(exit_code=0, stdout=json.dumps({"turns": len(play.turns)}), stderr="")
