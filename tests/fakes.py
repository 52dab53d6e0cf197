"""Fakes of the service layer's ports (``mediajobs.service_layer.ports``), for every tier.

They record what they were asked and fail on demand; none reaches AWS.
"""

from __future__ import annotations

from mediajobs.domain.errors import DeliveryLost, TransientFailure
from mediajobs.domain.jobs import Delivery


class FakeQueue:
    """The ``Queue`` port in memory.

    Attributes
    ----------
    visibility: the seconds of every ``set_visibility``, in order.
    resent: ``(queue ARN, body, delay_s, handovers)`` of every copy queued.
    deleted: ``(queue ARN, receipt handle)`` of every delete.
    returned: ``(queue ARN, receipt handle, seconds)`` of every record returned.
    gone: ``set_visibility`` raises :class:`DeliveryLost` (the message is no longer ours).
    refuse_resend: ``resend`` raises :class:`TransientFailure` (SQS refused the copy).
    """

    def __init__(self, *, gone: bool = False, refuse_resend: bool = False) -> None:
        self.visibility: list[int] = []
        self.resent: list[tuple[str, str, int, int]] = []
        self.deleted: list[tuple[str, str]] = []
        self.returned: list[tuple[str, str, int]] = []
        self.gone = gone
        self.refuse_resend = refuse_resend

    def set_visibility(self, delivery: Delivery, seconds: int) -> None:
        if self.gone:
            raise DeliveryLost("ReceiptHandleIsInvalid")
        self.visibility.append(seconds)

    def resend(self, queue_arn: str, body: str, delay_s: int, *, handovers: int = 0) -> None:
        if self.refuse_resend:
            raise TransientFailure("SQS SendMessage failed: throttled")
        self.resent.append((queue_arn, body, delay_s, handovers))

    def delete(self, queue_arn: str, receipt_handle: str) -> None:
        self.deleted.append((queue_arn, receipt_handle))

    def return_later(self, queue_arn: str, delays: list[tuple[str, int]]) -> None:
        self.returned.extend((queue_arn, handle, seconds) for handle, seconds in delays)
