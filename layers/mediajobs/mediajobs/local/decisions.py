"""The decision log, queried locally: the embedded AWS's Firehose files read with DuckDB,
with the same SQL files the stack's Athena named queries hold (``mediajobs/queries/``).

DuckDB (MIT, an embedded engine: one wheel, no server) reads JSON Lines natively and runs
the common subset of SQL the queries are written in; Athena runs the same text on the Glue
table ``decisions``. Locally the records are copied from the decisions bucket (every object
under ``decisions/``) into a folder and read as one view named ``decisions`` with the Glue
table's columns, so a field a record leaves out is ``NULL`` in both engines.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

#: The Glue table's columns and DuckDB's type for each (template.yaml ``DecisionsTable``).
COLUMNS: Final = {
    "t": "BIGINT",
    "corr": "VARCHAR",
    "action": "VARCHAR",
    "asset": "VARCHAR",
    "content": "VARCHAR",
    "job": "VARCHAR",
    "recipe": "VARCHAR",
    "recipe_v": "BIGINT",
    "recipe_hash": "VARCHAR",
    "policy": "VARCHAR",
    "key_v": "BIGINT",
    "prior": "VARCHAR",
    "state": "VARCHAR",
    "cpu_s": "DOUBLE",
    "bytes_in": "BIGINT",
    "bytes_out": "BIGINT",
    "rule": "VARCHAR",
    "model": "VARCHAR",
    "reviewer": "VARCHAR",
}

#: The prefix Firehose writes the records under (template.yaml ``DecisionStream``).
PREFIX: Final = "decisions/"


def query_text(name: str) -> str:
    """The SQL of the query ``name`` (``spikes``, ``top_cpu``, ``affected``): the file both
    engines run."""
    return resources.files("mediajobs.queries").joinpath(f"{name}.sql").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Rows:
    """A query's answer: its column names and rows."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def dicts(self) -> list[dict[str, Any]]:
        """Each row as a dict by column name."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


class DecisionLogReader:
    """The records of a decision bucket in a local folder, and queries over them.

    Parameters
    ----------
    s3: an S3 client of the embedded AWS.
    bucket: the decisions bucket (:attr:`~mediajobs.local.stack.LocalStack.decisions_bucket`).
    """

    def __init__(self, s3: Any, bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket

    @contextmanager
    def records(self) -> Iterator[Path]:
        """A folder holding every record file under ``decisions/`` (removed afterwards)."""
        with tempfile.TemporaryDirectory(prefix="mediajobs-decisions-") as folder:
            paginator = self._s3.get_paginator("list_objects_v2")
            count = 0
            for page in paginator.paginate(Bucket=self._bucket, Prefix=PREFIX):
                for item in page.get("Contents", []):
                    body = self._s3.get_object(Bucket=self._bucket, Key=item["Key"])["Body"].read()
                    (Path(folder) / f"{count:08d}.json").write_bytes(body)
                    count += 1
            yield Path(folder)

    def run(self, name: str, params: Sequence[Any]) -> Rows:
        """Run the query ``name`` with ``params`` (its ``?`` in order) over the records."""
        with self.records() as folder:
            return run_query(folder, query_text(name), params)

    def run_sql(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        """Run ``sql`` (over the table ``decisions``) on the records."""
        with self.records() as folder:
            return run_query(folder, sql, params)

    def count(self) -> dict[str, int]:
        """How many records there are of each action."""
        rows = self.run_sql("SELECT action, count(*) FROM decisions GROUP BY action ORDER BY action")
        return {str(action): int(n) for action, n in rows.rows}


def run_query(folder: Path, sql: str, params: Sequence[Any]) -> Rows:
    """Run ``sql`` over the JSON Lines files in ``folder``, seen as the table ``decisions``
    with :data:`COLUMNS` and the Glue table's partition ``day`` (``yyyy/MM/dd`` of ``t``, UTC:
    the Firehose prefix's day is its arrival's, the same or a later one) -- an empty folder
    is an empty table."""
    import duckdb

    con = duckdb.connect()
    try:
        files = sorted(str(p) for p in folder.glob("*.json") if p.stat().st_size)
        if files:
            columns = "{" + ", ".join(f"'{name}': '{kind}'" for name, kind in COLUMNS.items()) + "}"
            listing = "[" + ", ".join("'" + f.replace("'", "''") + "'" for f in files) + "]"
            # The names are this folder's own files and the columns a constant: no input
            # reaches the statement (the records are read as data).
            source = f"read_json({listing}, format = 'newline_delimited', columns = {columns})"
            day = "strftime(make_timestamp(t * 1000000), '%Y/%m/%d') AS day"
            view = f"CREATE VIEW decisions AS SELECT *, {day} FROM {source}"  # noqa: S608
            con.execute(view)
        else:
            fields = ", ".join(
                f'CAST(NULL AS {kind}) AS "{name}"' for name, kind in {**COLUMNS, "day": "VARCHAR"}.items()
            )
            con.execute(f"CREATE VIEW decisions AS SELECT {fields} WHERE false")
        cursor = con.execute(sql, list(params))
        names = [d[0] for d in cursor.description or []]
        return Rows(names, [tuple(r) for r in cursor.fetchall()])
    finally:
        con.close()
