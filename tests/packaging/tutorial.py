"""The steps a docs page marks for the host-project test, in the page's order.

A step is a fenced code block right below an HTML comment (invisible on the rendered page):

    <!-- host-project: run -->            each line is a command to run (``python manage.py ...``)
    <!-- host-project: start -->          one long-running command to start in the background
    <!-- host-project: append PATH -->    the block goes at the end of the project's file PATH
    <!-- host-project: create PATH -->    the block is the project's new file PATH
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

STEP = re.compile(
    r"^<!-- host-project: (run|start|append|create)(?: (\S+))? -->\n```[\w-]*\n(.*?)^```", re.S | re.M
)
MARK = re.compile(r"^<!-- host-project:", re.M)


@dataclass(frozen=True)
class Step:
    kind: str
    path: str | None
    text: str

    def commands(self) -> list[str]:
        """The block's command lines, continuation lines joined, comments and blanks left out."""
        lines = (line.strip() for line in self.text.replace("\\\n", " ").splitlines())
        return [line for line in lines if line and not line.startswith("#")]


def steps(page: Path) -> list[Step]:
    text = page.read_text()
    found = [Step(kind, path or None, body) for kind, path, body in STEP.findall(text)]
    # A mark that the pattern missed (a typo, a block not right below it) is a broken page.
    assert len(found) == len(MARK.findall(text)), f"{page}: a host-project mark is not above a code block"
    for step in found:
        assert (step.path is None) == (step.kind in ("run", "start")), f"{page}: {step.kind} {step.path!r}"
    return found
