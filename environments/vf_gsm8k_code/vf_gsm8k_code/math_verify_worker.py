"""A math-verify comparison server, run as its own process by vf_gsm8k_code.answers.MathVerifyWorker.

Reads one JSON line [gold, prediction] per comparison on stdin and writes one JSON line back: {"equal": bool} or
{"equal": false, "error": "..."}. It exists so that a comparison that runs away (sympy evaluating 10^10^10 inside
a single C call, which no signal or thread can interrupt) can be stopped by killing the process. Stdlib and
math-verify only, run by path, so that it starts without importing the environment's package.
"""

import json
import resource
import sys

MEMORY_LIMIT_BYTES = 2 * 1024**3  # a runaway big-integer computation fails with MemoryError instead of swapping


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    from math_verify import parse, verify  # after the limit: imports count too, and fit well within it

    print("ready", flush=True)
    for line in sys.stdin:
        try:
            gold, prediction = json.loads(line)
            # math-verify's own timeouts use SIGALRM, and cannot stop a C-level computation: the parent's kill does.
            equal = bool(verify(parse(gold, parsing_timeout=None), parse(prediction, parsing_timeout=None),
                                timeout_seconds=None))
            reply = {"equal": equal}
        except Exception as e:  # anything (MemoryError, RecursionError included) is a failed comparison
            reply = {"equal": False, "error": f"{type(e).__name__}: {str(e)[:200]}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
