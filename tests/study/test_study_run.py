"""`rlvr study` end to end on tiny-random, one study over two machines in three invocations, all on the user's
running server (`--server`: the session's training server; each invocation loads the base weights into it first;
a study's own server is tests/v1/test_study_v1.py's):
2 algorithms x 2 seeds x 2 steps on vf-triviaqa-search (search protocol), each cell also evaluated after step 1 (the
held-out learning curve, [evaluation] at_steps), every finished unit committed as a record (`--results`).

1. Machine A runs its share (`--cells`: the base evaluations and mt_grpo's cells) and commits their records.
2. Its study directory is lost: on a fresh clone the same command runs only grpo's cells, and the report (in the
   study directory and beside the records) has every cell, the paired differences, the held-out curve and every
   unit's provenance. Another configuration with the same records is refused by name before any server starts, and
   so are starting weights other than those the committed units started from.
3. A cell of the fresh clone is interrupted (its completion marker, record, evaluation, final weights and last
   checkpoint removed, as a kill after step 1's checkpoint and curve point leaves it) and resumed by the same
   command, which also re-runs that cell once with the same seed (replicates = 2); `rlvr analyze` redraws the report.
Real server, trainer, environment and evaluation throughout. (One study serves the committed records, the resume and
the replicate: each used to run a study of its own, one server start and three units more.)"""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil

import pytest
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.weights import fingerprint

pytestmark = pytest.mark.slow

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

STUDY_TOML = """
env = "vf-triviaqa-search"
model = "tiny-random"
algos = ["grpo", "mt_grpo"]
seeds = [0, 1]
keep_checkpoints = true
server_args = ["--kv-cache-gb", "0.5"]

[env_args]
protocol = "search"
num_train_examples = 8
num_eval_examples = 3
max_turns = 2

[training]
max_steps = 2
save_steps = 1
save_total_limit = 2
batch_size = 4
rollouts_per_example = 2
micro_batch_size = 2
max_tokens_per_turn = 4
max_seq_len = 512
temperature = 1.0
learning_rate = 1e-3
progress = false

[evaluation]
examples = 3
rollouts = 1
at_steps = [1]

[report]
headline = ["reward", "tool_execution_reward"]
collapse_window = 2
"""


def rlvr(*args) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, f"{result.output[-4000:]}\n{result.exception!r}"
    return result.output


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


CELLS = [(a, s) for a in ("grpo", "mt_grpo") for s in (0, 1)]
UNITS = ["base/seed-0", "base/seed-1", *(f"{a}/seed-{s}" for a, s in CELLS)]


def check_cell(study, algo: str, seed: int) -> None:
    """A cell trained from scratch for 2 steps with its seed, evaluated, with step 1's curve point."""
    unit = study / "cells" / algo / f"seed-{seed}"
    done = json.loads((unit / "done.json").read_text())
    assert done["resumed_from"] is None and set(done["wall_s"]) == {"training", "final_sync", "evaluation", "total"}
    assert [r["step"] for r in read_jsonl(unit / "train" / "metrics.jsonl") if "loss" in r] == [1, 2]
    config_json = json.loads((unit / "train" / "config.json").read_text())
    assert config_json["training"]["seed"] == seed and config_json["training"]["max_steps"] == 2
    assert config_json["training"].get("algo") == algo
    rows = read_jsonl(unit / "eval" / "results.jsonl")
    assert len(rows) == 3 and all("reward" in r for r in rows)
    # the held-out curve's point: step 1's weights (kept out of rotation), evaluated like the final ones
    point = unit / "curve" / "step-1"
    assert filecmp.cmp(point / "weights" / "model.safetensors", unit / "train" / "checkpoint-1" /
                       "model.safetensors", shallow=False)
    assert len(read_jsonl(point / "eval" / "results.jsonl")) == 3


def check_invocation(study, cells: list[str]) -> None:
    """study.json: one finished invocation with its versions, which ran `cells`, under the study's budget."""
    manifest = json.loads((study / "study.json").read_text())
    (invocation,) = manifest["invocations"]
    assert invocation["finished"] and invocation["versions"]["packages"]["verifiers"] == "0.1.9.post3"
    assert sorted(manifest["cells"]) == cells and manifest["settings"]["training"]["max_steps"] == 2


def record_files(results) -> list:
    return sorted([*results.glob("base/seed-*.json"), *results.glob("cells/*/seed-*.json")])


@pytest.mark.timeout(2400)  # eight units: ~4 min alone, several times that on a loaded machine
def test_a_study_over_two_machines_resumes_an_interrupted_cell_and_reports(tiny_model, training_server, tmp_path):
    config = tmp_path / "study.toml"
    config.write_text(STUDY_TOML)
    results = tmp_path / "benchmarks" / "results" / "study_tiny"
    study = ("study", "--config", config, "--results", results)
    on_the_server = ("--server", training_server.url)  # whatever weights earlier tests left there

    # 1. machine A: the base evaluations and mt_grpo's cells only, each committed as a record
    machine_a = tmp_path / "a"
    rlvr(*study, "--out", machine_a, "--cells", "base/seed-0,base/seed-1,mt_grpo/seed-0,mt_grpo/seed-1",
         *on_the_server)
    assert not (machine_a / "server.log").exists()  # no server of its own
    for seed in (0, 1):
        check_cell(machine_a, "mt_grpo", seed)
        assert len(read_jsonl(machine_a / "base" / f"seed-{seed}" / "eval" / "results.jsonl")) == 3
    check_invocation(machine_a, ["mt_grpo/seed-0", "mt_grpo/seed-1"])
    assert not (machine_a / "cells" / "grpo").exists() and not (results / "cells" / "grpo").exists()
    assert [p.relative_to(results).as_posix() for p in record_files(results)] == [
        "base/seed-0.json", "base/seed-1.json", "cells/mt_grpo/seed-0.json", "cells/mt_grpo/seed-1.json"]
    for path in record_files(results):
        made = json.loads(path.read_text())["provenance"]
        assert len(made["commit"]) == 40 and made["machine"]["cores"] == len(os.sched_getaffinity(0))
        assert made["machine"]["cpu"] and made["peak_rss_mb"] > 0 and made["command"].split()[0] == "rlvr"
        assert made["model_sha256"] == fingerprint(tiny_model)["sha256"]
    cell = json.loads((results / "cells" / "mt_grpo" / "seed-0.json").read_text())
    assert cell["definition"]["training"]["learning_rate"] == 1e-3 and cell["steps"] == 2
    assert cell["after"]["reward"]["n"] == 3 and set(cell["examples"][""]) == {"reward", "tool_execution_reward"}
    report = (results / "report.md").read_text()
    assert "2 of 4 cells finished" in report and "**Left: 2 unit(s)** (grpo/seed-0, grpo/seed-1)" in report
    committed = {p: p.read_bytes() for p in results.rglob("*.json") if p.name != "summary.json"}

    # 2. a fresh clone: no study directory, the committed records only; the same command runs grpo's cells alone
    shutil.rmtree(machine_a)
    out = tmp_path / "b"
    dry = rlvr(*study, "--out", out, "--dry-run")
    assert dry.count("done (committed record)") == 2 and "2 cells to run" in dry
    share = rlvr(*study, "--out", out, "--dry-run", "--cells", "grpo/seed-1")  # one machine's share
    assert "1 cell to run" in share and share.count("not selected") == 1, share
    # a study that trains otherwise (another learning rate) would take these base evaluations, not run them again
    other = rlvr("study", "--config", config, "--results", tmp_path / "other", "--out", tmp_path / "o",
                 "--set", "learning_rate=2e-3", "--bases-from", results, "--dry-run")
    assert "".join(f"would take base/seed-0, base/seed-1 from {results}".split()) in "".join(other.split())
    assert not (tmp_path / "other").exists()
    # committed units that started from other weights (here a record says so): named, refused before anything runs
    tampered = results / "base" / "seed-1.json"
    original = tampered.read_bytes()
    tampered.write_text(json.dumps({**json.loads(original), "provenance": {
        **json.loads(original)["provenance"], "model_sha256": "f" * 64}}))
    result = CliRunner().invoke(app, [str(a) for a in (*study, "--out", out, *on_the_server)])
    assert result.exit_code != 0 and not (out / "cells").exists(), result.output
    assert "are not those 1 of the 4 committed unit(s)" in result.output
    assert "ffffffffffffffff... (1 unit(s): base/seed-1)" in result.output and "--accept-weights" in result.output
    # accepted (as `rlvr pipeline --accept-weights` passes it on): said, and the run goes on
    accepted = CliRunner().invoke(app, [str(a) for a in (*study, "--out", out, *on_the_server)],
                                  env={"RLVR_ACCEPT_WEIGHTS": "1"})
    assert accepted.exit_code == 0, accepted.output[-4000:]
    assert "accepted (--accept-weights): the report names both starting points" in accepted.output
    assert "**The units started from 2 different weights**" in (results / "report.md").read_text()
    tampered.write_bytes(original)
    assert sorted(p.relative_to(out).as_posix() for p in out.glob("*/*/*/done.json")) == [
        "cells/grpo/seed-0/done.json", "cells/grpo/seed-1/done.json"]  # no base evaluation, no mt_grpo: committed
    assert all(p.read_bytes() == data for p, data in committed.items() if p.name != "results.json")
    for seed in (0, 1):
        check_cell(out, "grpo", seed)
    check_invocation(out, ["grpo/seed-0", "grpo/seed-1"])

    for where in (results, out):  # the committed report and the study directory's: every cell
        report = (where / "report.md").read_text()
        assert "4 of 4 cells finished" in report and "Nothing is left" in report
        provenance = report.split("## Provenance and cost")[1]
        for unit in UNITS:
            assert f"| {unit} | " in provenance
        summary = json.loads((where / "summary.json").read_text())
        assert {(c["algo"], c["seed"]) for c in summary["cells"]} == set(CELLS)
    report = (out / "report.md").read_text()
    assert "## Paired differences against grpo" in report and "Student's t with n-1 degrees of freedom" in report
    # one row per cell, with the headline metrics, collapse verdict, steps and tokens
    cell_rows = re.findall(r"^\| (grpo|mt_grpo) \| ([01]) \| .* \| (\*\*yes\*\*, from step \d|no.*?) \| (yes|no) \| 2 \| "
                           r"\d+ \|", report, re.MULTILINE)
    assert sorted((a, int(s)) for a, s, *_ in cell_rows) == CELLS, report
    summary = json.loads((out / "summary.json").read_text())
    assert summary["baseline"] == "grpo" and set(summary["paired"]) == {"mt_grpo"}
    paired = summary["paired"]["mt_grpo"]["reward"]
    assert paired["n"] == 2 and paired["low"] <= paired["mean"] <= paired["high"]
    assert "## Held-out learning curve" in report and "| step 1 | step 2 (final) |" in report
    assert re.search(r"^\| reward \| mt_grpo - grpo \| [-+]\d", report, re.MULTILINE), report
    assert summary["heldout_curve"]["steps"] == [0, 1, 2]
    assert summary["heldout_curve"]["algorithms"]["grpo"]["reward"]["1"]["n"] == 2
    for png in ("evaluation", "paired_differences", "training_curves", "heldout_curve"):
        assert (out / "plots" / f"{png}.png").read_bytes()[:8] == PNG_MAGIC
        assert f"(plots/{png}.png)" in report

    # another configuration with the same records: named, before any server starts (this one would start its own)
    result = CliRunner().invoke(app, [str(a) for a in (*study, "--out", tmp_path / "c", "--set", "learning_rate=2e-3")])
    assert result.exit_code != 0 and not (tmp_path / "c" / "server.log").exists()
    assert "4 committed record(s)" in result.output  # the cells: the bases did not train
    assert "training.learning_rate: 0.001 -> 0.002" in result.output

    # 3. A cell killed after step 1's checkpoint: no marker, no record, no evaluation, no final weights, no
    # checkpoint-2. The next invocation also asks for replicates = 2 on that cell only: it resumes the cell, then
    # re-runs it from scratch with the same seed (one server for both), and nothing else runs again.
    unit = out / "cells" / "grpo" / "seed-0"
    for path in (unit / "done.json", results / "cells" / "grpo" / "seed-0.json", unit / "eval",
                 unit / "train" / "final", unit / "train" / "checkpoint-2"):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    untouched = {p: p.read_text() for p in [*out.glob("*/*/seed-*/done.json"), *record_files(results)]}
    assert len(untouched) == 6  # grpo/seed-1's marker and the records of the five other units
    point_eval = unit / "curve" / "step-1" / "eval"
    point_rows, point_made = (point_eval / "results.jsonl").read_text(), point_eval.stat().st_mtime_ns
    config.write_text("replicates = 2\n" + STUDY_TOML)
    only_the_cell = ("--algos", "grpo", "--seeds", "0")

    dry = rlvr(*study, "--out", out, "--dry-run", *only_the_cell)
    assert "resumes from checkpoint-1" in dry and "(1 same-seed re-runs to do" in dry and "2 cells to run" in dry
    rlvr(*study, "--out", out, *only_the_cell, *on_the_server)

    assert all(p.read_text() == text for p, text in untouched.items())  # nothing finished ran again
    done = json.loads((unit / "done.json").read_text())
    assert done["resumed_from"].endswith("checkpoint-1")
    assert json.loads((unit / "train" / "config.json").read_text())["resumed_from"].endswith("checkpoint-1")
    steps = [r for r in read_jsonl(unit / "train" / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2]  # step 2 trained once more, step 1 kept from before
    assert len(read_jsonl(unit / "eval" / "results.jsonl")) == 3
    manifest = json.loads((out / "study.json").read_text())
    assert len(manifest["invocations"]) == 2 and manifest["cells"]["grpo/seed-0"] == done

    replicate = unit / "replicate-1"
    replicate_done = json.loads((replicate / "done.json").read_text())
    assert replicate_done["replicate"] == 1 and replicate_done["seed"] == 0 and replicate_done["resumed_from"] is None
    assert len(read_jsonl(replicate / "eval" / "results.jsonl")) == 3
    assert [r["step"] for r in read_jsonl(replicate / "train" / "metrics.jsonl") if "loss" in r] == [1, 2]
    assert json.loads((replicate / "train" / "config.json").read_text())["training"]["seed"] == 0
    assert manifest["settings"]["replicates"] == 2 and "grpo/seed-0/replicate-1" in manifest["cells"]
    report = (out / "report.md").read_text()
    assert "| grpo | 0 |" in report and "checkpoint-1" in report
    assert "1 of 4 cells were run more than once with their own seed" in report
    assert re.search(r"^\| grpo \| 0 \| 2 \| ", report.split("## Re-run spread")[1], re.MULTILINE), report
    # seeded sampling: the uninterrupted re-run trained and evaluated token for token like the resumed cell (CPU, one
    # server; benchmarks/rerun_determinism.py measures the same on a run whose weights move)
    assert [r["completion"] for r in read_jsonl(replicate / "eval" / "results.jsonl")] == [
        r["completion"] for r in read_jsonl(unit / "eval" / "results.jsonl")]
    assert [(r["loss"], r["reward"]) for r in read_jsonl(replicate / "train" / "metrics.jsonl") if "loss" in r] == [
        (r["loss"], r["reward"]) for r in steps]
    # the resumed cell's finished curve point was not evaluated again; the re-run's is the same, token for token
    assert (point_eval / "results.jsonl").read_text() == point_rows and point_eval.stat().st_mtime_ns == point_made
    assert [r["completion"] for r in read_jsonl(replicate / "curve" / "step-1" / "eval" / "results.jsonl")] == [
        r["completion"] for r in read_jsonl(point_eval / "results.jsonl")]
    assert "| 0.000 |" in report.split("## Re-run spread")[1]

    # rlvr analyze recognises the study directory and redraws its report
    (out / "report.md").unlink()
    rlvr("analyze", out)
    assert "4 of 4 cells finished" in (out / "report.md").read_text()
