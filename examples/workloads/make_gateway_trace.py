"""Write gateway-trace.csv: five minutes of arrivals as a gateway's access log would give them
(ISO 8601 time, class), for the trace-replay example. Synthetic (no real log ships with
tritontune): interactive users arrive as a Poisson stream whose rate swells and ebbs (2 to 5
req/s), and batch jobs come every 20 to 40 s as a burst of 30 requests within a second. Seeded,
so the file is the same every time."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

OUT = Path(__file__).with_name("gateway-trace.csv")
SPAN_S = 300.0
START = datetime(2026, 11, 24, 10, 0, tzinfo=timezone.utc)


def arrivals(rng: random.Random) -> list[tuple[float, str]]:
    out: list[tuple[float, str]] = []
    t = 0.0
    while True:  # thinning: a Poisson stream at the peak rate, kept with probability rate/peak
        t += rng.expovariate(5.0)
        if t >= SPAN_S:
            break
        if rng.random() < (3.5 + 1.5 * math.sin(2 * math.pi * t / SPAN_S)) / 5.0:
            out.append((t, "interactive"))
    t = rng.uniform(0, 20)
    while t < SPAN_S - 1:
        out += [(t + rng.uniform(0, 1.0), "batch") for _ in range(30)]
        t += rng.uniform(20, 40)
    return sorted(out)


def main() -> None:
    lines = ["time,class"]
    for t, name in arrivals(random.Random(7)):
        stamp = (START + timedelta(seconds=t)).isoformat(timespec="milliseconds")
        lines.append(f"{stamp.replace('+00:00', 'Z')},{name}")
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(lines) - 1} arrivals)")


if __name__ == "__main__":
    main()
