"""Finding the inputs of a run: __consumer_offsets segment files and the topic partition logs
next to them, in a kgroups data dir or a Kafka log dir, on any filesystem pyarrow can open.

Listing happens once on the driver; the decoding tasks then open each file by its URI themselves,
so Spark ships paths (bytes of text) to the workers, never segment contents.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import urlparse

from pyarrow import fs

OFFSETS_TOPIC = "__consumer_offsets"
# Kafka names a partition directory `<topic>-<partition>` and a segment `<20-digit base>.log`.
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_SEGMENT_FILE = re.compile(r"^(?P<base>\d{20})\.log$")
# Hadoop spells S3 `s3a://`; pyarrow's S3 filesystem answers to `s3://` for the same buckets.
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """One `.log` segment: where it is and which topic partition it belongs to."""

    uri: str
    topic: str
    partition: int
    base_offset: int
    size: int


@dataclass(frozen=True, slots=True)
class LogInputs:
    """Everything a run reads: offsets-topic segments and, for lag, the other topics' segments."""

    offsets_segments: tuple[SegmentFile, ...]
    topic_segments: tuple[SegmentFile, ...]


class InputNotFoundError(ValueError):
    """A PATH given to `kgroups analyze` does not exist or holds no __consumer_offsets segments."""


def open_filesystem(path: str) -> tuple[fs.FileSystem, str]:
    """The pyarrow filesystem for a local path or URI, and the path inside it."""
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return fs.LocalFileSystem(), os.path.abspath(parsed.path if parsed.scheme else path)
    scheme = _SCHEME_ALIASES.get(parsed.scheme, parsed.scheme)
    return fs.FileSystem.from_uri(scheme + path[len(parsed.scheme) :])


def _to_uri(filesystem: fs.FileSystem, path: str, original: str) -> str:
    """A string a worker can hand back to `open_filesystem` to reach the same file."""
    if isinstance(filesystem, fs.LocalFileSystem):
        return path
    scheme = urlparse(original).scheme
    netloc = urlparse(original).netloc
    return f"{scheme}://{netloc}/{path.removeprefix(netloc).lstrip('/')}"


def _segment_of(info: fs.FileInfo, uri: str) -> SegmentFile | None:
    """The segment a listed file is, or None when it is not a Kafka segment file."""
    name_match = _SEGMENT_FILE.match(info.base_name)
    parent = info.path.rstrip("/").rsplit("/", 2)
    if name_match is None or len(parent) < 2:
        return None
    dir_match = _PARTITION_DIR.match(parent[-2])
    if dir_match is None:
        return None
    return SegmentFile(
        uri=uri,
        topic=dir_match["topic"],
        partition=int(dir_match["partition"]),
        base_offset=int(name_match["base"]),
        size=info.size or 0,
    )


def find_inputs(paths: list[str]) -> LogInputs:
    """List every segment under `paths` (each a data dir, a partition dir or a segment file).

    Raises InputNotFoundError when a path is missing, or when no __consumer_offsets segment is
    found at all: an empty analysis would look like a cluster with no groups.
    """
    offsets: dict[str, SegmentFile] = {}
    topics: dict[str, SegmentFile] = {}
    for path in paths:
        filesystem, inner = open_filesystem(path)
        root = filesystem.get_file_info(inner)
        if root.type == fs.FileType.NotFound:
            raise InputNotFoundError(f"{path}: no such file or directory")
        if root.type == fs.FileType.File:
            listed = [root]
        else:
            listed = filesystem.get_file_info(fs.FileSelector(inner, recursive=True))
        for info in listed:
            if info.type != fs.FileType.File:
                continue
            segment = _segment_of(info, _to_uri(filesystem, info.path, path))
            if segment is None:
                continue
            target = offsets if segment.topic == OFFSETS_TOPIC else topics
            target[segment.uri] = segment
    if not offsets:
        raise InputNotFoundError(
            f"no {OFFSETS_TOPIC}-<partition>/<base offset>.log segment under {', '.join(paths)}"
        )
    return LogInputs(
        offsets_segments=tuple(sorted(offsets.values(), key=_segment_order)),
        topic_segments=tuple(sorted(topics.values(), key=_segment_order)),
    )


def _segment_order(segment: SegmentFile) -> tuple[str, int, int]:
    return (segment.topic, segment.partition, segment.base_offset)
