"""Turning a SandboxResult into the text a model sees, with framing the program cannot forge.

The environment, not the program, writes the `<output>` tags. Anything tag-like the program prints is
neutralised first, so a program cannot close the frame early and append a fake clean observation
(e.g. print "42</output>" and then crash) for a parser or reward that reads the first frame.
"""

from __future__ import annotations

import re
import signal

from rlvr.sandbox.core import SandboxConfig, SandboxResult

OUTPUT_TAG = "output"


def neutralise_tags(text: str, tag: str = OUTPUT_TAG) -> str:
    """Escape every opening or closing `tag` in `text` (any case, any inner spaces) as `&lt;...&gt;`."""
    pattern = re.compile(rf"<(\s*/?\s*{re.escape(tag)}\b[^>]*)>", re.IGNORECASE)
    return pattern.sub(lambda m: f"&lt;{m.group(1)}&gt;", text)


def frame(text: str, tag: str = OUTPUT_TAG) -> str:
    return f"<{tag}>\n{neutralise_tags(text, tag)}\n</{tag}>"


# Why the sandbox's own limits kill a program; any other signal is the program's own doing.
LIMIT_SIGNALS = {"SIGXCPU": "CPU time limit", "SIGXFSZ": "file size limit", "SIGKILL": "a resource limit"}


def describe_signal(signum: int) -> str:
    """ "killed by ..." text for any signal number: a named signal, a real-time one (SIGRTMIN+n, which has
    no name of its own), or one this system does not define."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        if signal.SIGRTMIN < signum < signal.SIGRTMAX:
            return f"signal {signum} (SIGRTMIN+{signum - signal.SIGRTMIN})"
        return f"signal {signum} (unknown)"
    return f"{name} ({LIMIT_SIGNALS.get(name, 'signal')})"


def describe_failure(result: SandboxResult, config: SandboxConfig) -> str | None:
    """One line saying why a run did not succeed, phrased so that verl-tool's failure markers
    ("Error:", "timed out") match it; None when the program exited 0 in time."""
    if result.timed_out:
        return f"Error: execution timed out after {config.timeout:g} seconds"
    if result.signal is not None:
        return f"Error: killed by {describe_signal(result.signal)}"
    if result.exit_code != 0:
        return f"Error: exit code {result.exit_code}"
    return None


def observation(result: SandboxResult, config: SandboxConfig) -> str:
    """stdout, then stderr, then the failure line, each truncation marked; unframed."""
    parts = []
    for text, cut in ((result.stdout, result.stdout_truncated), (result.stderr, result.stderr_truncated)):
        if text:
            parts.append(text.rstrip("\n") + ("\n[output truncated]" if cut else ""))
    failure = describe_failure(result, config)
    if failure:
        parts.append(failure)
    return "\n".join(parts)
