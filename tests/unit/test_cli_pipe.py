"""The CLI when the reader of its output goes away (``mediajobs status KEY | head -1``): exit
141 (128 + SIGPIPE), quietly, with no traceback."""

from __future__ import annotations

import argparse
import signal
import sys

import mediajobs.local.cli as cli


def test_a_closed_pipe_ends_the_command_quietly_with_141(monkeypatch, tmp_path, capsys):
    def run(args, parser, wrap_adapters):
        raise BrokenPipeError(32, "Broken pipe")

    parser = argparse.ArgumentParser()
    parser.set_defaults(run=run)
    monkeypatch.setattr(cli, "build_parser", lambda command=None: parser)
    with open(tmp_path / "stdout", "w") as out:  # a real descriptor for the redirection
        monkeypatch.setattr(sys, "stdout", out)
        assert cli.main([]) == 128 + signal.SIGPIPE
    assert capsys.readouterr().err == ""
