"""Where a model's instance sits idle while requests wait: Triton's own trace, per execution.

Triton writes a per-request trace with ``--trace-config triton,file=FILE --trace-config rate=1
--trace-config level=TIMESTAMPS --trace-config count=-1`` (give them to tritontune as
``--server-arg=--trace-config=...``). Requests that ran together share a ``COMPUTE_START``; this
groups them into executions, and for each execution after the first asks: was the next batch's
oldest request already queued when this one ended? If so, the time until the next execution
started is the instance idle while work waited. Measured on MiniLM (issue 24): with priority
levels or a queue policy, 21-24 % of the span, gaps up to 474 ms; with one FIFO queue and no
policy, none over 5 ms (docs/concepts/workloads.md, "Why the real model needs it").

    python bench/trace_gaps.py trace.json [--model NAME]
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path


def executions(records: list[dict], model: str | None) -> list[tuple[float, float, float, int]]:
    """(compute start, compute end, oldest queue start, requests) of each execution, in order."""
    requests: dict[int, dict] = {}
    for record in records:
        entry = requests.setdefault(record["id"], {})
        if record.get("model_name"):
            entry["model"] = record["model_name"]
        for stamp in record.get("timestamps", []):
            entry[stamp["name"]] = stamp["ns"] / 1e9
    grouped: dict[tuple[str, float], list[dict]] = {}
    for entry in requests.values():
        traced = all(name in entry for name in ("COMPUTE_START", "QUEUE_START", "COMPUTE_END"))
        if traced and (model is None or entry.get("model") == model):
            key = (entry.get("model", ""), round(entry["COMPUTE_START"], 4))
            grouped.setdefault(key, []).append(entry)
    rows = [
        (key[1], max(e["COMPUTE_END"] for e in group), min(e["QUEUE_START"] for e in group), len(group))
        for key, group in grouped.items()
    ]
    return sorted(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument(
        "--model", help="only this model's requests (default: all, one instance assumed)"
    )
    args = parser.parse_args()
    rows = executions(json.loads(args.trace.read_text()), args.model)
    if len(rows) < 2:
        raise SystemExit(f"{args.trace}: fewer than two executions traced")
    pairs = itertools.pairwise(rows)
    waiting = sorted(nxt[0] - cur[1] for cur, nxt in pairs if nxt[2] < cur[1])
    compute = sorted(end - start for start, end, _, _ in rows)
    span = rows[-1][1] - rows[0][0]
    print(f"executions {len(rows)}, compute p50 {compute[len(compute) // 2] * 1e3:.0f} ms, "
          f"max {compute[-1] * 1e3:.0f} ms, busy {sum(compute) / span:.0%} of {span:.1f} s")  # fmt: skip
    if waiting:
        p50 = waiting[len(waiting) // 2]
        print(f"idle while a request waited: {len(waiting)} gaps, p50 {p50 * 1e3:.1f} ms, "
              f"max {waiting[-1] * 1e3:.1f} ms, {sum(g > 0.02 for g in waiting)} over 20 ms, "
              f"{sum(waiting) / span:.0%} of the span")  # fmt: skip


if __name__ == "__main__":
    main()
