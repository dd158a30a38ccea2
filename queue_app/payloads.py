"""What JSON the stores accept: checked before a write, so bad input is a 4xx, not a 500.

PostgreSQL's jsonb rejects ``\\u0000`` and lone surrogates; Python's parser
and serializer hit RecursionError near 1,000 levels. Both are caught here.
jsonb keeps numbers as ``numeric`` and prints them without an exponent, so
``1e308`` reads back as 309 digits: the size limit counts floats that way.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from queue_app.exceptions import InvalidJob, PayloadTooLarge


def _check_string(value: str, field: str) -> None:
    if "\x00" in value:
        raise InvalidJob("strings may not contain the NUL character (\\u0000)", field=field)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJob("strings may not contain lone surrogates", field=field) from None


def _float_growth(value: float) -> int:
    """How many characters longer PostgreSQL prints this float than Python writes it."""
    text = repr(value)
    if "e" not in text:
        return 0
    return len(format(Decimal(text), "f")) - len(text)


def _walk(value: Any, field: str, depth: int, max_depth: int) -> int:
    """Check ``value``; returns how much longer the stored JSON reads back than Python writes it."""
    if depth > max_depth:
        raise InvalidJob(f"nested deeper than {max_depth} levels", field=field)
    if isinstance(value, str):
        _check_string(value, field)
    elif isinstance(value, bool) or value is None:
        return 0
    elif isinstance(value, int):
        # jsonb stores numerics, but keep integers within what clients round-trip.
        if abs(value) >= 2**63:
            raise InvalidJob("integers must fit in 64 bits", field=field)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidJob("NaN and infinity are not JSON", field=field)
        return _float_growth(value)
    elif isinstance(value, dict):
        growth = 0
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidJob("object keys must be strings", field=field)
            _check_string(key, field)
            growth += _walk(item, field, depth + 1, max_depth)
        return growth
    elif isinstance(value, (list, tuple)):
        return sum(_walk(item, field, depth + 1, max_depth) for item in value)
    else:
        raise InvalidJob(f"{type(value).__name__} is not JSON", field=field)
    return 0


# What a handler may return; the worker checks it before writing it as the job's result.
MAX_RESULT_BYTES = 10 * 1024 * 1024
MAX_RESULT_DEPTH = 64


def check_result(value: Any) -> None:
    """Raise InvalidJob / PayloadTooLarge (field "result") for a return value the job cannot store."""
    check_json(value, field="result", max_bytes=MAX_RESULT_BYTES, max_depth=MAX_RESULT_DEPTH)


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def check_json(value: Any, *, field: str, max_bytes: int, max_depth: int) -> int:
    """Raise InvalidJob / PayloadTooLarge naming ``field``; returns the encoded size."""
    text = checked_json_text(value, field=field, max_bytes=max_bytes, max_depth=max_depth)
    return len(text.encode("utf-8"))


def checked_json_text(value: Any, *, field: str, max_bytes: int, max_depth: int) -> str:
    """``value`` as compact JSON text after ``check_json``'s checks: encoded once, to measure and to store."""
    growth = _walk(value, field, 1, max_depth)
    text = _COMPACT.encode(value)
    # The size the job reads back at: floats in exponent form come back written out.
    size = len(text.encode("utf-8")) + growth
    if size > max_bytes:
        raise PayloadTooLarge(f"larger than {max_bytes} bytes ({size})", field=field)
    return text
