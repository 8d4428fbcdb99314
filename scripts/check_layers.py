#!/usr/bin/env python3
"""The include-direction check: every #include "..." goes one way through the
layers below, or the check fails naming the file, the line and what that
folder may include; and docs/ARCHITECTURE.md's table of layers must say what
this check enforces.

    scripts/check_layers.py [ROOT]     check the tree at ROOT (default: this one)
    scripts/check_layers.py --self-test  plant a wrong include in a scratch tree
                                         and check that it is caught

Layers, each with what it may include besides itself ("api" is include/,
the public C++ API, which the layers below implement):

    base        api                   files, logs, JSON limits, the version
    raw         -                     the raw format, reader
    core        base raw api          recording: buffers, flusher, sessions
    collectors  core base raw api     each collector on its own
    analysis    base raw api          passes over a run's events
    exporter    analysis base raw api writers of the outputs
    pipeline    exporter analysis core base raw api
                                      the drivers: analyse, cluster, summary
    tools, python/src, examples       api only

tests/, bench/ and fuzz/ reach internals on purpose and are not checked.
"""
import os
import re
import sys
import tempfile

ALLOWED = {
    "base": {"api"},
    "raw": set(),
    "core": {"base", "raw", "api"},
    "collectors": {"core", "base", "raw", "api"},
    "analysis": {"base", "raw", "api"},
    "exporter": {"analysis", "base", "raw", "api"},
    "pipeline": {"exporter", "analysis", "core", "base", "raw", "api"},
    "tools": {"api"},
    "python": {"api"},
    "examples": {"api"},
    "api": {"api"},
}

# The folders checked, and the layer each is.
CHECKED = {
    "src/base": "base",
    "src/raw": "raw",
    "src/core": "core",
    "src/collectors": "collectors",
    "src/analysis": "analysis",
    "src/exporter": "exporter",
    "src/pipeline": "pipeline",
    "tools": "tools",
    "python/src": "python",
    "examples": "examples",
    "include": "api",
}

# Includes that still cross a layer, each to be removed; listed here so that
# the check passes on them and fails on any new one. Each is (file, include).
KNOWN_CROSSINGS = set()

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_SUFFIXES = (".h", ".cc", ".cpp", ".hpp", ".inc")


def layer_of_include(name, including_dir, root):
    """The layer an include names, or None for a file of the includer's own folder."""
    if os.path.exists(os.path.join(root, including_dir, name)):
        return None  # beside the includer (tools' own headers, a collector's)
    first = name.split("/", 1)[0]
    if first == "trainprof":
        return "api"
    if first in ("base", "raw", "core", "analysis", "exporter", "pipeline"):
        return first
    if first == "collectors":
        return "collectors/" + name.split("/")[1] if name.count("/") >= 2 else "collectors"
    return "unknown"


def check(root):
    """Returns the list of problems: 'file:line: message'."""
    problems = []
    seen_known = set()
    for folder, layer in sorted(CHECKED.items()):
        for dirpath, _, files in sorted(os.walk(os.path.join(root, folder))):
            for f in sorted(files):
                if not f.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                rel_dir = os.path.dirname(rel)
                with open(path, encoding="utf-8", errors="replace") as text:
                    for number, line in enumerate(text, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = layer_of_include(m.group(1), rel_dir, root)
                        if target is None:
                            continue
                        own = layer
                        if layer == "collectors":
                            own = "collectors/" + rel.split("/")[2]
                        if target == own:
                            continue
                        allowed = ALLOWED[layer]
                        if target.split("/")[0] in allowed and not target.startswith("collectors"):
                            continue
                        if (rel, m.group(1)) in KNOWN_CROSSINGS:
                            seen_known.add((rel, m.group(1)))
                            continue
                        may = ", ".join(sorted(allowed)) or "nothing of ours"
                        problems.append(
                            f'{rel}:{number}: includes "{m.group(1)}" ({target}), but {layer} may include '
                            f"only: {may}"
                        )
    for rel, name in sorted(KNOWN_CROSSINGS - seen_known):
        if os.path.exists(os.path.join(root, rel)):
            problems.append(f'{rel}: "{name}" is listed as a known crossing but no longer included: '
                            "take it off the list")
    return problems, len(seen_known)


def check_document(root):
    """docs/ARCHITECTURE.md's table of layers says what ALLOWED says."""
    path = os.path.join(root, "docs", "ARCHITECTURE.md")
    if not os.path.exists(path):
        return []
    text = open(path, encoding="utf-8").read()
    if "## Layers" not in text:
        return ["docs/ARCHITECTURE.md: no '## Layers' section listing the layers"]
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    documented = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("layer", "") or cells[0].startswith("-"):
            continue
        may = cells[2].replace("nothing of ours", "")
        documented[cells[0]] = {m.strip() for m in may.split(",") if m.strip()}
    problems = []
    for layer, allowed in sorted(ALLOWED.items()):
        if documented.get(layer) != allowed:
            problems.append(f"docs/ARCHITECTURE.md: layer {layer} may include {sorted(documented.get(layer, []))} "
                            f"in the document, {sorted(allowed)} in this check")
    for layer in sorted(set(documented) - set(ALLOWED)):
        problems.append(f"docs/ARCHITECTURE.md: layer {layer} is not one this check knows")
    return problems


def self_test():
    """A scratch tree with one include the wrong way must fail, naming it."""
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        write("src/raw/format.h", "#pragma once\n")
        write("src/core/clock.h", '#pragma once\n#include "raw/format.h"\n')
        write("src/analysis/pass.cc", '#include "raw/format.h"\n#include "trainprof/analyse.h"\n')
        good, _ = check(root)
        if good:
            print("self-test: a tree that keeps the layers was refused:\n" + "\n".join(good))
            return 1
        write("src/raw/reader.cc", '// the reader\n#include "raw/format.h"\n#include "core/clock.h"\n')
        bad, _ = check(root)
        want = 'src/raw/reader.cc:3: includes "core/clock.h" (core), but raw may include only: nothing of ours'
        if bad != [want]:
            print("self-test: the planted include was not reported as expected:\n"
                  f"  wanted: {want}\n  got:    {bad}")
            return 1
    print("self-test: the planted include raw -> core was caught, with its file and line")
    return 0


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems, known = check(root)
    problems += check_document(root)
    for p in problems:
        print(p)
    if problems:
        print(f"include-direction check: {len(problems)} problem(s); the layers are listed in "
              "scripts/check_layers.py and docs/ARCHITECTURE.md")
        return 1
    print(f"include-direction check: every include goes one way ({known} known crossing(s) still listed)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
