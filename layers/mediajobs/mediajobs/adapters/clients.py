"""The client factory: the one place AWS clients are made and PynamoDB models bound.

Every client and model of one process comes from a :class:`ClientFactory`: one endpoint
(AWS's, or the embedded moto server's), one set of credentials (the function's role, or
the embedded AWS's), one retry configuration (:data:`mediajobs.adapters.dynamo.RETRY`:
botocore's standard mode for boto3's clients and PynamoDB's models alike, the same
timeouts, the optimistic rounds of the unit of work). The composition root
(:mod:`mediajobs.bootstrap`) asks it for what each function needs.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

import boto3
from botocore.config import Config
from pynamodb.models import Model

from mediajobs.adapters.assets import AssetModel, AssetModels, CandidateModel, ReferenceModel
from mediajobs.adapters.backfills import (
    BackfillModel,
    BackfillModels,
    ChangeModel,
    LaterModel,
    MarkModel,
    SegmentModel,
)
from mediajobs.adapters.dynamo import RETRY, Endpoint, RetryConfig, UnitOfWork, bind
from mediajobs.adapters.outbox import OutboxModel, outbox_put
from mediajobs.adapters.sessions import SESSIONS
from mediajobs.settings import Settings

M = TypeVar("M", bound=Model)

#: How S3 clients sign: SigV4 for every request, presigned URLs included. botocore presigns
#: S3 URLs with Signature Version 2 in the regions that once took it (``us-east-1`` among
#: them) unless a client asks for ``s3v4``, and S3 refuses SigV2 for every bucket created
#: after June 24, 2020 (400 ``InvalidRequest``, "The authorization mechanism you have
#: provided is not supported. Please use AWS4-HMAC-SHA256": S3 API reference, "Specifying
#: the Signature Version in request authentication"); so does the embedded AWS.
S3_SIGNING: Final = Config(signature_version="s3v4")


def with_s3_signing(service: str, config: Config | None = None) -> Config | None:
    """``config`` for a client of ``service``: for ``"s3"``, with :data:`S3_SIGNING`
    (``config``'s other settings kept); any other service's as it is."""
    if service != "s3":
        return config
    return S3_SIGNING if config is None else config.merge(S3_SIGNING)


class ClientFactory:
    """Clients, bound models and units of work for one endpoint.

    Parameters
    ----------
    region: AWS region.
    endpoint_url: every client's endpoint (the embedded moto server), ``None`` for AWS.
    credentials: ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``;
        empty for the default chain (the function's role).
    retry: the retry configuration.
    session: the boto3 session clients come from (default: a new one for ``region`` and
        ``credentials``; the embedded AWS passes one whose service models it loaded once).
    """

    def __init__(
        self,
        region: str,
        endpoint_url: str | None = None,
        credentials: Mapping[str, str] | None = None,
        *,
        retry: RetryConfig = RETRY,
        session: boto3.session.Session | None = None,
    ) -> None:
        self.endpoint = Endpoint(region, endpoint_url, dict(credentials or {}))
        self.retry = retry
        self._session = session

    @classmethod
    def for_settings(cls, settings: Settings) -> ClientFactory:
        """The factory of a function: its region and endpoint, its role's credentials."""
        return cls(settings.region, settings.endpoint_url)

    @functools.cached_property
    def session(self) -> boto3.session.Session:
        """The boto3 session every client of this factory comes from."""
        if self._session is not None:
            return self._session
        return SESSIONS.boto3_session(self.endpoint.region, self.endpoint.credentials)

    def client(self, service: str) -> Any:
        """A boto3 client of ``service`` (``"s3"``, ``"sqs"``, ``"events"`` ...) at the
        endpoint, with the retry configuration (S3's signing SigV4 only: :data:`S3_SIGNING`)."""
        config = with_s3_signing(service, self.retry.botocore())
        return self.session.client(service, endpoint_url=self.endpoint.host, config=config)

    def model(self, model: type[M], table_name: str) -> type[M]:
        """``model`` bound to ``table_name`` at the endpoint (:func:`mediajobs.adapters.dynamo.bind`)."""
        return bind(model, table_name, self.endpoint, self.retry)

    def asset_models(self, table_name: str) -> AssetModels:
        """The assets table's three models."""
        return AssetModels(
            self.model(AssetModel, table_name),
            self.model(ReferenceModel, table_name),
            self.model(CandidateModel, table_name),
        )

    def backfill_models(self, table_name: str) -> BackfillModels:
        """The backfills' models (they live in the assets table)."""
        return BackfillModels(
            self.model(BackfillModel, table_name),
            self.model(ChangeModel, table_name),
            self.model(SegmentModel, table_name),
            self.model(MarkModel, table_name),
            self.model(LaterModel, table_name),
        )

    def unit_of_work(
        self, outbox_table_name: str | None = None, *, sleep: Callable[[float], None] = time.sleep
    ) -> UnitOfWork:
        """A unit of work at the endpoint; with ``outbox_table_name``, the notifications its
        transactions owe are put in that outbox (``sleep``: how its rounds wait; tests pass
        a no-op)."""
        outbox = outbox_put(self.model(OutboxModel, outbox_table_name)) if outbox_table_name else None
        return UnitOfWork(self.endpoint, retry=self.retry, outbox=outbox, sleep=sleep)
