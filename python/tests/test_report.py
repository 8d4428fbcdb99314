"""trainprof report: the HTML page rendered by a real browser (Debian's
headless Chromium). The DOM after its script ran holds the CSV files'
figures; the page logs nothing to the console; a screenshot is kept."""

from __future__ import annotations

import csv
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import profiled_run


CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/install_deps.sh)")
ARTIFACTS = Path(os.environ.get("TRAINPROF_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "build" /
                                "test-artifacts"))


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", *args], capture_output=True, text=True, timeout=120)


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


class Tables(html.parser.HTMLParser):
    """Every table's rows (cell texts) by the table's first class, and the
    attributes of elements with a class."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.elements: dict[str, dict[str, str]] = {}
        self._table = None
        self._row: list[str] | None = None
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if "class" in a:
            self.elements.setdefault(a["class"].split()[0], {k: v or "" for k, v in attrs})
        if tag == "table":
            self._table = a.get("class", "").split()[0]
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None


def read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, batches: list) -> Path:
    run = profiled_run(tmp_path_factory.mktemp("report"), batches, active=6)
    result = subprocess.run([sys.executable, "-m", "trainprof", "report", str(run)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert str(run / "PROFILER_OUTPUT" / "report.html") in result.stdout
    return run


def test_the_rendered_page_shows_the_csv_figures_and_logs_nothing(run: Path) -> None:
    page = run / "PROFILER_OUTPUT" / "report.html"
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # self-contained: nothing to fetch
    rendered = chromium("--dump-dom", page.as_uri())
    assert rendered.returncode == 0, rendered.stderr
    assert console_lines(rendered.stderr) == []
    dom = Tables()
    dom.feed(rendered.stdout)
    out = run / "PROFILER_OUTPUT"
    steps = read_csv(out / "step_trace_time.csv")
    assert dom.tables["step-table"] == steps
    assert len(dom.tables["step-table"]) == 1 + 6
    # The step chart stacks the four parts that add up to each step, Data Wait among them.
    bars: dict[str, dict[str, float]] = {}
    for step, part, ms in re.findall(r"<title>step (\d+): (.+?) ([0-9.]+) ms</title>", rendered.stdout):
        bars.setdefault(step, {})[part] = float(ms)
    for row in steps[1:]:
        for part in ("Computing", "Communication(Not Overlapped)", "Data Wait", "Free"):
            assert bars[row[0]][part] == pytest.approx(float(row[steps[0].index(part)]) / 1000, abs=1e-3), part
    ops = read_csv(out / "op_statistic.csv")
    assert dom.tables["op-table"] == ops[:41]  # the header and the top 40, in the CSV's order
    memory = read_csv(out / "memory_record.csv")
    column = memory[0].index("Total Allocated(MB)")
    peak = max(memory[1:], key=lambda row: float(row[column]))[column]
    assert dom.elements["memory-peak"]["data-peak-mb"] == peak
    # What the memory held: stacked by class (a polygon each), and the highest peak's split.
    classes = read_csv(out / "memory_timeline.csv")[0][2:]
    assert re.findall(r"<polygon[^>]*><title>([a-z ]+\(MB\))</title>", rendered.stdout) == classes
    breakdown = read_csv(out / "memory_breakdown.csv")
    device = dom.elements["memory-class-chart"]["data-device"]
    rows = [r for r in breakdown[1:] if r[1] == device]
    highest = max(rows, key=lambda r: float(r[3]))
    assert dom.tables["memory-breakdown-table"] == [breakdown[0]] + [r for r in rows if r[0] == highest[0]]
    assert dom.elements["timeline"]  # the slowest step's timeline is drawn
    # The slowest step's critical path, its rows as critical_path.csv has them.
    slowest = dom.elements["critical-path-title"]["data-step"]
    path = read_csv(out / "critical_path.csv")
    assert dom.tables["critical-path-table"] == [path[0]] + [row for row in path[1:] if row[0] == slowest]
    assert dom.elements["what-if"] is not None
    # The advisor's findings open the run's section, as profiler_info.json holds them.
    with open(out / "profiler_info.json") as f:
        advice = json.load(f)["analysis"]["advice"]
    assert re.findall(r'<li data-rule="([a-z_]+)">', rendered.stdout) == [f["rule"] for f in advice]
    assert ("advice-none" in dom.elements) == (advice == [])
    assert rendered.stdout.index("Advice") < rendered.stdout.index("Step time")
    assert rendered.stdout.count("<rect") > 20
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report.png"
    taken = chromium(f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri())
    assert taken.returncode == 0 and shot.stat().st_size > 10_000


def test_a_table_sorts_in_the_browser(run: Path) -> None:
    page = run / "PROFILER_OUTPUT" / "report.html"
    # The address names a table and a column (the page's script clicks it on load).
    rendered = chromium("--dump-dom", page.as_uri() + "#sort=op-table:2")
    assert console_lines(rendered.stderr) == []
    dom = Tables()
    dom.feed(rendered.stdout)
    counts = [int(row[2]) for row in dom.tables["op-table"][1:]]
    assert counts == sorted(counts) and counts != [int(r[2]) for r in read_csv(run / "PROFILER_OUTPUT" /
                                                                              "op_statistic.csv")[1:41]]


def test_the_console_check_catches_a_script_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    assert console_lines(chromium("--dump-dom", bad.as_uri()).stderr)


def test_a_path_without_analysed_runs_is_named(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "trainprof", "report", str(tmp_path)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1 and "no trainprof run directory" in result.stderr


def test_two_runs_on_one_page_open_with_what_changed(tmp_path: Path, batches: list, run: Path) -> None:
    other = profiled_run(tmp_path / "b", batches, active=3)
    result = subprocess.run([sys.executable, "-m", "trainprof", "report", str(run), str(other)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    page = other / "PROFILER_OUTPUT" / "diff_report.html"
    assert str(page) in result.stdout
    rendered = chromium("--dump-dom", page.as_uri())
    assert rendered.returncode == 0 and console_lines(rendered.stderr) == []
    dom = Tables()
    dom.feed(rendered.stdout)
    csv_file = tmp_path / "diff.csv"
    diff = subprocess.run([sys.executable, "-m", "trainprof", "diff", str(run), str(other), "--csv", str(csv_file)],
                          capture_output=True, text=True, timeout=300)
    assert diff.returncode == 0, diff.stderr
    assert dom.tables["diff-table"] == read_csv(csv_file)[:41]
    steps = dom.tables["diff-steps-table"]
    assert [row[0] for row in steps] == ["Per step", "step", "computing", "communication not overlapped",
                                         "data wait", "free"]
    # Then each run's own sections, A's first.
    assert re.findall(r'<section class="run" id="run-\d+" data-run="([^"]+)"', rendered.stdout) == [run.name,
                                                                                                   other.name]


def write_many_ranks(root: Path, ranks: int, slow: int) -> None:
    """`ranks` analysed runs of one job, as the per-rank analysis leaves them: 4 steps, each a world allreduce
    after the step's work; rank `slow` works 20 ms longer in steps 1-3, so the others wait for it."""
    ms = 1_000_000
    t0 = 1_795_551_497_000_000_000
    header = ("Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
              "Communication(Not Overlapped and Exclude Receive),Preparing,Data Wait\n")
    for rank in range(ranks):
        run = root / f"node{rank // 8}_{1000 + rank}_20261127000000000_trainprof"
        (run / "PROFILER_OUTPUT").mkdir(parents=True)
        (run / "profiler_info.json").write_text("{}\n")
        (run / "PROFILER_OUTPUT" / "profiler_info.json").write_text(
            json.dumps({"rank": rank, "world_size": ranks, "host": f"node{rank // 8}"}))
        steps, collectives, csv_rows = [], [], []
        for step in range(4):
            start = t0 + step * 50 * ms
            work = (30 + (20 if rank == slow and step >= 1 else 0) + rank % 7 * 0.01) * ms
            arrive, end = start + int(work), start + 51 * ms if step >= 1 else start + 31 * ms
            comm = end - arrive
            steps.append({"step": step, "start_ns": start, "end_ns": start + 50 * ms, "computing_ns": int(work),
                          "communication_not_overlapped_ns": comm, "overlapped_ns": 0, "communication_ns": comm,
                          "free_ns": 0, "stage_ns": 0, "bubble_ns": 0,
                          "communication_not_overlapped_exclude_receive_ns": 0, "preparing_ns": 0,
                          "data_wait_ns": 0, "in_comm_ns": comm})
            collectives.append([0, step, "MPI_Allreduce", arrive, end, 1 << 20, step, 0])
            csv_rows.append(f"{rank},{step},{work / 1e3:.3f},{comm / 1e3:.3f},0,{comm / 1e3:.3f},0,0,0,0,0,0\n")
        summary = {"version": 5, "rank": rank, "world_size": ranks, "host": f"node{rank // 8}", "end": "normal",
                   "clock_aligned": True, "clock_offset_ns": 0, "clock_error_ns": 2000, "clock_problem": "",
                   "data_wait_separate": True, "steps": steps,
                   "groups": [{"name": "world", "ranks": [[0, ranks - 1]], "origin": "MPI_COMM_WORLD"}],
                   "collectives": collectives, "transfers": []}
        (run / "PROFILER_OUTPUT" / "rank_summary.json").write_text(json.dumps(summary))
        (run / "PROFILER_OUTPUT" / "step_trace_time.csv").write_text(header + "".join(csv_rows))


def test_a_job_of_many_ranks_is_a_heat_map_and_the_ranks_that_matter(tmp_path: Path) -> None:
    write_many_ranks(tmp_path, 300, slow=137)
    result = subprocess.run([sys.executable, "-m", "trainprof", "cluster", str(tmp_path)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and "Straggler: rank 137." in result.stdout, result.stdout + result.stderr
    result = subprocess.run([sys.executable, "-m", "trainprof", "report", str(tmp_path)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rendered = chromium("--dump-dom", (tmp_path / "report.html").as_uri())
    assert rendered.returncode == 0 and console_lines(rendered.stderr) == []
    dom = Tables()
    dom.feed(rendered.stdout)
    # Ranks x steps: 300 ranks in 100 rows of 3; the hottest computing cell is the straggler's.
    maps = re.findall(r'<svg class="heat-map" data-metric="([^"]+)" data-rows="(\d+)" data-ranks-per-row="(\d+)"'
                      r'(.*?)</svg>', rendered.stdout, re.S)
    assert [m[0] for m in maps][:2] == ["Computing", "Communication(Not Overlapped)"]
    computing = maps[0]
    assert computing[1:3] == ("100", "3")
    cells = [(float(us), rank) for rank, us in re.findall(r'data-rank="(\d+)" data-us="([\d.]+)"', computing[3])]
    assert len(cells) == 100 * 4
    assert max(cells)[1] == "137"
    # The waiting table lists the 20 ranks the others waited for most, the straggler first.
    rows = dom.tables["cluster-table"][1:]
    assert len(rows) == 20 and rows[0][0] == "137"
    # Each run's own section for the straggler and the lowest rank only, and said so.
    shown = re.findall(r'<section class="run" id="run-\d+" data-run="([^"]+)"', rendered.stdout)
    assert sorted(shown) == ["node0_1000_20261127000000000_trainprof", "node17_1137_20261127000000000_trainprof"]
    assert "300 runs: the sections above are rank(s) 0, 137" in rendered.stdout
