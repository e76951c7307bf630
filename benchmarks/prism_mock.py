"""Every SDK method against Prism on our OpenAPI document: decode failures, unknowns, refusals.

Run: .venv/bin/python benchmarks/prism_mock.py [--calls 50] [--decoding strict|lenient]

Starts the pinned Prism (``tests/prism/support.py``; installed into ``.cache/prism`` when
missing) on ``shipping_async/sandbox/openapi.json``, first in static mode (answers are the
document's examples), then in dynamic mode (``-d``: json-schema-faker builds answers from
the schemas), and makes ``--calls`` calls of every SDK method against each. Columns:

- ok: calls that returned a result;
- decode: answers that did not decode (``APIResponseValidationError``);
- unk2xx: outcome-unknown errors raised although the answer was 2xx;
- refused: requests Prism refused (its ``sl-violations`` header names the request, or a 4xx);
- undecoded: fields left out by lenient decoding (``model.undecoded``; 0 in strict mode);
- ans-viol: answers Prism itself found off the document.

``--decoding strict`` (the default) proves the document and the models agree exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.prism.support import PRISM_VERSION, Tally, drive, prism, table


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--decoding", choices=("strict", "lenient"), default="strict")
    args = parser.parse_args()
    results: dict[str, dict[str, Tally]] = {}
    started = time.perf_counter()
    for dynamic in (False, True):
        async with prism(dynamic=dynamic) as running:
            results[running.mode] = await drive(
                running.base_url, args.calls, decoding=args.decoding
            )
    seconds = time.perf_counter() - started
    print(f"Prism {PRISM_VERSION}, {args.calls} calls per method and mode, "
          f"{args.decoding} decoding, {seconds:.0f} s")  # fmt: skip
    print(table(results))
    every = [t for tallies in results.values() for t in tallies.values()]
    print(
        f"total: {sum(t.calls for t in every)} calls, {sum(t.ok for t in every)} ok, "
        f"{sum(t.decode_failures for t in every)} decode failures, "
        f"{sum(t.unknown_on_2xx for t in every)} outcome-unknown on 2xx, "
        f"{sum(t.refused for t in every)} refused by Prism"
    )


if __name__ == "__main__":
    asyncio.run(main())
