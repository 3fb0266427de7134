"""Export the studies named on the command line, each by the exporter of its kind."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tritontune.errors import InputError
from tritontune.export.single_class import Endpoint, export_records
from tritontune.export.staging import ExportResult
from tritontune.export.workload import export_workload
from tritontune.study.handle import TuningStudy
from tritontune.study.schema import StudyKind


def export_studies(
    endpoints: Sequence[Endpoint],
    storage: str,
    out: Path,
    *,
    top_k: int = 1,
    model_repository: Path | None = None,
    force: bool = False,
) -> ExportResult:
    """Export the best ``top_k`` configs of each endpoint's study in ``storage`` into ``out``
    (a workload study: its winner, exported alone)."""
    if not endpoints:
        raise InputError("nothing to export: give --study NAME or --endpoint ROLE=STUDY")
    loaded = {e.study: TuningStudy.open_existing(storage, e.study) for e in endpoints}
    workload = [name for name, study in loaded.items() if study.kind == StudyKind.WORKLOAD]
    if workload:
        if len(endpoints) > 1 or endpoints[0].role is not None or top_k != 1:
            raise InputError(
                f"study {workload[0]!r} is a workload study: export it alone, with "
                "--study NAME (its winner already says how many endpoints it serves)"
            )
        return export_workload(
            loaded[workload[0]].read_workload(),
            out,
            storage=storage,
            model_repository=model_repository,
            force=force,
        )
    studies = {name: study.read() for name, study in loaded.items()}
    return export_records(
        endpoints, studies, out, storage=storage, top_k=top_k,
        model_repository=model_repository, force=force,
    )  # fmt: skip
