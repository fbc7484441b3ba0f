"""Strict rendering: a message renders completely or that recipient fails.

Templates use Django's template language in an engine of their own (no
project context processors, autoescape only for HTML). Fail closed:
  - a variable missing from the recipient's context fails the render,
    with or without filters (give every row the key, empty if need be);
  - a variable rendered unconditionally (outside {% if %} / {% for %}, also
    inside blocks that always render: {% autoescape %}, {% filter %},
    {% with %} ...) that is empty fails too ("Hi ," is a bug, not a
    greeting), unless the template says what to do with an empty value
    with ``default`` or ``default_if_none``: ``{{ first_name|default:"there" }}``;
  - output that still contains template syntax (``{{`` or ``{%``) fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from django.template import Context, Engine, Template, TemplateSyntaxError
from django.template.base import Node, VariableNode
from django.template.defaulttags import ForNode, IfChangedNode, IfNode, WithNode

from scheduler_app.exceptions import SchedulerError


class RenderError(SchedulerError):
    """The message could not be rendered for this recipient."""

    code = "render_error"


class _FailOnMissing(str):
    """string_if_invalid that raises: Django formats it with the variable's name."""

    def __contains__(self, item: object) -> bool:
        return item == "%s"

    def __mod__(self, variable: object) -> str:
        raise RenderError("Variable %r is missing from the recipient's data." % str(variable))


# Non-empty, or Django would treat it as "not set" and render "".
_MISSING = _FailOnMissing("<missing>")
_ENGINE = Engine(string_if_invalid=_MISSING, autoescape=False)
_HTML_ENGINE = Engine(string_if_invalid=_MISSING, autoescape=True)
EMPTY_OK_FILTERS = {"default", "default_if_none"}
LEFTOVER_SYNTAX = ("{{", "{%", "}}", "%}")
#: Tags that decide whether their content renders: an empty variable inside is theirs.
CONDITIONAL_NODES = (IfNode, ForNode, IfChangedNode)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Message:
    """A rendered message for one recipient."""

    to: str
    subject: str
    text: str
    html: str = ""
    #: Extra headers, e.g. List-Unsubscribe on batch messages.
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class MessageTemplate:
    """The three templates of a batch, compiled once and rendered per recipient."""

    subject: Template
    text: Template
    html: Template | None

    @classmethod
    def compile(cls, subject: str, text: str, html: str = "") -> MessageTemplate:
        """Compile the templates; raise RenderError on a syntax error."""
        try:
            return cls(
                subject=_ENGINE.from_string(subject),
                text=_ENGINE.from_string(text),
                html=_HTML_ENGINE.from_string(html) if html else None,
            )
        except TemplateSyntaxError as exc:
            raise RenderError("Template syntax error: %s" % exc) from exc

    def render(self, to: str, context: Mapping[str, Any]) -> Message:
        """Render for one recipient; raise RenderError if anything is missing or empty."""
        if not to:
            raise RenderError("The recipient has no address.")
        subject = _render(self.subject, context, "subject")
        if "\n" in subject or "\r" in subject:
            raise RenderError("The subject renders with a line break.")
        return Message(
            to=to,
            subject=subject.strip(),
            text=_render(self.text, context, "text body"),
            html=_render(self.html, context, "HTML body") if self.html else "",
        )


def _render(template: Template, context: Mapping[str, Any], part: str) -> str:
    ctx = Context(dict(context), autoescape=template.engine.autoescape)
    try:
        with ctx.bind_template(template):
            _check_unconditional(template.nodelist, ctx, part)
        output = template.render(ctx)
    except RenderError:
        raise
    except Exception as exc:  # a filter or tag failed on this recipient's data
        raise RenderError(
            "Rendering the %s failed: %s: %s" % (part, type(exc).__name__, exc)
        ) from exc
    for syntax in LEFTOVER_SYNTAX:
        if syntax in output:
            raise RenderError("The %s still contains template syntax %r." % (part, syntax))
    if not output.strip():
        raise RenderError("The %s renders empty." % part)
    return output


def _check_unconditional(nodelist: Iterable[Node], ctx: Context, part: str) -> None:
    """Fail on an empty variable that always renders, at top level or in a block that does."""
    for node in nodelist:
        if isinstance(node, VariableNode):
            _check_variable(node, ctx, part)
        elif isinstance(node, WithNode):
            values = {name: value.resolve(ctx) for name, value in node.extra_context.items()}
            with ctx.push(**values):
                _check_unconditional(node.nodelist, ctx, part)
        elif not isinstance(node, CONDITIONAL_NODES):
            for name in node.child_nodelists:
                _check_unconditional(getattr(node, name, None) or (), ctx, part)


def _check_variable(node: VariableNode, ctx: Context, part: str) -> None:
    filters = {func.__name__ for func, _ in node.filter_expression.filters}
    if filters & EMPTY_OK_FILTERS:
        return
    # Resolving runs the filters: one failing on this recipient's data is
    # a render error like any other, never an exception out of the lane.
    value = node.filter_expression.resolve(ctx)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise RenderError(
            "Variable %r is empty for this recipient (in the %s); add a "
            '|default:"..." if that is expected.' % (node.filter_expression.token, part)
        )
