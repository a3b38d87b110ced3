"""The short version of the soak (benchmarks/soak_server.py, its committed command runs ~15 min): agent traffic on
the session's training server for 30 s (concurrent multi-turn conversations with long, distinct, growing prompts,
seeds, logprobs, parsed tool calls, weights replaced while requests are generated): no 5xx, no failure, the server
alive. Throughput and memory are the benchmark's numbers, not asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak_server.py"


def test_a_short_soak_under_agent_traffic(training_server, tmp_path):
    # training_server: its weights may change (a training run pushes its own before its first batch)
    out = tmp_path / "soak.json"
    command = [sys.executable, str(SOAK), "--server", training_server.url, "--server-pid", str(training_server.pid),
               "--model", training_server.model, "--seconds", "30", "--conversations", "6", "--update-every", "8",
               "--sample-every", "2", "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["failures"] == [] and set(report["status"]) == {"2xx"}, report["status"]
    assert report["weight_updates"] >= 2 and report["tool_calls_parsed"] >= 2
    assert report["max_prompt_tokens"] > 2048  # some prompts were prefilled in chunks (vLLM's CPU step budget)
    assert report["healthy_after"] and training_server.exit_code() is None
