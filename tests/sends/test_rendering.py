"""MessageTemplate fails closed: a recipient's message renders completely or not at all."""

from __future__ import annotations

import pytest

from scheduler_app.sends.rendering import Message, MessageTemplate, RenderError
from tests.helpers import UnreadableError

EMPTY_FIRST_NAME = (
    "Variable 'first_name' is empty for this recipient (in the text body); "
    'add a |default:"..." if that is expected.'
)


def render(text: str, context: dict, *, subject: str = "News", html: str = "") -> Message:
    return MessageTemplate.compile(subject, text, html).render("ann@example.com", context)


def render_error(text: str, context: dict, *, subject: str = "News", html: str = "") -> str:
    with pytest.raises(RenderError) as caught:
        render(text, context, subject=subject, html=html)
    return caught.value.message


def test_renders_subject_text_and_html_for_the_recipient():
    message = render(
        "Hi {{ first_name }}",
        {"first_name": "Ann"},
        subject="  Hello {{ first_name }}  ",
        html="<p>Hi {{ first_name }}</p>",
    )
    assert message == Message(
        to="ann@example.com", subject="Hello Ann", text="Hi Ann", html="<p>Hi Ann</p>"
    )


def test_html_body_is_autoescaped_and_text_and_subject_are_not():
    message = render(
        "Hi {{ first_name }}",
        {"first_name": "<b>Tom & Jerry</b>"},
        subject="For {{ first_name }}",
        html="<p>Hi {{ first_name }}</p>",
    )
    assert message.html == "<p>Hi &lt;b&gt;Tom &amp; Jerry&lt;/b&gt;</p>"
    assert message.text == "Hi <b>Tom & Jerry</b>"
    assert message.subject == "For <b>Tom & Jerry</b>"


def test_an_empty_variable_fails_instead_of_an_empty_greeting():
    assert render_error("Hi {{ first_name }}", {"first_name": ""}) == EMPTY_FIRST_NAME
    assert render_error("Hi {{ first_name }}", {"first_name": "   "}) == EMPTY_FIRST_NAME
    assert render_error("Hi {{ first_name }}", {"first_name": None}) == EMPTY_FIRST_NAME


def test_an_empty_variable_through_a_filter_fails_too():
    assert render_error("Hi {{ first_name|upper }}", {"first_name": ""}) == (
        "Variable 'first_name|upper' is empty for this recipient (in the text body); "
        'add a |default:"..." if that is expected.'
    )


def test_an_explicit_default_renders_for_an_empty_variable():
    assert render("Hi {{ first_name|default:'there' }}", {"first_name": ""}).text == "Hi there"
    assert render("Hi {{ first_name|default:'there' }}", {"first_name": "Ann"}).text == "Hi Ann"
    assert render("Hi {{ first_name|default_if_none:'there' }}", {"first_name": None}).text == (
        "Hi there"
    )


def test_a_missing_variable_fails_with_or_without_a_default():
    message = "Variable 'last_name' is missing from the recipient's data."
    assert render_error("Hi {{ last_name }}", {"first_name": "Ann"}) == message
    assert render_error("Hi {{ last_name|default:'you' }}", {"first_name": "Ann"}) == message


def test_a_missing_variable_inside_a_block_fails_when_the_block_renders():
    text = "{% if plan == 'pro' %}Your code: {{ discount }}. {% endif %}Hi {{ first_name }}"
    assert render(text, {"first_name": "Ann", "plan": "free"}).text == "Hi Ann"
    assert render_error(text, {"first_name": "Ann", "plan": "pro"}) == (
        "Variable 'discount' is missing from the recipient's data."
    )


def test_a_missing_attribute_fails():
    assert render_error("{% for item in items %}{{ item.name }}{% endfor %}", {"items": [1]}) == (
        "Variable 'item.name' is missing from the recipient's data."
    )


@pytest.mark.parametrize(
    ("value", "syntax"),
    [("{{ oops }}", "{{"), ("{% now %}", "{%")],
)
def test_template_syntax_left_in_the_output_fails(value, syntax):
    assert render_error("Hi {{ first_name }}", {"first_name": value}) == (
        "The text body still contains template syntax %r." % syntax
    )


def test_closing_braces_alone_are_text_not_leftover_syntax():
    """Minified CSS in an HTML template ends rules with "}}" and widths with "%}": it failed
    every recipient as leftover template syntax."""
    css = "<style>@media(max-width:600px){.c{width:100%}}</style><p>Hi {{ first_name }}</p>"
    message = MessageTemplate.compile("News", "Hi {{ first_name }}", css).render(
        "ann@example.com", {"first_name": "Ann"}
    )
    assert message.html == ("<style>@media(max-width:600px){.c{width:100%}}</style><p>Hi Ann</p>")


def test_template_syntax_left_in_the_subject_fails():
    assert render_error("Hi", {"first_name": "{{ x }}"}, subject="For {{ first_name }}") == (
        "The subject still contains template syntax '{{'."
    )


def test_a_subject_with_a_line_break_fails():
    # Also what str.splitlines() splits on: the email package refused those at send time,
    # and the recipient was retried as if the failure were transient.
    for value in (
        "Ann\nBcc: everyone@example.com",
        "Ann\rX",
        "Ann\x0bBcc: x@example.com",
        "Ann\x0cX",
        "Ann\x1cX",
        "Ann\x1dX",
        "Ann\x1eX",
        "Ann\x85X",
        "Ann\u2028X",
        "Ann\u2029X",
    ):
        assert render_error("Hi", {"first_name": value}, subject="For {{ first_name }}") == (
            "The subject renders with a line break."
        )


def test_an_empty_body_fails():
    assert render_error("{{ first_name|default:'' }}", {"first_name": ""}) == (
        "The text body renders empty."
    )
    assert render_error("Hi", {"first_name": ""}, html="{{ first_name|default:'' }}") == (
        "The HTML body renders empty."
    )


def test_a_recipient_without_an_address_fails():
    template = MessageTemplate.compile("News", "Hi")
    with pytest.raises(RenderError) as caught:
        template.render("", {})
    assert caught.value.message == "The recipient has no address."


def test_a_filter_failing_on_the_data_inside_a_block_fails_that_recipient():
    text = "{% if plan %}Round: {{ points|divisibleby:10 }}{% endif %}"
    assert render_error(text, {"plan": "pro", "points": "n/a"}) == (
        "Rendering the text body failed: ValueError: invalid literal for int() with base 10: 'n/a'"
    )


def test_a_filter_failing_on_the_data_at_top_level_fails_that_recipient():
    assert render_error("Round: {{ points|divisibleby:10 }}", {"points": "n/a"}) == (
        "Rendering the text body failed: ValueError: invalid literal for int() with base 10: 'n/a'"
    )


def test_a_syntax_error_is_reported_at_compile_time():
    with pytest.raises(RenderError) as caught:
        MessageTemplate.compile("News", "{% if %}")
    assert caught.value.message == (
        "Template syntax error: Unexpected end of expression in if tag."
    )


def test_the_engine_has_no_project_context():
    """No context processors or project settings leak into a message."""
    assert render_error("{{ user }}", {}) == "Variable 'user' is missing from the recipient's data."


def test_a_value_raising_an_exception_whose_message_cannot_be_read_fails_the_recipient():
    """str() of the value raises an exception whose own str() raises: the recipient
    fails with a RenderError, not a RuntimeError from formatting the first one."""

    class Unrenderable:
        def __str__(self):
            raise UnreadableError

    assert render_error("Hi {{ thing }}", {"thing": Unrenderable()}) == (
        "Rendering the text body failed: UnreadableError: "
        "<the message could not be read: RuntimeError>"
    )
