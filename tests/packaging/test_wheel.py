"""What the app's wheel carries: the app, and none of the test hooks kept beside it."""

from __future__ import annotations

import re
import zipfile

from tests.packaging.host import build_wheel


def test_the_wheel_carries_the_app_and_no_fault_points(tmp_path):
    (wheel,) = build_wheel(tmp_path).glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    # The hook's one reader ships; the handler it may name (tests/fault_points.py) does not.
    assert "queue_app/conf.py" in names
    assert [name for name in names if not name.startswith(("queue_app/", "jobsite_queue-"))] == []
    assert [name for name in names if re.search(r"fault|failpoint", name)] == []
