"""Botocore and boto3 sessions that parse each AWS service model once per process.

A fresh botocore session loads and parses a service's JSON model, ``endpoints.json`` and the
partitions again for its first client: 0.3 s (a DynamoDB client) to 1 s here (2 cores),
where a session on a loader that parsed them already takes 20 to 120 ms. botocore shares one
data loader among the clients of one session; PynamoDB gives each model's connection a
session of its own, and boto3 makes a session per ``boto3.session.Session()``. Here every
session shares one loader, whose ``instance_cache`` keeps what it parsed.

Used by the client factory (:mod:`mediajobs.adapters.clients`), the model binding
(:func:`mediajobs.adapters.dynamo.bind`) and the local tools' sessions.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Final

import boto3.session
import botocore.session


class SharedLoader:
    """Makes sessions on one botocore data loader (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loader: Any = None

    def _core(self) -> botocore.session.Session:
        """A new botocore session on the loader; the caller holds the lock."""
        core = botocore.session.Session()
        if self._loader is None:
            self._loader = core.get_component("data_loader")
        else:
            core.register_component("data_loader", self._loader)
        return core

    def botocore_session(self, credentials: Mapping[str, str]) -> botocore.session.Session:
        """A new botocore session signing with ``credentials`` (``aws_access_key_id``,
        ``aws_secret_access_key``, ``aws_session_token``; the default chain when empty)."""
        with self._lock:
            core = self._core()
        if credentials.get("aws_access_key_id") and credentials.get("aws_secret_access_key"):
            core.set_credentials(
                credentials["aws_access_key_id"],
                credentials["aws_secret_access_key"],
                credentials.get("aws_session_token"),
            )
        return core

    def boto3_session(self, region: str, credentials: Mapping[str, str]) -> boto3.session.Session:
        """A new boto3 session for ``region`` signing with ``credentials`` (as
        :meth:`botocore_session`)."""
        with self._lock:
            core = self._core()
            session = boto3.session.Session(region_name=region, botocore_session=core, **credentials)
            # boto3 adds its own data folder to the loader of each session it is given: once is enough.
            paths = self._loader.search_paths
            paths[:] = list(dict.fromkeys(paths))
            return session


#: The process's one loader.
SESSIONS: Final = SharedLoader()
