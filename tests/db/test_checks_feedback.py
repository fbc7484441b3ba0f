"""System checks of the mail feedback settings (scheduler_app.E100-E106)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler_app.checks.feedback import check_feedback_settings


def with_setting(**changes):
    return override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, **changes})


@pytest.mark.parametrize(
    "value",
    [
        "leave@example.com\r\nBcc: everyone@example.com",
        "leave@example.com\n",
        "leave@example.com\t",
        "leave@exa\x0bmple.com",
        '"le\x01ave"@example.com',
        "@",
        "leave@",
        "mailto:leave@example.com",
        "Leave <leave@example.com>",
        "leave@example.com?subject=x",
        "",
        5,
    ],
)
def test_an_unsubscribe_mailto_that_is_not_a_plain_address_is_e105(value):
    """CR/LF passed the check, then every message failed ("Header values can't contain
    newlines")."""
    with with_setting(UNSUBSCRIBE_MAILTO=value):
        errors = check_feedback_settings()

    assert [(e.id, e.msg) for e in errors] == [
        (
            "scheduler_app.E105",
            "SCHEDULER_APP['UNSUBSCRIBE_MAILTO'] must be a plain address such as "
            "'unsubscribe@example.com', not %r." % (value,),
        )
    ]


@pytest.mark.parametrize("value", [None, "unsubscribe@example.com", "list+leave@mail.example.org"])
def test_a_plain_unsubscribe_mailto_passes(value):
    with with_setting(UNSUBSCRIBE_MAILTO=value):
        assert check_feedback_settings() == []
