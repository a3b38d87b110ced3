"""rlvr.pipeline: config checks with clear errors, placeholders, stage skipping and resume, foreach stages, the
records next to each result. Stages are real processes (this interpreter running small scripts)."""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from rlvr.pipeline import (
    MANIFEST,
    MARKER,
    MAX_RESULT_BYTES,
    PipelineError,
    Plan,
    export_results,
    read_pipeline,
    run_pipeline,
    stage_states,
)

# a stage command: append its arguments to {here}/calls.txt (creating {here}); exit 3 when FAIL_FLAG exists
STEP = textwrap.dedent("""
    import pathlib, sys
    here, *rest = sys.argv[1:]
    if pathlib.Path(here).parent.joinpath("FAIL_FLAG").exists():
        sys.exit(3)
    pathlib.Path(here).mkdir(parents=True, exist_ok=True)
    with open(pathlib.Path(here) / "calls.txt", "a") as f:
        f.write(" ".join(rest) + "\\n")
    print("step ran", here)
""")


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "step.py").write_text(STEP)
    path = tmp_path / "pipeline.toml"
    path.write_text(textwrap.dedent(text).replace("STEP", str(tmp_path / "step.py")))
    return path


PIPELINE = """
    description = "three stages, the last once per result of the second"
    [vars]
    model = "tiny"
    tag = "{model}-v1"
    [[stages]]
    name = "expert"
    out = "expert"
    command = "python STEP {here} games=2 '{\\"max_turns\\": 3}'"
    [[stages]]
    name = "rl"
    out = "rl"
    command = "python STEP {here} from={expert} tag={tag}"
    [[stages]]
    name = "evaluate"
    foreach = "{rl}/cells/*/seed-*"
    out = "eval/{name}"
    command = "python STEP {here} model={match}"
"""


def calls(directory: Path) -> list[str]:
    return (directory / "calls.txt").read_text().splitlines()


def test_stages_run_in_order_skip_when_done_and_record_their_commands(tmp_path, capsys):
    config, out = write(tmp_path, PIPELINE), tmp_path / "run"
    pipeline = read_pipeline(config)
    with pytest.raises(PipelineError, match=r"stage evaluate: nothing matches .*rl/cells/\*/seed-\*"):
        run_pipeline(pipeline, out)
    # the JSON value stays one argument, with its braces; vars and earlier stages are filled in
    assert calls(out / "expert") == ['games=2 {"max_turns": 3}']
    assert calls(out / "rl") == [f"from={out / 'expert'} tag=tiny-v1"]
    for cell in ("grpo/seed-0", "grpo/seed-1", "gigpo/seed-0"):
        (out / "rl" / "cells" / cell).mkdir(parents=True)
    ran = run_pipeline(pipeline, out, command="rlvr pipeline ...")
    assert [r["item"] for r in ran] == ["gigpo-seed-0", "grpo-seed-0", "grpo-seed-1"]  # finished stages skipped
    assert calls(out / "rl") == [f"from={out / 'expert'} tag=tiny-v1"]
    assert calls(out / "eval" / "grpo-seed-1") == [f"model={out / 'rl/cells/grpo/seed-1'}"]
    record = json.loads((out / "eval" / "grpo-seed-1" / MARKER).read_text())
    assert record["command"] == f"python {tmp_path / 'step.py'} {out / 'eval/grpo-seed-1'} model={out / 'rl/cells/grpo/seed-1'}"
    assert record["wall_s"] >= 0 and record["peak_rss_mb"] > 1 and "step ran" in Path(record["log"]).read_text()
    assert "stage expert: done, skipped" in capsys.readouterr().out
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["invocations"][0]["vars"] == {"model": "tiny", "tag": "{model}-v1"}
    assert len(manifest["invocations"]) == 2
    assert manifest["invocations"][-1]["finished"] and manifest["invocations"][0]["finished"] is None
    assert run_pipeline(pipeline, out) == []  # all done: nothing runs
    assert all(state.startswith("done") for _, state, _ in stage_states(pipeline, out))


def test_a_failed_stage_stops_the_pipeline_and_the_same_command_resumes_it(tmp_path):
    config, out = write(tmp_path, PIPELINE), tmp_path / "run"
    pipeline = read_pipeline(config)
    run_pipeline(pipeline, out, until="expert")
    (out / "FAIL_FLAG").touch()
    with pytest.raises(PipelineError, match=r"(?s)stage rl failed \(exit status 3\).*run the same `rlvr pipeline`"):
        run_pipeline(pipeline, out, until="rl")
    assert not (out / "rl" / MARKER).exists()
    states = [state for _, state, _ in stage_states(pipeline, out)]
    assert states[0].startswith("done") and states[1] == "to do"  # the failed stage wrote no directory
    (out / "FAIL_FLAG").unlink()
    assert [r["stage"] for r in run_pipeline(pipeline, out, until="rl")] == ["rl"]


def test_a_stage_that_writes_nothing_to_its_directory_is_not_marked_done(tmp_path):
    config = write(tmp_path, """
        [[stages]]
        name = "lazy"
        out = "lazy"
        command = "python -c pass"
    """)
    with pytest.raises(PipelineError, match=r"exited 0 but wrote nothing to .*lazy: its command must write"):
        run_pipeline(read_pipeline(config), tmp_path / "run")


def test_vars_that_would_change_a_finished_stage_are_refused(tmp_path):
    config, out = write(tmp_path, PIPELINE), tmp_path / "run"
    run_pipeline(read_pipeline(config), out, until="expert")
    # the expert stage does not use {model}: changing it is fine while only later stages use it
    assert [r["stage"] for r in run_pipeline(read_pipeline(config, {"model": "smol"}), out, until="rl")] == ["rl"]
    assert calls(out / "rl") == [f"from={out / 'expert'} tag=smol-v1"]
    with pytest.raises(PipelineError, match=r"(?s)finished stages that these vars would make differently.*"
                                            r"rl: made by .*tag=smol-v1\n    would now run .*tag=tiny-v1.*remove"):
        run_pipeline(read_pipeline(config), out, until="rl")
    manifest = json.loads((out / MANIFEST).read_text())
    assert [i["vars"]["model"] for i in manifest["invocations"]] == ["tiny", "smol"]  # the refused one is not kept
    (out / "rl" / MARKER).unlink()  # the documented way to make a stage again with the new command
    assert [r["stage"] for r in run_pipeline(read_pipeline(config), out, until="rl")] == ["rl"]
    plan = Plan(read_pipeline(config, {"model": "smol"}), tmp_path / "other")
    assert plan.values["tag"] == "smol-v1" and plan.values["rl"] == str(tmp_path / "other" / "rl")


def test_sigterm_is_passed_to_the_running_stage(tmp_path):
    """The stage's command decides where to stop (the training commands checkpoint first); the pipeline reports
    its exit status and leaves the stage unfinished."""
    script = tmp_path / "wait.py"
    script.write_text(textwrap.dedent("""
        import os, pathlib, signal, sys, time
        pathlib.Path(sys.argv[1]).mkdir(parents=True)
        # a session of its own: a terminal's Ctrl-C reaches the stage only through the pipeline, once
        assert os.getsid(0) != os.getsid(os.getppid()), "the stage shares the pipeline's session"
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        os.kill(os.getppid(), signal.SIGTERM)  # as a scheduler would signal the pipeline
        time.sleep(30)
    """))
    config = tmp_path / "p.toml"
    before = signal.getsignal(signal.SIGTERM)
    config.write_text(f'[[stages]]\nname = "train"\nout = "train"\ncommand = "python {script} {{here}}"\n')
    with pytest.raises(PipelineError, match=r"stage train failed \(exit status 143\)"):
        run_pipeline(read_pipeline(config), tmp_path / "run")
    assert signal.getsignal(signal.SIGTERM) == before  # the pipeline's own handling is back
    assert not (tmp_path / "run" / "train" / MARKER).exists()


BAD = [
    ('[[stages]]\nname = "a"\nout = "a"\ncommand = "x"\nfor_each = "b"\n', r"unknown key 'for_each'.*Did you mean 'foreach'"),
    ('stage = []\n', r"unknown key 'stage'.*Did you mean 'stages'"),
    ('[[stages]]\nname = "a"\nout = "a"\n', r"lacks command"),
    ('description = "none"\n', r"has no \[\[stages\]\]"),
    ('[[stages]]\nname = "a"\nout = "a"\ncommand = "x"\n[[stages]]\nname = "a"\nout = "b"\ncommand = "x"\n',
     r"two stages have this name"),
    ('[[stages]]\nname = "a"\nout = "a"\ncommand = "x"\n[[stages]]\nname = "b"\nout = "a"\ncommand = "x"\n',
     r"no other stage uses \(a does\)"),
    ('[[stages]]\nname = "a"\nout = "../a"\ncommand = "x"\n', r"inside the pipeline directory"),
    ('[[stages]]\nname = "a"\nout = "a"\ncommand = "x {b}"\n[[stages]]\nname = "b"\nout = "b"\ncommand = "x"\n',
     r"\{b\} .*that stage runs later"),
    ('[vars]\nmodel = "m"\n[[stages]]\nname = "a"\nout = "a"\ncommand = "x {modle}"\n', r"\{modle\}.*Did you mean 'model'"),
    ('[[stages]]\nname = "a"\nout = "a"\ncommand = "x {match}"\n', r"\{match\}.*not a var, an earlier stage"),
    ('[[stages]]\nname = "a"\nforeach = "x/*"\nout = "a"\ncommand = "x"\n', r"needs \{name\}"),
    ('[[stages]]\nname = "a"\nforeach = "x/*"\nout = "a/{name}"\ncommand = "x"\n[[stages]]\nname = "b"\nout = "b"\n'
     'command = "x {a}"\n', r"a foreach stage has one result directory per match"),
    ('[vars]\na = "{b}"\nb = "{a}"\n[[stages]]\nname = "s"\nout = "s"\ncommand = "x"\n', r"circle: a -> b -> a"),
    ('[vars]\nm = "{sft}/final"\n[[stages]]\nname = "sft"\nout = "s"\ncommand = "x"\n', r"holds \{sft\}, which is no var"),
    ('[vars]\nrl = "x"\n[[stages]]\nname = "rl"\nout = "s"\ncommand = "x"\n', r"not a var's"),
    ('[[stages]]\nname = "here"\nout = "s"\ncommand = "x"\n', r"one of \('out', 'here'"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_config_mistakes_are_named_before_anything_runs(tmp_path, text, message):
    config = tmp_path / "p.toml"
    config.write_text(text)
    with pytest.raises(PipelineError, match=message):
        read_pipeline(config)


def test_unknown_set_and_until_name_what_exists(tmp_path):
    config = write(tmp_path, PIPELINE)
    with pytest.raises(PipelineError, match=r"has no var 'modle'.*Did you mean 'model'"):
        read_pipeline(config, {"modle": "x"})
    with pytest.raises(PipelineError, match=r"(?s)no stage 'r' .*stages: expert, rl, evaluate"):
        run_pipeline(read_pipeline(config), tmp_path / "run", until="r")
    with pytest.raises(PipelineError, match="does not exist"):
        read_pipeline(tmp_path / "missing.toml")


def test_shipped_pipelines_are_valid():
    root = Path(__file__).resolve().parents[2] / "configs" / "pipelines"
    configs = sorted(root.glob("*.toml"))
    assert configs, root
    for config in configs:
        pipeline = read_pipeline(config)
        plan = Plan(pipeline, Path("runs/x"))
        for stage in pipeline.stages:
            for unit in plan.units(stage):  # placeholders all filled in, commands run here
                assert "{" not in " ".join(a for a in unit.argv if not a.startswith("{\"")), (config, unit.argv)
                assert unit.argv[0] in ("rlvr", "python"), unit.argv


def test_rlvr_and_python_run_in_this_interpreter():
    from rlvr.pipeline import executable

    assert executable(("rlvr", "study", "-o", "x")) == [sys.executable, "-m", "rlvr.cli", "study", "-o", "x"]
    assert executable(("python", "-m", "vf_webshop.expert")) == [sys.executable, "-m", "vf_webshop.expert"]


def test_command_line_dry_run_and_errors(tmp_path):
    from typer.testing import CliRunner

    from rlvr.cli import app

    config, out = write(tmp_path, PIPELINE), tmp_path / "run"
    run_pipeline(read_pipeline(config), out, until="expert")
    result = CliRunner().invoke(app, ["pipeline", str(config), "-o", str(out), "--dry-run"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any("expert" in line and "done (0.0 min)" in line for line in lines)
    assert any(line.split("│")[1].strip() == "rl" and "to do" in line for line in lines if "│" in line)
    assert any("once per match of" in line for line in lines) and not (out / "rl").exists()  # ran nothing
    bad = CliRunner().invoke(app, ["pipeline", str(config), "-o", str(out), "--set", "model"])
    assert bad.exit_code == 2 and "write NAME=VALUE" in bad.output
    run_pipeline(read_pipeline(config), out, until="rl")
    other = CliRunner().invoke(app, ["pipeline", str(config), "-o", str(out), "--set", "model=smol", "--until", "rl"])
    assert other.exit_code == 2 and "would make differently" in other.output
    exported = CliRunner().invoke(app, ["pipeline", str(config), "-o", str(out), "--export", str(tmp_path / "res")])
    assert exported.exit_code == 0 and "3 result files" in exported.output, exported.output  # manifest, 2 markers
    assert (tmp_path / "res" / "rl" / MARKER).is_file() and not (out / "eval").exists()  # ran nothing


def test_a_stage_is_terminated_when_the_pipeline_is_killed(tmp_path):
    """kill -9 of `rlvr pipeline` skips its forwarding: the stage gets SIGTERM from the kernel (PR_SET_PDEATHSIG),
    so that it stops at a checkpoint instead of running on unobserved."""
    import os
    import subprocess
    import time

    script = tmp_path / "stage.py"
    script.write_text(textwrap.dedent("""
        import os, pathlib, signal, sys, time
        here = pathlib.Path(sys.argv[1])
        here.mkdir(parents=True)
        signal.signal(signal.SIGTERM, lambda *_: ((here / "terminated").touch(), sys.exit(143)))
        (here / "started").touch()
        time.sleep(60)
    """))
    config = tmp_path / "p.toml"
    config.write_text(f'[[stages]]\nname = "train"\nout = "train"\ncommand = "python {script} {{here}}"\n')
    runner = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "pipeline", str(config), "-o", str(tmp_path / "run")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    here = tmp_path / "run" / "train"
    deadline = time.monotonic() + 120
    while not (here / "started").exists() and time.monotonic() < deadline and runner.poll() is None:
        time.sleep(0.1)
    assert (here / "started").exists(), "the stage did not start"
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    deadline = time.monotonic() + 10
    while not (here / "terminated").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (here / "terminated").exists() and not (here / MARKER).exists()


def test_export_copies_the_finished_stages_reports_and_not_their_weights(tmp_path):
    config, out, dest = write(tmp_path, PIPELINE), tmp_path / "run", tmp_path / "results"
    pipeline = read_pipeline(config)
    with pytest.raises(PipelineError, match="no finished stage to export"):
        export_results(pipeline, out, dest)
    run_pipeline(pipeline, out, until="rl")
    rl = out / "rl"
    for name, size in (("report.md", 10), ("summary.json", 10), ("cells/sft/seed-0/eval/summary.json", 10),
                       ("plots/won.png", 10), ("cells/sft/seed-0/train/final/model.safetensors", 10),
                       ("cells/sft/seed-0/train/checkpoint-5/summary.json", 10),
                       ("cells/sft/seed-0/eval/results.jsonl", 10), ("huge/summary.json", MAX_RESULT_BYTES + 1)):
        (rl / name).parent.mkdir(parents=True, exist_ok=True)
        (rl / name).write_bytes(b"x" * size)
    (out / "expert" / "report.md").write_text("unfinished stages are left out")
    (out / "expert" / MARKER).unlink()
    copied = export_results(pipeline, out, dest)
    assert sorted(str(p.relative_to(dest)) for p in copied) == sorted(
        [MANIFEST, f"rl/{MARKER}", "rl/report.md", "rl/summary.json", "rl/cells/sft/seed-0/eval/summary.json",
         "rl/plots/won.png"])
    assert all(p.is_file() for p in copied) and (dest / "rl" / "report.md").read_bytes() == b"x" * 10
    (dest / "stale.md").write_text("from an earlier export")
    export_results(pipeline, out, dest)  # replaced as a whole
    assert not (dest / "stale.md").exists()
