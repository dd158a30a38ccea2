"""The REST API: every write goes through queue_app.services."""
