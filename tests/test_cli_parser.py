"""The CLI parses a command line with the parser of its subcommand alone (cqlstream/cli.py
`parse_args`, `_build_parser(command)`): for every subcommand, the parse, its help and its errors
are those of the whole parser, and a line without a known subcommand, or with arguments left over,
is parsed by the whole parser."""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Callable

import pytest

from cqlstream import cli


def _subcommands() -> list[str]:
    (action,) = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(action.choices)


def _outcome(parse: Callable[[list[str]], argparse.Namespace], argv: list[str]) -> tuple[object, str, str]:
    """(exit code or the parsed namespace, stdout, stderr) of parsing `argv`."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            result: object = vars(parse(argv))
        except SystemExit as e:
            result = e.code
    return result, out.getvalue(), err.getvalue()


def test_every_subcommand_is_found_alone():
    names = _subcommands()
    assert {"run", "serve", "explain", "query", "bench"} <= set(names) and len(names) > 10
    for name in names:
        assert cli._build_parser(name)[1], name
    assert not cli._build_parser("no-such-command")[1]


@pytest.mark.parametrize("name", _subcommands())
def test_a_subcommand_alone_parses_helps_and_fails_as_the_whole_parser(name: str):
    whole = cli.build_parser().parse_args
    for argv in ([name, "--help"], [name, "--no-such-option"], [name], [name, "x", "y", "z", "w"]):
        assert _outcome(cli.parse_args, argv) == _outcome(whole, argv), argv
    assert "[-h]" in _outcome(whole, [name, "--help"])[1]


def test_lines_parsed_alike():
    lines = [
        ["run", "x.cql", "--threads", "1", "--stream-compat", "--engine-threads", "2"],
        ["run", "x.cql", "--threads", "one"],
        ["run", "x.cql", "--writer", "bogus"],
        ["explain", "select * from S", "--ddl", "register stream S (a int)", "--json"],
        ["serve", "--overload-policy", "uniform", "--port", "8001"],
        ["serve", "--overload-policy", "bogus"],
        ["query", "select 1", "--format", "text"],
    ]
    for argv in lines:
        assert _outcome(cli.parse_args, argv) == _outcome(cli.build_parser().parse_args, argv), argv


def test_main_falls_back_to_the_whole_parser():
    for argv in (["no-such-command"], ["--help"], []):
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(err):
            with pytest.raises(SystemExit):
                cli.main(argv)
        want = _outcome(cli.build_parser().parse_args, argv)
        assert (out.getvalue(), err.getvalue()) == want[1:], argv
    assert "invalid choice: 'no-such-command'" in _outcome(cli.build_parser().parse_args, ["no-such-command"])[2]
