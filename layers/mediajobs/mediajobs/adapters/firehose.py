"""The decision log on Kinesis Data Firehose (:class:`~mediajobs.service_layer.ports.DecisionLog`).

Each record is one JSON line (a trailing newline: Firehose concatenates records as they
come, and JSON Lines needs one per line). ``PutRecordBatch`` takes at most 500 records and
4 MiB a call ("Amazon Data Firehose Quota"); a partial failure (``FailedPutCount``) sends
the failed records again, once. What still fails is logged and counted
(``DecisionsNotLogged``): the ledger holds every decision, the log is its copy for queries.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

log = logging.getLogger(__name__)

#: Most records one ``PutRecordBatch`` takes.
MAX_BATCH: Final = 500


class FirehoseDecisionLog:
    """Appends decision records to the Firehose stream ``stream_name`` through ``client``
    (a ``firehose`` client); ``on_lost`` is called with the count of records not sent."""

    def __init__(self, client: Any, stream_name: str, *, on_lost: Callable[[int], None] | None = None) -> None:
        self._client = client
        self._stream = stream_name
        self._on_lost = on_lost
        self.sent = 0

    def append(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Send ``records`` (module docstring). Never raises."""
        for start in range(0, len(records), MAX_BATCH):
            batch = [
                {"Data": (json.dumps(r, separators=(",", ":")) + "\n").encode()}
                for r in records[start : start + MAX_BATCH]
            ]
            lost = self._put(batch)
            if lost:
                lost = self._put(lost)
            if lost:
                log.warning("decision records not logged", extra={"records": len(lost), "stream": self._stream})
                if self._on_lost is not None:
                    self._on_lost(len(lost))
            self.sent += len(batch) - len(lost)

    def _put(self, batch: list[dict[str, bytes]]) -> list[dict[str, bytes]]:
        """One ``PutRecordBatch``; the entries that failed (all of them on an error)."""
        try:
            response = self._client.put_record_batch(DeliveryStreamName=self._stream, Records=batch)
        except (ClientError, BotoCoreError) as exc:
            log.warning("PutRecordBatch failed: %s", exc, extra={"stream": self._stream})
            return batch
        if not response.get("FailedPutCount"):
            return []
        answers = response.get("RequestResponses", [])
        return [entry for entry, answer in zip(batch, answers, strict=False) if answer.get("ErrorCode")]
