"""A probe app for tests and the chaos run: handlers that record what they did."""
