"""One system, one repetition, in a process of its own.

    python runner.py <module> '<workload as JSON>'

prints the figures as JSON on the last line of stdout. ``<module>`` names an
adapter module (``ours``, ``peer_celery``, ...) whose ``ADAPTER`` is the class.
"""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import asdict

from common import Workload, measure


def main() -> None:
    module, workload_json = sys.argv[1], sys.argv[2]
    workload = Workload(**json.loads(workload_json))
    adapter = importlib.import_module(module).ADAPTER()
    try:
        figures = measure(adapter, workload)
    finally:
        adapter.close()
    print(json.dumps({"system": adapter.name, "workload": asdict(workload), "figures": figures}))


if __name__ == "__main__":
    main()
