"""Running the program in a process forked from the sandbox server, as `python -I main.py` would.

The server's interpreter is already started (that is the point of pre-forking), so the program does not get
a fresh one; instead this module resets what a fresh `python -I <script>` would differ in: `__main__`,
`sys.argv`, `sys.path` (the script's directory first), the import caches, signal handlers, the server's
own modules. Exceptions print like the interpreter's (no frames of ours), `SystemExit` is the interpreter's
own, and the process ends through normal interpreter shutdown (non-daemon threads joined, atexit handlers
run, streams flushed; exit code 120 if flushing stdout fails), because `run` lets `SystemExit` reach the
top level of the server script.

What a program can tell apart from a fresh interpreter: modules the server preloaded are already in
`sys.modules`, `sys.flags.no_site` is 1, and every call shares the server's hash seed and address-space
layout (as Android's zygote children do). Nothing of one call reaches another: each is a new fork of the
untouched server.
"""

import builtins
import importlib
import importlib.machinery
import os
import signal
import socket
import sys
import types

SERVER_MODULES = ("_jail", "_program")  # the server script itself is the __main__ replaced below


class _NoNetwork(socket.socket):
    def __init__(self, *args, **kwargs):
        raise PermissionError("network access is disabled in this sandbox")


class Program:
    """One program, ready to run in the process it was prepared in (limits, uid and filters are set)."""

    def __init__(self, source: bytes, path: str, sys_path: list[str], signals: dict, block_network: bool):
        self.source = source
        self.path = path  # where main.py is written; its directory is the working directory
        self.sys_path = sys_path
        self.signals = signals  # the server's initial signal dispositions (Python's defaults)
        self.block_network = block_network

    def _reset_interpreter(self) -> types.ModuleType:
        for signum, handler in self.signals.items():
            signal.signal(signum, handler)
        sys.argv = [self.path]
        sys.orig_argv = [sys.executable, "-I", self.path]
        sys.path[:] = [self.path.rsplit("/", 1)[0], *self.sys_path]
        sys.path_importer_cache.clear()
        importlib.invalidate_caches()
        sys.dont_write_bytecode = True  # the view is read-only; the program's own dir would only fill up
        for name in SERVER_MODULES:
            sys.modules.pop(name, None)
        if self.block_network:  # best effort: `_socket` bypasses it; the network namespace does not exist
            socket.socket = _NoNetwork
        main = types.ModuleType("__main__")
        main.__file__ = self.path
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", self.path)
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        return main

    def run(self):
        """Run the program; always raises SystemExit (the exit code), for the interpreter to shut down."""
        main = self._reset_interpreter()
        try:
            with open(self.path, "wb") as f:
                f.write(self.source)
        except OSError as exc:  # the text alone is over the disk quota or the file size limit
            print(f"Error: cannot write the program file {self.path}: {exc}", file=sys.stderr)
            raise SystemExit(1) from None
        try:
            # Bytes, as the interpreter reads a script: PEP 263 decoding, so invalid UTF-8 (a lone surrogate
            # in the text) is the SyntaxError `python main.py` gives. NUL bytes: ValueError on 3.11.2.
            code = compile(self.source, self.path, "exec", dont_inherit=True)
        except BaseException as exc:  # noqa: BLE001 - SyntaxError, ValueError, RecursionError, MemoryError
            sys.excepthook(type(exc), exc.with_traceback(None), None)
            raise SystemExit(1) from None
        try:
            exec(code, main.__dict__)
        except SystemExit:
            raise
        except BaseException as exc:  # noqa: BLE001 - what the interpreter prints for an uncaught exception
            program_frames = exc.__traceback__.tb_next  # without this one
            sys.excepthook(type(exc), exc.with_traceback(program_frames), program_frames)
            if isinstance(exc, KeyboardInterrupt):  # the interpreter then dies of SIGINT (since 3.8)
                sys.stderr.flush()
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)
            raise SystemExit(1) from None
        raise SystemExit(0)
