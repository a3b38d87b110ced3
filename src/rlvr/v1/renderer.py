"""A `renderers` renderer for rlvr's models (runs in the bridge's interpreter, .venv-v1, never in rlvr's).

verifiers 0.4's train client renders prompts itself with a `renderers` Renderer and parses each completion's
tool calls from token ids. rlvr's models (tiny-random, SmolLM2) carry a Hermes tool template
(rlvr.models.TOOL_CHAT_TEMPLATE) in which `<tool_call>` is plain text, not a special token, so the package's
Hermes parser (`qwen3`, which looks the tag up as one token id) finds no call. This renderer is the package's
DefaultRenderer (the model's own chat template, so prompts are the token ids `rlvr serve` would render) with a
parser that finds the tags in the decoded text. Selected by rlvr.v1 as
`CustomRendererConfig(import_path="<this file>:HermesTextRenderer")`.
"""

from __future__ import annotations

import json
import re

from renderers.base import ParsedToolCall, ToolCallParseStatus
from renderers.configs import DefaultRendererConfig
from renderers.default import DefaultRenderer

OPEN, CLOSE = "<tool_call>", "</tool_call>"
BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(" + re.escape(CLOSE) + r"|$)", re.DOTALL)


class HermesTextToolParser:
    """`<tool_call>{"name": ..., "arguments": ...}</tool_call>` blocks found in the decoded completion."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=False)

    def extract(self, ids: list[int]) -> tuple[list[int], list[ParsedToolCall]]:
        text = self._decode(ids)
        if OPEN not in text:
            return ids, []
        # The content is the longest run of leading tokens whose text ends before the first tag.
        tag = text.index(OPEN)
        end = 0
        while end < len(ids) and len(self._decode(ids[: end + 1])) <= tag:
            end += 1
        content_ids = ids[:end]
        calls = []
        for match in BLOCK.finditer(text):
            raw = match.group(1).strip()
            if not match.group(2):
                calls.append(ParsedToolCall(raw=raw, status=ToolCallParseStatus.UNCLOSED_BLOCK))
                continue
            try:
                parsed = json.loads(raw)
            except json.JSONDecodeError:
                calls.append(ParsedToolCall(raw=raw, status=ToolCallParseStatus.INVALID_JSON))
                continue
            name = parsed.get("name") if isinstance(parsed, dict) else None
            arguments = parsed.get("arguments", {}) if isinstance(parsed, dict) else {}
            calls.append(ParsedToolCall(raw=raw, name=name or None, arguments=arguments,
                                        status=ToolCallParseStatus.OK if name else ToolCallParseStatus.MISSING_NAME))
        return content_ids, calls


class HermesTextRenderer(DefaultRenderer):
    config_class = DefaultRendererConfig

    def __init__(self, tokenizer, config: DefaultRendererConfig | None = None):
        super().__init__(tokenizer, config)
        self._tool_parser = HermesTextToolParser(tokenizer)
