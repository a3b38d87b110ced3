"""The calculator's harness: a tool loop that runs inside the rollout's own process.

verifiers' built-in chat harnesses (null, bash) launch a program that `uv sync --script` installs in every new
process, which needs the package index at run time. This loop needs nothing: verifiers' Harness contract allows a
harness to run its loop in-process as long as every model call goes through the interception `endpoint` with its
`secret` (verifiers/v1/harness.py, `Harness.launch`), which records each turn on the trace.
"""

from __future__ import annotations

import json

import verifiers.v1 as vf
from openai import AsyncOpenAI

from v1_calculator import tools


class ToolLoopHarnessConfig(vf.HarnessConfig):
    max_turns: int = 4
    """Model calls per rollout; the loop also ends at the first answer without a tool call."""


class ToolLoopHarness(vf.Harness[ToolLoopHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False  # the calculator evaluates a syntax tree; nothing runs in the runtime
    NEEDS_CONTAINER = False

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages: list[dict] = [{"role": "system", "content": system}] if system else []
        messages += [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [
            m.model_dump(exclude_none=True) for m in prompt or []]
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            for _ in range(self.config.max_turns):
                response = await client.chat.completions.create(model=ctx.model, messages=messages,
                                                                tools=[tools.SCHEMA])
                message = response.choices[0].message
                calls = message.tool_calls or []
                messages.append({"role": "assistant", "content": message.content or "", **({"tool_calls": [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.function.name, "arguments": c.function.arguments}}
                    for c in calls]} if calls else {})})
                if not calls or response.choices[0].finish_reason == "length":
                    break
                messages += [{"role": "tool", "tool_call_id": c.id,
                              "content": tools.call(c.function.name, c.function.arguments)} for c in calls]
        return vf.ProgramResult(exit_code=0, stdout=json.dumps({"turns": len(messages)}), stderr="")
