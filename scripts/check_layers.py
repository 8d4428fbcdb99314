#!/usr/bin/env python3
"""The include-direction check: every #include "..." goes one way through the
layers below, or the check fails naming the file, the line and what that
folder may include; docs/ARCHITECTURE.md's table of layers must say what
this check enforces; and its section "Where each part lives" must name every
source file under src/ (and no file that is not there), or the check fails
naming the file.

    scripts/check_layers.py [ROOT]     check the tree at ROOT (default: this one)
    scripts/check_layers.py --self-test  plant a wrong include and an unlisted
                                         file in scratch trees and check that
                                         both are caught

How a file is named: the section has a group per folder, begun by a heading
that names the folder in backticks (### core: `src/core/`); a file is named
when its path in that folder appears in backticks in the first cell of a
table row of the group, `name.*` standing for every file name.EXT (name.h
and name.cc). The folders whose files must be named: src/, tools/,
python/ (its tests/ aside) and bench/; their files are the sources and
scripts (.h, .cc, ..., .py, .pyi, .sh), not CMakeLists.txt or templates.

A function that include/trainprof/ declares is implemented by one layer (it
is defined in namespace trainprof there); a layer calls it only if it may
use that layer: exporter calling find_run_directories(), which pipeline
implements, goes up the layers through the public header, which the include
check alone does not see.

The Python package's modules (python/trainprof/) import each other without
a cycle, imports inside functions included: such an import only hides a
cycle until the call, and the first caller meets a module half made.

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
import ast
import functools
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
SOURCE_SUFFIXES = (".h", ".cc", ".c", ".cpp", ".hpp", ".inc")

# docs/ARCHITECTURE.md's section that names every file under src/.
WHERE_TITLE = "Where each part lives"
WHERE_SECTION = "## " + WHERE_TITLE
BACKTICKED = re.compile(r"`([^`]+)`")
# A file's path as the section gives it, relative to its group's folder: a
# source or script suffix, or ".*".
FILE_NAME = re.compile(r"^(?:[\w.+-]+/)*\w[\w.+-]*\.(?:h|cc|c|cpp|hpp|inc|py|pyi|sh|\*)$")
# The folders whose files the section names, each with the suffixes of its
# files and the subfolders left out.
DOCUMENTED = {
    "src": (SOURCE_SUFFIXES, ()),
    "tools": (SOURCE_SUFFIXES, ()),
    "python": (SOURCE_SUFFIXES + (".py", ".pyi"), ("python/tests/",)),
    "bench": (SOURCE_SUFFIXES + (".py", ".sh"), ()),
}
PYTHON_PACKAGE = "python/trainprof"


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


def where_groups(section):
    """The section's groups: {folder: names}, a group per heading that names a
    folder in backticks, its names the paths in backticks in the first cell of
    each table row below it, up to the next heading."""
    groups = {}
    names = None
    for line in section.splitlines():
        if line.startswith("#"):
            folders = [t for t in BACKTICKED.findall(line) if t.endswith("/")]
            names = groups.setdefault(folders[0], set()) if folders else None
        elif names is not None and line.startswith("|"):
            first_cell = line.strip().strip("|").split("|", 1)[0]
            names.update(t for t in BACKTICKED.findall(first_cell) if FILE_NAME.match(t))
    return groups


def names_file(name, file_name):
    """Whether a name of the section stands for `file_name` (`clock.*`: clock.h, clock.cc)."""
    if name.endswith(".*"):
        return file_name.startswith(name[:-1]) and "/" not in file_name[len(name) - 1:]
    return name == file_name


def source_files(root):
    """Every source file and script of the documented folders (CMakeLists.txt
    aside), relative to root."""
    found = []
    for top, (suffixes, left_out) in DOCUMENTED.items():
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                rel = os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
                if f.endswith(suffixes) and not rel.startswith(left_out):
                    found.append(rel)
    return sorted(found)


def group_of(rel, groups):
    """The group a file belongs in: the deepest folder of the section holding
    it (src/collectors/torch/, not src/), its path relative to that folder.
    Files of src/ belong in their own folder's group."""
    folder = rel.rsplit("/", 1)[0] + "/"
    if rel.startswith("src/"):
        return folder, rel[len(folder):]
    holding = [g for g in groups if rel.startswith(g)]
    best = max(holding, key=len) if holding else rel.split("/", 1)[0] + "/"
    return best, rel[len(best):]


def check_where(root):
    """docs/ARCHITECTURE.md's "Where each part lives" names every file of the
    documented folders, each in the group of its folder, and no file that is
    not there."""
    path = os.path.join(root, "docs", "ARCHITECTURE.md")
    if not os.path.exists(path):
        return []
    text = open(path, encoding="utf-8").read()
    if "\n" + WHERE_SECTION + "\n" not in text:
        return [f"docs/ARCHITECTURE.md: no '{WHERE_SECTION}' section naming the files of src/"]
    groups = where_groups(text.split("\n" + WHERE_SECTION + "\n", 1)[1].split("\n## ", 1)[0])
    files = source_files(root)
    problems = []
    placed = {}
    for rel in files:
        folder, name = group_of(rel, groups)
        placed.setdefault(folder, []).append(name)
        if not any(names_file(n, name) for n in groups.get(folder, ())):
            stem = name.rsplit(".", 1)[0] if "." in name.rsplit("/", 1)[-1] else name
            problems.append(f"{rel}: not named in docs/ARCHITECTURE.md's '{WHERE_TITLE}': add `{name}` "
                            f"(or `{stem}.*`) to the group headed `{folder}`")
    for folder, names in sorted(groups.items()):
        if folder.split("/", 1)[0] not in DOCUMENTED:
            continue
        for n in sorted(names):
            if not any(names_file(n, f) for f in placed.get(folder, [])):
                problems.append(f"docs/ARCHITECTURE.md: `{n}` is named under `{folder}` in "
                                f"'{WHERE_TITLE}', but {folder} holds no such file")
    return problems


def python_imports(root):
    """{module: the package's modules it imports}, for python/trainprof/,
    imports inside functions included."""
    package = os.path.join(root, PYTHON_PACKAGE)
    if not os.path.isdir(package):
        return {}
    modules = {f[:-3] for f in os.listdir(package) if f.endswith(".py")}
    graph = {}
    for module in sorted(modules):
        tree = ast.parse(open(os.path.join(package, module + ".py"), encoding="utf-8").read())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level == 1 or (node.module or "").startswith("trainprof")):
                parts = (node.module or "").split(".")
                if node.level == 0:
                    parts = parts[1:]  # trainprof.x -> x
                if parts and parts[0]:
                    imported.add(parts[0])
                else:
                    imported.update(a.name for a in node.names)  # from . import x, y
            elif isinstance(node, ast.Import):
                imported.update(a.name.split(".")[1] for a in node.names if a.name.startswith("trainprof."))
        graph[module] = sorted((imported & modules) - {module})
    return graph


def check_python_imports(root):
    """One message per import cycle among the package's modules, naming it."""
    graph = python_imports(root)
    problems, reported_cycles = [], set()
    for start in sorted(graph):
        # Depth first from `start`, a path back to it is a cycle.
        stack = [(start, [start])]
        while stack:
            module, path = stack.pop()
            for nxt in graph[module]:
                if nxt == start:
                    cycle = path + [start]
                    key = frozenset(path)
                    if key not in reported_cycles:
                        reported_cycles.add(key)
                        problems.append(f"{PYTHON_PACKAGE}: import cycle " + " -> ".join(cycle) +
                                        " (imports inside functions count: they only delay it)")
                elif nxt not in path and nxt > start:  # each cycle from its least module once
                    stack.append((nxt, path + [nxt]))
    return problems


# ---- Which layer implements each public function ----
#
# A layer may include include/trainprof/ (api), but a function declared there
# is implemented by one layer: calling it from a layer below that one goes
# up the layers through the public header, which the include check does not
# see. Public functions are the free functions that include/trainprof/
# declares at namespace scope; a function implements one when it is defined
# in namespace trainprof itself (not a member, not a nested namespace's).

CALLABLE = re.compile(r"namespace\s+([\w:]*)\s*\{|[{};]|((?:\w+::)*)(~?\w+)\s*\(")
NOT_FUNCTIONS = {"if", "for", "while", "switch", "return", "sizeof", "decltype", "catch", "alignof"}


def code_only(text):
    """`text` without comments, preprocessor lines, string contents and empty
    braces (`= {}` default arguments), so that braces and semicolons are code."""
    newlines = lambda m: "\n" * m.group(0).count("\n")  # noqa: E731 (lines keep their numbers)
    text = re.sub(r'R"([^(\s]*)\(.*?\)\1"', lambda m: '""' + newlines(m), text, flags=re.S)
    text = re.sub(r"/\*.*?\*/", newlines, text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"(?m)^[ \t]*#.*$", "", text)
    text = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', text)
    text = re.sub(r"'(?:[^'\\\n]|\\.)*'", "''", text)
    return re.sub(r"\{\s*\}", "", text)


def functions_in(text):
    """(kind, name, namespace, qualifier, offset) of `text` (code_only): kind
    "decl" or "def" for a function declared or defined at namespace scope,
    "call" for a name called inside a body (member calls aside)."""
    stack = []  # ("ns", name) per namespace level, ("body",) per other brace, ("multi", n) for a::b
    pending = None  # the first function name of the statement at namespace scope
    for m in CALLABLE.finditer(text):
        token = m.group(0)
        if token.startswith("namespace"):
            parts = (m.group(1) or "<anonymous>").split("::")
            stack.extend(("ns", p) for p in parts)
            if len(parts) > 1:
                stack.append(("multi", len(parts)))
            pending = None
        elif token == "{":
            if pending is not None:
                yield ("def",) + pending
            pending = None
            stack.append(("body",))
        elif token == "}":
            if stack and stack[-1][0] == "multi":
                del stack[len(stack) - 1 - stack[-1][1]:]
            elif stack:
                stack.pop()
            pending = None
        elif token == ";":
            if pending is not None:
                yield ("decl",) + pending
            pending = None
        else:
            qualifier, name = m.group(2) or "", m.group(3)
            namespace = tuple(e[1] for e in stack if e[0] == "ns")
            if all(e[0] != "body" for e in stack):
                if pending is None and name not in NOT_FUNCTIONS:
                    pending = (name, namespace, qualifier, m.start())
            elif name not in NOT_FUNCTIONS and not text[max(0, m.start() - 2):m.start()].endswith((".", "->")):
                yield ("call", name, namespace, qualifier, m.start())


def defines_own(text, name):
    """Whether `text` declares something of its own called `name`: a variable
    or parameter (`Type name =`), or a function or method (`Type name(`)."""
    keyword = r"(?!(?:return|else|case|new|delete|throw|co_return)\b)"
    return re.search(r"\b" + keyword + r"\w+[\s*&>]+" + name + r"\s*[=;),(]", text) is not None


def check_public_calls(root):
    """One message per call, in src/, to a public function that a layer the
    caller may not use implements."""
    public = set()
    api = os.path.join(root, "include", "trainprof")
    for f in sorted(os.listdir(api)) if os.path.isdir(api) else []:
        if f.endswith(".h"):
            text = code_only(open(os.path.join(api, f), encoding="utf-8").read())
            public.update(n for kind, n, ns, q, _ in functions_in(text) if kind == "decl" and not q)
    implemented, own_names, files = {}, {}, {}
    for rel in source_files(root):
        if not rel.startswith("src/") or not rel.endswith(SOURCE_SUFFIXES):
            continue
        layer = CHECKED.get("src/" + rel.split("/")[1])
        text = code_only(open(os.path.join(root, rel), encoding="utf-8", errors="replace").read())
        found = list(functions_in(text))
        files[rel] = (layer, text, found)
        for kind, name, ns, qualifier, _ in found:
            if kind == "call" or name not in public:
                continue
            if (ns == ("trainprof",) and not qualifier) or (not ns and qualifier == "trainprof::"):
                if kind == "def":
                    implemented.setdefault(name, set()).add(layer)
            elif not qualifier:
                own_names.setdefault((layer, name), set()).add(ns)  # another namespace's function
    problems = []
    for rel, (layer, text, found) in sorted(files.items()):
        may = (ALLOWED[layer] - {"api"}) | {layer}
        for kind, name, ns, qualifier, at in found:
            if kind != "call" or name not in implemented or implemented[name] & may:
                continue
            if qualifier not in ("", "trainprof::"):
                continue
            if not qualifier and (own_names.get((layer, name)) or defines_own(text, name)):
                continue  # this layer's or this file's own function, or a variable, of that name
            line = text.count("\n", 0, at) + 1
            problems.append(f"{rel}:{line}: calls {name}(), which {' and '.join(sorted(implemented[name]))} "
                            f"implements, but {layer} may use only: {', '.join(sorted(may))}")
    return problems



def plant(root, rel, text):
    """Writes `text` as the file `rel` of the scratch tree at `root`."""
    os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
    with open(os.path.join(root, rel), "w") as f:
        f.write(text)


def reported(got, what, want):
    """True when `got` is exactly the one message `want`; else says what came instead."""
    if got == [want]:
        return True
    print(f"self-test: {what} was not reported as expected:\n  wanted: {want}\n  got:    {got}")
    return False


def self_test_where():
    """A scratch tree with a source file that the section does not name must
    fail, naming the file, and so must a name whose files were removed;
    `name.*` covers name.h and name.cc."""
    with tempfile.TemporaryDirectory() as root:
        write = functools.partial(plant, root)
        write("src/core/clock.h", "#pragma once\n")
        write("src/core/clock.cc", '#include "core/clock.h"\n')
        write("src/core/CMakeLists.txt", "# not a source file\n")
        write("src/raw/format.h", "#pragma once\n")
        write("docs/ARCHITECTURE.md",
              "# x\n\n## Where each part lives\n\n### raw: `src/raw/`\n\n| `format.h` | constants |\n\n"
              "### core: `src/core/`\n\n| `clock.*` | the clock (`raw/format.h`, `Clock`, `now()`) |\n\n"
              "## Next\n\n`src/core/unlisted.cc`\n")
        good = check_where(root)
        if good:
            print("self-test: a section that names every file was refused:\n" + "\n".join(good))
            return 1
        write("src/core/unlisted.cc", '#include "core/clock.h"\n')
        if not reported(check_where(root), "the unlisted file",
                        "src/core/unlisted.cc: not named in docs/ARCHITECTURE.md's 'Where each part lives': "
                        "add `unlisted.cc` (or `unlisted.*`) to the group headed `src/core/`"):
            return 1
        os.remove(os.path.join(root, "src/core/unlisted.cc"))
        # Beyond src/: a package's files are named by their path in the group's folder.
        write("python/trainprof/profiler.py", "import os\n")
        write("python/tests/test_profiler.py", "import os\n")  # tests/ is one row, not its files
        write("docs/ARCHITECTURE.md",
              "# x\n\n## Where each part lives\n\n### raw: `src/raw/`\n\n| `format.h` | constants |\n\n"
              "### core: `src/core/`\n\n| `clock.*` | the clock (`raw/format.h`, `Clock`, `now()`) |\n\n"
              "### python: `python/`\n\n| `trainprof/profiler.py` | `profile` (`include/trainprof/x.h`) |\n"
              "| `tests/` | the suite |\n\n## Next\n")
        if check_where(root):
            print("self-test: a named Python module was refused:\n" + "\n".join(check_where(root)))
            return 1
        write("python/trainprof/_unnamed.py", "import os\n")
        if not reported(check_where(root), "the unnamed Python module",
                        "python/trainprof/_unnamed.py: not named in docs/ARCHITECTURE.md's 'Where each part "
                        "lives': add `trainprof/_unnamed.py` (or `trainprof/_unnamed.*`) to the group headed "
                        "`python/`"):
            return 1
        os.remove(os.path.join(root, "python/trainprof/_unnamed.py"))
        os.remove(os.path.join(root, "src/core/clock.h"))
        os.remove(os.path.join(root, "src/core/clock.cc"))
        if not reported(check_where(root), "the name of a removed file",
                        "docs/ARCHITECTURE.md: `clock.*` is named under `src/core/` in 'Where each part lives', "
                        "but src/core/ holds no such file"):
            return 1
    print("self-test: the unlisted file src/core/unlisted.cc was caught, with the group it belongs in, "
          "and so were an unnamed Python module and the name of a removed file")
    return 0


def self_test_python_imports():
    """A cycle through an import inside a function must fail, naming the
    modules in order; the same modules without it must pass."""
    with tempfile.TemporaryDirectory() as root:
        write = functools.partial(plant, root)
        write(PYTHON_PACKAGE + "/__init__.py", "from .profiler import profile\n")
        write(PYTHON_PACKAGE + "/profiler.py", "from . import _exports, _validate\n")
        write(PYTHON_PACKAGE + "/_exports.py", "import os\nfrom .analysis import analyse\n")
        write(PYTHON_PACKAGE + "/analysis.py", "from trainprof._validate import check\n")
        write(PYTHON_PACKAGE + "/_validate.py", "import sys\n")
        good = check_python_imports(root)
        if good:
            print("self-test: a package without an import cycle was refused:\n" + "\n".join(good))
            return 1
        write(PYTHON_PACKAGE + "/analysis.py",
              "from trainprof._validate import check\n\ndef analyse():\n    from .profiler import ExportType\n")
        if not reported(check_python_imports(root), "the import cycle",
                        PYTHON_PACKAGE + ": import cycle _exports -> analysis -> profiler -> _exports "
                        "(imports inside functions count: they only delay it)"):
            return 1
    print("self-test: the import cycle _exports -> analysis -> profiler, closed inside a function, was caught")
    return 0


def self_test_public_calls():
    """A call from exporter to a public function that pipeline implements must
    fail, naming it; a member of the same name, another namespace's function
    and a call from pipeline itself must not."""
    with tempfile.TemporaryDirectory() as root:
        write = functools.partial(plant, root)
        write("include/trainprof/analyse.h",
              "#pragma once\nnamespace trainprof {\nstruct Report { int runs = 0; };\n"
              "std::vector<std::string> find_run_directories(const std::string& path);\n"
              "Report analyse(const std::string& path, const Options& o = {});\n}  // namespace trainprof\n")
        write("src/pipeline/run_directories.cc",
              '#include "trainprof/analyse.h"\nnamespace trainprof {\n'
              "std::vector<std::string> find_run_directories(const std::string& path) {\n  return {path};\n}\n"
              "Report analyse(const std::string& path, const Options& o) {\n"
              "  for (auto& r : find_run_directories(path)) {}\n  return Report{};\n}\n}  // namespace trainprof\n")
        write("src/exporter/report.cc",
              '#include "trainprof/analyse.h"\nnamespace trainprof::exporter {\n'
              "class Writer {\n void analyse(int x) { if (x) { analyse(x - 1); } }\n};\n"
              "std::string page(const std::string& path) {\n  Writer w;\n  w.analyse(1);\n"
              "  return analysis::find_run_directories(path);\n}\n}  // namespace trainprof::exporter\n")
        good = check_public_calls(root)
        if good:
            print("self-test: calls that keep the layers were refused:\n" + "\n".join(good))
            return 1
        write("src/exporter/report.cc",
              '#include "trainprof/analyse.h"\nnamespace trainprof::exporter {\n'
              "std::string page(const std::string& path) {\n"
              "  // find_run_directories(path) in a comment is no call\n"
              "  return find_run_directories(path).front();\n}\n}  // namespace trainprof::exporter\n")
        if not reported(check_public_calls(root), "the call up the layers",
                        "src/exporter/report.cc:5: calls find_run_directories(), which pipeline implements, "
                        "but exporter may use only: analysis, base, exporter, raw"):
            return 1
    print("self-test: exporter's call to find_run_directories(), which pipeline implements, was caught")
    return 0


def self_test():
    """A scratch tree with one include the wrong way must fail, naming it."""
    with tempfile.TemporaryDirectory() as root:
        write = functools.partial(plant, root)
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
    return self_test_where() or self_test_python_imports() or self_test_public_calls()


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems, known = check(root)
    problems += check_document(root)
    problems += check_where(root)
    problems += check_python_imports(root)
    problems += check_public_calls(root)
    for p in problems:
        print(p)
    if problems:
        print(f"include-direction check: {len(problems)} problem(s); the layers are listed in "
              "scripts/check_layers.py and docs/ARCHITECTURE.md, the files of src/ in its "
              f"'{WHERE_TITLE}'")
        return 1
    print(f"include-direction check: every include and every call of a public function goes one way "
          f"({known} known crossing(s) still listed), "
          f"every file of src/, tools/, python/ and bench/ is named in docs/ARCHITECTURE.md "
          f"({len(source_files(root))} files), and the Python package's imports have no cycle "
          f"({len(python_imports(root))} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
