import pytest

from tests.reconciler.support import QUEUES


@pytest.fixture(autouse=True)
def two_queues(queue_config):
    """A priority queue and a strict FIFO queue."""
    queue_config(QUEUES=QUEUES)
