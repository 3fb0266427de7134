from tritontune.cli import app

app(prog_name="tritontune")
