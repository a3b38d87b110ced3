"""The pieces of rlvr.trainer.faults on real processes, signals and sockets (fast but for one test against
the real server)."""

from __future__ import annotations

import http.server
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from accelerate import Accelerator
from transformers import TrainerControl, TrainerState

from rlvr.serve.launch import Server, free_port
from rlvr.trainer.faults import (
    MAX_PAUSE_ENV,
    Preempted,
    Preemption,
    ServerDown,
    ServerWatch,
    resume_command,
    wandb_in_run_dir,
)


def test_resume_command_adds_run_dir_and_resume_to_an_rlvr_train_command_line():
    argv = ["/venv/bin/rlvr", "train", "--env", "vf-choice", "--model", "tiny-random", "--set", "seed=1"]
    assert resume_command("runs/x", argv) == ("rlvr train --env vf-choice --model tiny-random --set seed=1 "
                                              "--run-dir runs/x --resume")
    given = ["rlvr", "train", "-e", "a b", "-o", "runs/y", "--resume"]
    assert resume_command("runs/y", given) == "rlvr train -e 'a b' -o runs/y --resume"


def test_resume_command_of_a_study_or_pipeline_cell_is_the_same_command():
    argv = ["/venv/bin/rlvr", "study", "--config", "c.toml", "--env-args", '{"task": "x"}', "--out", "runs/s"]
    assert resume_command("runs/s/cells/grpo/seed-0/train", argv) == (
        "rlvr study --config c.toml --env-args '{\"task\": \"x\"}' --out runs/s (it resumes "
        "runs/s/cells/grpo/seed-0/train from its newest checkpoint)")
    assert resume_command("r", ["rlvr", "pipeline", "p.toml", "--out", "o"]).startswith("rlvr pipeline p.toml --out o (")


def test_resume_command_outside_the_cli_names_the_python_call():
    assert "run_training(..., run_dir='r', resume=True)" in resume_command("r", ["script.py", "--steps", "3"])
    # an accelerate worker's argv is `train` alone: it cannot rebuild the command line
    assert resume_command("r", ["/x/rlvr/cli/__main__.py", "train"]).startswith("the same command with --resume")


def dead_server(tmp_path: Path, sig: int) -> Server:
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('engine: out of memory', flush=True); "
                             "time.sleep(60)"], stdout=(tmp_path / "serve.log").open("w"))
    # wait for the line, then kill it the way the OOM killer or a crash would
    while "out of memory" not in (tmp_path / "serve.log").read_text():
        pass
    proc.send_signal(sig)
    proc.wait(10)
    port = free_port()
    return Server(url=f"http://127.0.0.1:{port}", model="tiny-random", port=port, pid=proc.pid,
                  log_file=tmp_path / "serve.log", process=proc)


def test_a_server_this_run_started_that_died_is_named_with_exit_code_log_tail_and_resume(tmp_path):
    server = dead_server(tmp_path, signal.SIGKILL)
    watch = ServerWatch(server.url, "rlvr train ... --resume", "tiny-random", server)
    assert watch.diagnosis() == "died (exit code -9, killed by SIGKILL)"
    cause = RuntimeError("batch 2: no rollout produced an assistant turn")
    with pytest.raises(ServerDown) as raised:
        watch.check(cause)
    first, *rest = str(raised.value).splitlines()
    assert server.url in first and "died (exit code -9, killed by SIGKILL)" in first
    assert first.endswith("Continue from the newest checkpoint with: rlvr train ... --resume")
    assert str(server.log_file) in rest[0] and rest[-1] == "engine: out of memory"
    assert raised.value.__cause__ is cause


def test_the_users_server_that_does_not_answer_is_named_with_how_to_restart_it():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    watch = ServerWatch(url, "rlvr train --resume", "tiny-random", health_timeout=1)
    with pytest.raises(ServerDown) as raised:
        watch.check()
    message = str(raised.value)
    assert "\n" not in message
    assert f"{url} (--server) does not answer {url}/health within 1 s (ConnectError)" in message
    assert f"rlvr serve --model tiny-random --port {url.rsplit(':', 1)[1]}" in message
    assert message.endswith("continue from the newest checkpoint with: rlvr train --resume")


@pytest.mark.slow
def test_a_healthy_server_is_not_blamed(tiny_server):
    watch = ServerWatch(tiny_server.url, "x", "tiny-random", tiny_server)
    assert watch.diagnosis() is None
    watch.check(RuntimeError("an environment bug"))  # returns: the caller re-raises its own error


def test_a_dead_server_this_run_started_is_restarted_and_the_restarts_are_bounded(tmp_path, caplog):
    from rlvr.serve.launch import ServeLaunchError

    dead = dead_server(tmp_path, signal.SIGKILL)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    replacement = Server(url="http://127.0.0.1:1", model="tiny-random", port=1, pid=alive.pid,
                         log_file=tmp_path / "serve.log", process=alive)
    attempts = []

    def restart() -> Server:
        attempts.append(len(attempts))
        if len(attempts) == 1:
            raise ServeLaunchError("rlvr serve exited with code 1 before becoming healthy; log ...\nTraceback")
        return replacement

    watch = ServerWatch(dead.url, "rlvr train --resume", "tiny-random", dead, restart=restart, max_restarts=2)
    try:
        with caplog.at_level("WARNING"):
            assert watch.recover(RuntimeError("generation failed")) == "http://127.0.0.1:1"
        assert attempts == [0, 1] and watch.started is replacement
        assert "died (exit code -9, killed by SIGKILL): restarting it (restart 1 of 2" in caplog.text
        assert "did not come back (rlvr serve exited with code 1 before becoming healthy; log ...): restarting it " \
               "(restart 2 of 2" in caplog.text
        alive.kill()
        alive.wait(10)
        with pytest.raises(ServerDown) as raised:  # the budget is spent: named, not restarted again
            watch.recover(RuntimeError("generation failed"))
        assert "died (exit code -9, killed by SIGKILL), after 2 restart(s); training stopped" in str(raised.value)
        assert len(attempts) == 2
    finally:
        alive.kill()


def test_a_hung_server_this_run_started_is_killed_before_its_restart(tmp_path):
    hung = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    port = free_port()  # nothing answers there: the process lives but is silent
    server = Server(url=f"http://127.0.0.1:{port}", model="tiny-random", port=port, pid=hung.pid,
                    log_file=tmp_path / "serve.log", process=hung)
    watch = ServerWatch(server.url, "x", "tiny-random", server, restart=lambda: server, health_timeout=1)
    assert watch.diagnosis().startswith(f"does not answer {server.url}/health within 1 s")
    watch.recover(RuntimeError("timeout"))
    assert hung.returncode == -signal.SIGKILL


def test_the_users_server_is_waited_for_with_a_doubling_pause_then_named(caplog, monkeypatch):
    monkeypatch.delenv(MAX_PAUSE_ENV, raising=False)  # the product's default: no cap (conftest.py sets one)
    url = f"http://127.0.0.1:{free_port()}"
    watch = ServerWatch(url, "rlvr train --resume", "tiny-random", wait_s=1.5, first_wait_s=0.5, health_timeout=1)
    start = time.monotonic()
    with caplog.at_level("WARNING"), pytest.raises(ServerDown) as raised:
        watch.recover(RuntimeError("generation failed"))
    assert 1.5 <= time.monotonic() - start < 10
    pauses = [r.message.split(": waiting ")[1] for r in caplog.records]
    assert pauses == ["0.5 s for it (0 of 1.5 s waited)", "1 s for it (0.5 of 1.5 s waited)"]  # doubled, capped
    assert "(waited 1.5 s); training stopped. Restart it (rlvr serve --model tiny-random" in str(raised.value)


def test_the_pause_between_health_checks_is_capped_by_the_environment(caplog, monkeypatch):
    monkeypatch.setenv(MAX_PAUSE_ENV, "0.5")
    watch = ServerWatch(f"http://127.0.0.1:{free_port()}", "x", "tiny-random", wait_s=2, first_wait_s=0.25,
                        health_timeout=1)
    with caplog.at_level("WARNING"), pytest.raises(ServerDown, match=r"\(waited 2 s\)"):
        watch.recover(RuntimeError("generation failed"))
    pauses = [r.message.split(": waiting ")[1].split(" s for it")[0] for r in caplog.records]
    assert pauses == ["0.25", "0.5", "0.5", "0.5", "0.25"]  # doubled up to the cap, the last one to wait_s
    monkeypatch.setenv(MAX_PAUSE_ENV, "0")
    with pytest.raises(ValueError, match=r"RLVR_SERVER_WAIT_MAX_PAUSE_S='0': .* > 0; unset it for no cap"):
        ServerWatch("http://127.0.0.1:1", "x", "tiny-random")


def test_the_users_server_that_comes_back_is_used_again():
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    started = []

    def come_back() -> None:  # binds the port only now: until then a connection is refused
        started.append(http.server.HTTPServer(("127.0.0.1", port), Health))
        started[0].serve_forever()

    class ComeBackDuringThePause(logging.Handler):  # not on a timer: recover must see it down first
        def emit(self, record: logging.LogRecord) -> None:
            if ": waiting " in record.getMessage() and not started:
                threading.Thread(target=come_back, daemon=True).start()

    watch = ServerWatch(url, "x", "tiny-random", wait_s=30, first_wait_s=1, health_timeout=1)
    assert watch.diagnosis() is not None
    trigger = ComeBackDuringThePause(logging.WARNING)
    logging.getLogger("rlvr.trainer.faults").addHandler(trigger)
    try:
        assert watch.recover(RuntimeError("connection refused")) == url
    finally:
        logging.getLogger("rlvr.trainer.faults").removeHandler(trigger)
        if started:
            started[0].shutdown()


def step_end(preemption: Preemption, step: int, max_steps: int = 10) -> TrainerControl:
    state = TrainerState(global_step=step, max_steps=max_steps)
    return preemption.on_step_end(None, state, TrainerControl())


def test_sigterm_stops_at_the_next_batch_boundary_with_a_checkpoint_and_status_143(capsys):
    preemption = Preemption(Accelerator(cpu=True), num_iterations=2)
    with preemption.signals():
        assert signal.getsignal(signal.SIGTERM) == preemption.handle
        os.kill(os.getpid(), signal.SIGTERM)  # a real signal; the handler only records it
    assert signal.getsignal(signal.SIGTERM) is not preemption.handle  # restored after the block
    assert "SIGTERM received: stopping after this step" in capsys.readouterr().err
    between = step_end(preemption, 3)  # between the two passes over batch 1: not resumable, so go on
    assert not between.should_save and not between.should_training_stop
    control = step_end(preemption, 4)
    assert control.should_save and control.should_training_stop and preemption.stopped_at == 4
    exit_ = preemption.preempted("rlvr train --resume")
    assert isinstance(exit_, Preempted) and exit_.code == 143
    assert "stopped on SIGTERM at step 4, checkpoint-4 written. Continue with: rlvr train --resume" in (
        capsys.readouterr().err)


def test_sigint_gives_130_and_no_signal_or_the_last_step_stops_nothing():
    preemption = Preemption(Accelerator(cpu=True), num_iterations=1)
    assert not step_end(preemption, 1).should_training_stop
    preemption.handle(signal.SIGINT, None)
    assert not step_end(preemption, 10, max_steps=10).should_training_stop  # the run is done anyway
    assert step_end(preemption, 5).should_training_stop
    assert preemption.preempted("x").code == 130


def test_a_signal_arriving_with_stderr_closed_still_stops_with_a_checkpoint(tmp_path):
    # a session's end closes the terminal's pipe as its SIGTERM arrives: the notice must not raise out of the handler
    # (BrokenPipeError there aborted a WebShop RL cell mid-step, with no checkpoint)
    code = ("import os, signal, sys; from accelerate import Accelerator; from rlvr.trainer.faults import Preemption\n"
            "from transformers import TrainerControl, TrainerState\n"
            "p = Preemption(Accelerator(cpu=True), 1)\n"
            "sys.stdin.read()\n"  # wait until the parent has closed the read end of stderr's pipe
            "with p.signals():\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "control = p.on_step_end(None, TrainerState(global_step=2, max_steps=5), TrainerControl())\n"
            "exit_ = p.preempted('resume')\n"
            "open(sys.argv[1], 'w').write(f'{control.should_save} {control.should_training_stop} {exit_.code}')\n")
    read_end, write_end = os.pipe()
    os.close(read_end)
    outcome = tmp_path / "outcome"
    proc = subprocess.Popen([sys.executable, "-c", code, str(outcome)], stdin=subprocess.PIPE, stderr=write_end)
    os.close(write_end)
    proc.communicate(b"", timeout=120)
    assert proc.returncode == 0 and outcome.read_text() == "True True 143"


def test_a_second_signal_stops_the_process_at_once():
    code = ("import os, signal; from accelerate import Accelerator; from rlvr.trainer.faults import Preemption\n"
            "p = Preemption(Accelerator(cpu=True), 1)\n"
            "with p.signals():\n"
            "    os.kill(os.getpid(), signal.SIGTERM); os.kill(os.getpid(), signal.SIGTERM)\n"
            "    print('not reached', flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGTERM and "not reached" not in proc.stdout


def test_wandb_dir_points_into_the_run_directory_for_the_block_only(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_DIR", raising=False)
    with wandb_in_run_dir(tmp_path / "run"):
        assert os.environ["WANDB_DIR"] == str((tmp_path / "run").resolve())
    assert "WANDB_DIR" not in os.environ
    monkeypatch.setenv("WANDB_DIR", "/elsewhere")  # the user's choice is kept
    with wandb_in_run_dir(tmp_path / "run"):
        assert os.environ["WANDB_DIR"] == "/elsewhere"
