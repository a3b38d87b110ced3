"""The tool-calling protocols: the MT-GRPO paper's XML one, OpenAI tool calls, and a minimal search-tag protocol for
small models; each with its system prompt and parser, collected in PROTOCOLS.

XML (SiliangZeng/Multi-Turn-RL-Agent verifiers/envs/tool_env.py): the model writes <reasoning>...</reasoning>
then <tool>{"name": ..., "args": {...}}</tool> or <answer>...</answer>; generation stops at </tool> or
</answer>; the environment replies with a user message <result>...</result>. Every bad call (invalid or deeply
nested JSON, an unknown tool, wrong arguments, a failing search) gets an "Error: ..." result that says what to
fix, never an exception, so the turn rewards can score it. Parsing is linear in the message length
(rlvr.rubrics.parsing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import verifiers as vf

from rlvr.rubrics.parsing import XMLParser
from rlvr.tools import GuardedToolEnv, ToolCallError, check_arguments, parse_json_object, shorten

XML_TAGS = ("reasoning", "tool", "answer")
SEARCH_TAGS = ("search", "answer")
TOOL_EXAMPLE = '{"name": "wiki_search", "args": {"query": "Ada Lovelace"}}'
NO_CALL_REPLY = (
    "Error: no <tool> call and no <answer> found. Call a tool as "
    '<tool>{"name": ..., "args": {...}}</tool> or give your final answer inside <answer> tags.'
)
NO_SEARCH_REPLY = "Error: no <search> and no <answer> found. Search as <search>keywords</search> or answer inside <answer> tags."

XML_PROMPT = """\
Answer the question. You can search Wikipedia with this tool:

wiki_search: returns the best matching Wikipedia passage.
  args: {{"query": "<what to search for, e.g. a name or a few keywords>"}}

{steps}
Format:
1. Think inside <reasoning> tags.
2. To search, write a JSON command inside <tool> tags, e.g.
   <tool>{{"name": "wiki_search", "args": {{"query": "Ada Lovelace"}}}}</tool>
   The search result comes back inside <result> tags.
3. Think about the result inside <reasoning> tags, then give only the answer (a name, place, year or short
   phrase) inside <answer> tags."""

NATIVE_PROMPT = """\
Answer the question. Search Wikipedia with the wiki_search tool.
{steps}
Think inside <reasoning> tags, then give only the answer (a name, place, year or short phrase) inside
<answer> tags."""

SEARCH_PROMPT = """\
Answer the question. You can search an encyclopedia: write <search>a name or keywords</search> and the
result comes back inside <result> tags. {steps} Give only the answer inside <answer> tags."""

# One worked exchange about an entity that is not in any world: small models copy the format from it.
SEARCH_FEW_SHOT = [
    {"role": "user", "content": "What is the capital of Velmora?"},
    {"role": "assistant", "content": "<search>Velmora</search>"},
    {"role": "user", "content": "<result>\nVelmora is a country. The capital of Velmora is Ostrikan.\n</result>"},
    {"role": "assistant", "content": "<answer>Ostrikan</answer>"},
]


def steps_sentence(max_turns: int) -> str:
    # The original prompt asks for exactly one search (max_steps=2); allow more when the turn budget does.
    if max_turns == 2:
        return "Search exactly once, then answer, even if the result does not help."
    return f"Search up to {max_turns - 1} times, then answer."


def xml_parser() -> XMLParser:
    return XMLParser(fields=["reasoning", ("tool", "answer")], answer_field="answer")


def native_parser() -> XMLParser:
    return XMLParser(fields=["reasoning", "answer"])


def search_parser() -> XMLParser:
    return XMLParser(fields=[("search", "answer")], answer_field="answer")


def call_tool_json(tool_json: str, tools: dict[str, Callable]) -> str:
    """Run one <tool> command; every failure becomes an "Error: ..." string that tells the model what to fix."""
    try:
        command = parse_json_object(tool_json, what="the <tool> content", example=TOOL_EXAMPLE)
        name, args = command.get("name"), command.get("args", {})
        if not isinstance(name, str):
            raise ToolCallError(f'the <tool> content must be a JSON object with a string "name" and an "args" object, '
                                f"e.g. {TOOL_EXAMPLE}")
        if not isinstance(args, dict):
            raise ToolCallError(f'"args" of {shorten(name, 60)} must be a JSON object, got {type(args).__name__}; '
                                f"e.g. {TOOL_EXAMPLE}")
        check_arguments(tools, name, args)
    except ToolCallError as e:
        return f"Error: {e}"
    try:
        result = str(tools[name](**args))
    except Exception as e:  # a tool failure is the model's feedback, not a crash of the rollout
        return f"Error: {name} failed: {shorten(str(e))}"
    return result if result.strip() else f"Error: {name} returned empty output"


class XMLToolEnv(vf.MultiTurnEnv):
    """Multi-turn tool use in the XML protocol; the rollout ends at an <answer> or after `max_turns` turns."""

    stop_strings = ["</tool>", "</answer>"]

    def __init__(self, tools: list[Callable], max_turns: int = 2, **kwargs):
        self.tools = {tool.__name__: tool for tool in tools}
        self.env_parser = XMLParser(fields=["result"])
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


class NativeToolEnv(GuardedToolEnv):
    """OpenAI tool calls (verifiers' ToolEnv, through rlvr.tools.GuardedToolEnv): one call per turn runs, as one
    <tool> command per message in the XML protocol; failed calls read "Error: ..." and say what to fix."""

    def __init__(self, tools: list[Callable], max_turns: int = 2, **kwargs):
        super().__init__(tools=tools, max_turns=max_turns, max_calls_per_turn=1, **kwargs)


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
        kwargs.setdefault("few_shot", SEARCH_FEW_SHOT)
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
                result = f"Error: search failed: {shorten(str(e))}"
        return [{"role": "user", "content": self.env_parser.format(result=result)}]


@dataclass(frozen=True)
class Protocol:
    """How the model calls the search tool: the environment class, its system prompt and parser, the tag that holds
    a call (for tool_execution_reward) and the tags xml_tag_reward checks."""

    env_class: type[vf.MultiTurnEnv]
    system_prompt: str
    parser: Callable[[], XMLParser]
    tool_tag: str
    tags: tuple[str, ...]


PROTOCOLS = {
    "xml": Protocol(XMLToolEnv, XML_PROMPT, xml_parser, "tool", XML_TAGS),
    "native": Protocol(NativeToolEnv, NATIVE_PROMPT, native_parser, "tool", XML_TAGS),
    "search": Protocol(SearchTagEnv, SEARCH_PROMPT, search_parser, "search", SEARCH_TAGS),
}
