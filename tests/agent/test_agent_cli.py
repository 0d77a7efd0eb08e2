"""Agent command-line validation: every usage error exits 2 before anything is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from semipd.agent.__main__ import main

ENGINE = ["--", "semipd", "sim-engine", "--role", "decode-owner"]


@pytest.fixture
def token(tmp_path: Path) -> str:
    path = tmp_path / "token"
    path.write_text("t\n")
    return str(path)


def run(tmp_path: Path, token: str, *args: str) -> int:
    return main(["--driver", "sim", "--token-file", token, "--run-dir", str(tmp_path / "run"), *args])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "missing `-- <engine command...>`"),
        (("--",), "missing `-- <engine command...>`"),
        (("--admin-host", "0.0.0.0", *ENGINE), "wildcard address"),
        (("--prefill-percent", "5", "--prefill-min", "10", *ENGINE), "prefillPercent 5 is outside 10..100"),
        (("--decode-min", "0", *ENGINE), "decode bounds 0..100"),
        ((*ENGINE, "--prefill-percent", "40"), "--prefill-percent is set by the agent"),
        (("--engine-health-url", "ftp://x", *ENGINE), "must be http://"),
    ],
)
def test_usage_errors_exit_2(
    tmp_path: Path, token: str, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    assert run(tmp_path, token, *args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_missing_token_file_refuses_to_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path, str(tmp_path / "absent"), *ENGINE) == 2
    assert "cannot stat token file" in capsys.readouterr().err


def test_unknown_driver_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--driver", "tensorrt", *ENGINE]) == 2
    assert main(["--help"]) == 0
    assert "semipd-agent [options] -- <engine command...>" in capsys.readouterr().out
