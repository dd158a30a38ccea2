"""Admin action requests that select more jobs than Django reads form fields.

Each job ticked on the job list is one form field, and Django refuses a body of
more than ``DATA_UPLOAD_MAX_NUMBER_FIELDS`` (1,000) fields with a 400 page before
any view runs (the CSRF check reads the form first): an action on its
documented limit of 1,000 jobs (``JobAdmin.action_limit``) could never arrive.
For a POST to the job list, this middleware reads the form with no cap on the
number of fields, so an action on up to ``action_limit`` jobs runs and one on
more says, in the admin, that it changed none. The body stays capped by
``DATA_UPLOAD_MAX_MEMORY_SIZE``. It must come before CsrfViewMiddleware.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from django.http import HttpRequest, QueryDict
from django.urls import reverse
from django.utils.datastructures import MultiValueDict

JOB_LIST = "admin:queue_app_job_changelist"


class JobSelectionMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        if (
            request.method == "POST"
            and request.content_type == "application/x-www-form-urlencoded"
            and request.path == reverse(JOB_LIST)
        ):
            request.POST = form_without_field_limit(request)
            request._files = MultiValueDict()  # a urlencoded body has no files (Django sets the same)
        return self.get_response(request)


def form_without_field_limit(request: HttpRequest) -> QueryDict:
    """``request.POST`` as Django reads a urlencoded body, but whatever its number of fields."""
    form = QueryDict(mutable=True, encoding=request.encoding)
    try:
        body = request.body.decode(form.encoding)
    except UnicodeDecodeError:
        body = request.body.decode("iso-8859-1")  # as QueryDict does
    for key, value in parse_qsl(body, keep_blank_values=True, encoding=form.encoding):
        form.appendlist(key, value)
    form._mutable = False  # as request.POST always is
    return form
