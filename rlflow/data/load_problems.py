"""What loading a pipeline's data would refuse, found without a tokenizer: what ``rlflow validate`` reports.

``data_problems(spec, root)`` reads each split with the readers ``load_split`` uses.
Design notes: docs/design/data.md.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rlflow.data.paths import DataPaths, database_file
from rlflow.data.records import read_records
from rlflow.data.verl_format import read_verl_rows
from rlflow.errors import DataError


def data_problems(spec, root: Path) -> list[str]:
    """One message per split (or per data path) that loading would refuse; empty when the data loads."""
    data = spec.data
    try:
        paths = DataPaths.from_spec(data, Path(root))
    except DataError as exc:
        return [str(exc)]
    problems = []
    for split in ("train", "val"):
        file = paths.split_file(split)
        if file is None or (_is_parquet(data.format, file) and importlib.util.find_spec("pyarrow") is None):
            continue  # a core install reads no Parquet; the run needs the training extra, which has pyarrow
        try:
            if data.format == "verl":
                read_verl_rows(file, split, data.truncation)
                continue
            databases = paths.databases_for(file)
            for i, record in enumerate(read_records(file, data.format, split, data.truncation)):
                database_file(databases, record["db_id"], f"{file}: record {i}")
        except DataError as exc:
            problems.append(str(exc))
    if data.format != "verl":
        from rlflow.data.prompts import PromptTemplate  # jinja2: only text-to-SQL data has a prompt template

        try:
            PromptTemplate(paths.template)
        except DataError as exc:
            problems.append(str(exc))
    return problems


def _is_parquet(fmt: str, file: Path) -> bool:
    return fmt == "parquet" or (fmt == "verl" and file.suffix.lower() == ".parquet")
