"""Metrics and traces: one-line hooks called by the engine and the runtime."""
