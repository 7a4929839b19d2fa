"""Logging in vLLM's format: ``(APIServer pid=N) INFO MM-DD HH:MM:SS [file.py:line] message``."""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import NoReturn

_lock = threading.Lock()


def log(msg: str, level: str = "INFO", where: str = "api_server.py:1", proc: str = "APIServer") -> None:
    """Print one vLLM-style log line on stdout (vLLM's default handler writes to stdout)."""
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime())
    with _lock:
        sys.stdout.write(f"({proc} pid={os.getpid()}) {level} {stamp} [{where}] {msg}\n")
        sys.stdout.flush()


def access_log(msg: str) -> None:
    """uvicorn's access line as vLLM prints it: ``(APIServer pid=N) INFO:     host:port - "GET / HTTP/1.1" 200 OK``."""
    with _lock:
        sys.stdout.write(f"(APIServer pid={os.getpid()}) INFO:     {msg}\n")
        sys.stdout.flush()


def fatal(exc_line: str, code: int = 1) -> NoReturn:
    """Print vLLM's exception line verbatim on stderr and exit ``code`` (no traceback)."""
    sys.stdout.flush()
    sys.stderr.write(exc_line.rstrip("\n") + "\n")
    sys.stderr.flush()
    raise SystemExit(code)
