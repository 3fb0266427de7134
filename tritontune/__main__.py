"""The ``tritontune`` command's entry point (``python -m tritontune`` and the console script).

A Ctrl-C before a command's body runs (while the commands' modules load, about a second, or
while its options are read) exits 130 with one line, as a Ctrl-C later does (see
``cli._common.user_errors``), instead of a traceback of wherever it landed."""

import sys


def main() -> None:
    try:
        from tritontune.cli import run

        run()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
