"""Reading model messages in time linear in their length: message text, <tag> contents, and an XMLParser.

A policy in RL writes anything, including an open tag followed by thousands of spaces and no closing tag. The
pattern `<tag>\\s*(.*?)\\s*</tag>` (verifiers' XMLParser.parse, and rlvr's first `tagged`) backtracks over every
split of that whitespace: cubic time, 27 s for 4,000 spaces (measured for issue 21). The functions here find the
tags with `str.find` instead and give the same results: the first (or last) non-overlapping <tag>...</tag>, its
content stripped of surrounding whitespace (the regex's `\\s` and `str.strip` agree on what whitespace is).
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import verifiers as vf

Message = dict[str, Any]


def message_text(message: Message | str) -> str:
    """The text of a chat message (string content or the text parts of a content list)."""
    if isinstance(message, str):
        return message
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def tag_contents(text: str, tag: str) -> Iterator[str]:
    """The stripped contents of the non-overlapping <tag>...</tag> in `text`, left to right, as re.finditer would
    find `<tag>\\s*(.*?)\\s*</tag>` (DOTALL): each opening tag closes at the first closing tag after it."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    position = 0
    while (start := text.find(opening, position)) != -1:
        inner = start + len(opening)
        end = text.find(closing, inner)
        if end == -1:  # no closing tag after this opening one, hence none after any later one either
            return
        yield text[inner:end].strip()
        position = end + len(closing)


def tagged(text: str, tag: str) -> str | None:
    """Content of the first <tag>...</tag> in text, stripped; None when absent."""
    return next(tag_contents(text, tag), None)


class XMLParser(vf.XMLParser):
    """verifiers' XMLParser with `parse` in linear time; everything else (parse_answer, the format reward, format)
    is verifiers' own and calls this `parse`. Results are those of verifiers' regex: `strip` makes no difference
    there either, since the pattern's `\\s*` already trims the content."""

    def parse(self, text: str, strip: bool = True, last: bool = False) -> Any:
        results: dict[str, str | None] = {}
        for _, alternatives in self._fields:
            for alt in alternatives:
                found = list(tag_contents(text, alt))
                results[alt] = (found[-1] if last else found[0]) if found else None
        return SimpleNamespace(**results)
