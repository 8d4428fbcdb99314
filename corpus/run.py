#!/usr/bin/env python3
"""Scores the advisor on the corpus: every workload under workloads/ is run
as a user would (zero-code under ``python -m trainprof run``, and inside
``trainprof.profile()``), then ``trainprof advise`` is read.

A workload says what it plants in its first lines: ``# expect: RULE`` (the
finding that must come first) or ``# expect: clean`` (no finding at all),
and ``# ranks: N`` for a job of N ranks (started by torchrun, Gloo);
``# ci: fast`` puts it in the part CI runs (``--fast``: planted problems
far above their rules' thresholds, and clean loops far below them).

Prints the table workload x rule: "1st" (the first finding), "fired" (a
later one), blank (silent), one cell per mode; the verdict per workload;
exit status 1 when any workload misses. ``--markdown`` prints the table as
docs/ADVICE.md carries it.

    .venv/bin/python corpus/run.py                 # all, both modes
    .venv/bin/python corpus/run.py --mode profile --only clean_
    .venv/bin/python corpus/run.py --fast          # what CI runs
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

WORKLOADS = Path(__file__).resolve().parent / "workloads"
MODES = ("zero-code", "profile")
TIMEOUT_S = 600


@dataclass
class Workload:
    name: str
    path: Path
    expect: str  # a rule, or "clean"
    ranks: int = 1
    fast: bool = False


@dataclass
class Outcome:
    rules: list[str] = field(default_factory=list)  # the findings' rules, first first
    first_title: str = ""
    error: str = ""  # the run or the advice failed
    seconds: float = 0.0


def workloads(only: list[str], fast: bool = False) -> list[Workload]:
    found = []
    for path in sorted(WORKLOADS.glob("*.py")):
        if path.name.startswith("_"):
            continue
        head = path.read_text().split("\n", 5)[:5]
        expect = next((m.group(1) for line in head if (m := re.match(r"# expect: (\w+)", line))), None)
        if expect is None:
            sys.exit(f"corpus: {path.name} has no '# expect: RULE' line")
        ranks = next((int(m.group(1)) for line in head if (m := re.match(r"# ranks: (\d+)", line))), 1)
        w = Workload(path.stem, path, expect, ranks, "# ci: fast" in head)
        if (not only or any(o in w.name for o in only)) and (w.fast or not fast):
            found.append(w)
    return found


def command(w: Workload, mode: str) -> list[str]:
    trainprof_run = ["-m", "trainprof", "run"] if mode == "zero-code" else []
    if w.ranks == 1:
        return [sys.executable, *trainprof_run, str(w.path)]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={w.ranks}"]
    if mode == "zero-code":
        return [*torchrun, "--module", "trainprof", "run", str(w.path)]
    return [*torchrun, str(w.path)]


def run_one(w: Workload, mode: str, keep: Path | None) -> Outcome:
    out = Outcome()
    work = Path(tempfile.mkdtemp(prefix=f"corpus_{w.name}_"))
    env = dict(os.environ, CORPUS_MODE=mode, CORPUS_OUT=str(work / "data"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(WORKLOADS), os.environ.get("PYTHONPATH")])))
    start = time.monotonic()
    try:
        done = subprocess.run(command(w, mode), cwd=work, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
        if done.returncode != 0:
            # torchrun ends with its own summary: the lines that say why come before it.
            said = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("[")]
            out.error = f"exit {done.returncode}: " + " | ".join(said[-6:])
            (work / "stderr.txt").write_text(done.stderr)
            return out
        advice = subprocess.run([sys.executable, "-m", "trainprof", "advise", str(work / "data"), "--json"],
                                capture_output=True, text=True, timeout=TIMEOUT_S)
        if advice.returncode != 0:
            out.error = f"advise: {advice.stderr.strip()}"
            return out
        findings = json.loads(advice.stdout)
        out.rules = [f["rule"] for f in findings]
        out.first_title = findings[0]["title"] if findings else ""
    except subprocess.TimeoutExpired:
        out.error = f"ran past {TIMEOUT_S} s"
    finally:
        out.seconds = time.monotonic() - start
        if keep is not None:
            target = keep / mode / w.name
            shutil.rmtree(target, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(work), target)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return out


def verdict(w: Workload, o: Outcome) -> bool:
    if o.error:
        return False
    return not o.rules if w.expect == "clean" else bool(o.rules) and o.rules[0] == w.expect


def cell(rule: str, o: Outcome | None) -> str:
    if o is None:
        return ""
    if o.error:
        return "error"
    if rule not in o.rules:
        return "-"
    return "1st" if o.rules[0] == rule else "fired"


def table(ws: list[Workload], results: dict, modes: list[str], markdown: bool) -> str:
    rules = sorted({w.expect for w in ws if w.expect != "clean"} |
                   {r for o in results.values() for r in o.rules})
    head = ["workload", "planted", *rules, "verdict"]
    rows = []
    for w in ws:
        cells = [" / ".join(cell(r, results.get((w.name, m))) for m in modes) for r in rules]
        ok = all(verdict(w, results[(w.name, m)]) for m in modes)
        rows.append([w.name, w.expect, *cells, "ok" if ok else "MISS"])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(f"`{r[0]}`" if i == 0 else c for i, c in enumerate(r)) + " |"
                  for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in [head, *rows])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=[*MODES, "both"], default="both")
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="workloads whose name holds TEXT (repeatable)")
    parser.add_argument("--fast", action="store_true", help="only the workloads marked '# ci: fast'")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep each run's directory under DIR")
    parser.add_argument("--markdown", action="store_true", help="the table as Markdown")
    args = parser.parse_args()
    modes = list(MODES) if args.mode == "both" else [args.mode]
    ws = workloads(args.only, args.fast)
    if not ws:
        print("corpus: no workload matches", file=sys.stderr)
        return 2
    results: dict[tuple[str, str], Outcome] = {}
    began = time.monotonic()
    for i, w in enumerate(ws, 1):
        for mode in modes:
            o = run_one(w, mode, args.keep)
            results[(w.name, mode)] = o
            said = o.error or (", ".join(o.rules) if o.rules else "no finding")
            mark = "ok  " if verdict(w, o) else "MISS"
            print(f"[{i}/{len(ws)}] {mark} {w.name} ({mode}, {o.seconds:.1f} s): {said}", file=sys.stderr,
                  flush=True)
    print(table(ws, results, modes, args.markdown))
    misses = [w.name for w in ws if not all(verdict(w, results[(w.name, m)]) for m in modes)]
    cells = "zero-code / profile" if len(modes) == 2 else modes[0]
    print(f"\n{len(ws) - len(misses)} of {len(ws)} workloads right in {cells} "
          f"({time.monotonic() - began:.0f} s)" + (f"; missed: {', '.join(misses)}" if misses else ""))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
