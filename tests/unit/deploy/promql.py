"""A small PromQL scanner for checking monitoring config against the metrics the services export.

promtool is not available here, so this reads just enough PromQL to list each vector selector
(metric name and label matchers) and each grouping label (``by``/``without``/``on``/``ignoring``).
It refuses what it does not understand (an unknown function, unbalanced brackets, a selector with no
metric name) instead of guessing, so an expression it cannot read fails the tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

AGGREGATIONS = frozenset({
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
    "quantile", "limitk", "limit_ratio",
})
FUNCTIONS = frozenset({
    "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "day_of_month",
    "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp", "floor", "histogram_avg",
    "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev", "histogram_stdvar",
    "histogram_sum", "holt_winters", "hour", "idelta", "increase", "irate", "label_join", "label_replace",
    "ln", "log2", "log10", "minute", "month", "predict_linear", "rate", "resets", "round", "scalar", "sgn",
    "sort", "sort_desc", "sqrt", "time", "timestamp", "vector", "year", "avg_over_time", "min_over_time",
    "max_over_time", "sum_over_time", "count_over_time", "quantile_over_time", "stddev_over_time",
    "stdvar_over_time", "last_over_time", "present_over_time",
})
GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"})

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<range>\[[^\[\]]*\])
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+(?![\w:]))
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=(){},@])
    """,
    re.VERBOSE,
)


class PromQLError(ValueError):
    pass


@dataclass
class Selector:
    metric: str
    matchers: list[tuple[str, str, str]] = field(default_factory=list)  # (label, op, value)


@dataclass
class Parsed:
    selectors: list[Selector]
    grouping_labels: set[str]

    @property
    def metrics(self) -> set[str]:
        return {s.metric for s in self.selectors}


def _tokens(expr: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise PromQLError(f"cannot read {expr[pos:pos + 20]!r} in {expr!r}")
        kind = match.lastgroup
        if kind != "ws":
            out.append((kind, match.group()))
        pos = match.end()
    return out


def _unquote(literal: str) -> str:
    return literal[1:-1]


def parse(expr: str) -> Parsed:
    tokens = _tokens(expr)
    depth = 0
    for _, text in tokens:
        depth += {"(": 1, ")": -1}.get(text, 0)
        if depth < 0:
            raise PromQLError(f"unbalanced ')' in {expr!r}")
    if depth:
        raise PromQLError(f"unbalanced '(' in {expr!r}")

    selectors: list[Selector] = []
    grouping: set[str] = set()
    i = 0

    def peek(offset: int = 0) -> tuple[str, str]:
        j = i + offset
        return tokens[j] if j < len(tokens) else ("end", "")

    while i < len(tokens):
        kind, text = tokens[i]
        if kind == "op" and text == "{":
            raise PromQLError(f"a selector without a metric name in {expr!r}")
        if kind != "ident":
            i += 1
            continue
        following = peek(1)[1]
        if text in GROUPING:
            if following != "(":
                raise PromQLError(f"{text} without a label list in {expr!r}")
            i += 2
            while peek()[1] != ")":
                label_kind, label = peek()
                if label_kind == "ident":
                    grouping.add(label)
                elif label != ",":
                    raise PromQLError(f"unexpected {label!r} in a {text} list of {expr!r}")
                i += 1
            i += 1
            continue
        if text in KEYWORDS:
            i += 1
            continue
        if text in AGGREGATIONS or (text in FUNCTIONS and following == "("):
            i += 1
            continue
        if following == "(":
            raise PromQLError(f"unknown function {text}() in {expr!r}")
        selector = Selector(text)
        i += 1
        if peek()[1] == "{":
            i += 1
            while peek()[1] != "}":
                label_kind, label = peek()
                if label == ",":
                    i += 1
                    continue
                op = peek(1)[1]
                value_kind, value = peek(2)
                if label_kind != "ident" or op not in ("=", "!=", "=~", "!~") or value_kind != "string":
                    raise PromQLError(f"cannot read the label matchers of {text} in {expr!r}")
                selector.matchers.append((label, op, _unquote(value)))
                i += 3
            i += 1
        selectors.append(selector)
    return Parsed(selectors, grouping)


LABEL_VALUES = re.compile(r"^\s*label_values\((?P<selector>.+),\s*(?P<label>[A-Za-z_]\w*)\s*\)\s*$")


def parse_grafana_query(query: str) -> Parsed:
    """A panel target is PromQL; a template variable may be ``label_values(<selector>, <label>)``."""
    match = LABEL_VALUES.match(query)
    if match is None:
        return parse(query)
    parsed = parse(match["selector"])
    parsed.grouping_labels.add(match["label"])
    return parsed
