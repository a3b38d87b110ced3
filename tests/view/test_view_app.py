"""The viewer's web app through the ASGI test client: every page kind, escaping, path traversal, readable errors,
server-side pagination, the export file and the CLI."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import write_evaluation
from rlvr.cli import app as cli_app
from rlvr.view.app import create_app
from rlvr.view.export import export_html
from rlvr.view.synthetic import write_run

REPO = Path(__file__).resolve().parents[2]


def client(root: Path) -> TestClient:
    return TestClient(create_app(root), raise_server_exceptions=False)


def assert_readable(response, status: int, *fragments: str) -> None:
    assert response.status_code == status, response.text[:500]
    assert "Traceback" not in response.text
    for fragment in fragments:
        assert fragment in response.text, fragment


def test_run_pages(run_dir):
    c = client(run_dir)
    home = c.get("/")
    assert_readable(home, 200, "Training run", "24 logged rollouts", "learning_rate", "/static/plotly.min.js")
    assert home.text.count('class="chart"') >= 8  # reward, functions, per-turn x2, KL, entropy, clip, timing, loss
    assert "default-src 'self'" in home.headers["content-security-policy"]
    assert_readable(c.get("/rollouts?at="), 200, "24 of 24 rollouts")
    assert_readable(c.get("/rollouts?step=2&error=no"), 200, "6 of 24 rollouts")
    assert_readable(c.get("/rollout?i=3"), 200, "Rollout 3", "advantage colour", "turn 2", "tool_execution_reward")
    assert_readable(c.get("/rollout?i=3&scale=group"), 200, "max |advantage| of the group")
    group = c.get("/group?i=3")
    assert_readable(group, 200, "4 rollouts")
    assert group.text.count('class="member"') == 4
    assert c.get("/static/plotly.min.js").headers["content-type"].startswith("text/javascript")


def test_model_text_is_escaped(run_dir, hostile_eval):
    page = client(run_dir).get("/rollout?i=0").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # the token piece
    assert "&lt;script&gt;window.__rlvr_xss = 1&lt;/script&gt;&lt;img src=x onerror=" in page  # the tool reply
    assert "<script>alert" not in page and "<script>window" not in page and "<img" not in page
    for url in ("/", "/rollout?i=0", "/rollouts?q=<script>"):
        page = client(hostile_eval).get(url).text
        assert "<script>window" not in page and "<img src=x" not in page
    assert "&lt;answer&gt;&lt;script&gt;window.__rlvr_xss" in client(hostile_eval).get("/rollout?i=0").text


@pytest.mark.parametrize("url", [
    "/run?at=..", "/run?at=../..", "/rollouts?at=/etc", "/rollout?at=../&i=0", "/file?path=../secret.png",
    "/file?path=/etc/passwd", "/file?path=link.png", "/file?path=config.json", "/compare?a=..&b=.",
])
def test_paths_outside_the_directory_are_refused(run_dir, url):
    (run_dir.parent / "secret.png").write_bytes(b"\x89PNG")
    if not (run_dir / "link.png").exists():
        os.symlink(run_dir.parent / "secret.png", run_dir / "link.png")
    assert_readable(client(run_dir).get(url), 403, "Refused")


def test_missing_things_are_404_pages(run_dir):
    c = client(run_dir)
    assert_readable(c.get("/rollout?i=999"), 404, "no rollout 999", "it has 24")
    assert_readable(c.get("/run?at=nothing"), 404, "is not a directory")
    assert_readable(c.get("/static/..%2Fapp.py"), 404)
    assert_readable(c.get("/static/missing.js"), 404, "no static file")
    assert_readable(c.get("/no/such/page"), 404, "no page")
    assert_readable(c.get("/rollout?i=abc"), 400, "i=&#39;abc&#39; is not an integer")
    assert_readable(c.get("/rollouts?reward_min=high"), 400, "reward_min=&#39;high&#39; is not a number")


def test_corrupt_and_missing_files_show_what_is_wrong(run_dir):
    (run_dir / "metrics.jsonl").unlink()
    (run_dir / "config.json").write_text("{not json")
    with open(run_dir / "token_credit.jsonl", "a") as f:
        f.write('{"step": 9, "cut in the mid')
    c = client(run_dir)
    assert_readable(c.get("/"), 200, "metrics.jsonl: missing", "config.json, line 1: not valid JSON",
                    "token_credit.jsonl, line 25: not valid JSON", "truncated?")
    assert_readable(c.get("/rollouts"), 200, "24 of 24 rollouts", "line 25")
    # the file changed under a running server: the index is rebuilt (rollouts.jsonl's 6 rollouts remain)
    (run_dir / "token_credit.jsonl").write_text("")
    assert_readable(c.get("/rollouts"), 200, "6 of 6 rollouts")
    assert_readable(c.get("/rollout?i=10"), 404, "it has 6")


def test_ten_thousand_rollouts_paginate_on_the_server(tmp_path):
    run = write_run(tmp_path / "big", steps=50, groups=50, members=4, turns=2, tokens_per_turn=4)
    c = client(run)
    first = c.get("/rollouts")
    assert_readable(first, 200, "10000 of 10000 rollouts", "page 1 of 200")
    assert first.text.count("<tr><td>") == 50
    last = c.get("/rollouts?page=200")
    assert_readable(last, 200, "page 200 of 200", '?at=&amp;i=9999"')
    assert_readable(c.get("/rollouts?step=37&page=2"), 200, "200 of 10000 rollouts", "page 2 of 4")
    assert_readable(c.get("/rollout?i=9999"), 200, "Rollout 9999", "step 50")


def test_evaluation_dataset_and_compare_in_a_study(study_dir, tmp_path):
    c = client(study_dir)
    home = c.get("/")
    assert_readable(home, 200, "Study", "base model", "grpo", "&lt;script&gt;window.__rlvr_xss = 3")
    assert '<a href="/run?at=cells%2Fgrpo%2Fseed-0%2Ftrain">grpo</a>' in home.text  # report cell -> its run
    assert "<td>ppo</td>" in home.text  # no such run directory: no link
    assert '<img src="/file?path=plots%2Fcurves.png"' in home.text
    assert c.get("/file?path=plots/curves.png").headers["content-type"] == "image/png"
    compare_url = re.search(r'href="(/compare\?[^"]+)"', home.text).group(1).replace("&amp;", "&")
    compare = c.get(compare_url)
    assert_readable(compare, 200, "Compare evaluations", "3 examples", "Lyon", "Paris")
    assert_readable(c.get("/run?at=cells/grpo/seed-0/train"), 200, "Training run", "4 logged rollouts")
    assert_readable(c.get("/rollouts?at=base/seed-0/eval"), 200, "3 of 3 rollouts", "Evaluation metadata")
    assert_readable(c.get("/compare?a=cells/grpo/seed-0/train&b=base/seed-0/eval"), 404, "compare takes two")
    dataset = write_evaluation(tmp_path / "collected", [1.0, 0.0])
    (dataset / "results.jsonl").rename(dataset / "predictions.jsonl")
    (dataset / "metadata.json").unlink()
    assert_readable(client(dataset).get("/"), 200, "dataset", "2 of 2 rollouts")


def test_committed_study_renders(tmp_path):
    c = client(REPO / "benchmarks/results/study_triviaqa_credit_cpu")
    page = c.get("/")
    assert_readable(page, 200, "Held-out evaluation after training", "<table>", "no run directories here")
    src = re.search(r'<img src="([^"]+)" alt="evaluation"', page.text).group(1).replace("&amp;", "&")
    assert c.get(src).status_code == 200


def test_export_is_one_file_with_everything_inlined(run_dir, tmp_path, study_dir):
    out, kept, total = export_html(run_dir, tmp_path / "out.html")
    html = out.read_text()
    assert (kept, total) == (24, 24)
    assert "<script src=" not in html and "/static/" not in html
    assert re.findall(r"<link [^>]*>", html) == ['<link rel="icon" href="data:,">']  # no favicon request
    assert 'id="rollout-23"' in html and 'href="#rollout-5"' in html and 'id="overview"' in html
    assert "Plotly" in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    assert "holds 24 of the 24 rollouts" in html
    study_html = export_html(study_dir, tmp_path / "study.html")[0].read_text()
    assert 'src="data:image/png;base64,' in study_html


def test_export_bounds_the_rollouts(tmp_path, monkeypatch):
    import rlvr.view.export as export

    monkeypatch.setattr(export, "MAX_TOKEN_ROLLOUTS", 5)
    run = write_run(tmp_path / "r", steps=2, groups=2, members=4)
    html = export_html(run, tmp_path / "o.html")[0].read_text()
    assert "holds 5 of the 16 rollouts" in html
    assert 'id="rollout-4"' in html and 'id="rollout-5"' not in html


def test_cli(run_dir, tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli_app, ["view", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "does not exist" in result.output
    result = runner.invoke(cli_app, ["view", str(run_dir), "--export", str(tmp_path / "x.html")])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())  # rich wraps long paths at the terminal width
    assert "24 of 24 rollouts" in output and (tmp_path / "x.html").stat().st_size > 4_000_000


def test_a_directory_of_them_lists_each_and_compares_two_evaluations(tmp_path, run_dir, hostile_eval, study_dir):
    from rlvr.view.records import detect_kind, find_viewable

    write_evaluation(tmp_path / "evals" / "after", [1.0, 1.0, 1.0, 1.0])
    write_run(study_dir / "cells" / "grpo" / "seed-0" / "replicate-1" / "train", steps=1, groups=1, members=2)
    (tmp_path / "empty").mkdir()
    assert detect_kind(tmp_path) == "directory"
    assert find_viewable(tmp_path) == [("eval", "evaluation"), ("evals/after", "evaluation"), ("run", "run"),
                                       ("study", "study")]  # a study's own runs are listed by the study
    c = client(tmp_path)
    home = c.get("/")
    assert_readable(home, 200, "Directory", "Compare two evaluations")
    for link in ("/rollouts?at=eval", "/rollouts?at=evals%2Fafter", "/run?at=run", "/study?at=study"):
        assert f'href="{link}"' in home.text
    assert_readable(c.get("/compare?a=eval&b=evals/after"), 200, "3 examples", "&lt;answer&gt;&lt;script&gt;")
    study = c.get("/study?at=study")
    assert_readable(study, 200, "(replicate 1)")
    assert '<a href="/run?at=study%2Fcells%2Fgrpo%2Fseed-0%2Ftrain">grpo</a>' in study.text  # the report's cell
    assert_readable(c.get("/run?at=study/cells/grpo/seed-0/replicate-1/train"), 200, "2 logged rollouts")
    exported = export_html(tmp_path, tmp_path / "dir.html")[0].read_text()
    assert 'id="home"' in exported and "/run?at=" not in exported and "/study?at=" not in exported


def test_cli_serves_on_loopback_and_warns_off_it(run_dir, monkeypatch):
    import uvicorn

    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: calls.append((host, port)))
    runner = CliRunner()
    result = runner.invoke(cli_app, ["view", str(run_dir)])
    assert result.exit_code == 0, result.output
    (host, port), = calls
    assert host == "127.0.0.1" and port > 0 and f"http://127.0.0.1:{port}/" in result.output
    assert "warning" not in result.output
    result = runner.invoke(cli_app, ["view", str(run_dir), "--host", "0.0.0.0", "--port", "8123"])
    assert calls[-1] == ("0.0.0.0", 8123) and "warning" in result.output and "anyone who can reach" in result.output


def test_a_rollout_of_the_wrong_shape_shows_what_is_wrong(run_dir):
    path = run_dir / "token_credit.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[0]) | {"samples": 5, "turn_reward_parts": "x"}
    path.write_text("\n".join([json.dumps(record)] + lines[1:]) + "\n")
    assert_readable(client(run_dir).get("/rollout?i=0"), 200, "token_credit.jsonl, line 1: &#39;samples&#39; is a int",
                    "No token credit logged for this rollout")


def test_files_linked_from_outside_are_not_read(run_dir, study_dir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text('{"step": 1, "reward": 0.5, "SECRET": 1}\n')
    (outside / "secret.md").write_text("SECRET report\n")
    (run_dir / "metrics.jsonl").unlink()
    os.symlink(outside / "secret.jsonl", run_dir / "metrics.jsonl")
    (run_dir / "token_credit.jsonl").unlink()
    os.symlink(outside / "secret.jsonl", run_dir / "token_credit.jsonl")
    page = client(run_dir).get("/")
    assert_readable(page, 200, "metrics.jsonl: a symbolic link leading outside the viewed directory: not read")
    assert "SECRET" not in page.text and "6 logged rollouts" in page.text  # rollouts.jsonl's, not the link's
    (study_dir / "report.md").unlink()
    os.symlink(outside / "secret.md", study_dir / "report.md")
    page = client(study_dir).get("/")
    assert_readable(page, 200, "report.md: a symbolic link leading outside")
    assert "SECRET" not in page.text
