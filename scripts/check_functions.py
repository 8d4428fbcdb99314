#!/usr/bin/env python3
"""The size check: no function of src/ longer than 100 lines or taking more
than 6 parameters, or the check fails naming each, its file, line and size.

    scripts/check_functions.py [ROOT]      check the tree at ROOT (default: this one)
    scripts/check_functions.py --self-test plant a long function and a wide one
                                           in a scratch tree and check both are caught

A function's lines run from its name to its closing brace; lambdas count in
the function that holds them. Two kinds are not held to the limits:
functions whose signature another library fixes (MPI's, which the PMPI layer
interposes, and NCCL's profiler plugin's), and the functions still listed in
KNOWN_OVER below, each to be split and taken off the list (the check fails
when a listed one is gone or back within the limits, so the list only
shrinks).
"""
import functools
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_layers import code_only, plant  # noqa: E402

MAX_LINES = 100
MAX_PARAMETERS = 6

# Signatures another library fixes: (file, function name pattern).
FIXED_SIGNATURES = [
    ("src/collectors/mpi/", re.compile(r"^P?MPI_\w+$")),
    ("src/collectors/nccl/nccl_profiler.cc", re.compile(r"^init$")),
]

# Functions over the limits when this check came: (file, function). Each is
# to be split; the check fails once one is within the limits or gone, so
# that it is taken off.
KNOWN_OVER = {
    ("src/pipeline/cluster_spread.cc", "spread_match"),
    ("src/pipeline/cluster_run.cc", "conclude"),
    ("src/core/option_table.cc", "make_table"),
    ("src/core/raw_encoder.cc", "events"),
    ("src/pipeline/cluster_run.cc", "cluster_unguarded"),
    ("src/pipeline/cluster_spread.cc", "align_numbering"),
    ("src/exporter/cluster_trace.cc", "write_cluster_perfetto_trace"),
    ("src/pipeline/cluster_digest_spread.cc", "spread_digest"),
    ("src/pipeline/cluster_run.cc", "write_rank_tables_spread"),
    ("src/raw/raw_reader.cc", "read_bytes"),
    ("src/pipeline/run_outputs.cc", "write_memory_outputs"),
    ("src/pipeline/run_info.cc", "output_info"),
    ("src/exporter/chrome_trace.cc", "metadata"),
    ("src/collectors/mpi/mpi_collector.cc", "point_to_point"),
    ("src/core/raw_encoder.cc", "put_event"),
    ("src/core/recorder.cc", "write_event_fields"),
    ("src/exporter/chrome_trace.cc", "event_head"),
    ("src/core/recorder.cc", "record_comm"),
    ("src/core/recorder.cc", "append_event_fields"),
    ("src/core/recorder.cc", "record_event_fields"),
}

NOT_FUNCTIONS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "alignas", "alignof",
                 "constexpr", "requires", "static_assert", "noexcept", "defined", "typeid", "throw", "new",
                 "delete", "operator"}
CALLED = re.compile(r"(~?\b\w+)\s*\(")
AFTER_PARAMETERS = re.compile(
    r"\s*(?:const|noexcept(?:\([^)]*\))?|override|final|mutable|&&|&|\s)*(?:->\s*[\w:<>,\s*&]+?)?\s*(\{|:(?!:))")
SUFFIXES = (".h", ".cc", ".c", ".cpp", ".hpp", ".inc")


def closing(text, at, open_char, close_char):
    """Where the bracket opened at `at` closes, or -1."""
    depth = 0
    for i in range(at, len(text)):
        if text[i] == open_char:
            depth += 1
        elif text[i] == close_char:
            depth -= 1
            if depth == 0:
                return i
    return -1


def body_after_initializers(text, colon):
    """A constructor's body brace after its member initializers, or -1."""
    depth, i = 0, colon + 1
    while i < len(text):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == ";":
            return -1
        elif c == "{" and depth == 0:
            if re.search(r"\w\s*$", text[colon + 1:i]):  # a member's brace initializer: member{...}
                i = closing(text, i, "{", "}") + 1
                continue
            return i
        i += 1
    return -1


def parameter_count(parameters):
    parameters = parameters.strip()
    if parameters in ("", "void"):
        return 0
    depth, count = 0, 1
    for c in parameters:
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
        elif c == "," and depth == 0:
            count += 1
    return count


def functions(text):
    """(name, first line, lines, parameters) of each function defined in
    `text` (code_only), methods of classes included."""
    found, at = [], 0
    while True:
        m = CALLED.search(text, at)
        if m is None:
            return found
        at = m.end()
        name = m.group(1)
        if name in NOT_FUNCTIONS or text[max(0, m.start() - 2):m.start()].endswith((".", "->")):
            continue
        close = closing(text, m.end() - 1, "(", ")")
        after = AFTER_PARAMETERS.match(text, close + 1) if close > 0 else None
        if after is None:
            continue
        brace = after.end() - 1
        if after.group(1) == ":":
            brace = body_after_initializers(text, brace)
        end = closing(text, brace, "{", "}") if brace > 0 else -1
        if end < 0:
            continue
        first = text.count("\n", 0, m.start()) + 1
        found.append((name, first, text.count("\n", 0, end) + 2 - first, parameter_count(text[m.end():close])))
        at = brace + 1  # the functions inside (a local class's methods) are found too


def check(root):
    problems, listed_seen = [], set()
    for dirpath, _, files in sorted(os.walk(os.path.join(root, "src"))):
        for f in sorted(files):
            if not f.endswith(SUFFIXES):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
            text = code_only(open(os.path.join(root, rel), encoding="utf-8", errors="replace").read())
            for name, line, lines, parameters in functions(text):
                if lines <= MAX_LINES and parameters <= MAX_PARAMETERS:
                    continue
                if any(rel.startswith(where) and pattern.match(name) for where, pattern in FIXED_SIGNATURES):
                    continue
                if (rel, name) in KNOWN_OVER:
                    listed_seen.add((rel, name))
                    continue
                problems.append(f"{rel}:{line}: {name}() has {lines} lines and {parameters} parameter(s); "
                                f"the limits are {MAX_LINES} lines and {MAX_PARAMETERS} parameters: split it, "
                                "or pass a struct")
    for rel, name in sorted(KNOWN_OVER - listed_seen):
        if os.path.exists(os.path.join(root, rel)):
            problems.append(f"{rel}: {name}() is listed in KNOWN_OVER but is within the limits now (or gone): "
                            "take it off the list")
    return problems, len(listed_seen)


def self_test():
    with tempfile.TemporaryDirectory() as root:
        write = functools.partial(plant, root)
        short = "int add(int a, int b) {\n  return a + b;\n}\n"
        write("src/base/small.cc", "namespace trainprof::base {\n" + short + "}\n")
        if check(root)[0] != []:
            print("self-test: a tree within the limits was refused:\n" + "\n".join(check(root)[0]))
            return 1
        long_body = "".join(f"  x += {i};\n" for i in range(100))
        write("src/base/small.cc",
              "namespace trainprof::base {\n" + short + "struct S {\n  int wide(int a, int b, int c, int d, "
              "int e, int f, std::function<void(int, int)> g) const {\n    return a;\n  }\n};\n"
              "int long_one(int x) {\n  auto f = [&](int y) {\n    return y;\n  };\n" + long_body +
              "  return x;\n}\n}\n")
        got = check(root)[0]
        want = ["src/base/small.cc:6: wide() has 3 lines and 7 parameter(s); the limits are 100 lines and 6 "
                "parameters: split it, or pass a struct",
                "src/base/small.cc:10: long_one() has 106 lines and 1 parameter(s); the limits are 100 lines "
                "and 6 parameters: split it, or pass a struct"]
        if got != want:
            print("self-test: the planted functions were not reported as expected:\n  wanted: " +
                  "\n          ".join(want) + "\n  got:    " + "\n          ".join(got))
            return 1
    print("self-test: a method of 7 parameters and a function of 106 lines (a lambda inside) were caught")
    return 0


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems, listed = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"function-size check: {len(problems)} problem(s)")
        return 1
    print(f"function-size check: no function of src/ over {MAX_LINES} lines or {MAX_PARAMETERS} parameters "
          f"but the {listed} listed to be split")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
