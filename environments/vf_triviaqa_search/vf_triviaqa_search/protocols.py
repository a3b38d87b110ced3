"""The tool-calling protocols: the MT-GRPO paper's XML one, OpenAI tool calls (verifiers' ToolEnv), and a minimal
search-tag protocol for small models.

XML (SiliangZeng/Multi-Turn-RL-Agent verifiers/envs/tool_env.py): the model writes <reasoning>...</reasoning>
then <tool>{"name": ..., "args": {...}}</tool> or <answer>...</answer>; generation stops at </tool> or
</answer>; the environment replies with a user message <result>...</result>. A bad call gets an
"Error: ..." result (never an exception), so the turn rewards can score it.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import verifiers as vf

XML_FIELDS = ["reasoning", ("tool", "answer")]
XML_TAGS = ("reasoning", "tool", "answer")
SEARCH_TAGS = ("search", "answer")
NO_CALL_REPLY = (
    "Error: no <tool> call and no <answer> found. Call a tool as "
    '<tool>{"name": ..., "args": {...}}</tool> or give your final answer inside <answer> tags.'
)


def xml_parser() -> vf.XMLParser:
    return vf.XMLParser(fields=XML_FIELDS, answer_field="answer")


def result_parser() -> vf.XMLParser:
    return vf.XMLParser(fields=["result"])


def call_tool_json(tool_json: str, tools: dict[str, Callable]) -> str:
    """Run one <tool> command; every failure becomes an "Error: ..." string that tells the model what to fix."""
    try:
        command = json.loads(tool_json)
    except json.JSONDecodeError as e:
        return f'Error: the <tool> content is not valid JSON ({e.msg}); write {{"name": ..., "args": {{...}}}}'
    if not isinstance(command, dict) or not isinstance(command.get("name"), str):
        return 'Error: the <tool> content must be a JSON object with a string "name" and an "args" object'
    name, args = command["name"], command.get("args", {})
    if name not in tools:
        return f"Error: unknown tool {name!r}; available tools: {', '.join(sorted(tools))}"
    if not isinstance(args, dict):
        return f'Error: "args" of {name} must be a JSON object, got {type(args).__name__}'
    try:
        result = str(tools[name](**args))
    except Exception as e:  # a tool failure is the model's feedback, not a crash of the rollout
        return f"Error: {name} failed: {e}"
    return result if result.strip() else f"Error: {name} returned empty output"


class XMLToolEnv(vf.MultiTurnEnv):
    """Multi-turn tool use in the XML protocol; the rollout ends at an <answer> or after `max_turns` turns."""

    stop_strings = ["</tool>", "</answer>"]

    def __init__(self, tools: list[Callable], max_turns: int = 2, **kwargs):
        self.tools = {tool.__name__: tool for tool in tools}
        self.env_parser = result_parser()
        super().__init__(max_turns=max_turns, parser=kwargs.pop("parser", xml_parser()), **kwargs)

    async def setup_state(self, state: vf.State) -> vf.State:
        # The parser needs the closing tag: keep the stop strings in the output (a vLLM sampling parameter).
        # Set per rollout because a caller's sampling_args replace the environment's extra_body wholesale.
        sampling_args = dict(state.get("sampling_args") or {})
        sampling_args["stop"] = self.stop_strings
        sampling_args["extra_body"] = {**(sampling_args.get("extra_body") or {}), "include_stop_str_in_output": True}
        state["sampling_args"] = sampling_args
        return state

    @vf.stop
    async def answered(self, state: vf.State) -> bool:
        if not state["trajectory"]:
            return False
        last = state["trajectory"][-1]["completion"][-1]
        return self.parser.parse(str(last.get("content") or "")).answer is not None

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs) -> vf.Messages:
        assert isinstance(messages, list)
        tool_json = self.parser.parse(str(messages[-1].get("content") or "")).tool
        if tool_json is None:
            return [{"role": "user", "content": NO_CALL_REPLY}]
        result = call_tool_json(tool_json, self.tools)
        return [{"role": "user", "content": self.env_parser.format(result=result)}]


class NativeToolEnv(vf.ToolEnv):
    """verifiers' ToolEnv whose failed calls all read "Error: ..." (its default message for an unknown tool is
    a bare KeyError such as "'wiki_serch'")."""

    def __init__(self, tools: list[Callable], max_turns: int = 2, **kwargs):
        super().__init__(tools=tools, max_turns=max_turns, error_formatter=lambda e: f"Error: {e}", **kwargs)

    async def call_tool(self, tool_name: str, tool_args: dict, tool_call_id: str, **kwargs) -> vf.Message:
        if tool_name not in self.tool_map:
            raise ValueError(f"unknown tool {tool_name!r}; available tools: {', '.join(sorted(self.tool_map))}")
        if not isinstance(tool_args, dict):
            raise ValueError(f"arguments of {tool_name} must be a JSON object, got {type(tool_args).__name__}")
        return await super().call_tool(tool_name, tool_args, tool_call_id, **kwargs)


def search_parser() -> vf.XMLParser:
    return vf.XMLParser(fields=[("search", "answer")], answer_field="answer")


NO_SEARCH_REPLY = "Error: no <search> and no <answer> found. Search as <search>keywords</search> or answer inside <answer> tags."


class SearchTagEnv(XMLToolEnv):
    """The smallest protocol: <search>keywords</search> runs the one search tool, <answer>...</answer> ends.

    The paper's JSON-in-<tool> format is out of reach of a 135M model (SmolLM2-135M wrote a valid call in 0 of
    16 sampled rollouts; measured for the demo), while a bare tag is within reach (about half of the samples
    with a one-example few-shot at temperature 0.7), which is the spread GRPO needs to learn from.
    """

    stop_strings = ["</search>", "</answer>"]

    def __init__(self, tools: list[Callable], max_turns: int = 2, **kwargs):
        if len(tools) != 1:
            raise ValueError(f"the search protocol drives exactly one search tool, got {len(tools)}")
        super().__init__(tools=tools, max_turns=max_turns, parser=kwargs.pop("parser", search_parser()), **kwargs)
        self.search = tools[0]

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs) -> vf.Messages:
        assert isinstance(messages, list)
        query = self.parser.parse(str(messages[-1].get("content") or "")).search
        if query is None:
            return [{"role": "user", "content": NO_SEARCH_REPLY}]
        if not query.strip():
            result = "Error: empty search; write a name or keywords inside <search> tags"
        else:
            try:
                result = str(self.search(query.strip())) or "Error: the search returned nothing"
            except Exception as e:  # a tool failure is the model's feedback, not a crash of the rollout
                result = f"Error: search failed: {e}"
        return [{"role": "user", "content": self.env_parser.format(result=result)}]
