"""``Labelled``: a Prometheus metric's children by one label value, looked up once each.

``metric.labels(...)`` validates and takes a lock on every call; on a per-token or per-event path
that cost is paid thousands of times a second for the same few values."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

M = TypeVar("M")


class Labelled(Generic[M]):
    def __init__(self, metric: Any, label: str) -> None:
        self._metric = metric
        self._label = label
        self._children: dict[str, M] = {}

    def __getitem__(self, value: str) -> M:
        child = self._children.get(value)
        if child is None:
            child = self._children[value] = self._metric.labels(**{self._label: value})
        return child
