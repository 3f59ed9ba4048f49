"""When the application calls `poll()`: the rhythm group work that needs the application
thread follows, computed from a few numbers rather than simulated call by call.

The loop turns every `processing_ms` from an anchor; a pause (a stuck handler, a GC, a debugger)
stops it until the pause ends. `max.poll.interval.ms` is broken when the next poll comes later
than that interval after the previous one.
"""

from __future__ import annotations

from dataclasses import dataclass

from kgroups.member.settings import ClientFlavour, MemberSettings


@dataclass(slots=True)
class PollLoop:
    processing_ms: int
    max_poll_interval_ms: int
    client: ClientFlavour = ClientFlavour.JAVA
    anchor: int = 0
    pause_from: int = 0
    pause_until: int = 0

    @classmethod
    def of(cls, settings: MemberSettings, now: int) -> PollLoop:
        return cls(settings.processing_ms, settings.max_poll_interval_ms, settings.client,
                   anchor=now)

    def group_work_at(self, now: int) -> int:
        """When group work that needs the application thread can run: the next poll (Java);
        at once unless paused (librdkafka's background thread, `ClientFlavour`)."""
        if self.client is ClientFlavour.LIBRDKAFKA and now >= self.pause_until:
            return now
        return self.next_poll(now)

    def set_processing(self, now: int, processing_ms: int) -> None:
        """Each poll from now on is followed by `processing_ms` of work."""
        self.anchor = self.last_poll(now)
        self.processing_ms = max(1, processing_ms)

    def pause(self, now: int, until: int) -> None:
        self.pause_from = self.last_poll(now)
        self.pause_until = until
        self.anchor = until

    def next_poll(self, now: int) -> int:
        """The first poll at or after `now`."""
        if now < self.pause_until:
            return self.pause_until
        steps = -(-(now - self.anchor) // self.processing_ms)
        return self.anchor + max(0, steps) * self.processing_ms

    def last_poll(self, now: int) -> int:
        """The latest poll at or before `now`."""
        if now < self.pause_until:
            return self.pause_from
        steps = (now - self.anchor) // self.processing_ms
        return self.anchor + max(0, steps) * self.processing_ms

    def poll_deadline(self, now: int) -> int | None:
        """When `max.poll.interval.ms` runs out before the next poll, that moment; else None."""
        deadline = self.last_poll(now) + self.max_poll_interval_ms
        return deadline if self.next_poll(now) > deadline else None
