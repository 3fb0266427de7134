from tritontune.cli import run

run()
