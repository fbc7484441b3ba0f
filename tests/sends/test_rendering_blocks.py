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


def empty(variable: str = "", *, tag: str = "") -> str:
    """The error for an empty variable, or for an empty {% firstof %} / {% cycle %}."""
    if tag:
        what, remedy = "{%% %s %%}" % tag, 'end it with a value in quotes, e.g. "there",'
    else:
        what, remedy = "Variable %r" % variable, 'add a |default:"..."'
    return "%s is empty for this recipient (in the text body); %s if that is expected." % (
        what,
        remedy,
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


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        ("Dear {% firstof first_name nickname %},", "firstof first_name nickname"),
        ("Dear {% firstof missing %},", "firstof missing"),
        ("{% filter upper %}Dear {% firstof first_name %},{% endfilter %}", "firstof first_name"),
        ("Dear {% cycle first_name nickname %},", "cycle first_name nickname"),
    ],
)
def test_a_firstof_or_cycle_that_always_renders_fails_when_it_renders_empty(text, tag):
    """{% firstof %} skips empty and missing values and writes nothing when all are:
    "Dear ," is an empty greeting like any other."""
    with pytest.raises(RenderError) as caught:
        render_text(text, {"first_name": "", "nickname": " "})

    assert caught.value.message == empty(tag=tag)


@pytest.mark.parametrize(
    ("text", "nickname", "expected"),
    [
        ("Dear {% firstof first_name nickname %},", "Nan", "Dear Nan,"),
        ('Dear {% firstof first_name "there" %},', "", "Dear there,"),
        ("Dear {% firstof first_name '' %}!", "", "Dear !"),
        ("Dear {% firstof first_name|default:'' %}!", "", "Dear !"),
        ("{% cycle 'odd' '' as row %}{% cycle row %}", "", "odd"),
        ("{% if nickname %}Dear {% firstof first_name %},{% endif %}Hello", "", "Hello"),
        ("{% firstof first_name as name %}Dear {{ name|default:'you' }},", "", "Dear you,"),
    ],
)
def test_a_firstof_with_a_value_or_under_a_condition_renders(text, nickname, expected):
    assert render_text(text, {"first_name": "", "nickname": nickname}) == expected


def test_a_variable_a_tag_sets_while_rendering_is_checked_when_it_renders():
    """The check runs as the template renders, so a variable set by an earlier tag
    ({% now ... as %}, {% firstof ... as %}) is there; an empty one still fails."""
    assert render_text("{% now 'Y' as year %}News of {{ year }}", {}).startswith("News of 2")
    with pytest.raises(RenderError) as caught:
        render_text("{% firstof first_name as name %}Dear {{ name }},", {"first_name": ""})

    assert caught.value.message == empty("name")
