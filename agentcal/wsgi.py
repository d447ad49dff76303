"""The web process's WSGI application: two Django handlers over the same URLs, told apart by path.

Agents (`/v1/`) and providers' callbacks (`/hooks/`) never carry a session or a CSRF token and never see
a page, so their requests skip the middleware that exists for people (static files, sessions, CSRF,
sign-in, flash messages, htmx, the pages' security policy). Everything else goes through the full stack.
docs/performance-notes.md has what the lean stack saves.
"""

import os
from collections.abc import Iterable
from wsgiref.types import StartResponse, WSGIEnvironment

from django.core.handlers.wsgi import WSGIHandler
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentcal.settings")
pages = get_wsgi_application()  # also sets Django up

from django.conf import settings  # noqa: E402  (after setup, like every Django import here)


class MachineRequestsHandler(WSGIHandler):
    """A handler whose middleware is settings.MACHINE_MIDDLEWARE."""

    def load_middleware(self, is_async: bool = False) -> None:
        everything = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.MACHINE_MIDDLEWARE  # read once, here, at start-up
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = everything


machines = MachineRequestsHandler()
MACHINE_PATHS = ("/v1/", "/hooks/")


def application(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    handler = machines if environ.get("PATH_INFO", "").startswith(MACHINE_PATHS) else pages
    return handler(environ, start_response)
