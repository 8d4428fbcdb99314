# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""``python -m trainprof run [--options JSON] SCRIPT ARGS...``: an unmodified
script (or ``-m MODULE``) run under a process-wide profile (_zero_code)."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from types import TracebackType
from typing import Optional

from . import _zero_code
from ._distributed import one_of_several_ranks

USAGE = """usage: python -m trainprof run [--flight-recorder] [--options JSON] SCRIPT [ARGS...]
       python -m trainprof run [--flight-recorder] [--options JSON] -m MODULE [ARGS...]

Runs SCRIPT (as `python SCRIPT ARGS...` would) under trainprof: steps are the
optimizer's step() calls, the profile is stopped, flushed and analysed at exit
("analyse": false leaves the analysis to `trainprof analyse`).
The options are --options JSON, else TRAINPROF_OPTIONS (one of the two, not
both), else {"analyse": true, "data_process": true}, with
"profile_communication": true when a launcher started this process as one
of several ranks (WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE or SLURM_NTASKS
above 1: the cluster analysis needs the ranks' collectives); output under
./data.
JSON has the keys of TRAINPROF_OPTIONS (the ProfilerOptions field names,
"schedule": {"wait": W, "warmup": W, "active": A, "repeat": R, "skip_first": S},
"analyse": true|false); "start" is true unless given: "start": false runs
SCRIPT without profiling. Options that are not valid (bad JSON, nested deeper
than 128, an unknown key, a bad value) are a usage error: SCRIPT does not run.

--flight-recorder adds "flight_recorder": true to the options (unless they
have that key): nothing is written while the training goes well; a step 3x
slower than the median of the last 50, no step for 600 s, an exception, a
crash, SIGTERM or SIGUSR1 writes the last steps (a 64 MiB ring) as a run,
analysed. Settings: "flight_recorder": {"ring_mb": ..., "slow_step_factor":
..., "hang_timeout_s": ..., ...}.
"""

DEFAULT_OPTIONS = '{"start": true, "analyse": true, "data_process": true}'
DEFAULT_RANK_OPTIONS = '{"start": true, "analyse": true, "data_process": true, "profile_communication": true}'

# Exit status of a usage error (argparse's).
USAGE_ERROR = 2


def _usage_error(message: str) -> SystemExit:
    sys.stderr.write(f"trainprof run: {message}\n{USAGE}")
    return SystemExit(USAGE_ERROR)


def _with_start(text: str, flight_recorder: bool = False) -> str:
    """``text`` with ``"start": true`` added when it has no "start" (run
    means profile), ``"analyse": true`` when it has no "analyse" (run
    analyses at exit; the flight recorder has its own setting), and
    ``"flight_recorder": true`` when asked for and absent."""
    import json
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text  # the core's parser says what is wrong (nesting: past its limit of 128)
    if not isinstance(value, dict):
        return text
    added = dict(value)
    if "start" not in added:
        added = {"start": True, **added}
    if flight_recorder and "flight_recorder" not in added:
        added["flight_recorder"] = True
    if "analyse" not in added and "flight_recorder" not in added:
        added["analyse"] = True
    return json.dumps(added) if added != value else text


def _parse(argv: list[str]) -> tuple[Optional[str], bool, list[str]]:
    options: Optional[str] = None
    flight_recorder = False
    args = list(argv)
    while args and (args[0] in ("--options", "--flight-recorder", "-h", "--help")
                    or args[0].startswith("--options=")):
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            sys.stdout.write(USAGE)
            raise SystemExit(0)
        if arg == "--flight-recorder":
            flight_recorder = True
        elif arg.startswith("--options="):
            options = arg.split("=", 1)[1]
        elif not args:
            raise _usage_error("--options needs a JSON value")
        else:
            options = args.pop(0)
    if not args or args == ["-m"]:
        raise _usage_error("a SCRIPT or -m MODULE is needed")
    return options, flight_recorder, args


def _start_profile(options: Optional[str], flight_recorder: bool = False) -> None:
    """Starts the process-wide profile by the rule of USAGE (one rule for
    --options and TRAINPROF_OPTIONS); a usage error when they are not valid."""
    env_text = os.environ.get(_zero_code.OPTIONS_VARIABLE, "")
    if _zero_code.active() is not None or (options is not None and env_text):
        if options is not None:
            raise _usage_error(f"{_zero_code.OPTIONS_VARIABLE} is set and --options is given: give one")
        return  # started from the environment before this runner (not through `run`)
    if options is not None:
        source, text = "--options", options
    elif env_text:
        source, text = _zero_code.OPTIONS_VARIABLE, env_text
    else:
        source, text = "the default options", DEFAULT_RANK_OPTIONS if one_of_several_ranks() else DEFAULT_OPTIONS
    try:
        started = _zero_code.start_from_json(_with_start(text, flight_recorder))
    except ValueError as e:
        message = str(e)
        if source == "--options" and message.startswith(_zero_code.OPTIONS_VARIABLE):
            message = "--options" + message[len(_zero_code.OPTIONS_VARIABLE):]  # the core names the variable
        elif not message.startswith(_zero_code.OPTIONS_VARIABLE):
            message = f"{source}: {message}"
        raise _usage_error(message) from None
    if started is None:
        sys.stderr.write(f"[trainprof] {source} has \"start\": false: running without profiling\n")


def _script_frames(tb: Optional[TracebackType]) -> Optional[TracebackType]:
    """``tb`` without this runner's and runpy's frames (runpy is frozen in
    recent Pythons: its frames' file is "<frozen runpy>")."""
    while tb is not None:
        code = tb.tb_frame.f_code
        module = tb.tb_frame.f_globals.get("__name__")
        if not (module in ("runpy", __name__) or code.co_filename in (__file__, runpy.__file__, "<frozen runpy>")):
            break
        tb = tb.tb_next
    return tb


def main(argv: list[str]) -> int:
    """Runs the script; returns its exit status (SystemExit passes through)."""
    options, flight_recorder, args = _parse(argv)
    if args[0] != "-m" and not os.path.isfile(args[0]):
        raise _usage_error(f"SCRIPT {args[0]!r} is not a file")
    _start_profile(options, flight_recorder)
    if args[0] == "-m":
        module, sys.argv = args[1], args[1:]
        target = module
    else:
        target = args[0]
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
        _zero_code.on_uncaught_exception(e)
        traceback.print_exception(type(e), e, _script_frames(e.__traceback__))
        return 1
    return 0
