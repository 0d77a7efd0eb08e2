"""Hand-written Prometheus text exposition (format 0.0.4) for the agent's own metrics.

prometheus_client is not available inside arbitrary engine images, so the agent keeps its few
counters, gauges and one histogram here and renders them itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LabelKey = tuple[tuple[str, str], ...]


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(key: LabelKey, extra: Iterable[tuple[str, str]] = ()) -> str:
    pairs = [*key, *extra]
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _key(labels: dict[str, str]) -> LabelKey:
    return tuple(sorted(labels.items()))


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, help_text: str) -> None:
        self.name = name
        self.help_text = help_text

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help_text}", f"# TYPE {self.name} {self.kind}"]

    def samples(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help_text: str) -> None:
        if not name.endswith("_total"):
            raise ValueError(f"counter {name} must end in _total")
        super().__init__(name, help_text)
        self._values: dict[LabelKey, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount < 0:
            raise ValueError("counters only go up")
        key = _key(labels)
        self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        return self._values.get(_key(labels), 0.0)

    def samples(self) -> list[str]:
        values = self._values or {(): 0.0}
        return [f"{self.name}{_labels(k)} {format_value(v)}" for k, v in sorted(values.items())]


class Gauge(_Metric):
    kind = "gauge"

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help_text)
        self._values: dict[LabelKey, float] = {}

    def set(self, value: float, **labels: str) -> None:
        self._values[_key(labels)] = float(value)

    def value(self, **labels: str) -> float:
        return self._values.get(_key(labels), 0.0)

    def samples(self) -> list[str]:
        return [f"{self.name}{_labels(k)} {format_value(v)}" for k, v in sorted(self._values.items())]


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: Sequence[float]) -> None:
        super().__init__(name, help_text)
        if list(buckets) != sorted(set(buckets)) or not buckets:
            raise ValueError("histogram buckets must be strictly increasing")
        self.buckets = tuple(float(b) for b in buckets)
        self._counts = [0] * (len(self.buckets) + 1)
        self._sum = 0.0

    def observe(self, value: float) -> None:
        self._sum += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self._counts[i] += 1
                return
        self._counts[-1] += 1

    @property
    def count(self) -> int:
        return sum(self._counts)

    def samples(self) -> list[str]:
        lines = []
        cumulative = 0
        for bound, n in zip((*self.buckets, math.inf), self._counts):  # noqa: B905 (strict= needs 3.10)
            cumulative += n
            lines.append(f"{self.name}_bucket{_labels((), [('le', format_value(bound))])} {cumulative}")
        lines.append(f"{self.name}_sum {format_value(self._sum)}")
        lines.append(f"{self.name}_count {cumulative}")
        return lines


class Registry:
    def __init__(self) -> None:
        self._metrics: list[_Metric] = []

    def add(self, metric: _Metric) -> None:
        if any(m.name == metric.name for m in self._metrics):
            raise ValueError(f"duplicate metric {metric.name}")
        self._metrics.append(metric)

    def render(self) -> str:
        lines: list[str] = []
        for metric in self._metrics:
            samples = metric.samples()
            if samples:
                lines += metric.header() + samples
        return "\n".join(lines) + "\n"
