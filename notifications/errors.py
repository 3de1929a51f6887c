"""What the alert settings refuse, as domain errors."""

from __future__ import annotations

from core.errors import INVALID_VALUE, DomainError


class AlertSettingsInvalid(DomainError):
    """A threshold or webhook URL the settings cannot take; `param` names the field."""

    code = INVALID_VALUE
