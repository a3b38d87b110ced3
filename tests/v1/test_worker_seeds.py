"""Each model call of a v1 episode samples with its own seed (rlvr.v1.worker.call_seed): verifiers gives every call
of an episode one SamplingConfig seed, and vLLM's seeded sampling would then repeat its random draws at every turn
(SmolLM2's two replies were equal in 107 of 125 v1-credit-suite episodes). Checked in the bridge's interpreter on
renderers' real entry point (worker_seed_cases.py); no server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from rlvr.v1.bridge import v1_python

HERE = Path(__file__).parent


def test_each_call_of_an_episode_gets_its_own_seed_and_a_replay_the_same_ones():
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    proc = subprocess.run([str(v1_python()), str(HERE / "worker_seed_cases.py")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    seeds = [params.get("seed") for params in out["sent"]]
    assert seeds[:3] == out["expected"] and seeds[0] != seeds[1] and seeds[0] == seeds[2]
    assert 1234 not in seeds and all(0 <= s < 2**31 for s in seeds[:3])
    assert seeds[3] is None  # an unseeded call stays unseeded
    assert out["sent"][0]["temperature"] == 1.0 and out["episode_unchanged"]
