"""The trainer's side of the rollout server: start-up checks with actionable errors, and weight sync.

CPU: the whole (LoRA-merged) state dict goes to `rlvr serve` through `rlvr.serve.CPUWeightSyncClient`.
GPU: verifiers' own NCCL protocol (`VLLMClient`, driven by `RLTrainer.update_vllm`).
"""

from __future__ import annotations

import httpx
import torch
from accelerate.utils import is_peft_model


class ServerError(RuntimeError):
    """The rollout server is missing or does not fit the trainer, with what to do about it."""


def start_command(model: str, port: int | str) -> str:
    return f"rlvr serve --model {model} --port {port}"


def check_server(url: str, model: str, tokenizer, timeout: float = 10.0) -> str:
    """Fail early and clearly: the server answers, serves a model, and tokenises chats like the trainer.

    Returns the served model name to use in requests.
    """
    root = url.rstrip("/").removesuffix("/v1")
    port = root.rsplit(":", 1)[-1]
    try:
        httpx.get(f"{root}/health", timeout=timeout).raise_for_status()
        served = [m["id"] for m in httpx.get(f"{root}/v1/models", timeout=timeout).json()["data"]]
    except (httpx.HTTPError, KeyError, ValueError) as e:
        raise ServerError(
            f"the rollout server at {root} is unreachable ({type(e).__name__}: {e}).\n"
            f"  start one:  {start_command(model, port)}\n"
            f"  or let rlvr.trainer.run_training start it (server_url=None)"
        ) from e
    if not served:
        raise ServerError(f"the server at {root} serves no model")
    name = model if model in served else served[0]
    probe = [{"role": "system", "content": "probe"}, {"role": "user", "content": "Hello, 1 + 1 = ?"}]
    response = httpx.post(f"{root}/tokenize", json={"model": name, "messages": probe,
                                                     "add_generation_prompt": True}, timeout=timeout)
    response.raise_for_status()
    server_ids = response.json()["tokens"]
    trainer_ids = list(tokenizer.apply_chat_template(probe, tokenize=True, add_generation_prompt=True,
                                                     return_dict=False))
    if server_ids != trainer_ids:
        raise ServerError(
            f"the served model {name!r} tokenises a chat differently from the trainer's tokenizer "
            f"(server {server_ids[:12]}... vs trainer {trainer_ids[:12]}...): serve the same model as you train "
            f"({start_command(model, port)})"
        )
    return name


def check_token_ids(url: str, model: str, sampling_args: dict, timeout: float = 60.0) -> None:
    """One 1-token request with the training sampling args: the answer must carry token ids and logprobs.

    Without them verifiers' parse_response_tokens either returns None (the trainer would train on nothing) or
    fails deep inside a rollout; here the cause is named before any generation.
    """
    root = url.rstrip("/").removesuffix("/v1")
    body = {k: v for k, v in sampling_args.items() if k != "extra_body"}
    body.update(sampling_args.get("extra_body") or {})
    body.update(model=model, max_tokens=1, messages=[{"role": "user", "content": "Hi"}])
    response = httpx.post(f"{root}/v1/chat/completions", json=body, timeout=timeout)
    response.raise_for_status()
    answer = response.json()
    choice = answer["choices"][0]
    if not answer.get("prompt_token_ids") or not choice.get("token_ids") or not choice.get("logprobs"):
        raise missing_token_ids_error(root)


def missing_token_ids_error(url: str) -> ServerError:
    return ServerError(
        f"the rollout server at {url} returned no token ids or logprobs, so there is nothing to train on. "
        "vLLM returns them when the request sets extra_body.return_token_ids=True and logprobs=True "
        "(MTGRPOConfig.sampling_args does) and the server supports `return_token_ids` (vLLM >= 0.10.2; "
        "`rlvr serve` does). Check that the URL points at a vLLM server, not another OpenAI-compatible one."
    )


def policy_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights vLLM should serve, under checkpoint names: LoRA merged into the base weights.

    `state_dict()`, not `named_parameters()`: the latter lists a tied lm_head only once (as the embedding), and a
    server that keeps lm_head as its own tensor (vLLM on CPU in fp32) would keep serving the old one. Name mapping
    as in verifiers' RLTrainer.update_vllm (verifiers/rl/trainer/trainer.py). Tensors are cloned: under LoRA they
    must outlive `unmerge_adapter`.
    """
    if not is_peft_model(model):
        return {name: t.detach().clone() for name, t in model.state_dict().items()}
    state: dict[str, torch.Tensor] = {}
    model.merge_adapter()
    try:
        for name, tensor in model.state_dict().items():
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            if model.prefix in name or "original_module" in name:
                continue  # the LoRA factors themselves, and modules_to_save's frozen originals
            state[name.replace("modules_to_save.default.", "")] = tensor.detach().clone()
    finally:
        model.unmerge_adapter()
    return state


def server_prompt_logprobs(url: str, model: str, input_ids: list[int], timeout: float = 60.0) -> list[float]:
    """The server's logprob of each token of `input_ids` given the previous ones (vLLM `prompt_logprobs`)."""
    root = url.rstrip("/").removesuffix("/v1")
    response = httpx.post(f"{root}/v1/completions", json={
        "model": model, "prompt": input_ids, "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0,
    }, timeout=timeout)
    response.raise_for_status()
    entries = response.json()["choices"][0]["prompt_logprobs"]
    # entries[i] maps token ids (as strings) to {"logprob": ...}; entry 0 is None (no context).
    return [entry[str(tok)]["logprob"] for tok, entry in zip(input_ids[1:], entries[1:], strict=True)]
