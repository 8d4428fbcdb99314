"""msprof-analyze (MindSpore's cluster tool) on trainprof's data: `trainprof cluster
--msprof-layout` lays four real MPI ranks' tables out the way msprof-analyze
reads them, and `msprof-analyze cluster -m all` (PyPI's msprof-analyze) must
come to the same cluster tables as trainprof's own."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The MPI training loop in miniature (tests/helpers/mpi_straggler_child.cc)
# from the default C++ build, which scripts/test.sh makes before pytest.
CHILD = ROOT / "build" / "bin" / "trainprof_test_mpi_straggler_child"
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (scripts/python_env.sh installs it)")
    return found


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> tuple[Path, Path]:
    """Four ranks (rank 2 slow in compute, a ring of transfers each step):
    trainprof's cluster outputs and msprof-analyze's, on the same data."""
    if not CHILD.exists():
        pytest.skip(f"{CHILD} is not built (cmake --preset default && cmake --build --preset default)")
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("OpenMPI's mpirun is not installed (scripts/install_deps.sh installs it)")
    runs = tmp_path_factory.mktemp("ranks")
    env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1")
    subprocess.run([mpirun, "--oversubscribe", "--allow-run-as-root", "-np", "4", "--mca", "btl", "self,vader",
                    str(CHILD), str(runs), "2", "compute", "6", "ring"], env=env, check=True, timeout=300)
    msprof_dir = tmp_path_factory.mktemp("msprof") / "layout"
    done = subprocess.run([_tool("trainprof"), "cluster", str(runs), "--msprof-layout", str(msprof_dir)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Straggler: rank 2." in done.stdout
    done = subprocess.run([_tool("msprof-analyze"), "cluster", "-d", str(msprof_dir), "-m", "all"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return runs / "cluster_analysis_output", msprof_dir / "cluster_analysis_output"


def _differences(ours, theirs, path: str = "") -> list[str]:
    """Where two JSON values differ: keys on one side only, other strings,
    numbers further apart than rounding."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        out = [f"{path}/{k}: only in trainprof's" for k in ours.keys() - theirs.keys()]
        out += [f"{path}/{k}: only in msprof-analyze's" for k in theirs.keys() - ours.keys()]
        for k in ours.keys() & theirs.keys():
            out += _differences(ours[k], theirs[k], f"{path}/{k}")
        return out
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [d for i, (a, b) in enumerate(zip(ours, theirs)) for d in _differences(a, b, f"{path}[{i}]")]
    if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)):
        return [] if math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-9) else [f"{path}: {ours} != {theirs}"]
    return [] if ours == theirs else [f"{path}: {ours!r} != {theirs!r}"]


def _json(path: Path):
    with open(path) as f:
        return json.load(f)


def test_layout_is_read_as_four_text_ranks(layout):
    ours, theirs = layout
    groups = _json(theirs / "communication_group.json")
    assert groups["collective"] == [[0, 1, 2, 3]]
    assert groups["p2p"] == [[0, 1, 2, 3]]


@pytest.mark.parametrize("name", ["cluster_communication.json", "cluster_communication_matrix.json"])
def test_communication_tables_agree(layout, name):
    ours, theirs = layout
    a, b = _json(ours / name), _json(theirs / name)
    differences = _differences(a, b)
    assert not differences, "\n".join(differences[:20])
    # Not two empty files: the allreduce of every step, its wait and the ring's transfers.
    steps = a["(0, 1, 2, 3)"]
    assert len(steps) >= 6
    if name == "cluster_communication.json":
        waits = [info["Communication Time Info"]["Wait Time(ms)"]
                 for step in steps.values() for key, ranks in step.items() if key.startswith("MPI_Allreduce")
                 for info in ranks.values()]
        assert len(waits) >= 6 * 4 and max(waits) > 0
        assert any(key.startswith("MPI_Sendrecv") for step in steps.values() for key in step)
    else:
        links = {link for step in steps.values() for key, entry in step.items() if key.startswith("Total")
                 for link in entry}
        assert {"0-1", "1-2", "2-3", "3-0"} <= links  # the ring, in world ranks


def test_step_trace_tables_agree(layout):
    ours, theirs = layout

    def rows(path: Path) -> tuple[list[str], dict]:
        with open(path) as f:
            table = list(csv.reader(f))
        return table[0], {(r[0], r[1], r[2]): [float(v) for v in r[3:]] for r in table[1:]}

    (header_a, a), (header_b, b) = rows(ours / "cluster_step_trace_time.csv"), rows(theirs / "cluster_step_trace_time.csv")
    assert header_a == header_b
    assert a.keys() == b.keys()
    assert len(a) == 4 * 5  # steps 1-5 of each rank: step 0 is the start-up, 6 the tail
    for key in a:
        assert a[key] == pytest.approx(b[key], abs=1e-3), key
