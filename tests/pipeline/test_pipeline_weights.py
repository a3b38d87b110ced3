"""Starting weights checked against a committed fingerprint (rlvr.weights, a pipeline stage's `weights`): the
fingerprint ignores how tensors are stored and sees a one-ulp change; a rebuilt stage whose weights differ from the
committed record is named (the tensor, how much) and stops the pipeline before a later stage starts from it, unless
--accept-weights names it. Stages are real processes writing real safetensors files."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from rlvr.pipeline import MARKER, PipelineError, export_results, read_pipeline, run_pipeline
from rlvr.weights import describe, differences, fingerprint, main, max_abs_diff

# a stage command: a two-tensor checkpoint in {here}/final, its bias scaled by the argument
TRAIN = textwrap.dedent("""
    import pathlib, sys, torch
    from safetensors.torch import save_file
    here, scale = pathlib.Path(sys.argv[1]), float(sys.argv[2])
    (here / "final").mkdir(parents=True, exist_ok=True)
    save_file({"layer.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3) / 7,
               "layer.bias": torch.ones(2) * scale}, str(here / "final" / "model.safetensors"))
""")
# a later stage: records whether the pipeline told it that an accepted mismatch precedes it
NEXT = textwrap.dedent("""
    import os, pathlib, sys
    here = pathlib.Path(sys.argv[1])
    here.mkdir(parents=True, exist_ok=True)
    (here / "accept.txt").write_text(os.environ.get("RLVR_ACCEPT_WEIGHTS", ""))
""")


def checkpoint(directory: Path, tensors: dict[str, torch.Tensor], shards: int = 1) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    names = list(tensors)
    for k in range(shards):
        save_file({n: tensors[n] for n in names[k::shards]}, str(directory / f"model-{k}.safetensors"))
    return directory


def test_fingerprint_sees_the_bytes_not_the_layout_and_names_what_differs(tmp_path, capsys):
    weights = {"a.weight": torch.randn(4, 3), "b.bias": torch.randn(3), "c.weight": torch.randn(2, 2).bfloat16()}
    one = fingerprint(checkpoint(tmp_path / "one", weights))
    # other shards, reversed save order: the same tensors hash alike
    assert fingerprint(checkpoint(tmp_path / "two", dict(reversed(weights.items())), shards=2)) == one
    assert one["tensors"]["c.weight"]["dtype"] == "bfloat16" and one["tensors"]["a.weight"]["shape"] == [4, 3]

    nudged = dict(weights, **{"b.bias": torch.nextafter(weights["b.bias"], torch.tensor(9.0))})  # one ulp
    other = fingerprint(checkpoint(tmp_path / "nudged", nudged))
    assert other["sha256"] != one["sha256"]
    (found,) = differences(one, other)
    assert (found.name, found.what) == ("b.bias", "values") and found.norm_change < 1e-6
    assert describe([found], 3).startswith("1 of 3 tensors differ; largest: b.bias (values, |norm change| ")
    assert differences(one, one) == []
    reshaped = fingerprint(checkpoint(tmp_path / "reshaped", dict(weights, **{"a.weight": torch.randn(3, 4)})))
    assert [(d.name, d.what) for d in differences(one, reshaped)] == [("a.weight", "shape/dtype")]

    diffs = dict(max_abs_diff(tmp_path / "one", tmp_path / "nudged"))
    assert diffs["a.weight"] == 0.0 and 0 < diffs["b.bias"] < 1e-6
    assert main(["diff", str(tmp_path / "one"), str(tmp_path / "nudged")]) == 0
    assert "1 of 3 tensors differ" in capsys.readouterr().out


def test_check_compares_a_checkpoint_with_each_kind_of_record(tmp_path, capsys):
    """`python -m rlvr.weights check RECORD DIR`: a fingerprint file, a pipeline stage's record and a study unit's
    record (only the starting weights' sha256) each say same (exit 0) or differ (exit 1, what differs where known);
    a record without a fingerprint or a directory without weights is an error naming what to give (exit 2)."""
    weights = {"a.weight": torch.randn(4, 3), "b.bias": torch.randn(3)}
    made = checkpoint(tmp_path / "made", weights)
    other = checkpoint(tmp_path / "other", dict(weights, **{"b.bias": weights["b.bias"] * 2}))
    saved = tmp_path / "fingerprint.json"
    assert main(["fingerprint", str(made), "-o", str(saved)]) == 0
    assert json.loads(saved.read_text()) == fingerprint(made)
    assert capsys.readouterr().out.startswith(fingerprint(made)["sha256"])
    stage = tmp_path / "pipeline_stage.json"
    stage.write_text(json.dumps({"stage": "sft", "weights": fingerprint(made)}))
    study = tmp_path / "seed-0.json"
    study.write_text(json.dumps({"key": "cells/grpo/seed-0", "provenance": {"model_sha256": fingerprint(made)["sha256"]}}))

    for record, what in ((saved, "the fingerprint in"), (stage, "pipeline stage sft"), (study, "cells/grpo/seed-0")):
        assert main(["check", str(record), str(made)]) == 0
        out = capsys.readouterr().out
        assert "the same weights as" in out and what in out
        assert main(["check", str(record), str(other)]) == 1
        out = capsys.readouterr().out
        assert "DIFFERS from" in out and what in out
        if record is study:
            assert "which tensors differ is not known" in out
        else:
            assert "1 of 2 tensors differ; largest: b.bias (values" in out

    bare = tmp_path / "no_fingerprint.json"
    bare.write_text(json.dumps({"stage": "expert", "command": "python -m vf_webshop.expert"}))
    assert main(["check", str(bare), str(made)]) == 2
    assert "holds no fingerprint: give a pipeline stage's pipeline_stage.json" in capsys.readouterr().err
    assert main(["check", str(saved), str(tmp_path)]) == 2
    assert "holds no *.safetensors file" in capsys.readouterr().err


def write_pipeline(tmp_path: Path, committed: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "next.py").write_text(NEXT)
    config = tmp_path / "pipeline.toml"
    config.write_text(textwrap.dedent(f"""
        results = "{committed}"
        [vars]
        scale = "1.0"
        [[stages]]
        name = "sft"
        out = "sft"
        weights = "final"
        command = "python {tmp_path / 'train.py'} {{here}} {{scale}}"
        [[stages]]
        name = "rl"
        out = "rl"
        command = "python {tmp_path / 'next.py'} {{here}}"
    """))
    return config


def test_a_rebuilt_stage_is_checked_against_its_committed_fingerprint(tmp_path):
    committed = tmp_path / "committed"
    config = write_pipeline(tmp_path, committed)
    lines: list[str] = []
    # the first build: nothing committed yet, said so; the fingerprint is in the stage's record, and exported
    run_pipeline(read_pipeline(config), tmp_path / "first", echo=lines.append)
    record = json.loads((tmp_path / "first/sft" / MARKER).read_text())
    assert record["weights"] == fingerprint(tmp_path / "first/sft/final")
    assert record["weights_check"].startswith("not checked: no committed fingerprint")
    export_results(read_pipeline(config), tmp_path / "first", committed)
    assert json.loads((committed / "sft" / MARKER).read_text())["weights"]["sha256"] == record["weights"]["sha256"]

    # a rebuild elsewhere (another directory) with the same command: it matches
    run_pipeline(read_pipeline(config), tmp_path / "same", echo=lines.append)
    assert "match the committed ones" in json.loads((tmp_path / "same/sft" / MARKER).read_text())["weights_check"]
    assert (tmp_path / "same/rl/accept.txt").read_text() == ""

    # a rebuild that differs: named, and the rl stage does not start from it, now or when the command is run again
    changed = read_pipeline(config, {"scale": "1.5"})
    for _attempt in range(2):
        with pytest.raises(PipelineError, match=r"stage sft: its weights .*final DIFFER from the committed ones "
                                                r"\(.*committed/sft/pipeline_stage.json\): 1 of 2 tensors differ; "
                                                r"largest: layer.bias \(values, \|norm change\| 0.707\)") as err:
            run_pipeline(changed, tmp_path / "other", echo=lines.append)
        assert "--accept-weights sft" in str(err.value) and "another command" in str(err.value)
        assert not (tmp_path / "other/rl").exists()
    # accepted: the mismatch is recorded, and the pipeline goes on
    run_pipeline(changed, tmp_path / "other", echo=lines.append, accept_weights=["sft"])
    assert (tmp_path / "other/rl" / MARKER).is_file()
    # ... and tells the later stages, whose studies then take those weights beside committed units (rlvr study
    # --accept-weights reads RLVR_ACCEPT_WEIGHTS)
    assert (tmp_path / "other/rl/accept.txt").read_text() == "1"
    check = json.loads((tmp_path / "other/sft" / MARKER).read_text())["weights_check"]
    assert check.startswith("DIFFER") and check.endswith("accepted (--accept-weights sft)")
    with pytest.raises(PipelineError, match="--accept-weights rl: stage rl has no `weights` to check"):
        run_pipeline(changed, tmp_path / "other", accept_weights=["rl"])

    # a stage record made before fingerprints were kept gets one from the weights still there
    marker = tmp_path / "first/sft" / MARKER
    old = json.loads(marker.read_text())
    del old["weights"], old["weights_check"]
    marker.write_text(json.dumps(old))
    run_pipeline(read_pipeline(config), tmp_path / "first", echo=lines.append)
    assert json.loads(marker.read_text())["weights"] == record["weights"]
    assert "match the committed ones" in json.loads(marker.read_text())["weights_check"]


def test_the_webshop_rl_pipeline_checks_its_sft_weights_and_commits_its_cells():
    from rlvr.cli.study import resolve_settings
    from rlvr.pipeline import Plan

    root = Path(__file__).resolve().parents[2]
    pipeline = read_pipeline(root / "configs/pipelines/webshop_rl_cpu.toml")
    plan = Plan(pipeline, Path("runs/pipeline-webshop"))
    (sft,) = plan.units(pipeline.stage("sft"))
    assert sft.weights == Path("runs/pipeline-webshop/sft/cells/sft/seed-0/train/final")
    # the same SFT command as webshop_cpu.toml's, so one rebuild serves both
    whole = read_pipeline(root / "configs/pipelines/webshop_cpu.toml")
    (full,) = Plan(whole, plan.out).units(whole.stage("sft"))
    assert full.command == sft.command
    (rl,) = plan.units(pipeline.stage("rl"))
    assert rl.argv[rl.argv.index("--model") + 1] == str(sft.weights)
    # the pilot starts from the same SFT weights: GiGPO at two learning rates, with held-out curves, trained on a
    # fresh catalogue's goals and evaluated on the SFT stage's held-out goals
    (pilot,) = plan.units(pipeline.stage("pilot"))
    assert pilot.argv[pilot.argv.index("--model") + 1] == str(sft.weights)
    piloted = resolve_settings(root / pilot.argv[pilot.argv.index("-c") + 1], None, str(sft.weights), None, None,
                               None, [], pilot.argv[pilot.argv.index("--env-args") + 1], 50, None, None)
    assert piloted.variants == {"gigpo_lr1e5": "gigpo", "gigpo_lr3e6": "gigpo"} and piloted.evaluation.at_steps == [4, 8]
    assert piloted.results == "benchmarks/results/study_webshop_rl_pilot_fresh"
    assert piloted.training_env_args() == {**piloted.env_args, "seed": 1} and "seed" not in piloted.env_args
    settings = resolve_settings(root / rl.argv[rl.argv.index("-c") + 1], None, str(sft.weights), None, "0,1,2", 12,
                                [], rl.argv[rl.argv.index("--env-args") + 1], 50, None, None)
    assert settings.algos == ["grpo", "gigpo", "mt_grpo_k", "ppo_bi_level"] and settings.seeds == [0, 1, 2]
    assert settings.results == "benchmarks/results/study_webshop_rl" and settings.evaluation.examples == 50
    assert settings.env_args["num_eval_examples"] == 50 and settings.train_env_args == piloted.train_env_args
