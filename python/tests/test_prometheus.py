"""The flight recorder's step health scraped by the real thing: Debian's
Prometheus server scraping the recorder's endpoint and node_exporter's
textfile collector reading its metrics file, while a PyTorch loop trains,
queried through Prometheus' HTTP API."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Optional

import pytest
from conftest import Trainer

import trainprof

PROMETHEUS = shutil.which("prometheus")
NODE_EXPORTER = shutil.which("prometheus-node-exporter")
pytestmark = pytest.mark.skipif(PROMETHEUS is None or NODE_EXPORTER is None,
                                reason="Debian's prometheus and prometheus-node-exporter are not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> Optional[bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read()
    except OSError:
        return None


def query(prometheus: str, expression: str) -> list[dict]:
    body = get(f"{prometheus}/api/v1/query?query={urllib.parse.quote(expression)}")
    return json.loads(body)["data"]["result"] if body else []


def wait_for(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {seconds} s for {what}")
        time.sleep(0.2)


def test_prometheus_scrapes_the_step_health_of_a_training_run(trainer: Trainer, tmp_path: Path) -> None:
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    node_port, prometheus_port = free_port(), free_port()
    recorder = trainprof.flight_recorder(tmp_path / "flight", ring_mb=8, analyse=False, slow_step_factor=0,
                                         metrics_port=0, metrics_file=textfiles / "trainprof.prom",
                                         metrics_interval_s=0.5)
    url = recorder.metrics_url
    assert url is not None and url.startswith("http://127.0.0.1:")  # this machine only, by default
    target = url[len("http://"):-len("/metrics")]
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""global:
  scrape_interval: 1s
scrape_configs:
  - job_name: trainprof
    static_configs: [{{targets: ["{target}"]}}]
  - job_name: node
    static_configs: [{{targets: ["127.0.0.1:{node_port}"]}}]
""")
    node = subprocess.Popen([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{node_port}",
                             "--collector.disable-defaults", "--collector.textfile",
                             f"--collector.textfile.directory={textfiles}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                               f"--web.listen-address=127.0.0.1:{prometheus_port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    prometheus = f"http://127.0.0.1:{prometheus_port}"
    try:
        wait_for(lambda: get(f"{prometheus}/-/ready") is not None, 60, "Prometheus to start")
        steps = 0

        def scraped(job: str, at_least: int) -> bool:
            result = query(prometheus, f'trainprof_steps_total{{job="{job}"}}')
            return bool(result) and float(result[0]["value"][1]) >= at_least

        # Training, until both paths reached Prometheus with steps in them.
        deadline = time.monotonic() + 90
        while not (scraped("trainprof", 5) and scraped("node", 5)):
            assert time.monotonic() < deadline, "Prometheus did not see the steps within 90 s"
            trainer.train_step(steps)
            recorder.step()
            steps += 1
        # From the endpoint, while it trains (a stopped recorder's series go stale).
        [cpu] = query(prometheus, 'trainprof_cpu_seconds_total{job="trainprof"}')
        assert float(cpu["value"][1]) > 0
        [last] = query(prometheus, 'trainprof_last_step_end_timestamp_seconds{job="trainprof"}')
        assert abs(float(last["value"][1]) - time.time()) < 60  # a hang alert: time() - this > T
        recorder.stop()  # the file gets the final counts
        wait_for(lambda: scraped("node", steps), 30, f"node_exporter's file to say {steps} steps")
        [series] = query(prometheus, 'trainprof_steps_total{job="node"}')
        assert series["metric"]["rank"] == "0"
        assert series["metric"]["pid"] == str(os.getpid())
        [seconds] = query(prometheus, 'trainprof_step_seconds_total{job="node"}')
        assert float(seconds["value"][1]) > 0
    finally:
        recorder.stop()
        for p in (server, node):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
