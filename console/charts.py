"""The overview's spend chart: bar geometry for the server-rendered SVG, stacked by model."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from billing.money import money_display
from console import queries


@dataclass(frozen=True)
class ChartSegment:
    """One model's part of a day's bar (stacked from the baseline up, in the legend's order)."""

    y: float
    height: float
    colour: int  # the legend entry's index, mod CHART_COLOURS (CSS class seg-N)
    model: str
    label: str


@dataclass(frozen=True)
class ChartBar:
    x: float
    y: float
    width: float
    height: float
    day: Any
    label: str
    segments: tuple[ChartSegment, ...] = ()


@dataclass(frozen=True)
class LegendEntry:
    model: str
    colour: int
    total_label: str


@dataclass(frozen=True)
class SpendChart:
    width: int
    height: int
    baseline: float
    bars: list[ChartBar]
    peak_label: str
    total_label: str
    first_day: Any
    last_day: Any
    legend: tuple[LegendEntry, ...] = ()


CHART_WIDTH, CHART_HEIGHT, CHART_TOP, CHART_BOTTOM = 600, 160, 16, 20
CHART_COLOURS = 8
UNKNOWN_MODEL = "other charges"


def _segments(
    day: queries.SpendDayByModel | None, *, models: list[str], baseline: float, height: float
) -> tuple[ChartSegment, ...]:
    """A bar of `height` pixels cut into the day's models, in proportion to their amounts."""
    if day is None or not day.amount or not height:
        return ()
    segments, top = [], baseline
    for index, spend in enumerate(day.models):
        if not spend.amount:
            continue
        part = float(spend.amount / day.amount) * height
        top -= part
        segments.append(
            ChartSegment(
                y=round(top, 2),
                height=round(part, 2),
                colour=models.index(spend.model_id) % CHART_COLOURS if spend.model_id in models else index,
                model=spend.model_id or UNKNOWN_MODEL,
                label=money_display(spend.amount),
            )
        )
    return tuple(segments)


def spend_chart(
    days: list[queries.SpendDay],
    *,
    by_model: list[queries.SpendDayByModel] | None = None,
    models: list[str] | None = None,
) -> SpendChart:
    """Bar geometry for the server-rendered SVG (floats here are pixels, never money); with
    `by_model` each bar is stacked by model and the chart has a legend."""
    models = models or []
    split = {day.day: day for day in by_model or []}
    peak = max((day.amount for day in days), default=Decimal(0))
    slot = CHART_WIDTH / max(len(days), 1)
    baseline = CHART_HEIGHT - CHART_BOTTOM
    drawable = baseline - CHART_TOP
    bars = []
    for index, day in enumerate(days):
        height = float(day.amount / peak) * drawable if peak else 0.0
        if day.amount > 0:
            height = max(height, 1.5)  # a tiny charge stays visible
        bars.append(
            ChartBar(
                x=round(index * slot + slot * 0.15, 2),
                y=round(baseline - height, 2),
                width=round(slot * 0.7, 2),
                height=round(height, 2),
                day=day.day,
                label=money_display(day.amount),
                segments=_segments(split.get(day.day), models=models, baseline=baseline, height=height),
            )
        )
    total = sum((day.amount for day in days), start=Decimal(0))
    model_totals = {
        model: sum(
            (spend.amount for day in split.values() for spend in day.models if spend.model_id == model),
            start=Decimal(0),
        )
        for model in models
    }
    return SpendChart(
        width=CHART_WIDTH,
        height=CHART_HEIGHT,
        baseline=baseline,
        bars=bars,
        peak_label=money_display(peak),
        total_label=money_display(total),
        first_day=days[0].day if days else None,
        last_day=days[-1].day if days else None,
        legend=tuple(
            LegendEntry(
                model=model or UNKNOWN_MODEL,
                colour=index % CHART_COLOURS,
                total_label=money_display(model_totals[model]),
            )
            for index, model in enumerate(models)
        ),
    )
