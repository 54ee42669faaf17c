"""Process logging: text for people, JSON lines for log pipelines, both carrying request ids.

The request id lives in a context variable: grpc.aio runs each RPC in its own task, so
setting it at the top of a handler tags every line that handler (and what it awaits) logs.
"""

from __future__ import annotations

import json
import logging
import time
from contextvars import ContextVar

request_id_var: ContextVar[str] = ContextVar("request_id", default="")


class _RequestContext(logging.Filter):
    def __init__(self, role: str) -> None:
        super().__init__()
        self.role = role

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = getattr(record, "request_id", "") or request_id_var.get()
        record.role = self.role
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, role, logger, msg, request_id (when known), exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "role": getattr(record, "role", ""),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if getattr(record, "request_id", ""):
            entry["request_id"] = record.request_id  # type: ignore[attr-defined]
        for key in ("worker_id", "status", "reason"):
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        rid = getattr(record, "request_id", "")
        return line.replace(" | ", f" [{rid}] ", 1) if rid else line.replace(" | ", " ", 1)


def configure_logging(role: str, log_format: str = "text", level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.addFilter(_RequestContext(role))
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(_TextFormatter("%(asctime)s %(name)s %(levelname)s | %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
