"""Test-time search with OREO's value model (arXiv 2412.16145, Sec. 4.4), behind an OpenAI-compatible client, so
that any environment runs it unchanged (`rlvr evaluate --search beam --value-model RUN/value --beam-width K`).

beam       step-level beam search for reasoning (the paper's math search; examples/scratch/batch_sbs_qwen.py):
           keep B partial solutions; extend each by B sampled next steps (up to the next newline); keep the B
           extensions the value model rates highest; a candidate that ends (end of turn or token budget) joins
           the finished ones; the finished candidate with the highest value is the answer.
best_of_k  for agents, whose environment cannot be searched ahead (Sec. 4.4): sample K whole turns and act with
           the one the value model rates highest (examples/scratch/run_alfworld_async_with_value.py).

Candidates are sampled at temperature 1 (the original's `expand`). A seeded request (`rlvr.seeding`: `rlvr evaluate`
seeds every request unless --unseeded) seeds the search's own: best_of_k's one request of K samples with it (vLLM
gives sample i the seed + i), beam's request for beam b at step s with `derived_seed(seed, s, b)`; so the same seed
searches the same way. A candidate's value is V at its last token:
the state after the step in the value model's training (rlvr.offline.oreo: position t holds V(ids[:t+1])).
The original reads the second-to-last position (its critic drops the last one); that is the state before the
last token, so here the last token is used.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import torch

from rlvr.seeding import derived_seed

SearchMode = Literal["beam", "best_of_k"]
SEARCH_MODES = ("beam", "best_of_k")


class SearchError(ValueError):
    """A search that cannot run as asked (value model missing or for another tokenizer), with what to do."""


class ValueModel:
    """A value model saved by `rlvr train --algo oreo` (run_dir/value): V of a chat-rendered text at its last token."""

    def __init__(self, path: str | Path, policy_tokenizer, batch_size: int = 8):
        from transformers import AutoModelForTokenClassification, AutoTokenizer

        path = Path(path)
        if not (path / "config.json").is_file():
            raise SearchError(f"no value model at {path}: pass the value/ directory of an OREO run "
                              "(`rlvr train --algo oreo` writes RUN_DIR/value)")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        check_same_tokenizer(self.tokenizer, policy_tokenizer, path)
        self.model = AutoModelForTokenClassification.from_pretrained(path).eval()
        if self.model.config.num_labels != 1:
            raise SearchError(f"{path} is not a value model (it has {self.model.config.num_labels} outputs, not 1)")
        self.batch_size = batch_size
        self._lock = threading.Lock()  # one forward at a time: rollouts call it concurrently from threads

    @torch.no_grad()
    def values(self, texts: list[str]) -> list[float]:
        out: list[float] = []
        with self._lock:
            for start in range(0, len(texts), self.batch_size):
                encoded = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts[start:start + self.batch_size]]
                length = max(len(ids) for ids in encoded)
                ids = torch.zeros(len(encoded), length, dtype=torch.long)
                mask = torch.zeros(len(encoded), length, dtype=torch.long)
                for b, row in enumerate(encoded):
                    ids[b, : len(row)], mask[b, : len(row)] = torch.tensor(row), 1
                logits = self.model(input_ids=ids, attention_mask=mask).logits[..., 0]
                last = mask.sum(-1) - 1
                out += logits[torch.arange(len(encoded)), last].float().tolist()
        return out


def check_same_tokenizer(value_tokenizer, policy_tokenizer, where) -> None:
    """The value model reads the policy's text: both must tokenise it identically."""
    ours, theirs = value_tokenizer.get_vocab(), policy_tokenizer.get_vocab()
    if ours != theirs:
        differing = len(set(ours.items()) ^ set(theirs.items()))
        raise SearchError(
            f"the value model at {where} uses another tokenizer than the policy ({len(ours)} vs {len(theirs)} "
            f"tokens, {differing} entries differ): its values would be read from the wrong tokens. Use the value/ "
            "directory of the OREO run whose final/ policy you evaluate"
        )


@dataclass(frozen=True)
class SearchConfig:
    mode: SearchMode = "beam"
    width: int = 4  # beam: B partial solutions kept and B samples per partial solution; best_of_k: K samples
    temperature: float = 1.0
    delimiter: str = "\n"  # the end of a reasoning step
    max_steps: int = 20  # as batch_sbs_qwen.py

    def __post_init__(self):
        if self.mode not in SEARCH_MODES:
            raise SearchError(f"search mode {self.mode!r} is not one of {SEARCH_MODES}")
        if self.width < 1:
            raise SearchError(f"beam width {self.width} must be >= 1")


@dataclass(frozen=True)
class Candidate:
    text: str  # the completion so far
    finished: bool


def select(candidates: list[Candidate], values: list[float], width: int) -> list[Candidate]:
    """The `width` candidates with the highest values (ties: the earlier one)."""
    order = sorted(range(len(candidates)), key=lambda i: -values[i])
    return [candidates[i] for i in order[:width]]


class ValueGuidedClient:
    """Answers verifiers' `client.chat.completions.create(model=..., messages=..., **sampling_args)` with a
    value-guided search over samples from an OpenAI-compatible completions server (`rlvr serve`)."""

    def __init__(self, base_url: str, model: str, tokenizer, value_model: ValueModel, config: SearchConfig):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.tokenizer = tokenizer
        self.value_model = value_model
        self.config = config
        self.chat = self
        self.completions = self
        self.scored = 0  # candidates the value model rated
        self._http = httpx.AsyncClient(timeout=600.0)

    async def _sample(self, prompt: str, n: int, max_tokens: int, stop: list[str] | None,
                      seed: int | None) -> list[dict]:
        body = {"model": self.model, "prompt": prompt, "n": n, "temperature": self.config.temperature,
                "max_tokens": max_tokens, "include_stop_str_in_output": True, **({"stop": stop} if stop else {}),
                **({"seed": seed} if seed is not None else {})}
        response = await self._http.post(f"{self.base_url}/completions", json=body)
        response.raise_for_status()
        return response.json()["choices"]

    async def _values(self, prompt: str, candidates: list[Candidate]) -> list[float]:
        self.scored += len(candidates)
        return await asyncio.to_thread(self.value_model.values, [prompt + c.text for c in candidates])

    def _tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    async def best_of_k(self, prompt: str, max_tokens: int, seed: int | None = None) -> str:
        choices = await self._sample(prompt, self.config.width, max_tokens, None, seed)
        candidates = [Candidate(c["text"], True) for c in choices]
        return select(candidates, await self._values(prompt, candidates), 1)[0].text

    async def beam(self, prompt: str, max_tokens: int, seed: int | None = None) -> str:
        cfg = self.config
        beams, finished = [Candidate("", False)], []
        for step in range(cfg.max_steps):
            budgets = [max_tokens - self._tokens(b.text) for b in beams]
            expansions = await asyncio.gather(*(
                self._sample(prompt + b.text, cfg.width, budget, [cfg.delimiter],
                             None if seed is None else derived_seed(seed, step, i))
                for i, (b, budget) in enumerate(zip(beams, budgets, strict=True)) if budget > 0))
            growing = []
            for beam, choices in zip([b for b, n in zip(beams, budgets, strict=True) if n > 0], expansions,
                                     strict=True):
                for choice in choices:
                    text = beam.text + choice["text"]
                    ended_step = choice.get("stop_reason") == cfg.delimiter and self._tokens(text) < max_tokens
                    (growing if ended_step else finished).append(Candidate(text, not ended_step))
            if not growing:
                break
            beams = select(growing, await self._values(prompt, growing), cfg.width)
        finished = finished or beams
        return select(finished, await self._values(prompt, finished), 1)[0].text

    async def create(self, model: str, messages: list[dict[str, Any]], **sampling_args) -> Any:
        from openai.types.chat import ChatCompletion

        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        max_tokens = int(sampling_args.get("max_tokens") or sampling_args.get("max_completion_tokens") or 256)
        search = self.beam if self.config.mode == "beam" else self.best_of_k
        text = await search(prompt, max_tokens, sampling_args.get("seed"))
        return ChatCompletion.model_validate({
            "id": f"search-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        })

    async def close(self) -> None:
        await self._http.aclose()


def search_client(base_url: str, served_model: str, policy: str, value_model: str | Path, mode: str,
                  width: int) -> ValueGuidedClient:
    """The client `rlvr evaluate --search MODE --value-model DIR --beam-width K` rolls out with. `policy` names
    the evaluated model (its tokenizer renders the chat and must be the value model's)."""
    from transformers import AutoTokenizer

    from rlvr import models

    if value_model is None:
        raise SearchError("give --value-model DIR: the value/ directory of the OREO run that trained the policy")
    tokenizer = AutoTokenizer.from_pretrained(models.resolve(policy))
    config = SearchConfig(mode=mode, width=width)
    return ValueGuidedClient(base_url, served_model, tokenizer, ValueModel(value_model, tokenizer), config)
