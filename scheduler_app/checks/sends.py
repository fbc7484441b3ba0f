"""Bulk sends: Message-IDs' domain (E030), the lanes' markers and breaker (E085, E086),
providers, the suppression check, the send queue, the checklist, the dry-run and where
its reports go (E110-E115)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import Error, Tags, register
from django.core.files.storage import storages
from django.utils.module_loading import import_string

from scheduler_app.conf import app_settings, is_integer, is_number, message_id_domain
from scheduler_app.exceptions import UnknownQueue
from scheduler_app.registry import check_queue
from scheduler_app.sends.checklist import ITEM_NAMES
from scheduler_app.sends.dry_run import REPORT_DIR, report_storage

DOMAIN_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", re.IGNORECASE)


@register(Tags.compatibility)
def check_message_id_domain(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Message-IDs get a plausible domain: MESSAGE_ID_DOMAIN, or DEFAULT_FROM_EMAIL's (E030)."""
    configured = app_settings.MESSAGE_ID_DOMAIN
    if configured is not None:
        if isinstance(configured, str) and _plausible_domain(configured):
            return []
        return [
            Error(
                "SCHEDULER_APP['MESSAGE_ID_DOMAIN'] must be a domain name such as "
                "'mail.example.com', not %r." % (configured,),
                id="scheduler_app.E030",
            )
        ]
    if _plausible_domain(message_id_domain()):
        return []
    return [
        Error(
            "Message-IDs take their domain from DEFAULT_FROM_EMAIL (%r), which has none."
            % settings.DEFAULT_FROM_EMAIL,
            hint="Set SCHEDULER_APP['MESSAGE_ID_DOMAIN'] (e.g. 'mail.example.com').",
            id="scheduler_app.E030",
        )
    ]


def _plausible_domain(domain: str) -> bool:
    """Return True for a host name of dot-separated labels (IDNA allowed), at most 253 long."""
    try:
        ascii_domain = domain.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    labels = ascii_domain.split(".")
    return len(ascii_domain) <= 253 and all(DOMAIN_LABEL.fullmatch(label) for label in labels)


@register(Tags.compatibility)
def check_lane_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """How a lane commits its markers (E085) and when its breaker trips (E086)."""
    errors = []
    if not isinstance(app_settings.SEND_MARKER_SYNCHRONOUS_COMMIT, bool):
        errors.append(
            Error(
                "SCHEDULER_APP['SEND_MARKER_SYNCHRONOUS_COMMIT'] must be True or False.",
                id="scheduler_app.E085",
            )
        )
    threshold = app_settings.BREAKER_THRESHOLD
    if not is_number(threshold) or not 0 < threshold <= 1:
        errors.append(
            Error(
                "SCHEDULER_APP['BREAKER_THRESHOLD'] must be a number above 0 and at most 1 "
                "(the share of failed attempts that pauses a batch).",
                id="scheduler_app.E086",
            )
        )
    return errors


@register(Tags.compatibility)
def check_send_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Bulk sends: providers, the suppression check, the send queue, the checklist's relaxed
    items and the dry-run's short-body limit (E110-E114); each failed only at send time."""
    errors = []
    providers = app_settings.PROVIDERS
    if not isinstance(providers, dict) or not all(isinstance(name, str) for name in providers):
        errors.append(
            Error(
                "SCHEDULER_APP['PROVIDERS'] must be a dict of provider name -> dotted path, "
                "not %r." % (providers,),
                id="scheduler_app.E110",
            )
        )
    else:
        errors.extend(
            Error("SCHEDULER_APP['PROVIDERS'][%r] %s." % (name, problem), id="scheduler_app.E110")
            for name, path in providers.items()
            if (problem := _import_problem(path))
        )
    suppression = app_settings.SUPPRESSION_CHECK
    if suppression is not None and (problem := _import_problem(suppression)):
        errors.append(
            Error("SCHEDULER_APP['SUPPRESSION_CHECK'] %s." % problem, id="scheduler_app.E111")
        )
    if isinstance(app_settings.QUEUES, list | tuple):  # else E002 reports QUEUES
        try:
            check_queue(app_settings.SEND_QUEUE)
        except UnknownQueue as exc:
            errors.append(
                Error("SCHEDULER_APP['SEND_QUEUE']: %s" % exc.message, id="scheduler_app.E112")
            )
    relax = app_settings.CHECKLIST_RELAX
    if not isinstance(relax, list | tuple):
        problem = "must be a list of checklist item names, not %r" % (relax,)
    else:
        unknown = [name for name in relax if name not in ITEM_NAMES]
        problem = "names unknown checklist item %r" % (unknown[0],) if unknown else ""
    if problem:
        errors.append(
            Error(
                "SCHEDULER_APP['CHECKLIST_RELAX'] %s; the items are: %s."
                % (problem, ", ".join(sorted(ITEM_NAMES))),
                id="scheduler_app.E113",
            )
        )
    if not is_integer(app_settings.DRY_RUN_SHORT_BODY, 0, math.inf):  # E007: the most
        errors.append(
            Error(
                "SCHEDULER_APP['DRY_RUN_SHORT_BODY'] must be an integer >= 0 (0 flags no body).",
                id="scheduler_app.E114",
            )
        )
    return errors


@register(Tags.compatibility)
def check_dry_run_storage(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E115: DRY_RUN_STORAGE names a storage, and not one that writes into this package."""
    alias = app_settings.DRY_RUN_STORAGE
    if not isinstance(alias, str) or alias not in storages.backends:
        return [
            Error(
                "SCHEDULER_APP['DRY_RUN_STORAGE'] must name a storage in STORAGES (%s), not %r."
                % (", ".join(storages.backends), alias),
                id="scheduler_app.E115",
            )
        ]
    try:
        folder = Path(report_storage().path(REPORT_DIR)).resolve()
    except NotImplementedError:  # not on a file system: it cannot be the package's folder
        return []
    package = Path(apps.get_app_config("scheduler_app").path).resolve()
    if folder == package or package in folder.parents:
        return [
            Error(
                "SCHEDULER_APP['DRY_RUN_STORAGE'] (%r) would write dry-run reports into the "
                "installed package (%s); set MEDIA_ROOT, or name another storage."
                % (alias, folder),
                id="scheduler_app.E115",
            )
        ]
    return []


def _import_problem(path: Any) -> str:
    """Return what is wrong with ``path`` as the dotted path of a class or function, or ''."""
    if not isinstance(path, str) or not path:
        return "must be a dotted path, not %r" % (path,)
    try:
        imported = import_string(path)
    except Exception as exc:  # ImportError, or whatever the module raises
        return "cannot be imported: %s" % exc
    return "" if callable(imported) else "(%r) is not a class or callable" % path
