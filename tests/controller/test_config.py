from __future__ import annotations

import pytest

from semipd.controller.config import OperatorConfig, load_config


def test_defaults() -> None:
    assert load_config({}) == OperatorConfig()


def test_reads_environment() -> None:
    cfg = load_config({"SEMIPD_NAMESPACES": "a, b", "SEMIPD_RESYNC_INTERVAL": "10s", "SEMIPD_METRICS_PORT": "0"})
    assert cfg.namespaces == ("a", "b")
    assert cfg.resync_interval == 10.0
    assert cfg.metrics_port == 0


def test_reads_the_timeouts_and_the_pool_bound() -> None:
    cfg = load_config(
        {
            "SEMIPD_API_TIMEOUT": "10s",
            "SEMIPD_PROMETHEUS_TIMEOUT": "2s",
            "SEMIPD_POOL_TIMEOUT": "1m",
            "SEMIPD_POOL_CONCURRENCY": "16",
        }
    )
    assert (cfg.api_timeout, cfg.prometheus_timeout, cfg.pool_timeout, cfg.pool_concurrency) == (10.0, 2.0, 60.0, 16)


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"SEMIPD_RESYNC_INTERVAL": "soon"}, "SEMIPD_RESYNC_INTERVAL"),
        ({"SEMIPD_RESYNC_INTERVAL": "0s"}, "must be positive"),
        ({"SEMIPD_METRICS_PORT": "http"}, "SEMIPD_METRICS_PORT"),
        ({"SEMIPD_METRICS_PORT": "70000"}, "SEMIPD_METRICS_PORT: .*65535"),
        ({"SEMIPD_API_TIMEOUT": "0s"}, "SEMIPD_API_TIMEOUT: must be positive"),
        ({"SEMIPD_POOL_CONCURRENCY": "0"}, "SEMIPD_POOL_CONCURRENCY"),
        ({"SEMIPD_POOL_CONCURRENCY": "many"}, "SEMIPD_POOL_CONCURRENCY"),
        ({"SEMIPD_LOG_LEVEL": "verbose"}, "SEMIPD_LOG_LEVEL"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        load_config(env)


def test_log_level_defaults_to_info_and_takes_debug() -> None:
    assert load_config({}).log_level == "info"
    assert load_config({"SEMIPD_LOG_LEVEL": "debug"}).log_level == "debug"


def test_every_setting_is_documented() -> None:
    from pathlib import Path

    from semipd.controller.config import env_name

    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    for field in OperatorConfig.model_fields:
        assert f"`{env_name(field)}`" in doc, env_name(field)
