"""``mediajobs serve``'s and ``mediajobs webhook listen``'s webhook flags, in this process:
a webhook URL whose host is, or resolves at start to, an address no webhook is sent to is
a usage error naming it (loopback admitted by default, and not once the allow list says
otherwise); the secret comes from a file, the environment or the flag -- exactly one."""

from __future__ import annotations

import socket

import pytest

from mediajobs.local.notifications import new_webhook_secret

ENV = "MEDIAJOBS_WEBHOOK_SECRET"


@pytest.fixture()
def served(monkeypatch):
    """``serve``'s arguments as run() hands them on: cmd_serve replaced, nothing started."""
    from mediajobs.local.commands import serve

    seen: list = []
    monkeypatch.setattr(serve, "cmd_serve", lambda args: seen.append(args) or 0)
    monkeypatch.setattr(serve, "port_free", lambda host, port: True)  # nothing binds: cmd_serve is replaced
    monkeypatch.delenv(ENV, raising=False)
    return seen


def usage_error(argv, capsys) -> str:
    from mediajobs.local.cli import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2, argv
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("https://169.254.169.254/latest/meta-data/", "host 169.254.169.254 is the instance metadata service"),
        ("https://10.0.0.1/", "host 10.0.0.1 is a private network (RFC 1918; 10.0.0.0/8)"),
        ("https://[fd00:ec2::254]/", "the AWS instance metadata service over IPv6: never a webhook target"),
        ("https://[::ffff:10.0.0.1]/", "carrying IPv4 10.0.0.1"),
    ],
)
def test_serve_refuses_a_webhook_url_whose_host_is_a_refused_address(url, said, served, monkeypatch, capsys):
    monkeypatch.setenv(ENV, new_webhook_secret())
    error = usage_error(["serve", "--worker", "--webhook-url", url], capsys)
    assert "--webhook-url: the webhook URL's host" in error and said in error
    assert served == []


def test_serve_refuses_a_name_that_resolves_to_a_private_address_at_start(served, monkeypatch, capsys):
    """The name is resolved at start (socket.getaddrinfo answers here: no real DNS)."""
    answers = {"hooks.example.com": "10.1.2.3"}

    def getaddrinfo(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setenv(ENV, new_webhook_secret())
    error = usage_error(["serve", "--worker", "--webhook-url", "https://hooks.example.com/hook"], capsys)
    assert "host hooks.example.com resolves to 10.1.2.3, which is a private network" in error
    assert "--webhook-allow-networks" in error
    argv = [
        "serve",
        "--worker",
        "--webhook-url",
        "https://hooks.example.com/hook",
        "--webhook-allow-networks",
        "10.1.0.0/16",
    ]
    from mediajobs.local.cli import main

    assert main(argv) == 0 and served[0].webhook_allow_networks == "10.1.0.0/16"  # admitted by the operator


def test_serve_admits_a_loopback_receiver_by_default_and_not_once_the_allow_list_leaves_it_out(
    served, monkeypatch, capsys
):
    from mediajobs.local.cli import main

    secret = new_webhook_secret()
    monkeypatch.setenv(ENV, secret)
    assert main(["serve", "--worker", "--webhook-url", "http://127.0.0.1:8765/"]) == 0
    (args,) = served
    assert (args.webhook_secret, args.webhook_allow_networks) == (secret, "127.0.0.0/8,::1/128")
    for allow in ("", "10.0.0.0/8"):
        argv = ["serve", "--worker", "--webhook-url", "http://127.0.0.1:8765/", "--webhook-allow-networks", allow]
        assert "127.0.0.1 is loopback" in usage_error(argv, capsys)
    bad = ["serve", "--worker", "--webhook-url", "http://127.0.0.1:8765/", "--webhook-allow-networks", "10.0.0.1/8"]
    assert "--webhook-allow-networks: not a network" in usage_error(bad, capsys)


def test_serve_takes_the_secret_from_a_file_or_the_environment(served, tmp_path, monkeypatch, capsys):
    from mediajobs.local.cli import main

    from_file, from_env = new_webhook_secret(), new_webhook_secret()
    path = tmp_path / "secret"
    path.write_text(from_file + "\n")
    path.chmod(0o600)
    assert (
        main(["serve", "--worker", "--webhook-url", "http://127.0.0.1:8765/", "--webhook-secret-file", str(path)]) == 0
    )
    assert capsys.readouterr().err == ""  # mode 600: no warning
    monkeypatch.setenv(ENV, from_env)
    assert main(["serve", "--worker", "--webhook-url", "http://127.0.0.1:8765/"]) == 0
    assert [args.webhook_secret for args in served] == [from_file, from_env]


def test_two_sources_of_the_secret_are_a_usage_error_naming_both(served, tmp_path, monkeypatch, capsys):
    path = tmp_path / "secret"
    path.write_text(new_webhook_secret())
    path.chmod(0o600)
    url = ["--webhook-url", "http://127.0.0.1:8765/"]
    both = usage_error(["serve", "--worker", *url, "--webhook-secret-file", str(path), "--webhook-secret", "x"], capsys)
    assert f"given twice, by --webhook-secret-file {path} and by --webhook-secret" in both
    monkeypatch.setenv(ENV, new_webhook_secret())
    env_and_file = usage_error(["serve", "--worker", *url, "--webhook-secret-file", str(path)], capsys)
    assert f"by --webhook-secret-file {path} and by {ENV}" in env_and_file
    listen = usage_error(["webhook", "listen", "--port", "0", "--secret", new_webhook_secret()], capsys)
    assert f"by {ENV} and by --secret" in listen
    assert served == []


def test_listen_needs_a_secret_and_says_where_a_bad_one_came_from(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(ENV, raising=False)
    assert "--secret-file PATH, MEDIAJOBS_WEBHOOK_SECRET, or --secret" in usage_error(["webhook", "listen"], capsys)
    path = tmp_path / "secret"
    path.write_text("whsec_bXlzZWNyZXQ=")  # too short
    path.chmod(0o600)
    error = usage_error(["webhook", "listen", "--secret-file", str(path)], capsys)
    assert f"--secret-file {path}: " in error and "24 to 64" in error
    missing = usage_error(["webhook", "listen", "--secret-file", str(tmp_path / "nope")], capsys)
    assert f"--secret-file {tmp_path / 'nope'}: No such file or directory" in missing
    monkeypatch.setenv(ENV, "not a secret")
    assert f"{ENV}: a local webhook secret starts with whsec_" in usage_error(["webhook", "listen"], capsys)


def test_a_secret_file_other_users_can_read_is_used_with_a_warning(served, tmp_path, capsys):
    from mediajobs.local.cli import main

    path = tmp_path / "secret"
    path.write_text(new_webhook_secret())
    path.chmod(0o644)
    assert (
        main(["serve", "--worker", "--webhook-url", "http://127.0.0.1:8765/", "--webhook-secret-file", str(path)]) == 0
    )
    assert f"warning: {path} is readable by other users (mode 644): chmod 600 it" in capsys.readouterr().err


def test_the_secret_flags_say_that_ps_shows_them():
    from mediajobs.local.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.choices and isinstance(a.choices, dict))
    serve = subparsers.choices["serve"]
    listen = next(a for a in subparsers.choices["webhook"]._actions if a.choices and isinstance(a.choices, dict))
    for command, flag in ((serve, "--webhook-secret"), (listen.choices["listen"], "--secret")):
        help_text = command._option_string_actions[flag].help
        assert "VISIBLE TO OTHER USERS in `ps`" in help_text and ENV in help_text
