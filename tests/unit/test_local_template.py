"""The local tools' template reader: CloudFormation's short forms, and a file parsed once
per process while it stays the same."""

from __future__ import annotations

import os

from mediajobs.local.template import load_template

TEMPLATE = """Resources:
  Queue:
    Type: AWS::SQS::Queue
    Properties:
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt DeadLetters.Arn
      QueueName: !Sub "${AWS::StackName}-jobs"
      Tags: [!Ref Name]
"""


def test_short_forms_become_intrinsic_functions(tmp_path):
    path = tmp_path / "template.yaml"
    path.write_text(TEMPLATE)
    props = load_template(path)["Resources"]["Queue"]["Properties"]
    assert props["RedrivePolicy"] == {"deadLetterTargetArn": {"Fn::GetAtt": ["DeadLetters", "Arn"]}}
    assert props["QueueName"] == {"Fn::Sub": "${AWS::StackName}-jobs"}
    assert props["Tags"] == [{"Ref": "Name"}]


def test_each_read_is_a_copy_of_its_own_and_a_changed_file_is_read_again(tmp_path):
    path = tmp_path / "template.yaml"
    path.write_text(TEMPLATE)
    first = load_template(path)
    first["Resources"]["Queue"]["Type"] = "changed by a caller"
    assert load_template(path)["Resources"]["Queue"]["Type"] == "AWS::SQS::Queue"
    path.write_text(TEMPLATE.replace("AWS::SQS::Queue", "AWS::SQS::Queue2"))
    os.utime(path, ns=(1, 1))  # a change is seen even when the clock's resolution hides it
    assert load_template(path)["Resources"]["Queue"]["Type"] == "AWS::SQS::Queue2"
