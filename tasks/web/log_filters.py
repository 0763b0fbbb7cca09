"""What the log says about a request that failed: a fault of ours is an ERROR with its
traceback; a client's mistake (a bad Host header, too many fields, a body too big, any
other 4xx) and a request answered 503 because the database is away are one WARNING line
each. A traceback there says nothing about the code, and a client could fill the log with
them."""

from __future__ import annotations

import logging

from tasks.runtime import outage


class OneLineUnlessOurFault(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if not isinstance(status, int):
            return True
        if 400 <= status < 500 or (status == 503 and outage.is_away()):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        return True
