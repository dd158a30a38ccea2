"""The long-running processes: relay, worker (and its supervisor), reconciler."""
