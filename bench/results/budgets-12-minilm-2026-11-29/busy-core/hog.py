"""One core busy while a search measures its step-1 trials: from when the study's first trial
starts until its fifth starts (at most 240 s). Another process on the host, as on a shared one."""

import sqlite3
import sys
import time

db = sys.argv[1]


def trials() -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
            return c.execute("select count(*) from trials").fetchone()[0]
    except sqlite3.Error:
        return 0


while trials() < 1:
    time.sleep(0.5)
start = time.monotonic()
print(f"hog: busy from {time.strftime('%H:%M:%S', time.gmtime())}", flush=True)
checked = start
while time.monotonic() - start < 240:
    if time.monotonic() - checked > 1.0:
        checked = time.monotonic()
        if trials() >= 5:
            break
print(
    f"hog: done at {time.strftime('%H:%M:%S', time.gmtime())} ({time.monotonic() - start:.0f} s)",
    flush=True,
)
