"""The one rule for what address a send can go to; the dry-run flags what the send refuses.

Django's email validator, without the exception it makes for ``user@localhost``: a host
name without a dot is no address an ESP or a real mail server delivers to.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import EmailValidator

#: Raise ValidationError if an address cannot be sent to.
validate_address = EmailValidator(allowlist=[])


def address_problem(address: str) -> str:
    """Return why a send would refuse ``address``, or ''."""
    if any(char.isspace() for char in address):
        return "address cannot be valid: it contains a space"
    local, at, domain = address.partition("@")
    if not at:
        return "address cannot be valid: no '@'"
    if "@" in domain:
        return "address cannot be valid: more than one '@'"
    if not local:
        return "address cannot be valid: nothing before '@'"
    if not domain:
        return "address cannot be valid: nothing after '@'"
    try:
        validate_address(address)
    except ValidationError:
        return "address cannot be valid: not an email address a send accepts"
    return ""
