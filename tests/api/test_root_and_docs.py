"""The API's root lists its endpoints; its docs page loads nothing from the internet, and a
system check warns when the app that serves the page's files is missing."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.test import Client, override_settings

from scheduler_app.api.urls import router
from scheduler_app.api.views import DocsView
from scheduler_app.checks.urls import check_api_docs_assets

pytestmark = pytest.mark.django_db

LINKS = {
    "jobs": "jobs/",
    "batches": "batches/",
    "messages": "messages/",
    "suppressions": "suppressions/",
    "schema": "schema/",
    "docs": "docs/",
}


def test_api_root_lists_every_endpoint_and_the_schema_and_docs():
    response = Client().get("/api/")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {key: "http://testserver/api/" + path for key, path in LINKS.items()}
    for key in ("schema", "docs"):  # public, like the root
        assert Client().get(response.json()[key]).status_code == 200
    assert {prefix + "/" for prefix, *_ in router.registry} <= set(LINKS.values())


@override_settings(ROOT_URLCONF="tests.api.urls_elsewhere")
def test_api_root_follows_the_mount_point():
    response = Client().get("/v2/scheduling/")

    assert response.json()["jobs"] == "http://testserver/v2/scheduling/jobs/"
    assert response.json()["docs"] == "http://testserver/v2/scheduling/docs/"


def test_api_root_is_read_only():
    response = Client().post("/api/")

    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_docs_page_loads_swagger_ui_from_local_static_files_only():
    page = Client().get("/api/docs/").content.decode()

    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert assets == [
        "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css",
        "../schema/?format=json",  # the <noscript> link
        "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js",
    ]
    assert not re.search(r"https?://", page), "the page names an internet address"
    for asset in (a for a in assets if a.startswith("/static/")):
        assert finders.find(asset.removeprefix("/static/")), asset


def without_sidecar():
    return [app for app in settings.INSTALLED_APPS if app != "drf_spectacular_sidecar"]


def test_check_warns_when_the_docs_page_is_routed_without_its_assets_app():
    with override_settings(INSTALLED_APPS=without_sidecar()):
        warnings = check_api_docs_assets()

    assert [(w.id, w.level) for w in warnings] == [("scheduler_app.W090", 30)]
    assert "'drf_spectacular_sidecar'" in warnings[0].msg
    assert warnings[0].hint == (
        "Add 'drf_spectacular_sidecar' to INSTALLED_APPS (it is installed with "
        "django-scheduler-app)."
    )


def test_check_is_quiet_with_the_assets_app_or_without_the_docs_page():
    assert check_api_docs_assets() == []
    with override_settings(
        INSTALLED_APPS=without_sidecar(), ROOT_URLCONF="tests.api.urls_without_docs"
    ):
        assert check_api_docs_assets() == []


def test_check_finds_a_subclass_of_the_docs_view_too():
    class BrandedDocs(DocsView):
        pass

    from django.urls import path

    urls = type("urls", (), {"urlpatterns": [path("docs/", BrandedDocs.as_view())]})
    with override_settings(INSTALLED_APPS=without_sidecar(), ROOT_URLCONF=urls):
        assert [w.id for w in check_api_docs_assets()] == ["scheduler_app.W090"]
