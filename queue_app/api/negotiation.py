"""Content negotiation that falls back to JSON: the API never answers 406 to a browser."""

from __future__ import annotations

from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation


class JSONWhenNothingElseFits(DefaultContentNegotiation):
    """A client whose Accept names only formats the API does not render (e.g. ``text/html`` when the
    browsable API is off) gets JSON, not a 406."""

    def select_renderer(self, request, renderers, format_suffix=None):
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except NotAcceptable:
            return renderers[0], renderers[0].media_type
