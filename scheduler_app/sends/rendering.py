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
    so does an unconditional {% firstof %} or {% cycle %} that renders empty
    (``{% firstof first_name nickname "there" %}`` says what to write then);
  - output that still contains template syntax (``{{`` or ``{%``) fails.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from django.template import Context, Engine, Template, TemplateSyntaxError
from django.template.base import FilterExpression, Node, VariableNode, render_value_in_context
from django.template.defaulttags import CycleNode, FirstOfNode, ForNode, IfChangedNode, IfNode

from scheduler_app.exceptions import SchedulerError, describe


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
#: What an unrendered tag or variable opens with; a closing "}}" or "%}" alone is ordinary
#: text (minified CSS in an HTML body: ``@media(...){.c{width:100%}}``).
LEFTOVER_SYNTAX = ("{{", "{%")
#: What str.splitlines() splits on, as a regex class body: Python's email package splits a
#: header on each of these, so a subject holding one cannot be sent.
LINE_BREAKS = r"\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029"
_LINE_BREAK = re.compile("[%s]" % LINE_BREAKS)
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
                subject=_strict(_ENGINE.from_string(subject)),
                text=_strict(_ENGINE.from_string(text)),
                html=_strict(_HTML_ENGINE.from_string(html)) if html else None,
            )
        except TemplateSyntaxError as exc:
            raise RenderError("Template syntax error: %s" % exc) from exc

    def render(self, to: str, context: Mapping[str, Any]) -> Message:
        """Render for one recipient; raise RenderError if anything is missing or empty."""
        if not to:
            raise RenderError("The recipient has no address.")
        subject = _render(self.subject, context, "subject")
        if _LINE_BREAK.search(subject):
            raise RenderError("The subject renders with a line break.")
        return Message(
            to=to,
            subject=subject.strip(),
            text=_render(self.text, context, "text body"),
            html=_render(self.html, context, "HTML body") if self.html else "",
        )


def _render(template: Template, context: Mapping[str, Any], part: str) -> str:
    try:
        output = template.render(Context(dict(context), autoescape=template.engine.autoescape))
    except RenderError:
        raise
    except _Empty as exc:
        raise RenderError(
            "%s is empty for this recipient (in the %s); %s if that is expected."
            % (exc.what, part, exc.remedy)
        ) from None
    except Exception as exc:  # a filter or tag failed on this recipient's data
        raise RenderError("Rendering the %s failed: %s" % (part, describe(exc))) from exc
    for syntax in LEFTOVER_SYNTAX:
        if syntax in output:
            raise RenderError("The %s still contains template syntax %r." % (part, syntax))
    if not output.strip():
        raise RenderError("The %s renders empty." % part)
    return output


def _strict(template: Template) -> Template:
    """Return ``template`` with what always renders made strict (see _make_strict)."""
    _make_strict(template.nodelist)
    return template


def _make_strict(nodelist: list[Node]) -> None:
    """Make strict the variables, and the {% firstof %} and {% cycle %} tags, that always
    render: at top level, or in a block that always renders its content. Those in
    {% if %} / {% for %} are left to their condition."""
    for index, node in enumerate(nodelist):
        if isinstance(node, VariableNode):
            nodelist[index] = _StrictVariableNode(node)
        elif isinstance(node, FirstOfNode | CycleNode):
            if _may_write_nothing(node):
                nodelist[index] = _StrictTagNode(node)
        elif not isinstance(node, CONDITIONAL_NODES):
            for name in node.child_nodelists:
                _make_strict(getattr(node, name, None) or [])


def _may_write_nothing(node: FirstOfNode | CycleNode) -> bool:
    """Return whether the tag writes a value out (not ``as name`` / ``silent``, which only
    set one) without the template saying what empty means: a value in quotes, or a
    ``default`` filter, among its values."""
    if isinstance(node, FirstOfNode):
        writes, values = node.asvar is None, node.vars
    else:
        writes, values = not node.silent, node.cyclevars
    return writes and not any(
        isinstance(value.var, str)  # a literal: the parser resolved it already
        or _says_what_empty_means(value)
        for value in values
    )


def _says_what_empty_means(expression: FilterExpression) -> bool:
    """Return whether ``expression`` has a ``default`` or ``default_if_none`` filter."""
    return any(func.__name__ in EMPTY_OK_FILTERS for func, _ in expression.filters)


class _Empty(Exception):
    """Something that always renders rendered empty; _render() says in which part."""

    def __init__(self, what: str, remedy: str) -> None:
        super().__init__(what)
        self.what = what
        self.remedy = remedy


class _StrictVariableNode(VariableNode):
    """A variable that always renders: an empty value fails the render, unless the template
    says what empty means (``default``, ``default_if_none``).

    The check is made while rendering, so each value is resolved once. Resolving runs the
    filters: one failing on this recipient's data is a render error like any other.
    """

    def __init__(self, node: VariableNode) -> None:
        super().__init__(node.filter_expression)
        self.token = getattr(node, "token", None)
        self.origin = getattr(node, "origin", None)
        self.empty_ok = _says_what_empty_means(node.filter_expression)

    def render(self, context: Context) -> str:
        value = self.filter_expression.resolve(context)
        if not self.empty_ok and (value is None or (isinstance(value, str) and not value.strip())):
            raise _Empty("Variable %r" % self.filter_expression.token, 'add a |default:"..."')
        return render_value_in_context(value, context)


class _StrictTagNode(Node):
    """A {% firstof %} or {% cycle %} that always renders: empty output fails the render.

    ``firstof`` skips empty and missing values, so ``Dear {% firstof a b %}`` would
    render "Dear " when both are empty; ``cycle`` writes its values in turn, empty ones
    too. A last value in quotes says what to write then.
    """

    def __init__(self, node: FirstOfNode | CycleNode) -> None:
        self.node = node
        self.token = getattr(node, "token", None)
        self.origin = getattr(node, "origin", None)

    def render(self, context: Context) -> str:
        output = self.node.render(context)
        if not output.strip():
            tag = self.token.contents if self.token is not None else "tag"
            raise _Empty("{%% %s %%}" % tag, 'end it with a value in quotes, e.g. "there",')
        return output
