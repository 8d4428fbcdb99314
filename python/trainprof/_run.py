"""``python -m trainprof run [--options JSON] SCRIPT ARGS...``: an unmodified
script (or ``-m MODULE``) run under a process-wide profile (_zero_code)."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from typing import Optional

from . import _zero_code

USAGE = """usage: python -m trainprof run [--options JSON] SCRIPT [ARGS...]
       python -m trainprof run [--options JSON] -m MODULE [ARGS...]

Runs SCRIPT (as `python SCRIPT ARGS...` would) under trainprof: steps are the
optimizer's step() calls, the profile is stopped, flushed and analysed at exit.
JSON has the keys of TRAINPROF_OPTIONS (the ProfilerOptions field names,
"schedule": {"wait": W, "warmup": W, "active": A, "repeat": R, "skip_first": S},
"analyse": true|false, "start" is implied); without --options, TRAINPROF_OPTIONS,
else {"analyse": true, "data_process": true}, output under ./data.
"""

DEFAULT_OPTIONS = '{"start": true, "analyse": true, "data_process": true}'


def _with_start(text: str) -> str:
    """``text`` with ``"start": true`` added when it has no "start" (run means profile)."""
    import json
    try:
        value = json.loads(text)
    except ValueError:
        return text  # the core's parser says what is wrong
    if isinstance(value, dict) and "start" not in value:
        value = {"start": True, **value}
        return json.dumps(value)
    return text


def _parse(argv: list[str]) -> tuple[Optional[str], list[str]]:
    options: Optional[str] = None
    args = list(argv)
    while args and (args[0] in ("--options", "-h", "--help") or args[0].startswith("--options=")):
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            sys.stdout.write(USAGE)
            raise SystemExit(0)
        if arg.startswith("--options="):
            options = arg.split("=", 1)[1]
        elif not args:
            raise SystemExit(f"trainprof run: --options needs a JSON value\n{USAGE}")
        else:
            options = args.pop(0)
    if not args or args == ["-m"]:
        raise SystemExit(f"trainprof run: a SCRIPT or -m MODULE is needed\n{USAGE}")
    return options, args


def main(argv: list[str]) -> int:
    """Runs the script; returns its exit status (SystemExit passes through)."""
    options, args = _parse(argv)
    if options is not None and _zero_code.active() is not None:
        raise SystemExit("trainprof run: TRAINPROF_OPTIONS is set and --options is given: give one")
    if _zero_code.active() is None:
        try:
            if _zero_code.start_from_json(_with_start(options or DEFAULT_OPTIONS)) is None:
                sys.stderr.write("[trainprof] \"start\": false; running without profiling\n")
        except ValueError as e:
            raise SystemExit(f"trainprof run: --options: {e}") from None
    if args[0] == "-m":
        module, sys.argv = args[1], args[1:]
        target = module
    else:
        target = args[0]
        if not os.path.isfile(target):
            raise SystemExit(f"trainprof run: SCRIPT {target!r} is not a file")
        sys.argv = list(args)
        sys.path[0] = os.path.dirname(os.path.abspath(target))
    try:
        if args[0] == "-m":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as e:  # as `python SCRIPT` shows it: without this runner's frames
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__):
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
        return 1
    return 0
