"""`trainprof mcp`: the Model Context Protocol served over stdio, driven by
the protocol's own Python client (the `mcp` package) as an agent would:
list the tools, call each on the demo's runs, and see a write statement and
a path outside the root refused."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, FASHION_MNIST, run_dirs

mcp = pytest.importorskip("mcp", reason="the protocol's client (pip install mcp) is not installed")
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

TOOLS = {"list_runs", "summary", "advise", "sql", "diff", "critical_path", "key_averages"}


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's two recorded cycles, the first also with trainprof.db."""
    if not FASHION_MNIST.is_dir():
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    out = tmp_path_factory.mktemp("mcp") / "out"
    demo = subprocess.run([sys.executable, str(EXAMPLES / "fashion_mnist.py"), "--out", str(out), "--steps", "14",
                           "--schedule", "1,1,3,2,2"], capture_output=True, text=True, timeout=600)
    assert demo.returncode == 0, demo.stderr
    runs = run_dirs(out)
    assert len(runs) == 2
    db = subprocess.run([sys.executable, "-m", "trainprof", "analyse", str(runs[0]), "--export-type", "text,db"],
                        capture_output=True, text=True, timeout=600)
    assert db.returncode == 0, db.stderr
    return out


async def session_calls(root: Path, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    """The tools the server lists, and each call's result, over one session."""
    server = StdioServerParameters(command=sys.executable, args=["-m", "trainprof", "mcp", str(root)])
    async with stdio_client(server) as (read, write):
        async with mcp.ClientSession(read, write) as session:
            init = await session.initialize()
            assert field(init, "server_info", "serverInfo").name == "trainprof"
            tools = (await session.list_tools()).tools
            results = [await session.call_tool(name, args) for name, args in calls]
    return tools, results


def field(value: Any, snake: str, camel: str) -> Any:
    """A field of the client's result models, as the SDK spells it (2.x: snake
    case; 1.x: the protocol's camel case)."""
    return getattr(value, snake) if hasattr(value, snake) else getattr(value, camel)


def text_of(result: Any) -> str:
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def test_an_agent_lists_the_tools_and_calls_each_on_the_demos_runs(demo_runs: Path) -> None:
    first, second = (str(r.relative_to(demo_runs)) for r in run_dirs(demo_runs))
    calls = [
        ("list_runs", {}),
        ("summary", {"path": first}),
        ("advise", {"path": "."}),
        ("sql", {"path": first, "query": "SELECT s.value AS name, COUNT(*) AS calls FROM slices "
                                         "JOIN strings s ON s.id = slices.name_id GROUP BY s.value "
                                         "ORDER BY calls DESC", "max_rows": 5}),
        ("diff", {"run_a": first, "run_b": second}),
        ("critical_path", {"run": first}),
        ("key_averages", {"run": first, "row_limit": 10}),
        ("sql", {"path": first, "query": "DROP TABLE slices"}),
        ("summary", {"path": "../.."}),
        ("list_runs", {"path": "/etc"}),
    ]
    tools, results = asyncio.run(session_calls(demo_runs, calls))
    assert {t.name for t in tools} == TOOLS
    assert all(field(t, "input_schema", "inputSchema")["type"] == "object" and t.description for t in tools)
    answers = {i: (text_of(r), field(r, "is_error", "isError")) for i, r in enumerate(results)}
    for i, (name, _) in enumerate(calls[:7]):
        assert not answers[i][1], (name, answers[i][0])

    listed = json.loads(answers[0][0])
    assert [r["run"] for r in listed["runs"]] == [first, second] and all(r["analysed"] for r in listed["runs"])
    assert "aten::" in answers[1][0] and "PROFILER_OUTPUT" in answers[1][0]  # where the time went
    findings = json.loads(answers[2][0])["findings"]
    assert isinstance(findings, list) and all({"rule", "title", "change"} <= set(f) for f in findings)
    sql_lines = answers[3][0].splitlines()
    assert sql_lines[0] == "name,calls" and len(sql_lines) >= 6 and "more rows not shown" in answers[3][0]
    assert "step" in answers[4][0].lower()  # the two cycles compared per step
    assert "(the slowest)" in answers[5][0] and "start(ms)" in answers[5][0]
    assert "by self time" in answers[6][0] and "aten::" in answers[6][0]

    # A write, and paths outside the root: refused, saying why.
    assert answers[7][1] and "read-only" in answers[7][0], answers[7]
    assert answers[8][1] and "outside the root" in answers[8][0], answers[8]
    assert answers[9][1] and "outside the root" in answers[9][0], answers[9]


def test_mcp_help_says_how_to_add_it_to_an_agent() -> None:
    result = subprocess.run([sys.executable, "-m", "trainprof", "mcp", "--help"], capture_output=True, text=True,
                            check=True)
    assert '"mcpServers"' in result.stdout and '"args": ["mcp", "/path/to/prof"]' in result.stdout
    for tool in TOOLS:
        assert tool in result.stdout
    bad = subprocess.run([sys.executable, "-m", "trainprof", "mcp", "/no/such/dir"], capture_output=True, text=True)
    assert bad.returncode == 1 and "is not a directory" in bad.stderr
