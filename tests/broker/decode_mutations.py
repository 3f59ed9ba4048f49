"""Run as a child process by test_frame_check: decode every mutation of one class of every
served request and print the outcome counts as JSON. A child, because the failure this guards
against (the native decoder reserving what a client claims) aborts the process it runs in."""

from __future__ import annotations

import json
import random
import sys
from collections import Counter

from fuzz_frames import PATTERNS, pattern_mutations, random_mutation, sample_frames

from kgroups.broker.wire import FrameDecodeError, decode_request, peek_header, request_type


def outcome(frame: bytes) -> str:
    try:
        api_key, version, _ = peek_header(frame)
        request_type(api_key, version)
    except Exception:
        return "refused before decoding"  # unknown key or version: the server closes first
    try:
        decode_request(frame)
    except FrameDecodeError as exc:
        # The length check and the decoder must agree on where a request ends.
        return "unexpected: check and decoder disagree" if "decoder used" in str(exc) else (
            "malformed")
    except Exception as exc:  # anything else would escape the server's handling
        return f"unexpected {type(exc).__name__}: {exc}"
    return "decoded"


def main() -> None:
    mutation_class = sys.argv[1]
    outcomes: Counter[str] = Counter()
    frames = [sample.frame for sample in sample_frames()]
    if mutation_class == "random":
        rng = random.Random(int(sys.argv[2]))
        for _ in range(int(sys.argv[3])):
            outcomes[outcome(random_mutation(rng.choice(frames), rng))] += 1
    else:
        pattern = PATTERNS[mutation_class]
        for frame in frames:
            for mutated in pattern_mutations(frame, pattern):
                outcomes[outcome(mutated)] += 1
    json.dump(dict(outcomes), sys.stdout)


if __name__ == "__main__":
    main()
