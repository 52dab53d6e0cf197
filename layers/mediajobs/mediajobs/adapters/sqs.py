"""SQS, the :class:`~mediajobs.service_layer.ports.Queue` port: visibility while a job runs
and when a record goes back, hand-overs to a fresh copy.

Lambda's SQS event source deletes the records a handler reports as successes and leaves
the others invisible until their visibility timeout ends; it never changes visibility
itself. So the worker does, with ``ChangeMessageVisibility`` on the record's receipt
handle (SQS developer guide, "Amazon SQS visibility timeout").
"""

from __future__ import annotations

import logging
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from mediajobs.domain.errors import DeliveryLost, TransientFailure
from mediajobs.domain.jobs import Delivery
from mediajobs.service_layer.delivery import HANDOVERS_ATTRIBUTE

log = logging.getLogger(__name__)

#: Answers that mean the receipt handle no longer names an in-flight receive of ours.
_LOST_CODES: Final = frozenset(
    {"ReceiptHandleIsInvalid", "AWS.SimpleQueueService.MessageNotInflight", "MessageNotInflight"}
)


class SqsQueue:
    """Every operation the worker makes on the queues its records come from (the
    :class:`~mediajobs.service_layer.ports.Queue` port).

    Parameters
    ----------
    client: a boto3 SQS client.
    """

    def __init__(self, client: Any) -> None:
        self._sqs = client
        self._urls: dict[str, str] = {}

    def url(self, queue_arn: str) -> str:
        """The queue URL for an ARN (``GetQueueUrl``, cached for the process)."""
        if queue_arn not in self._urls:
            _, _, _, _, account, name = queue_arn.split(":", 5)
            try:
                self._urls[queue_arn] = self._sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)[
                    "QueueUrl"
                ]
            except (ClientError, BotoCoreError) as exc:
                raise TransientFailure(f"SQS GetQueueUrl failed: {exc}") from exc
        return self._urls[queue_arn]

    def set_visibility(self, delivery: Delivery, seconds: int) -> None:
        """Make the message invisible for ``seconds`` from now (0-43200).

        Raises
        ------
        DeliveryLost
            ``ReceiptHandleIsInvalid`` (or not in flight): the message was deleted or
            received again; this worker no longer holds it.
        TransientFailure
            On any other error.
        """
        try:
            self._sqs.change_message_visibility(
                QueueUrl=self.url(delivery.queue_arn),
                ReceiptHandle=delivery.receipt_handle,
                VisibilityTimeout=seconds,
            )
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            message = str(exc.response.get("Error", {}).get("Message", "")).lower()
            # SQS answers an expired or stale receipt handle with InvalidParameterValue ("The
            # receipt handle has expired", "ReceiptHandle is invalid. Reason: Message does not
            # exist or is not available for visibility timeout change").
            if code in _LOST_CODES or (code == "InvalidParameterValue" and "receipthandle" in message.replace(" ", "")):
                raise DeliveryLost(f"the message is no longer ours: {code}") from exc
            raise TransientFailure(f"SQS ChangeMessageVisibility failed: {code}") from exc
        except BotoCoreError as exc:
            raise TransientFailure(f"SQS ChangeMessageVisibility failed: {exc}") from exc

    def resend(self, queue_arn: str, body: str, delay_s: int, *, handovers: int = 0) -> None:
        """Send ``body`` again as a new message, delivered after ``delay_s`` (at most 900,
        SQS's ``DelaySeconds`` limit). Its receive count starts at 0; ``handovers`` is
        carried in the message attribute :data:`HANDOVERS_ATTRIBUTE`.

        Raises
        ------
        TransientFailure
            If SQS refuses it (the caller then returns the record instead).
        """
        try:
            self._sqs.send_message(
                QueueUrl=self.url(queue_arn),
                MessageBody=body,
                DelaySeconds=max(0, min(900, delay_s)),
                MessageAttributes={HANDOVERS_ATTRIBUTE: {"DataType": "Number", "StringValue": str(handovers)}},
            )
        except (ClientError, BotoCoreError) as exc:
            raise TransientFailure(f"SQS SendMessage failed: {exc}") from exc

    def delete(self, queue_arn: str, receipt_handle: str) -> None:
        """Delete a received message now (after its request was handed to a fresh copy), so
        a crash of the rest of the batch cannot count another receive against it.
        Failures are logged: the message then comes back and is answered again."""
        try:
            self._sqs.delete_message(QueueUrl=self.url(queue_arn), ReceiptHandle=receipt_handle)
        except (ClientError, BotoCoreError, TransientFailure) as exc:
            log.warning("could not delete a handed-over message: %s", exc)

    def return_later(self, queue_arn: str, delays: list[tuple[str, int]]) -> None:
        """Set the visibility of records going back to the queue, ``(receipt handle,
        seconds)`` each, in batches of 10 (the API's limit). Failures are logged: such a
        message comes back when its current visibility timeout ends."""
        for start in range(0, len(delays), 10):
            entries = [
                {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": seconds}
                for i, (handle, seconds) in enumerate(delays[start : start + 10])
            ]
            try:
                response = self._sqs.change_message_visibility_batch(QueueUrl=self.url(queue_arn), Entries=entries)
            except (ClientError, BotoCoreError, TransientFailure) as exc:
                log.warning("could not set the visibility of returned records: %s", exc)
                continue
            for failure in response.get("Failed", []):
                log.warning("could not set a returned record's visibility: %s", failure.get("Code"))
