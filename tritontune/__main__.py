"""The ``tritontune`` command's entry point (``python -m tritontune`` and the console script).

Loading the commands' modules takes about a second; a Ctrl-C in it exits 130 with one line, as
a Ctrl-C later does, instead of a traceback of whichever import it landed in."""

import sys


def main() -> None:
    try:
        from tritontune.cli import run
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    run()


if __name__ == "__main__":
    main()
