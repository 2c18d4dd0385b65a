"""What the fleet nemesis prints and returns: the counts of the faults it injected and of
the anomalies watchkeeper-fleet-check found (the checker judges; nothing here decides
whether a history is right), and what each kind of fault cost the fleet, measured from the
same history: the runs it interrupted (killed, or stopped by SIGTERM), how long after the fault
began their items ran again, persistent fires in its window that never ran ok, and the
anomalies the checker finds among the items it is behind (the checker run again on them);
and the etcd stalls the probe observed without a fault, with the fires the checker excused
for them beside those it excused for injected quorum losses."""
import calendar, json, os, re, statistics, tempfile, time

HOST_FAULTS = {"kill9", "sigstop", "partition", "sigterm_restart", "same_name"}


def iso(instant):
    """A fire instant as WATCHKEEPER_SCHEDULED_AT writes it (UTC, milliseconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(instant)) + f".{int(round(instant % 1 * 1000)) % 1000:03d}Z"


def instant_of(item):
    """The fire instant of a task item (task:<name>@<ISO>), or None."""
    match = re.match(r"task:[^@]+@(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z$", item)
    if not match:
        return None
    y, mo, d, h, mi, s, ms = (int(g) for g in match.groups())
    return calendar.timegm((y, mo, d, h, mi, s)) + ms / 1000


def runs_of(events):
    """run id -> {item, host, start, end, ok, note, stopped}; a run cut by a kill9 of its
    host ends at the kill, not ok; `stopped`: killed so, or ended by a SIGTERM (a fence, an
    expiry, a stop) rather than by failing on its own."""
    runs = {}
    for e in events:
        if e.get("type") == "start":
            runs[e["run"]] = {"item": e["item"], "host": e["host"], "start": e["t"], "end": None, "ok": None, "note": e.get("note")}
        elif e.get("type") == "end" and e["run"] in runs:
            runs[e["run"]].update(end=e["t"], ok=e["ok"], stopped=e.get("note") == "stopped by SIGTERM")
    for fault in (e for e in events if e.get("type") == "fault" and e.get("jobs_killed")):
        for run in runs.values():
            if run["end"] is None and run["host"] == fault["host"] and run["start"] <= fault["t"]:
                run.update(end=fault["t"], ok=False, stopped=True)
    return runs


def items_by_fault(events, by_item, lease_ttl):
    """Each item goes to one fault: the last one that began before the item's first run
    started (a fire never run: before its instant), if that run started before the fault
    healed plus the lease and 2 s; items of no fault's window go to None (quiet time). A
    rough guide: a backlog claimed before one fault may run twice during the next."""
    faults = sorted((e for e in events if e.get("type") == "fault"), key=lambda f: f["t"])
    items = set(by_item) | {e["item"] for e in events if e.get("type") == "expect" and instant_of(e["item"])}
    assigned = {}
    for item in items:
        anchor = min(r["start"] for r in by_item[item]) if item in by_item else instant_of(item)
        before = [i for i, f in enumerate(faults) if f["t"] <= anchor]
        last = before[-1] if before else None
        if last is not None and anchor > (faults[last].get("until") or faults[last]["t"]) + lease_ttl + 2:
            last = None
        assigned.setdefault(last, set()).add(item)
    return faults, assigned


def checker_on(events, items, check):
    """The checker's verdict on these items alone (every fault and observed line kept, so
    silences and held fires are judged as in the whole history): anomaly counts and examples."""
    subset = [e for e in events if e.get("type") in ("fault", "observed") or e.get("item") in items]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("".join(json.dumps(e) + "\n" for e in subset))
    try:
        report = check(f.name)
    finally:
        os.unlink(f.name)
    return report.get("anomalies", {}), report.get("examples", {})


def fault_costs(events, report, lease_ttl, check):
    """Per kind of fault: how many, runs interrupted, their items run again (delay from the
    fault's start), persistent fires in the window never run ok, and the anomalies among the
    items `items_by_fault` gives it, with the first example of each; "~ no fault" (sorted
    last) for anomalies among the items of quiet time."""
    runs = runs_of(events)
    by_item = {}
    for run in runs.values():
        by_item.setdefault(run["item"], []).append(run)
    ok_items = {r["item"] for r in runs.values() if r["ok"]}
    expected_fires = [e["item"] for e in events if e.get("type") == "expect" and e["item"].startswith("task:")]
    fires = {}
    for item in expected_fires:
        fires.setdefault(item.split("@")[0], set())
    faults, assigned = items_by_fault(events, by_item, lease_ttl)
    costs = {}
    for index, fault in enumerate(faults):
        kind, start, until = fault["kind"], fault["t"], fault.get("until") or fault["t"]
        cost = costs.setdefault(kind, {"count": 0, "seconds": [], "interrupted": 0, "stop_delays": [], "rerun_delays": [],
                                       "fires_never_ok": 0, "anomalies": {}, "examples": {}})
        cost["count"] += 1
        cost["seconds"].append(until - start)
        horizon = until + lease_ttl + 2
        for run in runs.values():
            if kind in HOST_FAULTS and run["host"] != fault["host"]:
                continue
            if run.get("stopped") and start <= run["end"] <= horizon and run["start"] <= until:
                cost["interrupted"] += 1
                cost["stop_delays"].append(run["end"] - start)
                later = [r["start"] for r in by_item[run["item"]] if r["start"] > run["start"]]
                if later:
                    cost["rerun_delays"].append(min(later) - start)
        for task in fires:
            instant = int(start // 2 + 1) * 2
            while instant <= until:
                if f"{task}@{iso(instant)}" not in ok_items:
                    cost["fires_never_ok"] += 1
                instant += 2
        anomalies, examples = checker_on(events, assigned.get(index, set()), check) if index in assigned else ({}, {})
        for anomaly, count in anomalies.items():
            if count:
                cost["anomalies"][anomaly] = cost["anomalies"].get(anomaly, 0) + count
                cost["examples"].setdefault(anomaly, examples.get(anomaly, [""])[0])
    anomalies, examples = checker_on(events, assigned[None], check) if None in assigned else ({}, {})
    if any(anomalies.values()):
        costs["~ no fault"] = {"count": 0, "seconds": [0], "interrupted": 0, "stop_delays": [], "rerun_delays": [], "fires_never_ok": 0,
                               "anomalies": {k: v for k, v in anomalies.items() if v},
                               "examples": {k: v[0] for k, v in examples.items() if v}}
    return costs


def summary(nemesis, timing, report, check):
    events = nemesis.history.events()
    runs = runs_of(events).values()
    costs = fault_costs(events, report, 4.0, check)
    stalls = [(e["t"], e.get("until")) for e in events if e.get("type") == "observed" and e.get("kind") == "etcd_stall"]
    probe = nemesis.probe
    return {
        "unjudged": report.get("unjudged"),
        "held_fires": {cause: {"exempt": report.get(f"exempt_fires_{cause}", 0), "never_ran": report.get(f"held_fires_{cause}", 0)}
                       for cause in ("injected", "observed")},
        "etcd_probe": {"writes": probe.writes, "acknowledged": probe.acknowledged, "longest_gap_s": round(probe.longest_gap, 2),
                       "stalls": len(stalls), "stall_s": [round((u if u is not None else timing["stopped"]) - t, 1) for t, u in stalls],
                       "outside_injected_s": report.get("observed_stall_s"), "history_s": report.get("history_s")},
        "faults": dict(sorted(report.get("faults", {}).items())),
        "anomalies": report.get("anomalies", {}),
        "anomaly_count": sum(report.get("anomalies", {}).values()),
        "examples": report.get("examples", {}),
        "checker": {k: report.get(k) for k in ("events", "runs", "items", "expected", "ok_runs", "failed_runs", "killed_runs",
                                               "reruns_after_failure", "reruns_after_silenced_ok")},
        "files": nemesis.producer.count,
        "file_versions": sum(nemesis.producer.versions.values()),
        "gone_file_runs": sum(1 for r in runs if r["note"]),
        "runs_by_host": {h: sum(1 for r in runs if r["host"] == h) for h in "abc"},
        "fault_seconds": round(timing["faults_ended"] - timing["began"]),
        "quiesced_s": timing["quiesced_s"],
        "costs": {kind: {"count": c["count"], "median_s": round(statistics.median(c["seconds"]), 1),
                         "interrupted_runs": c["interrupted"],
                         "stopped_after_max_s": round(max(c["stop_delays"]), 1) if c["stop_delays"] else None,
                         "rerun": len(c["rerun_delays"]),
                         "rerun_delay_median_s": round(statistics.median(c["rerun_delays"]), 1) if c["rerun_delays"] else None,
                         "rerun_delay_max_s": round(max(c["rerun_delays"]), 1) if c["rerun_delays"] else None,
                         "fires_never_ok": c["fires_never_ok"],
                         "anomalies": c["anomalies"], "examples": c["examples"]}
                  for kind, c in sorted(costs.items())},
        "notes": nemesis.notes,
    }


def print_result(result, kept):
    print(f"\nfleet nemesis: seed {result['seed']} (replay: --seed {result['seed']}), {result.get('duration_s')} s in all"
          + (f", {result['fault_seconds']} s of faults, quiet after {result['quiesced_s']} s" if "fault_seconds" in result else ""))
    for failure in result["failures"]:
        print(f"  FAILED: {failure}")
    if "faults" not in result:
        return
    print("  faults injected: " + ", ".join(f"{k} {v}" for k, v in result["faults"].items()) + f" ({sum(result['faults'].values())})")
    c = result["checker"]
    print(f"  history: {c['runs']} runs of {c['items']} items ({c['expected']} expected: {result['file_versions']} file versions "
          f"of {result['files']} names, the rest fires); ok {c['ok_runs']}, failed {c['failed_runs']}, killed {c['killed_runs']}; "
          f"run again after a failure or kill {c['reruns_after_failure']}, after a silenced ok {c['reruns_after_silenced_ok']}; "
          f"runs by host {result['runs_by_host']}; jobs that found their file already handled and moved: {result['gone_file_runs']}")
    p, held = result["etcd_probe"], result["held_fires"]
    print(f"  etcd as the probe saw it: {p['acknowledged']} of {p['writes']} writes acknowledged, the longest gap {p['longest_gap_s']} s; "
          f"{p['stalls']} stall(s) over the threshold" + (f" ({', '.join(f'{s} s' for s in p['stall_s'])})" if p["stall_s"] else "")
          + f", {p['outside_injected_s']} s of the history's {p['history_s']} s outside injected quorum losses")
    print(f"  fires held by design and excused (of those in an outage's window): injected {held['injected']['never_ran']} "
          f"(of {held['injected']['exempt']}), observed {held['observed']['never_ran']} (of {held['observed']['exempt']})")
    print("  anomalies: " + ", ".join(f"{k} {v}" for k, v in result["anomalies"].items()) + f" ({result['anomaly_count']})")
    for kind, texts in result["examples"].items():
        for text in texts[:5]:
            print(f"    {kind}: {text}")
    print("  what each fault cost (interrupted: runs killed or stopped by SIGTERM; rerun: their items run again, delay from the fault's start;")
    print("  its items: those whose first run began after it and before the next fault, within the lease and 2 s of its end):")
    for kind, c in result["costs"].items():
        delay = f", delay median {c['rerun_delay_median_s']} s, max {c['rerun_delay_max_s']} s" if c["rerun"] else ""
        stopped = f" (the last {c['stopped_after_max_s']} s after the fault began)" if c["interrupted_runs"] else ""
        print(f"    {kind:17s} ×{c['count']:<3d} (median {c['median_s']} s): interrupted {c['interrupted_runs']}{stopped}, rerun {c['rerun']}{delay}; "
              f"persistent fires in the window never ok {c['fires_never_ok']}; anomalies among its items: "
              + (", ".join(f"{k} {v}" for k, v in c["anomalies"].items()) or "none"))
        for anomaly, text in c["examples"].items():
            print(f"        e.g. {anomaly}: {text}")
    for note in result.get("notes", []):
        print(f"  note: {note}")
    if kept:
        print(f"  kept: {kept} (history.jsonl, host-*/stderr.log, etcd/*.log)")
