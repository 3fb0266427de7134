"""The prediction errors of the three predicted searches in band/searches (their studies, gunzipped
into a temporary directory): ``bench/prediction_errors.py`` on that folder."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from prediction_errors import main  # noqa: E402

main([str(HERE / "band" / "searches"), "--glob", "predict-seed*.db.gz"])
