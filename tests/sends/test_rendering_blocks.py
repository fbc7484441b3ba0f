"""Strict rendering looks inside block tags that always render their content.

``{% autoescape %}``, ``{% filter %}``, ``{% spaceless %}``, ``{% with %}`` and
``{% block %}`` render what they wrap unconditionally, so an empty variable
in them is an empty greeting like any other; ``{% if %}`` and ``{% for %}``
decide for themselves and are left alone.
"""

from __future__ import annotations

import pytest

from scheduler_app.sends.rendering import MessageTemplate, RenderError


def render_text(text: str, context: dict) -> str:
    return MessageTemplate.compile("News", text).render("ann@example.com", context).text


def empty(variable: str) -> str:
    return (
        "Variable %r is empty for this recipient (in the text body); "
        'add a |default:"..." if that is expected.' % variable
    )


@pytest.mark.parametrize(
    ("text", "variable"),
    [
        ("{% autoescape off %}Hi {{ first_name }},{% endautoescape %}", "first_name"),
        ("{% filter upper %}Hi {{ first_name }},{% endfilter %}", "first_name"),
        ("{% spaceless %}<p>Hi {{ first_name }},</p>{% endspaceless %}", "first_name"),
        ("{% block greeting %}Hi {{ first_name }},{% endblock %}", "first_name"),
        ("{% with name=first_name %}Hi {{ name }},{% endwith %}", "name"),
        (
            "{% autoescape off %}{% filter lower %}Hi {{ first_name }},{% endfilter %}"
            "{% endautoescape %}",
            "first_name",
        ),
    ],
)
def test_an_empty_variable_inside_an_unconditional_block_fails(text, variable):
    with pytest.raises(RenderError) as caught:
        render_text(text, {"first_name": ""})

    assert caught.value.message == empty(variable)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{% autoescape off %}Hi {{ first_name }},{% endautoescape %}", "Hi Ann,"),
        ("{% filter upper %}Hi {{ first_name }},{% endfilter %}", "HI ANN,"),
        ("{% with name=first_name %}Hi {{ name }},{% endwith %}", "Hi Ann,"),
        (
            "{% with name=first_name %}{% filter upper %}{{ name }}{% endfilter %}{% endwith %}",
            "ANN",
        ),
    ],
)
def test_a_filled_variable_inside_a_block_renders(text, expected):
    assert render_text(text, {"first_name": "Ann"}) == expected


def test_a_default_inside_a_block_says_what_empty_means():
    text = "{% autoescape off %}Hi {{ first_name|default:'there' }},{% endautoescape %}"

    assert render_text(text, {"first_name": ""}) == "Hi there,"


def test_conditional_blocks_are_left_to_their_condition():
    text = (
        "{% if first_name %}Hi {{ first_name }},{% else %}Hello,{% endif %}"
        "{% for item in items %} {{ item }}{% empty %} nothing{% endfor %}"
    )

    assert render_text(text, {"first_name": "", "items": []}) == "Hello, nothing"
