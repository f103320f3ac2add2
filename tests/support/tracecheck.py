"""A structural checker for Chrome/Perfetto traces, shared by the tests."""

from __future__ import annotations


def us_to_ns(us: float) -> int:
    return round(us * 1000)


def check_trace_structure(trace: dict) -> list[str]:
    """Problems with a Chrome trace: missing metadata/fields, negative durations,
    overlapping (neither nested nor disjoint) slices on one thread, half flows."""
    problems: list[str] = []
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        return ["traceEvents is not a list"]
    procs = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    slices: dict[tuple[int, int], list[tuple[int, int, str]]] = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        missing = [k for k in ("name", "ts", "dur", "pid", "tid") if k not in e]
        if missing:
            problems.append(f"X event {e.get('name')!r} lacks {missing}")
            continue
        if e["dur"] < 0:
            problems.append(f"X event {e['name']!r} has dur {e['dur']} < 0")
        key = (e["pid"], e["tid"])
        slices.setdefault(key, []).append(
            (us_to_ns(e["ts"]), us_to_ns(e["ts"] + e["dur"]), e["name"])
        )
    for pid, tid in slices:
        if pid not in procs:
            problems.append(f"pid {pid} has no process_name")
        if (pid, tid) not in threads:
            problems.append(f"pid {pid} tid {tid} has no thread_name")
    for key, group in slices.items():
        stack: list[tuple[int, int, str]] = []
        for start, end, name in sorted(group, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1]:
                problems.append(f"{key}: {name!r} overlaps {stack[-1][2]!r} without nesting")
            stack.append((start, end, name))
    flows: dict[object, list[dict]] = {}
    for e in events:
        if e.get("ph") in ("s", "f"):
            flows.setdefault(e.get("id"), []).append(e)
    for fid, ends in flows.items():
        phases = sorted(e["ph"] for e in ends)
        if phases != ["f", "s"]:
            problems.append(f"flow {fid} has ends {phases}, want one s and one f")
            continue
        for e in ends:
            inside = any(
                s <= us_to_ns(e["ts"]) <= t for s, t, _ in slices.get((e["pid"], e["tid"]), [])
            )
            if not inside:
                problems.append(f"flow {fid} {e['ph']} end lies in no slice of its thread")
    return problems
