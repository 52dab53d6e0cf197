"""The decision log's queries, one SQL file each: the same text runs in Athena (the stack's
named queries; ``tests/functional/test_template_decisions.py`` holds them equal to these
files) and locally in DuckDB (``mediajobs decisions``). Each reads one table,
``decisions``, and takes its parameters as ``?`` in order (Athena's execution parameters,
DuckDB's prepared parameters)."""
