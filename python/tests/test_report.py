"""trainprof report: the HTML page rendered by a real browser (Debian's
headless Chromium). The DOM after its script ran holds the CSV files'
figures (each table cell keeps the CSV's text where it shows it in ms); the
page logs nothing to the console and fits an 800 px window; screenshots at
1400 and 800 px are kept as test artefacts."""

from __future__ import annotations

import base64
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
    """Every table's rows by the table's first class: each cell the CSV's text
    (data-v, data-csv) where the page shows it otherwise, else the cell's
    text; `shown` the texts as shown. The attributes of the first element of
    each class."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.shown: dict[str, list[list[str]]] = {}
        self.elements: dict[str, dict[str, str]] = {}
        self._table = None
        self._row: list[str] | None = None
        self._shown_row: list[str] | None = None
        self._cell: str | None = None
        self._csv: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if "class" in a:
            self.elements.setdefault(a["class"].split()[0], {k: v or "" for k, v in attrs})
        if tag == "table":
            self._table = a.get("class", "").split()[0]
            self.tables[self._table] = []
            self.shown[self._table] = []
        elif tag == "tr" and self._table is not None:
            self._row, self._shown_row = [], []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""
            self._csv = a.get("data-v", a.get("data-csv"))

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(self._cell if self._csv is None else self._csv)
            self._shown_row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            self.tables[self._table].append(self._row)
            self.shown[self._table].append(self._shown_row)
            self._row = None
        elif tag == "table":
            self._table = None


def read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def ms(us: float) -> str:
    """A time as the page shows it: in ms, to the us below 10 ms, 3 significant digits or more above."""
    v = abs(us) / 1000
    return f"{us / 1000:.{0 if v >= 1000 else 1 if v >= 100 else 2 if v >= 10 else 3}f}"


def layout_width(page: Path, width: int, tmp: Path) -> int:
    """The page's width as laid out in a `width` px window (a copy of it reports it)."""
    probe = tmp / f"layout-{width}.html"
    probe.write_text(page.read_text().replace(
        "</body>", "<script>document.body.dataset.layoutWidth=document.documentElement.scrollWidth;</script></body>"))
    rendered = chromium("--dump-dom", f"--window-size={width},1000", probe.as_uri())
    return int(re.search(r'data-layout-width="(\d+)"', rendered.stdout).group(1))


def render(page: Path, name: str, tmp: Path) -> tuple[str, Tables]:
    """The page as the browser leaves it, checked for what every report must be: nothing fetched (the one address
    is the Perfetto UI's, opened by a click), nothing on the console, no sideways scrolling in an 800 px window.
    Screenshots at 1400 and 800 px go to the test artefacts as NAME-WIDTH.png."""
    text = page.read_text()
    assert "http://" not in text and set(re.findall(r"https://[^'\"]*", text)) <= {"https://ui.perfetto.dev/#!/",
                                                                                  "https://ui.perfetto.dev"}
    rendered = chromium("--dump-dom", page.as_uri())
    assert rendered.returncode == 0, rendered.stderr
    assert console_lines(rendered.stderr) == []
    assert layout_width(page, 800, tmp) <= 800
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for width in (1400, 800):
        shot = ARTIFACTS / f"{name}-{width}.png"
        taken = chromium(f"--screenshot={shot}", f"--window-size={width},1800", page.as_uri())
        assert taken.returncode == 0 and shot.stat().st_size > 10_000, taken.stderr
    dom = Tables()
    dom.feed(rendered.stdout)
    return rendered.stdout, dom


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, batches: list) -> Path:
    run = profiled_run(tmp_path_factory.mktemp("report"), batches, active=6)
    result = subprocess.run([sys.executable, "-m", "trainprof", "report", str(run)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert str(run / "PROFILER_OUTPUT" / "report.html") in result.stdout
    return run


def test_the_first_screen_answers_and_the_page_holds_the_csv_figures(run: Path, tmp_path: Path) -> None:
    page = run / "PROFILER_OUTPUT" / "report.html"
    rendered, dom = render(page, "report-run", tmp_path)
    out = run / "PROFILER_OUTPUT"
    # The first screen: findings, the steps, the slowest step's critical path, the memory at its peak.
    overview = rendered.index('<div class="overview">')
    cards = re.findall(r'<div class="card ([a-z-]+)">', rendered)
    assert cards[:4] == ["findings-card", "steps-card", "critical-path-card", "memory-card"], cards
    assert overview < rendered.index("step-table")
    with open(out / "profiler_info.json") as f:
        advice = json.load(f)["analysis"]["advice"]
    assert re.findall(r'<li data-rule="([a-z_]+)">', rendered) == [f["rule"] for f in advice]
    assert ("advice-none" in dom.elements) == (advice == [])
    steps = read_csv(out / "step_trace_time.csv")
    assert dom.tables["step-table"] == steps and len(steps) == 1 + 6
    # Shown in ms, each part of each step.
    assert dom.shown["step-table"][0][1] == "Computing (ms)"
    assert [r[1:] for r in dom.shown["step-table"][1:]] == [[ms(float(v)) for v in r[1:]] for r in steps[1:]]
    # The step chart stacks the four parts that add up to each step, Data Wait among them.
    bars: dict[str, dict[str, float]] = {}
    for step, part, value in re.findall(r"<title>step (\d+): (.+?) ([0-9.]+) ms</title>", rendered):
        bars.setdefault(step, {})[part] = float(value)
    lengths = {}
    for row in steps[1:]:
        for part in ("Computing", "Communication(Not Overlapped)", "Data Wait", "Free"):
            assert bars[row[0]][part] == pytest.approx(float(row[steps[0].index(part)]) / 1000, abs=1e-3), part
        lengths[row[0]] = sum(float(row[steps[0].index(p)]) for p in ("Computing", "Communication(Not Overlapped)",
                                                                        "Data Wait", "Free"))
    slowest = max(lengths, key=lambda k: lengths[k])
    # The slowest step's critical path: a strip of its segments, and its rows as critical_path.csv has them, their
    # start in ms from the step's start.
    path = read_csv(out / "critical_path.csv")
    rows = [row for row in path[1:] if row[0] == slowest]
    assert dom.elements["critical-path-title"]["data-step"] == slowest
    assert dom.tables["critical-path-table"] == [path[0]] + rows
    start, length = path[0].index("Start Time(us)"), path[0].index("Duration(us)")
    origin = min(float(r[start]) for r in rows)
    assert [r[start] for r in dom.shown["critical-path-table"][1:]] == [ms(float(r[start]) - origin) for r in rows]
    strip = re.search(r'<svg class="critical-path-strip chart".*?</svg>', rendered, re.S).group(0)
    assert re.findall(r'data-us="([0-9.]+)"', strip) == [r[length] for r in rows]
    # What the memory held at its peak, by class: the highest peak's class rows of memory_breakdown.csv.
    breakdown = read_csv(out / "memory_breakdown.csv")
    peak = max(breakdown[1:], key=lambda r: float(r[3]))
    at_peak = [r for r in breakdown[1:] if r[0] == peak[0] and r[1] == peak[1] and r[6] == "class"]
    bar = re.search(r'<svg class="memory-peak-bar chart".*?</svg>', rendered, re.S).group(0)
    assert re.findall(r'data-mb="([0-9.]+)"', bar) == [r[8] for r in at_peak]
    # The icicle: the step's thread holds the whole step, on average.
    assert int(dom.elements["flame-title"]["data-steps"]) == 6
    nodes = re.findall(r'<g class="node" data-x="[^"]+" data-w="[^"]+" data-depth="(\d+)" data-name="([^"]+)" '
                       r'data-us="([0-9.]+)"', rendered)
    threads = [(name, float(us)) for depth, name, us in nodes if depth == "1"]
    assert threads[0][0].startswith("main thread")
    assert threads[0][1] == pytest.approx(sum(lengths.values()) / 6, abs=0.01)
    assert any(depth == "2" and name == "aten::conv2d" for depth, name, _ in nodes)
    # The timeline one click away: the button, the file's path, and the file itself embedded.
    assert str(out / "trace_view.pftrace") in rendered
    button = dom.elements["open-perfetto"]
    embedded = re.search(r'<script type="application/octet-stream" id="' + button["data-trace"] + r'">([^<]+)<',
                         rendered).group(1)
    assert base64.b64decode(embedded) == (out / "trace_view.pftrace").read_bytes()
    # The tables below.
    ops = read_csv(out / "op_statistic.csv")
    assert dom.tables["op-table"] == ops  # every row, in the CSV's order (paged in the browser)
    total = ops[0].index("Total Time(us)")
    assert [r[total] for r in dom.shown["op-table"][1:]] == [ms(float(r[total])) for r in ops[1:]]
    hidden = re.findall(r'<tr hidden="">', rendered)
    assert len(hidden) >= len(ops) - 1 - 25  # the op table's rows after its first page
    memory = read_csv(out / "memory_record.csv")
    column = memory[0].index("Total Allocated(MB)")
    peak_mb = max(memory[1:], key=lambda row: float(row[column]))[column]
    assert dom.elements["memory-peak"]["data-peak-mb"] == peak_mb
    # What the memory held over time: stacked by class (a polygon each), and the highest peak's split.
    classes = read_csv(out / "memory_timeline.csv")[0][2:]
    assert re.findall(r"<polygon[^>]*><title>([a-z ]+\(MB\))</title>", rendered) == classes
    device = dom.elements["memory-class-chart"]["data-device"]
    rows = [r for r in breakdown[1:] if r[1] == device]
    highest = max(rows, key=lambda r: float(r[3]))
    assert dom.tables["memory-breakdown-table"] == [breakdown[0]] + [r for r in rows if r[0] == highest[0]]
    assert dom.elements["timeline"]  # the slowest step's timeline is drawn
    assert dom.elements["what-if"] is not None


def test_a_table_filters_and_pages_in_the_browser(run: Path, tmp_path: Path) -> None:
    """The page's script, driven as a reader would: a filter keeps the matching rows, the pages show 25."""
    page = run / "PROFILER_OUTPUT" / "report.html"
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", """<script>
var box=document.querySelector('table.op-table').closest('.table-box'),input=box.previousElementSibling.querySelector('input');
var shown=function(){return Array.prototype.filter.call(box.querySelectorAll('tbody tr'),function(r){return !r.hidden;}).length;};
var first=shown();input.value='backward';input.dispatchEvent(new Event('input'));
document.body.dataset.probe=first+','+shown();</script></body>"""))
    rendered = chromium("--dump-dom", probe.as_uri())
    assert console_lines(rendered.stderr) == []
    first, filtered = map(int, re.search(r'data-probe="(\d+),(\d+)"', rendered.stdout).groups())
    ops = read_csv(run / "PROFILER_OUTPUT" / "op_statistic.csv")[1:]
    assert first == min(25, len(ops))
    assert filtered == min(25, sum("backward" in ",".join(r).lower() for r in ops)) and filtered < first


def test_a_table_sorts_in_the_browser(run: Path) -> None:
    page = run / "PROFILER_OUTPUT" / "report.html"
    # The address names a table and a column (the page's script clicks it on load).
    rendered = chromium("--dump-dom", page.as_uri() + "#sort=op-table:2")
    assert console_lines(rendered.stderr) == []
    dom = Tables()
    dom.feed(rendered.stdout)
    counts = [int(row[2]) for row in dom.tables["op-table"][1:]]
    assert counts == sorted(counts) and counts != [int(r[2]) for r in read_csv(run / "PROFILER_OUTPUT" /
                                                                              "op_statistic.csv")[1:]]


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
    maps = re.findall(r'<svg class="heat-map chart" data-metric="([^"]+)" data-rows="(\d+)" data-ranks-per-row="(\d+)"'
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
