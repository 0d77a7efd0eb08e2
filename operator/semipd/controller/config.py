"""Operator settings, read once from `SEMIPD_*` environment variables by pydantic-settings.

Each field's description is its documentation: `semipd operator --help` lists them (see
`settings_help`) and docs/configuration.md repeats them. Invalid values stop the operator at start
with a message naming the variable, rather than misbehaving later.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from semipd.api.durations import to_seconds
from semipd.api.semantics import DEFAULT_SCRAPE_INTERVAL_S

ENV_PREFIX = "SEMIPD_"

# The environment `load_config(env)` reads instead of os.environ (tests, rendered chart env).
_ENVIRONMENT: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("environment", default=None)


def _seconds(value: Any) -> Any:
    """Go-style duration strings (`30s`, `5m`) as seconds; numbers pass through."""
    if isinstance(value, str):
        seconds = to_seconds(value.strip())
        if seconds <= 0:
            raise ValueError(f"must be positive, got {value!r}")
        return seconds
    return value


def _comma_list(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


def _key_values(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    out = []
    for item in value.split(","):
        if not item.strip():
            continue
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected key=value, got {item!r}")
        out.append((key.strip(), val.strip()))
    return tuple(out)


Seconds = Annotated[float, BeforeValidator(_seconds), Field(gt=0, json_schema_extra={"format": "duration"})]


class _EnvironmentSource(EnvSettingsSource):
    """The environment source, reading the mapping handed to `load_config` when there is one."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env = _ENVIRONMENT.get()
        if env is None:
            return super()._load_env_vars()
        return parse_env_vars(env, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


class OperatorConfig(BaseSettings):
    """Process-wide settings of the operator."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        frozen=True,
        extra="ignore",
        env_ignore_empty=True,
        populate_by_name=True,
    )

    namespaces: Annotated[tuple[str, ...], NoDecode, BeforeValidator(_comma_list)] = Field(
        default=(), description="Namespaces to watch, comma-separated; empty means cluster-wide."
    )
    resync_interval: Seconds = Field(
        default=30.0, description="Go duration between level-based re-reconciles of every InferencePool."
    )
    liveness_endpoint: str = Field(default="http://127.0.0.1:8081/healthz", description="Kopf liveness endpoint URL.")
    metrics_host: str = Field(default="127.0.0.1", description="Address the operator's Prometheus metrics listen on.")
    metrics_port: int = Field(default=8080, ge=0, le=65535, description="Port of the operator's metrics; 0 disables.")
    prometheus_url: str = Field(
        default="http://127.0.0.1:9090",
        description="Default Prometheus queried for SLO metrics (per pool: spec.autoscaling.prometheusURL).",
    )
    prometheus_allowed_urls: Annotated[tuple[str, ...], NoDecode, BeforeValidator(_comma_list)] = Field(
        default=(),
        description="Prometheus URLs a pool's spec.autoscaling.prometheusURL may point under, comma-separated; "
        "empty: no override is honoured.",
    )
    scrape_interval: Seconds = Field(
        default=DEFAULT_SCRAPE_INTERVAL_S,
        description="Go duration between Prometheus scrapes of engine pods; spec.slo.window must be at least twice it.",
    )
    field_manager: str = Field(
        default="semipd-operator", description="Server-side apply field manager for everything the operator owns."
    )
    stale_after: Seconds = Field(
        default=300.0,
        description="Go duration; liveness fails when nothing came from the apiserver (watch event or heartbeat) "
        "for this long, or no reconcile succeeded for this long while pools exist.",
    )
    api_timeout: Seconds = Field(
        default=30.0, description="Go duration any one Kubernetes API request (and the heartbeat) may take."
    )
    prometheus_timeout: Seconds = Field(
        default=5.0, description="Go duration one Prometheus query may take (server- and client-side; one retry)."
    )
    pool_timeout: Seconds = Field(
        default=120.0, description="Go duration after which one pool's reconcile or evaluation is abandoned."
    )
    pool_concurrency: int = Field(default=8, gt=0, description="Pools reconciled (and evaluated) at the same time.")
    token_key_file: str | None = Field(
        default=None, description="File with the key agent admin tokens are derived from (mounted from a Secret)."
    )
    operator_image: str = Field(
        default="semipd-operator:0.1.0", description="Image of the agent-install init container and the sim engine."
    )
    termination_grace_seconds: int = Field(
        default=60,
        json_schema_extra={"format": "duration"},
        validation_alias=AliasChoices("termination_grace_seconds", f"{ENV_PREFIX}TERMINATION_GRACE"),
        description="Go duration of engine pods' termination grace period (at least 15s; the agent drains within it).",
    )
    pod_annotations: Annotated[tuple[tuple[str, str], ...], NoDecode, BeforeValidator(_key_values)] = Field(
        default=(), description="Extra annotations on every engine pod, `key=value,key=value`."
    )
    log_level: Literal["debug", "info", "warning"] = Field(
        default="info",
        description="Log level: `debug` adds Kopf's own (watch-stream restarts, every event), for diagnosis only.",
    )
    leader_election: bool = Field(
        default=False,
        description="Reconcile and autoscale only while holding the Lease `lease_name` in `lease_namespace`; "
        "other replicas wait as standbys.",
    )
    lease_namespace: str = Field(
        default="", description="Namespace of the leader Lease (required with leader election)."
    )
    lease_name: str = Field(default="semipd-operator", min_length=1, description="Name of the leader Lease.")
    lease_duration: Seconds = Field(
        default=15.0, description="Go duration a standby waits after the last renewal it saw before taking over."
    )
    renew_deadline: Seconds = Field(
        default=10.0, description="Go duration the leader may fail to renew before it exits (shorter than the lease)."
    )
    retry_period: Seconds = Field(default=2.0, description="Go duration between Lease renewals and standby checks.")

    @field_validator("prometheus_allowed_urls")
    @classmethod
    def _http_urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"not an http(s) URL: {url!r}")
        return value

    @model_validator(mode="after")
    def _lease(self) -> OperatorConfig:
        if self.leader_election and not self.lease_namespace:
            raise ValueError(f"{ENV_PREFIX}LEASE_NAMESPACE is required with {ENV_PREFIX}LEADER_ELECTION")
        if self.leader_election and not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(f"need {ENV_PREFIX}RETRY_PERIOD < {ENV_PREFIX}RENEW_DEADLINE < {ENV_PREFIX}LEASE_DURATION "
                             "(a leader must give up before a standby may take over)")  # fmt: skip
        return self

    @field_validator("termination_grace_seconds", mode="before")
    @classmethod
    def _grace(cls, value: Any) -> Any:
        seconds = _seconds(value)
        return max(15, round(seconds)) if isinstance(value, str) else seconds

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, _EnvironmentSource(settings_cls)


def env_name(field: str) -> str:
    """The environment variable that sets a field."""
    if field == "termination_grace_seconds":
        return f"{ENV_PREFIX}TERMINATION_GRACE"
    return ENV_PREFIX + field.upper()


def load_config(env: Mapping[str, str] | None = None) -> OperatorConfig:
    """Build the config from `SEMIPD_*` variables (os.environ by default); ValueError names the bad one."""
    token = _ENVIRONMENT.set(env)
    try:
        return OperatorConfig()
    except ValidationError as err:
        problems = []
        for e in err.errors():
            loc = str(e["loc"][0]) if e["loc"] else ""
            name = loc if loc.startswith(ENV_PREFIX) else env_name(loc)
            msg, given = e["msg"].removeprefix("Value error, "), repr(e.get("input"))
            if not loc:  # a rule across settings names them itself
                problems.append(msg)
                continue
            problems.append(f"{name}: {msg}" + ("" if given in msg else f" (got {given})"))
        raise ValueError("; ".join(problems)) from None
    finally:
        _ENVIRONMENT.reset(token)


def settings_help() -> str:
    """One line per setting: variable, default, description (the `semipd operator --help` list)."""
    lines = []
    for name, field in OperatorConfig.model_fields.items():
        default = field.default
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("format") == "duration":
            shown = f"{default:g}s"
        lines.append(
            f"  {env_name(name):<28} {field.description} (default: {shown if shown not in (None, '') else '-'})"
        )
    return "\n".join(lines)
