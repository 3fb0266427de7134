"""tritontune/__main__.py: the command's entry point."""

import subprocess
import sys

#: A KeyboardInterrupt raised by the import of ``tritontune.cli``, where a Ctrl-C in the second
#: the commands' modules take to load would raise it, then the entry point.
INTERRUPTED_IMPORT = """
import sys

class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "tritontune.cli":
            raise KeyboardInterrupt

sys.meta_path.insert(0, Interrupt())
from tritontune.__main__ import main
main()
"""


def test_a_ctrl_c_while_the_commands_load_exits_130_in_one_line():
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_IMPORT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr == "interrupted\n"  # no traceback


def test_the_entry_point_runs_the_command():
    done = subprocess.run(
        [sys.executable, "-m", "tritontune", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.startswith("tritontune "), done.stderr
