"""The accelerate configs load with accelerate's own parser and say what the README promises.

ZeRO-2/3 are GPU configs: validated here (parsed, DeepSpeed plugin built from them), never run on this machine.
"""

from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.utils import DeepSpeedPlugin, DistributedType

CONFIGS = Path(__file__).resolve().parents[2] / "src" / "rlvr" / "trainer" / "accelerate"


def load(name):
    return load_config_from_file(str(CONFIGS / name))


def test_cpu_single_process():
    config = load("cpu.yaml")
    assert config.distributed_type == DistributedType.NO and config.use_cpu and config.num_processes == 1


def test_cpu_two_process_gloo_ddp():
    config = load("cpu_ddp.yaml")
    assert config.distributed_type == DistributedType.MULTI_CPU  # torch.distributed with gloo
    assert config.use_cpu and config.num_processes == 2


@pytest.mark.parametrize("name, stage", [("zero2.yaml", 2), ("zero3.yaml", 3)])
def test_deepspeed_configs_build_a_plugin(name, stage):
    config = load(name)
    assert config.distributed_type == DistributedType.DEEPSPEED and config.mixed_precision == "bf16"
    ds = config.deepspeed_config
    plugin = DeepSpeedPlugin(
        zero_stage=ds["zero_stage"], gradient_accumulation_steps=ds["gradient_accumulation_steps"],
        gradient_clipping=ds["gradient_clipping"], zero3_init_flag=ds["zero3_init_flag"],
        offload_optimizer_device=ds["offload_optimizer_device"], offload_param_device=ds["offload_param_device"],
    )
    assert plugin.zero_stage == stage
    assert plugin.deepspeed_config["zero_optimization"]["stage"] == stage
