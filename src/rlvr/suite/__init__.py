"""The credit-assignment suite (issue 28): diagnostic multi-turn tasks with known optimal policies (tasks.py), a
tabular tier that trains a softmax table with every `rlvr.credit` estimator (tabular.py), metrics with confidence
intervals (metrics.py) and the report (report.py). No torch, no verifiers: the LLM tier (vf-credit-suite and its v1
port) imports `tasks` and `protocol` (the text protocol: observations, action parsing, invalid replies) alone."""
