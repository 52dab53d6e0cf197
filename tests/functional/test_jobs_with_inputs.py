"""Jobs with inputs against the embedded AWS: a job that takes two other jobs' outputs
(``pair@1`` takes ``left@1``'s and ``right@1``'s ``out``) is requested exactly once when
its inputs end at the same moment on two workers, and committed once.

Each round requests the three jobs (``Pipeline.request``: the two inputs get job requests,
the pair is written waiting), delivers the two requests to two workers at once through
the real handler, and holds each worker at the moment it tells the pair its input ended
until the other got there too -- so both tell it together, the race the conditional write
settles. Exactly one ``waiting`` -> ``requested`` transition happens and one job request
for the pair reaches the queue; delivered twice, it commits once. And an original whose
delivery was throttled telling the pair has it run by its redelivery.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid

from mediajobs.bootstrap import build_service
from mediajobs.domain.errors import TransientFailure
from mediajobs.domain.jobs import JobState
from mediajobs.domain.keys import sha256_hex
from mediajobs.domain.plan import Where, plan_jobs
from mediajobs.entrypoints import worker
from mediajobs.local.events import sqs_event
from mediajobs.local.runner import LocalLambdaContext
from mediajobs.local.session import local_adapters
from tests.fakes import TextStep, Wrapping, pair_recipes
from tests.functional.together import run_together

ROUNDS = 4


def receive_all(sqs, url: str, expected: int) -> list[dict]:
    """Every message of the test's own queue, at least ``expected`` (long polls)."""
    got: list[dict] = []
    for _ in range(5):
        answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=600)
        got.extend(answer.get("Messages", []))
        if len(got) >= expected:
            answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            return got + answer.get("Messages", [])
    return got


def test_two_inputs_ending_at_once_request_the_pair_once_and_it_commits_once(local_session):
    stack, sqs = local_session.stack, local_session.sqs
    url = sqs.create_queue(QueueName=f"job-requests-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    settings = dataclasses.replace(local_session.settings, jobs_queue_arn=arn)
    step, recipes = TextStep(), pair_recipes()
    adapters = dataclasses.replace(local_adapters(stack, settings), steps={TextStep.name: step})
    together = threading.Barrier(2, timeout=30)
    requested: list[str] = []

    def input_done(waiter, input_key, *, now_s):
        together.wait()  # both workers tell the pair at once
        view, made = adapters.ledger.input_done(waiter, input_key, now_s=now_s)
        if made:
            requested.append(waiter)
        return view, made

    racing = dataclasses.replace(adapters, ledger=Wrapping(adapters.ledger, input_done=input_done))
    service = build_service(settings, adapters=racing, recipes=recipes)
    handlers = [worker.make_handler(service), worker.make_handler(service)]
    plain = worker.make_handler(build_service(settings, adapters=adapters, recipes=recipes))

    for round_ in range(ROUNDS):
        data = f"round {round_} {uuid.uuid4().hex}".encode()
        key = f"inputs/pairs/{uuid.uuid4().hex}.txt"  # not under originals/: no S3 event is ours
        local_session.s3.put_object(Bucket=stack.bucket, Key=key, Body=data)
        where = Where(stack.bucket, key, settings.derivatives_prefix, settings.policy_version, settings.keys)
        left, right, pair = plan_jobs(sha256_hex(data), "image", recipes, where)
        assert sorted(service.request([left, right, pair])) == sorted([left.key, right.key])
        inputs = receive_all(sqs, url, 2)
        assert sorted(json.loads(m["Body"])["job_key"] for m in inputs) == sorted([left.key, right.key])

        answers = run_together(lambda n, got=inputs: handlers[n](sqs_event([got[n]], arn), LocalLambdaContext()), 2)
        assert answers == [{"batchItemFailures": []}] * 2
        assert requested == [pair.key], f"round {round_}"
        requested.clear()

        [request] = receive_all(sqs, url, 1)  # one request for the pair, however they raced
        assert json.loads(request["Body"]) == {"mediajobs": "job", "job_key": pair.key}
        for _ in range(2):  # SQS may deliver it twice: it commits once
            assert plain(sqs_event([request], arn), LocalLambdaContext()) == {"batchItemFailures": []}
        row = stack.ledger().get(pair.key)
        assert row is not None and (row.state, row.attempts) == (JobState.DONE, 1)
        joined = local_session.s3.get_object(Bucket=stack.bucket, Key=f"derivatives/{pair.key}/out.txt")["Body"].read()
        assert joined == f"P|L|{data.decode()}|R|{data.decode()}".encode()
        assert receive_all(sqs, url, 0) == []
    assert len(step.runs) == 3 * ROUNDS  # each job rendered once


def test_the_originals_redelivery_after_a_throttled_teller_runs_the_pair(local_session):
    """The original's delivery commits ``left`` and ``right`` and is throttled telling the
    pair (its record fails, the message comes back); the redelivery through the real
    handler tells it and runs it: acknowledged, the pair done, each job rendered once."""
    from tests.functional.test_worker import event_for, put, swallow_queued, unique_png

    stack, settings = local_session.stack, local_session.settings
    step, recipes = TextStep(), pair_recipes()
    adapters = dataclasses.replace(local_adapters(stack, settings), steps={TextStep.name: step})
    throttled: list[str] = []

    def input_done(waiter, input_key, *, now_s):
        if not throttled:
            throttled.append(input_key)
            raise TransientFailure("ProvisionedThroughputExceededException")
        return adapters.ledger.input_done(waiter, input_key, now_s=now_s)

    flaky = dataclasses.replace(adapters, ledger=Wrapping(adapters.ledger, input_done=input_done))
    first = worker.make_handler(build_service(settings, adapters=flaky, recipes=recipes))
    again = worker.make_handler(build_service(settings, adapters=adapters, recipes=recipes))
    data = unique_png(64, 48)
    key = f"originals/pairs/{uuid.uuid4().hex}.png"
    put(local_session, key, data)
    swallow_queued(local_session)
    where = Where(stack.bucket, key, settings.derivatives_prefix, settings.policy_version, settings.keys)
    left, right, pair = plan_jobs(sha256_hex(data), "image", recipes, where)

    assert first(event_for(local_session, key, len(data)), LocalLambdaContext())["batchItemFailures"] != []
    ledger = stack.ledger()
    assert [ledger.get(job.key).state for job in (left, right, pair)] == [JobState.DONE] * 2 + [JobState.WAITING]
    assert again(event_for(local_session, key, len(data)), LocalLambdaContext()) == {"batchItemFailures": []}
    assert ledger.get(pair.key).state == JobState.DONE and len(step.runs) == 3
