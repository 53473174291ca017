"""The log lines of Python models (``pb_utils.Logger``), on the server's side.

A stub sends each line on its events socket (``LOG``); the server writes it to the logger
``triton_core_python.model`` with the model's file and line, as Triton logs them, and the
model's name and instance on the record.
"""

from __future__ import annotations

import logging

#: what models log through pb_utils.Logger
model_logger = logging.getLogger("triton_core_python.model")

#: pb_utils.LogLevel -> logging levels
_LOG_LEVELS = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.DEBUG}


def log_model_line(
    model_name: str, instance_name: str, level: int, text: str, filename: str, line: int
) -> None:
    """A ``pb_utils.Logger`` line, with the model's file and line as Triton logs it."""
    number = _LOG_LEVELS.get(level, logging.INFO)
    if not model_logger.isEnabledFor(number):
        return
    record = model_logger.makeRecord(
        model_logger.name, number, str(filename), int(line), "%s", (str(text),), None
    )
    record.model_name = model_name
    record.model_instance = instance_name
    model_logger.handle(record)
