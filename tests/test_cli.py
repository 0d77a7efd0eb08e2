"""The `semipd` command as a new user meets it: help, version, errors, durations, `--output -`."""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from semipd import cli
from semipd.cliargs import duration, positive_duration
from semipd.controller.config import OperatorConfig, env_name

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sim-mixed-gpu-ascend.yaml"


def _parsers() -> dict[str, argparse.ArgumentParser]:
    top = cli.build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    out = {name: p for name, p in sub.choices.items() if name not in cli.DELEGATED}
    for name, (module, _) in cli.DELEGATED.items():
        out[name] = importlib.import_module(module).build_parser(f"semipd {name}")
    return out


def test_no_arguments_prints_help_and_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: semipd")
    for command in ("operator", "crds", "validate", "simulate", "load", "agent"):
        assert command in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"semipd {cli.version()}" != "semipd unknown"


def test_internal_commands_are_listed_apart(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 0
    commands, _, internal = capsys.readouterr().out.partition("internal commands")
    for name in cli.INTERNAL:
        assert name not in commands
        assert name in internal
    for name in ("operator", "simulate", "load"):
        assert name in commands


@pytest.mark.parametrize("command", ["operator", "crds", "validate", "simulate", "load", "agent"])
def test_every_flag_has_help_showing_its_default(command: str) -> None:
    parser = _parsers()[command]
    text = parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        assert action.help, f"semipd {command} {action.option_strings or action.dest}: no help"
        shown = not any(action.default is v for v in (None, False)) and action.default not in ([], argparse.SUPPRESS)
        if action.option_strings and shown:
            assert f"(default: {action.default})" in " ".join(text.split()), (command, action.dest)


def test_agent_help_names_the_command_it_was_started_as(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["agent", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: semipd agent [options] -- <engine command...>")


def test_operator_help_lists_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["operator", "--help"])
    out = capsys.readouterr().out
    for field in OperatorConfig.model_fields:
        assert env_name(field) in out
    assert "SEMIPD_RESYNC_INTERVAL" in out
    assert "(default: 30s)" in out


def test_crds_output_dash_prints_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["crds", "--output", "-"]) == 0
    assert not (tmp_path / "-").exists()
    crd = yaml.safe_load(capsys.readouterr().out)
    assert crd["kind"] == "CustomResourceDefinition"
    assert cli.main(["crds", "--output", "-", "--reference", "-"]) == 2
    assert "give one a file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--pool", str(EXAMPLE), "--trace", "azure-conv", "--duration", "soon"],
        ["load", "--synthetic", "poisson", "--rate", "1", "--endpoint", "http://127.0.0.1:1", "--duration", "-5s"],
        ["crds", "--no-such-flag"],
        ["no-such-command"],
        ["agent", "--driver", "no-such-driver"],
        ["validate", "--scrape-interval", "soon", str(EXAMPLE)],
    ],
)
def test_usage_errors_are_one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code: object = cli.main(argv)  # the agent turns its parser's exit into a return code
    except SystemExit as exit_:
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "--help" in err


def test_user_errors_never_show_a_traceback(tmp_path: Path) -> None:
    """As a shell runs them (the console script's real entry point)."""
    env = {**os.environ, "SEMIPD_METRICS_PORT": "eighty"}
    cases = [
        (["operator"], env),
        (["simulate", "--pool", str(tmp_path / "missing.yaml"), "--trace", "azure-conv"], None),
        (["simulate", "--pool", str(EXAMPLE), "--trace", "no-such-trace"], None),
        (["load", "--trace", str(tmp_path / "missing.csv"), "--endpoint", "http://127.0.0.1:1"], None),
    ]
    for argv, cmd_env in cases:
        proc = subprocess.run([sys.executable, "-m", "semipd", *argv], capture_output=True, text=True,
                              timeout=120, env=cmd_env)  # fmt: skip
        assert proc.returncode == 2, (argv, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_durations_read_like_the_crds() -> None:
    assert duration("5m") == 300.0
    assert duration("1m30s") == 90.0
    assert duration("250ms") == 0.25
    assert duration("90") == 90.0  # a bare number is seconds
    assert duration("0s") == 0.0
    for bad in ("soon", "5 minutes", "nan", "-1s", "inf"):
        with pytest.raises(argparse.ArgumentTypeError):
            duration(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="positive"):
        positive_duration("0")


def test_validate_reports_unreadable_files_and_unserved_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["validate", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "missing.yaml" in err
    (tmp_path / "bad.yaml").write_text("a: [unclosed\n")
    assert cli.main(["validate", str(tmp_path / "bad.yaml")]) == 2
    docs = tmp_path / "mixed.yaml"
    docs.write_text(
        "apiVersion: semipd.io/v1beta1\nkind: InferencePool\nmetadata: {name: x}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y}\n"
    )
    assert cli.main(["validate", str(docs)]) == 1
    err = capsys.readouterr().err
    assert "semipd.io/v1beta1: not served" in err
    assert "skipped ConfigMap (v1)" in err


def test_validate_refuses_a_name_the_apiserver_would(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "dense-gpu.yaml"
    doc = yaml.safe_load(example.read_text())
    doc["metadata"]["name"] = "Bad_Name"
    bad = tmp_path / "bad-name.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert cli.main(["validate", str(example)]) == 0
    capsys.readouterr()
    assert cli.main(["validate", str(bad)]) == 1
    assert "metadata.name" in capsys.readouterr().err


def test_a_zero_default_is_shown() -> None:
    text = " ".join(_parsers()["simulate"].format_help().split())
    assert "(default: 0)" in text  # --seed


def completions(tmp_path: Path, line: str) -> list[str]:
    """What the bash hook does: run the command with the line so far; completions come back on fd 8."""
    out = tmp_path / "completions"
    with out.open("wb") as fd8:
        env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
               "_ARGCOMPLETE_IFS": "\n"}  # fmt: skip
        code = "import os, sys; from semipd.cli import main; os.dup2(int(sys.argv[1]), 8); sys.exit(main())"
        subprocess.run([sys.executable, "-c", code, str(fd8.fileno())], env=env, pass_fds=(fd8.fileno(),),
                       timeout=60, capture_output=True)  # fmt: skip
    return out.read_text().split()


def test_shell_completion_script_and_completions_of_the_commands(tmp_path: Path) -> None:
    script = subprocess.run([sys.executable, "-m", "semipd", "completion", "bash"], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert script.returncode == 0, script.stderr
    assert "complete " in script.stdout
    assert "semipd" in script.stdout
    assert completions(tmp_path, "semipd cr") == ["crds"]


@pytest.mark.parametrize(("line", "want"), [("semipd simulate --dur", "--duration"),
                                            ("semipd load --max-", "--max-requests"),
                                            ("semipd agent --prefill-", "--prefill-percent")])  # fmt: skip
def test_the_delegated_commands_complete_their_options(tmp_path: Path, line: str, want: str) -> None:
    assert want in completions(tmp_path, line)
