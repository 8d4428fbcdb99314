#!/usr/bin/python3
"""The peer's cost for the same job: torch.profiler turning N recorded operator
events into a Chrome trace (Debian python3-torch 1.13, CPU).

  /usr/bin/python3 bench/torch_export_compare.py N OUT.json

Records N operator events (aten::add on a 1-element tensor, so the op itself is
negligible), then measures
  stop:   leaving the profile() context (torch post-processes its events here)
  export: prof.export_chrome_trace(OUT.json)
and prints one line of JSON. bench/analysis_compare.sh runs it beside
trainprof's analysis of the same number of events.
"""
import json
import resource
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    out = sys.argv[2] if len(sys.argv) > 2 else "/tmp/torch_trace.json"
    x = torch.ones(1)
    torch.set_num_threads(1)
    prof = profile(activities=[ProfilerActivity.CPU])
    prof.__enter__()
    t_record = time.perf_counter()
    for _ in range(n):
        torch.add(x, x)
    t_stop = time.perf_counter()
    prof.__exit__(None, None, None)
    t_export = time.perf_counter()
    prof.export_chrome_trace(out)
    t_end = time.perf_counter()
    with open(out) as f:
        trace = json.load(f)
    # Kineto builds write {"traceEvents": [...]}, the legacy exporter a bare list.
    trace_events = trace["traceEvents"] if isinstance(trace, dict) else trace
    events = sum(1 for e in trace_events if e.get("name") == "aten::add")
    print(json.dumps({
        "torch": torch.__version__,
        "requested_events": n,
        "aten_add_events_in_trace": events,
        "record_s": round(t_stop - t_record, 3),
        "stop_s": round(t_export - t_stop, 3),
        "export_s": round(t_end - t_export, 3),
        "stop_plus_export_s": round(t_end - t_stop, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }))


if __name__ == "__main__":
    main()
