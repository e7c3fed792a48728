"""A writer process for tests/system/test_backends.py: opens a Store on the backend given as JSON and
stores until killed or done, printing one line per acknowledged call (after the call returned,
so a line means "acknowledged"): `ack ID` for a store, `bulk ID,ID,...` for a bulk_store.

    python -m tests.support.backend_writer '{"database": "postgresql://..."}' NAME COUNT [BULK]
"""

from __future__ import annotations

import json
import sys

from compactor.store import Store, StoreInput


def content(name: str, k: int, j: int = 0) -> str:
    return f"writer {name} call {k} part {j}: marker {name}k{k}j{j} " + "filler " * (k % 7)


def main() -> None:
    where = json.loads(sys.argv[1])
    name, count = sys.argv[2], int(sys.argv[3])
    bulk = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    store = Store(budget=1_000_000, **where)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for k in range(count):
        if bulk and k % 3 == 2:
            res = store.bulk_store([StoreInput(content(name, k, j)) for j in range(bulk)])
            out.write("bulk " + ",".join(i.id for i in res.items) + "\n")
        else:
            out.write(f"ack {store.store(content(name, k)).item.id}\n")
        out.flush()
    store.close()
    out.write("done\n")
    out.flush()


if __name__ == "__main__":
    main()
