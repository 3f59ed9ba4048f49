"""The picture: per variant, which member consumed each partition over time, with the
moments a partition had no owner shaded, drawn by the pipeline's ownership picture (the analyze
report draws a real group's history the same way). Needs matplotlib (the `spark` or `simulate`
extra); `MissingPlotting` says so in one line when it is absent."""

from __future__ import annotations

from pathlib import Path

from kgroups.member import TopicPartition
from kgroups.simulate.engine import Outcome


class MissingPlotting(RuntimeError):
    """matplotlib is not installed."""


def write_timeline(outcomes: list[Outcome], path: Path) -> None:
    try:
        import matplotlib.pyplot as plt

        from kgroups.pipeline.ownership_picture import OwnershipPanel, Stretch, ownership_figure
    except ModuleNotFoundError as error:
        if error.name is None or not error.name.startswith("matplotlib"):
            raise
        raise MissingPlotting("the timeline needs matplotlib: pip install "
                              "'kgroups[simulate]'") from None

    def label(partition: TopicPartition) -> str:
        return f"{partition[0]}-{partition[1]}"

    panels = [OwnershipPanel(
        title=f"{outcome.variant.name}: colour = owning member, dark = no owner",
        partitions=[label(p) for p in outcome.ledger.partitions],
        stretches=[Stretch(label(s.partition), s.member, s.start_ms / 1000, s.end_ms / 1000)
                   for s in outcome.ledger.segments],
        start=0, end=outcome.duration_ms / 1000,
        unmeasured_until=outcome.ledger.measure_from / 1000) for outcome in outcomes]
    figure = ownership_figure(panels, x_label="virtual seconds")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
