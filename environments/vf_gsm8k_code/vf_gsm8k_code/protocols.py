"""The two ways a model runs code: XML tags in its message, or a native `python` tool call; with their prompts.

Both execute through rlvr.sandbox. A failure of the sandbox itself (not of the program) becomes verifiers'
SandboxError, which ends that rollout with state["error"] instead of crashing the whole generate() call. Native
calls go through rlvr.tools.GuardedToolEnv: one program per turn runs (as one <code> block per message in XML; the
other calls of the turn are answered "Error: ..."), and a bad call gets an "Error: ..." that says what to fix.
"""

from __future__ import annotations

import re

import verifiers as vf

from rlvr.rubrics.parsing import message_text, tagged
from rlvr.sandbox import SandboxConfig, SandboxError, arun_python, frame, observation
from rlvr.tools import GuardedToolEnv

FENCE = re.compile(r"^```[\w+-]*\n(.*?)\n?```$", re.DOTALL)

XML_SYSTEM_PROMPT = """Solve the math word problem. You may run Python: write a complete program inside \
<code>...</code> and its printed output comes back inside <output>...</output> (use print). \
When you know the result, reply with only the final number inside <answer>...</answer>."""

NATIVE_SYSTEM_PROMPT = """Solve the math word problem. You may call the `python` tool to run a complete program; \
it returns what the program printed (use print). When you know the result, reply with only the final number \
inside <answer>...</answer>."""


def code_block(text: str) -> str | None:
    """The program in the first <code>...</code>, without a Markdown fence if the model added one."""
    code = tagged(text, "code")
    if code is None:
        return None
    fenced = FENCE.match(code)
    return fenced.group(1) if fenced else code


async def execute(code: str, config: SandboxConfig) -> str:
    """Run `code` in the sandbox; the unframed observation the model will see."""
    try:
        result = await arun_python(code, config)
    except SandboxError as e:
        raise vf.SandboxError(str(e)) from e
    except Exception as e:  # the sandbox broke on this program (its bug, not the program's): end only this rollout
        raise vf.SandboxError(f"the sandbox failed unexpectedly: {e!r}") from e
    return observation(result, config)


class CodeXMLEnv(vf.MultiTurnEnv):
    """A <code> block in the assistant's message is run; the reply is a user message <output>...</output>.
    The rollout ends at the first assistant message without a <code> block (its answer) or at max_turns."""

    def __init__(self, sandbox: SandboxConfig, **kwargs):
        super().__init__(**kwargs)
        self.sandbox = sandbox

    @vf.stop
    async def no_code(self, state: vf.State) -> bool:
        if not state["trajectory"]:
            return False
        return code_block(message_text(state["trajectory"][-1]["completion"][-1])) is None

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs) -> vf.Messages:
        code = code_block(message_text(messages[-1]))
        return [{"role": "user", "content": frame(await execute(code, self.sandbox))}]


class CodeToolEnv(GuardedToolEnv):
    """The native protocol: a `python(code)` tool; one call per turn runs. The rollout ends at the first assistant
    message without a tool call (its answer) or at max_turns."""

    def __init__(self, sandbox: SandboxConfig, **kwargs):
        super().__init__(tools=[python_tool(sandbox)], max_calls_per_turn=1, **kwargs)


def python_tool(config: SandboxConfig):
    """The native tool. Its docstring is the schema the model sees (verifiers converts it)."""

    async def python(code: str) -> str:
        """Run a Python program and return what it printed (stdout, then stderr and any error).

        Args:
            code: The complete Python program to run; print the values you need.
        """
        return await execute(code, config)

    return python
