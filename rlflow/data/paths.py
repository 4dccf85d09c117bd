"""Where a pipeline's data lives, and the rule that keeps it inside one folder.

Every data and database path stays inside the data root (checked lexically); databases live at
``<databases>/<db_id>/<db_id>.sqlite``. Design notes: docs/design/data.md.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rlflow.assets import builtin_path
from rlflow.errors import DataError

_PLAIN_NAME = re.compile(r"^\w[\w.-]*$")
DEFAULT_TEMPLATE = Path(__file__).parent / "templates" / "text2sql.j2"


def _absolute(path: str | Path, base: Path) -> Path:
    """``path`` from a pipeline: a packaged ``builtin:`` path, or ``~``/relative to ``base``."""
    try:
        packaged = builtin_path(path)
    except ValueError as exc:
        raise DataError(f"data: {exc}") from None
    path = packaged or Path(os.path.expanduser(path))
    return Path(os.path.normpath(path if path.is_absolute() else base / path))


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@dataclass(frozen=True)
class DataPaths:
    """The resolved, checked paths of one pipeline's ``data`` section."""

    data_root: Path
    train: Path
    val: Path | None
    databases: Path | None  # data.databases; None means "next to each split file"
    template: Path

    @classmethod
    def from_spec(cls, data, root: Path) -> DataPaths:
        """Resolve ``data`` (a ``DataSpec``) against project ``root``; raise DataError naming each escape."""
        root = _absolute(root, Path.cwd())
        train = _absolute(data.train, root)
        data_root = _absolute(data.root, root) if data.root else train.parent
        fields = {
            "train": train,
            "val": data.val and _absolute(data.val, root),
            "databases": data.databases and _absolute(data.databases, root),
        }
        problems = [
            f"data.{name}: {getattr(data, name)!r} resolves to {path}, outside the data root {data_root}; "
            "keep data files under it (no '..') or set data.root to a folder that holds them all"
            for name, path in fields.items()
            if path is not None and not _inside(path, data_root)
        ]
        if problems:
            raise DataError("\n".join(problems))
        template = _absolute(data.prompt_template, root) if data.prompt_template else DEFAULT_TEMPLATE
        return cls(data_root, train, fields["val"], fields["databases"], template)

    def split_file(self, split: str) -> Path | None:
        return self.train if split == "train" else self.val

    def databases_for(self, split_file: Path) -> Path:
        """The databases folder for ``split_file``; DataError when there is none."""
        if self.databases is not None:
            if not self.databases.is_dir():
                raise DataError(
                    f"data.databases: no folder at {self.databases}; point it at the folder "
                    "holding <db_id>/<db_id>.sqlite"
                )
            return self.databases
        candidates = [split_file.parent / "databases", split_file.parent / f"{split_file.stem}_databases"]
        for folder in candidates:
            if folder.is_dir():
                return folder
        tried = ", ".join(str(c) for c in candidates)
        raise DataError(
            f"data.databases is not set and no databases folder was found next to {split_file} "
            f"(tried {tried}); set data.databases"
        )


def database_file(databases: Path, db_id: object, where: str) -> Path:
    """``<databases>/<db_id>/<db_id>.sqlite`` for a plain-name ``db_id``; ``where`` names the record."""
    if not isinstance(db_id, str) or not _PLAIN_NAME.match(db_id):
        raise DataError(
            f"{where}: db_id {db_id!r} is not a plain name (letters, digits, '_', '-', '.'; "
            "no path separators or leading dot); fix the record"
        )
    return databases / db_id / f"{db_id}.sqlite"
