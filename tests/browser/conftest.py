"""Headless Chromium (Debian's ``chromium``) driven by Playwright against the live_server.

* Skips the folder only when /usr/bin/chromium is missing (CI installs it).
* A failed test leaves a screenshot and the page's HTML in $CI_ARTIFACTS
  (default /tmp/ci-artifacts).
* Playwright's sync API keeps an asyncio loop running in the main thread,
  which makes Django refuse ORM calls from it ("async context"). The loop
  lives only while this folder's tests run: the browser is package-scoped,
  and DJANGO_ALLOW_ASYNC_UNSAFE is set for exactly that time.
"""

from __future__ import annotations

import mimetypes
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
USERNAME, PASSWORD = "operator", "correct horse battery staple"
TIMEOUT_MS = 15_000


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives headless Chromium (tests/browser)")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """Keep each phase's report on the item, so fixtures can see whether the test failed."""
    report = yield
    setattr(item, "rep_" + report.when, report)
    return report


def artifacts_dir() -> Path:
    path = Path(os.environ.get("CI_ARTIFACTS") or "/tmp/ci-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.skip("%s is missing (apt-get install chromium)" % CHROMIUM)
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright = sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        playwright.stop()
        if previous is None:
            del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def serve_static(route: Any) -> None:
    """Serve /static/<path> from the apps' static folders.

    tests/settings.py has no django.contrib.staticfiles, so live_server serves
    no static files; the admin's CSS and scheduler_app/admin.js come from here.
    """
    relative = route.request.url.split("/static/", 1)[1].split("?", 1)[0]
    for config in apps.get_app_configs():
        candidate = Path(config.path) / "static" / relative
        if candidate.is_file():
            content_type = mimetypes.guess_type(candidate.name)[0] or "application/octet-stream"
            route.fulfill(status=200, body=candidate.read_bytes(), content_type=content_type)
            return
    route.fulfill(status=404, body="not found")


@pytest.fixture
def page(browser: Any, live_server: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser context and page on the live server; screenshot if the test failed."""
    context = browser.new_context(base_url=live_server.url, accept_downloads=True)
    context.set_default_timeout(TIMEOUT_MS)
    if "django.contrib.staticfiles" not in django_settings.INSTALLED_APPS:
        context.route(re.compile(r".*/static/.*"), serve_static)
    tab = context.new_page()
    try:
        yield tab
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)
            folder = artifacts_dir()
            try:
                tab.screenshot(path=str(folder / ("%s.png" % name)), full_page=True)
                (folder / ("%s.html" % name)).write_text(tab.content())
            except Exception as exc:  # never hide the test's own failure
                print("could not save the failure screenshot: %s" % exc)
        context.close()


@pytest.fixture
def operator(transactional_db: None, settings: Any) -> Any:
    """A superuser who logs in with a password (fast hasher: the live server checks it)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return get_user_model().objects.create_superuser(USERNAME, "op@example.com", PASSWORD)


def log_in(page: Any) -> None:
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", USERNAME)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit], button[type=submit]")
    page.wait_for_url("**/admin/")


@pytest.fixture
def admin_page(page: Any, operator: Any) -> Any:
    """The page, logged in as the operator."""
    log_in(page)
    return page


@pytest.fixture(autouse=True)
def _media_in_tmp(settings: Any, tmp_path: Path) -> None:
    """Dry-run reports go through default_storage: keep them out of the repository."""
    settings.MEDIA_ROOT = str(tmp_path / "media")
