"""configs/pipelines/webshop_sft_lora.toml (issue 39, item 2): the LoRA warm start beside the full-weight SFT of
webshop_rl_cpu.toml, read and planned as `rlvr pipeline` and `rlvr study` read them; nothing is trained."""

from __future__ import annotations

from pathlib import Path

from rlvr.pipeline import Plan, read_pipeline

ROOT = Path(__file__).resolve().parents[2]


def test_the_lora_sft_stage_fingerprints_an_adapter_trained_like_the_full_sft(tmp_path):
    from rlvr.cli.study import resolve_settings
    from rlvr.study.runner import cell_config

    lora = read_pipeline(ROOT / "configs/pipelines/webshop_sft_lora.toml")
    full = read_pipeline(ROOT / "configs/pipelines/webshop_rl_cpu.toml")
    out = Path("runs/pipeline-webshop")
    plan, full_plan = Plan(lora, out), Plan(full, out)
    # the same expert command: with the same --out, the full pipeline's finished expert stage is reused
    assert plan.units(lora.stage("expert"))[0].command == full_plan.units(full.stage("expert"))[0].command
    (sft_lora,) = plan.units(lora.stage("sft_lora"))
    (sft,) = full_plan.units(full.stage("sft"))
    assert sft_lora.weights == out / "sft_lora/cells/sft/seed-0/train/final" and sft_lora.here != sft.here
    assert lora.results == "benchmarks/results/pipeline_webshop_sft_lora"

    def settings(unit):
        argv = unit.argv
        return resolve_settings(ROOT / argv[argv.index("-c") + 1], None, argv[argv.index("--model") + 1], None, None,
                                int(argv[argv.index("--steps") + 1]), [], argv[argv.index("--env-args") + 1],
                                int(argv[argv.index("--eval-examples") + 1]), None, None,
                                [argv[argv.index("--offline-dataset") + 1]])

    with_lora, without = settings(sft_lora), settings(sft)
    config = cell_config(with_lora, "sft", 0, tmp_path / "train")
    assert config.use_lora and (config.lora_rank, config.lora_alpha) == (8, 32)
    assert not cell_config(without, "sft", 0, tmp_path / "train").use_lora
    # everything but the LoRA options and the rate is the full-weight SFT's: the two compare directly
    def shared(options):
        return {k: v for k, v in options.items() if k not in {"use_lora", "lora_rank", "lora_alpha", "learning_rate"}}

    assert shared(with_lora.cell_training("sft")) == shared(without.cell_training("sft"))
    assert with_lora.evaluation == without.evaluation and with_lora.model == without.model == "smollm2-135m"
