"""The API's own pages: the root's links to every endpoint, the OpenAPI schema, its docs
page, and the 404 in the API's format below the router's prefixes.

The endpoints themselves are viewsets, one module each: jobs, batches, messages,
suppressions (their shared policy is viewsets.SchedulerViewSet).
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.templatetags.static import static
from django.urls import reverse
from django.utils.html import escape
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler_app.api.errors import error_body, exception_handler
from scheduler_app.api.negotiation import JSONOnlyNegotiation


@csrf_exempt  # it changes nothing; a session POST gets the JSON 404, not a CSRF page
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """Answer 404 in the API's error format (paths below a router prefix that match no route)."""
    return JsonResponse(error_body("not_found", "Not found."), status=404)


class ApiRootView(APIView):
    """The API's front door: a link to each endpoint, the schema and its docs page.

    Public, like the schema: it lists routes, not anyone's data.
    """

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JSONOnlyNegotiation
    schema = None  # not part of the OpenAPI document: it describes nothing a client calls
    #: Each key and its URL name (below the API's namespace).
    links = {
        "jobs": "job-list",
        "batches": "batch-list",
        "messages": "message-list",
        "suppressions": "suppression-list",
        "schema": "schema",
        "docs": "docs",
    }

    def get_exception_handler(self) -> Any:
        return exception_handler

    def get(self, request: Request) -> Response:
        match = request.resolver_match
        namespace = match.namespace + ":" if match and match.namespace else ""
        return Response(
            {
                key: request.build_absolute_uri(reverse(namespace + name))
                for key, name in self.links.items()
            }
        )


class SchemaView(SpectacularAPIView):
    """The OpenAPI 3 schema of the routes it is given, at the prefix it is mounted under.

    Public (it describes the API, not anyone's data). Give it the router's
    ``patterns``; it serves YAML, or JSON with ``?format=json``.
    """

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    #: The path of this view below the API's prefix (see urls.py).
    route = "schema/"

    def get_exception_handler(self) -> Any:
        return exception_handler

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        prefix = request.path_info.removesuffix(self.route).rstrip("/")
        self.custom_settings = {
            "TITLE": "scheduler_app API",
            "DESCRIPTION": "Jobs: list, retrieve, cancel, and undo inside an undo window. "
            "Send batches: list, progress, pause, resume, cancel and undo. Messages: "
            "schedule one email with an undo window. "
            "Authenticate with `Authorization: Token <key>` or a session. Errors have one "
            'format: `{"error": {"code": ..., "message": ..., "fields": {...}}}`.',
            "VERSION": "1",
            # The routes are given without the project's prefix; put it back.
            "SCHEMA_PATH_PREFIX": "/",
            "SCHEMA_PATH_PREFIX_INSERT": prefix,
            "POSTPROCESSING_HOOKS": [
                "drf_spectacular.hooks.postprocess_schema_enums",
                "scheduler_app.api.schema_hooks.blank_text_any_of",
            ],
            **(self.custom_settings or {}),
        }
        return super().get(request, *args, **kwargs)


DOCS_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>scheduler_app API</title>
<link rel="stylesheet" href="%(css)s">
</head>
<body>
<div id="swagger-ui"><noscript>The schema is at <a href="%(url)s">%(url)s</a>.</noscript></div>
<script src="%(js)s"></script>
<script>
const csrfToken = (document.cookie.match(/(?:^|; )csrftoken=([^;]*)/) || [])[1];
SwaggerUIBundle({
  url: %(json_url)s,
  dom_id: "#swagger-ui",
  persistAuthorization: true,
  // Session users: Django's CSRF check wants the token on unsafe requests.
  requestInterceptor: (request) => {
    if (csrfToken) { request.headers["X-CSRFToken"] = decodeURIComponent(csrfToken); }
    return request;
  },
});
</script>
</body>
</html>
"""


class DocsView(View):
    """A Swagger UI page for the schema served next to it.

    Its assets are static files of ``drf_spectacular_sidecar`` (add it to
    INSTALLED_APPS; check scheduler_app.W090 says so), so the page loads
    nothing from the internet.
    """

    http_method_names = ["get", "head"]
    #: The schema's path relative to this page (see urls.py).
    schema_url = "../schema/?format=json"
    #: Swagger UI's files among the static files of drf_spectacular_sidecar.
    assets = "drf_spectacular_sidecar/swagger-ui-dist/"

    def get(self, request: HttpRequest) -> HttpResponse:
        json_url = json.dumps(self.schema_url).replace("<", "\\u003c")
        return HttpResponse(
            DOCS_PAGE
            % {
                "url": escape(self.schema_url),
                "json_url": json_url,
                "css": escape(static(self.assets + "swagger-ui.css")),
                "js": escape(static(self.assets + "swagger-ui-bundle.js")),
            }
        )
