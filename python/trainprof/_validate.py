# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""Argument checks shared by the public API: each error names the parameter."""

from __future__ import annotations

import functools
import os
import re
from typing import Any, Optional, Sequence

from . import _trainprof

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8_text(value: str) -> str:
    """``value`` as UTF-8 can carry it: each lone surrogate (U+D800 to U+DFFF,
    how Python holds bytes that are not UTF-8, as ``os.fsdecode`` gives them,
    or a broken UTF-16 pair) becomes U+FFFD, the replacement character. Names
    and texts are recorded so; paths keep their bytes (the binding encodes
    them as ``os.fsencode`` does)."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", value)


def check_bool(name: str, value: Any) -> bool:
    """Returns ``value`` if it is a bool, else raises TypeError naming ``name``."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def check_int(name: str, value: Any, minimum: int, maximum: Optional[int] = None) -> int:
    """Returns ``value`` if it is an int (not a bool) >= ``minimum`` and,
    given ``maximum``, <= it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


@functools.lru_cache(maxsize=None)
def option_range(option: str) -> tuple[int, int]:
    """The ``[min, max]`` of an unsigned option, from the C++ option table
    (``trainprof options``), which the C++ checks read too."""
    row = next(r for r in _trainprof.option_list() if r.name == option)
    low, high = re.fullmatch(r"\[(\d+), (\d+)\]", row.range).groups()
    return int(low), int(high)


def check_option(name: str, value: Any) -> int:
    """``check_int`` within the option table's range of the option ``name``."""
    return check_int(name, value, *option_range(name))


def check_str(name: str, value: Any, allow_empty: bool = False) -> str:
    """Returns ``value`` if it is a str (non-empty unless ``allow_empty``)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r}")
    if not allow_empty and not value:
        raise ValueError(f"{name} must not be empty")
    if "\0" in value:
        raise ValueError(f"{name} must not contain a NUL character")
    return value


def check_path(name: str, value: Any) -> str:
    """Returns ``value`` as a str if it is a non-empty str or os.PathLike."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike, got {type(value).__name__} {value!r}")
    return check_str(name, os.fspath(value))


def check_str_list(name: str, value: Any) -> list[str]:
    """Returns ``value`` as a list if it is a list or tuple of non-empty strings."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list of str, got {type(value).__name__} {value!r}")
    for i, item in enumerate(value):
        check_str(f"{name}[{i}]", item)
    return list(value)


def check_step_list(name: str, value: Optional[Sequence[int]]) -> list[int]:
    """Returns ``value`` as a list of consecutive ints (empty for None: all steps)."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple, range)):
        raise TypeError(f"{name} must be a list of int, got {type(value).__name__} {value!r}")
    steps = [check_int(f"{name}[{i}]", s, 0) for i, s in enumerate(value)]
    if any(b != a + 1 for a, b in zip(steps, steps[1:])):
        raise ValueError(f"{name} must be consecutive integers in increasing order, got {steps}")
    return steps
