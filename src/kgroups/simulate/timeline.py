"""The picture: per variant, which member consumed each partition over time, with the
moments a partition had no owner shaded. Needs matplotlib (the `spark` or `simulate` extra);
`MissingPlotting` says so in one line when it is absent."""

from __future__ import annotations

from pathlib import Path

from kgroups.simulate.engine import Outcome


class MissingPlotting(RuntimeError):
    """matplotlib is not installed."""


def write_timeline(outcomes: list[Outcome], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingPlotting("the timeline needs matplotlib: pip install "
                              "'kgroups[simulate]'") from None
    partitions = outcomes[0].ledger.partitions
    height = max(2.0, 0.12 * len(partitions)) + 0.6
    figure, axes = plt.subplots(len(outcomes), 1, figsize=(12, height * len(outcomes)),
                                squeeze=False, sharex=True)
    row = {partition: i for i, partition in enumerate(partitions)}
    for axis, outcome in zip(axes[:, 0], outcomes, strict=True):
        ledger = outcome.ledger
        names = sorted({s.member for s in ledger.segments}, key=lambda n: (len(n), n))
        colours = plt.get_cmap("tab20")
        colour = {name: colours(i % 20) for i, name in enumerate(names)}
        axis.axvspan(0, ledger.measure_from / 1000, color="0.95")
        for segment in ledger.segments:
            axis.broken_barh([(segment.start_ms / 1000,
                               (segment.end_ms - segment.start_ms) / 1000)],
                             (row[segment.partition] - 0.4, 0.8),
                             facecolors=colour[segment.member])
        owned: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for segment in ledger.segments:
            owned.setdefault(segment.partition, []).append((segment.start_ms, segment.end_ms))
        for partition in partitions:
            cursor = 0
            for start, end in sorted(owned.get(partition, [])):
                if start > cursor:
                    axis.broken_barh([(cursor / 1000, (start - cursor) / 1000)],
                                     (row[partition] - 0.5, 1.0), facecolors="black", alpha=0.55)
                cursor = max(cursor, end)
            if cursor < outcome.duration_ms:
                axis.broken_barh([(cursor / 1000, (outcome.duration_ms - cursor) / 1000)],
                                 (row[partition] - 0.5, 1.0), facecolors="black", alpha=0.55)
        axis.set_title(f"{outcome.variant.name}: colour = owning member, dark = no owner",
                       fontsize=9)
        axis.set_ylabel("partition")
        axis.set_xlim(0, outcome.duration_ms / 1000)
        axis.set_ylim(-0.5, len(partitions) - 0.5)
    axes[-1, 0].set_xlabel("virtual seconds")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
