"""The one-line death of a server names the engine's last error from its log (`rlvr.serve.launch.engine_error`)."""

from __future__ import annotations

import subprocess
import sys

from rlvr.serve.launch import Server, engine_error, free_port


def test_engine_error_is_the_end_of_the_fatal_traceback_or_the_worker_death(tmp_path):
    """The two ways vLLM 0.32 logs an engine's death (lines as `rlvr serve` writes them)."""
    log = tmp_path / "serve.log"
    prefix = "(EngineCore pid=16081) ERROR 11-27 12:24:48 [core.py:1512] "
    log.write_text("\n".join([
        "(Worker pid=16407) ERROR 11-27 12:24:48 [multiproc_executor.py:1063] RuntimeError: CPU Generator does not "
        "use offset",
        prefix + "EngineCore encountered a fatal error.",
        prefix + "Traceback (most recent call last):",
        prefix + '  File "multiproc_executor.py", line 444, in get_response',
        prefix + "    raise RuntimeError(",
        prefix + "RuntimeError: Worker failed with error 'CPU Generator does not use offset', please check the "
                 "stack trace above for the root cause",
        "(MainProcess pid=15342) ERROR 11-27 12:24:48 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.",
        "INFO:     Shutting down",
    ]) + "\n")
    assert engine_error(log) == ("RuntimeError: Worker failed with error 'CPU Generator does not use offset', please "
                                 "check the stack trace above for the root cause")
    log.write_text("(EngineCore pid=1) ERROR 11-27 12:24:48 [multiproc_executor.py:316] Worker proc VllmWorker-0 "
                   "died unexpectedly (exit code: -9), shutting down executor.\n")
    assert engine_error(log) == "Worker proc VllmWorker-0 died unexpectedly (exit code: -9)"
    log.write_text("INFO:     Shutting down\n")
    assert engine_error(log) is None
    assert engine_error(tmp_path / "missing.log") is None


def test_a_dead_servers_death_carries_the_engines_error(tmp_path):
    log = tmp_path / "serve.log"
    prefix = "ERROR 2026-11-27 12:24:48,120 [vllm.v1.engine.core] "  # rlvr serve --log-file's format
    lines = [prefix + "EngineCore encountered a fatal error.", prefix + "Traceback (most recent call last):",
             prefix + "RuntimeError: boom", "INFO:     Shutting down"]
    script = f"print({chr(10).join(lines)!r}, flush=True)"
    process = subprocess.Popen([sys.executable, "-c", script], stdout=log.open("w"))
    port = free_port()
    server = Server(url=f"http://127.0.0.1:{port}", model="tiny-random", port=port, pid=process.pid, log_file=log,
                    process=process)
    assert server.death(wait_s=30) == "died (exit code 0; the engine's last error: RuntimeError: boom)"
