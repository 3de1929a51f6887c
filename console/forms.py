"""Forms of the web console. Choices come from the signed-in account only, so a posted id of another
account's group or model is refused as an invalid choice."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta

from django import forms
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.core.validators import RegexValidator
from django.utils import timezone

from billing.money import money_display, money_trimmed
from console.signin import signin_attempt_give_back, signin_attempt_take, signin_turn
from groups.models import Group
from images.models import ImageModel
from keys.errors import KeyLimitsInvalid
from keys.models import ApiKey
from keys.services import ApiKeyLimitsInput, api_key_limits_clean, api_key_models_check

THROTTLED = "throttled"


class ConsoleAuthenticationForm(AuthenticationForm):
    """Django's sign-in form behind the failed sign-in throttle (console/signin.py): each sign-in
    takes its attempt before its password is hashed, and a throttled address or username is refused
    unchecked."""

    def clean(self):
        username = self.cleaned_data.get("username") or ""
        attempt = signin_attempt_take(request=self.request, username=username)
        if attempt.wait is not None:
            self.retry_after = attempt.wait
            minutes = max(1, round(attempt.wait / 60))
            raise ValidationError(
                f"Too many failed sign-ins from this address or for this account. Try again in "
                f"about {minutes} minute{'s' if minutes != 1 else ''}.",
                code=THROTTLED,
            )
        failed = False
        try:
            with signin_turn() as turn:
                if not turn:
                    self.retry_after = 1
                    raise ValidationError("Too many sign-ins at once. Try again in a moment.", code=THROTTLED)
                return super().clean()
        except ValidationError as error:
            failed = error.code == "invalid_login"
            raise
        finally:
            if not failed:
                signin_attempt_give_back(attempt=attempt)

    def throttled(self) -> bool:
        return self.has_error(NON_FIELD_ERRORS, THROTTLED)


EXPIRY_CHOICES = [
    ("", "Never"),
    ("1", "In 1 day"),
    ("7", "In 7 days"),
    ("30", "In 30 days"),
    ("90", "In 90 days"),
    ("365", "In 1 year"),
]
DEFAULT_SIZE = ""
MAX_N_OFFERED = 10
FORM_TOKEN_LENGTH = 64


def form_token_new() -> str:
    """A random token for one rendered form: a second POST of the same form carries the same one."""
    return secrets.token_urlsafe(18)


class FormTokenMixin:
    """A hidden `form_token`, fresh on every unbound form, so that a form sent twice (a double click,
    back and send again) can be recognised and not acted on twice."""

    def form_token_add(self) -> None:
        self.fields["form_token"] = forms.CharField(
            widget=forms.HiddenInput,
            max_length=FORM_TOKEN_LENGTH,
            initial=form_token_new(),
            validators=[RegexValidator(r"^[A-Za-z0-9_-]*$", "This form's token is not one the page made.")],
            # A form posted without one (not the page's own) is simply not recognised when resent.
            required=False,
        )


BUDGET_PERIOD_CHOICES = [
    ("", "No budget"),
    ("daily", "Per day"),
    ("weekly", "Per week (from Monday)"),
    ("monthly", "Per month"),
    ("total", "In total"),
]


def _listed(text: str) -> list[str]:
    """A list field's text (items separated by commas, spaces or lines) as its items."""
    return [item for item in re.split(r"[\s,]+", text or "") if item]


class ApiKeyLimitsForm(forms.Form):
    """A key's own limits, each optional. The values are checked by keys.services'
    `api_key_limits_clean` and the models by `api_key_models_check` (against the key's group); a
    refusal is shown on its field."""

    budget = forms.CharField(
        max_length=40,
        required=False,
        strip=True,
        widget=forms.TextInput(attrs={"inputmode": "decimal", "placeholder": "5.00"}),
        help_text="The most the key may spend per period; empty: no budget of its own.",
    )
    budget_period = forms.ChoiceField(label="Budget period", choices=BUDGET_PERIOD_CHOICES, required=False)
    models = forms.CharField(
        max_length=4000,
        required=False,
        help_text="Model ids it may call, separated by commas; empty: every model of its group.",
    )
    rpm = forms.IntegerField(
        label="Requests per minute",
        required=False,
        widget=forms.NumberInput(attrs={"min": 1, "inputmode": "numeric"}),
        help_text="Empty: no limit of its own.",
    )
    tpm = forms.IntegerField(
        label="Tokens per minute",
        required=False,
        widget=forms.NumberInput(attrs={"min": 1, "inputmode": "numeric"}),
        help_text="Input and output tokens of text calls; empty: no limit of its own.",
    )
    allowed_ips = forms.CharField(
        label="Allowed IP addresses",
        max_length=4000,
        required=False,
        help_text="Networks such as 10.0.0.0/8 or single addresses, separated by commas; empty: any.",
    )

    LIMIT_FIELDS = ("budget", "budget_period", "models", "rpm", "tpm", "allowed_ips")

    def limits_group_id(self) -> int | None:
        """The group whose models the key may list; None while it is not known (a create form whose
        group was refused), when the models are not checked. The edit and create forms name it."""
        return None

    def clean(self):
        cleaned = super().clean()
        if any(name in self.errors for name in self.LIMIT_FIELDS):
            return cleaned
        limits = self.limits()
        group_id = self.limits_group_id()
        try:
            api_key_limits_clean(limits=limits)
            if group_id is not None:
                api_key_models_check(group_id=group_id, model_ids=limits.model_ids)
        except KeyLimitsInvalid as refused:
            self.add_error(refused.param if refused.param in self.fields else None, refused.message)
        return cleaned

    def limits(self) -> ApiKeyLimitsInput:
        data = self.cleaned_data
        return ApiKeyLimitsInput(
            budget=data.get("budget") or None,
            budget_period=data.get("budget_period") or "",
            model_ids=_listed(data.get("models", "")),
            rpm=data.get("rpm"),
            tpm=data.get("tpm"),
            allowed_ips=_listed(data.get("allowed_ips", "")),
        )


def key_limits_initial(api_key: ApiKey) -> dict[str, object]:
    """A key's limits as the limits form shows them."""
    return {
        "budget": money_trimmed(api_key.budget) if api_key.budget is not None else "",
        "budget_period": api_key.budget_period,
        "models": ", ".join(api_key.model_ids),
        "rpm": api_key.rpm,
        "tpm": api_key.tpm,
        "allowed_ips": ", ".join(api_key.allowed_ips),
    }


class ApiKeyLimitsEditForm(ApiKeyLimitsForm):
    """The limits of an existing key: its models are checked against its own group. Sending it
    twice sets the same values twice, so it needs no form token."""

    def __init__(self, *args, api_key: ApiKey, **kwargs) -> None:
        super().__init__(*args, initial=key_limits_initial(api_key), **kwargs)
        self.api_key = api_key

    def limits_group_id(self) -> int | None:
        return self.api_key.group_id


class ApiKeyCreateForm(FormTokenMixin, ApiKeyLimitsForm):
    label = forms.CharField(
        max_length=100,
        required=False,
        strip=True,
        help_text="Helps you recognise the key later, e.g. “laptop” or “CI”.",
    )
    group = forms.ModelChoiceField(
        queryset=Group.objects.none(),
        empty_label=None,
        help_text="The key's calls are served and billed in this group.",
    )
    expires_in_days = forms.TypedChoiceField(
        label="Expires",
        choices=EXPIRY_CHOICES,
        coerce=int,
        empty_value=None,
        required=False,
    )

    def __init__(self, *args, groups: Sequence[Group], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["group"].queryset = Group.objects.filter(pk__in=[group.pk for group in groups])
        self.fields["group"].label_from_instance = _group_label
        self.form_token_add()

    def limits_group_id(self) -> int | None:
        group = self.cleaned_data.get("group")
        return group.pk if group is not None else None

    def expires_at(self, *, now: datetime | None = None) -> datetime | None:
        days = self.cleaned_data.get("expires_in_days")
        if days is None:
            return None
        return (now or timezone.now()) + timedelta(days=days)


def _group_label(group: Group) -> str:
    kind = "images" if group.image_enabled else "no image endpoints"
    return f"{group.name} ({kind}, {group.get_billing_display().lower()})"


# The model's choices the playground offers, each a field of the form: field name → capability.
CHOICE_CAPABILITIES = {"size": "sizes", "quality": "qualities", "output_format": "output_formats"}
CHOICE_LABELS = {"size": "Size", "quality": "Quality", "output_format": "Format"}


def image_model_choices(image_model: ImageModel) -> dict:
    """What the playground offers for one model: its sizes, qualities, formats and largest n."""
    return {
        **{
            field: list(getattr(image_model, capability)) for field, capability in CHOICE_CAPABILITIES.items()
        },
        "max_n": min(MAX_N_OFFERED, image_model.max_n),
    }


class PlaygroundForm(FormTokenMixin, forms.Form):
    """The playground's image form, for one selected model: the sizes, qualities, formats and number
    of images offered are that model's (a posted value the model does not take is refused here)."""

    model = forms.ModelChoiceField(queryset=ImageModel.objects.none(), empty_label=None)
    prompt = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        max_length=settings.GATEWAY_MAX_PROMPT_CHARS,
        strip=True,
    )

    def __init__(
        self, *args, image_models: Sequence[ImageModel], selected: str | None = None, **kwargs
    ) -> None:
        super().__init__(*args, **kwargs)
        self.image_models = list(image_models)
        self.fields["model"].queryset = ImageModel.objects.filter(pk__in=[m.pk for m in image_models])
        self.fields["model"].label_from_instance = _model_label
        self.selected_model = self._selected(selected)
        if not self.is_bound and self.selected_model is not None:
            self.initial["model"] = self.selected_model.pk
        offered = image_model_choices(self.selected_model) if self.selected_model else {}
        for field, label in CHOICE_LABELS.items():
            values = offered.get(field, [])
            self.fields[field] = forms.ChoiceField(
                label=label,
                required=False,
                choices=[(DEFAULT_SIZE, "The model's default"), *((value, value) for value in values)],
            )
            # A model without such choices: the field is hidden (the script shows it for another).
            self.fields[field].offered = bool(values)
        self.fields["n"] = forms.IntegerField(
            label="Number of images", min_value=1, max_value=offered.get("max_n", 1), initial=1
        )
        self.fields["n"].widget.attrs["max"] = offered.get("max_n", 1)
        self.form_token_add()

    def _selected(self, selected: str | None) -> ImageModel | None:
        """The model the form is for: the posted one, else the initial or asked-for one, else the first."""
        by_pk = {str(m.pk): m for m in self.image_models}
        for candidate in (
            self.data.get("model") if self.is_bound else None,
            self.initial.get("model"),
            selected,
        ):
            if candidate is not None and str(candidate) in by_pk:
                return by_pk[str(candidate)]
        return self.image_models[0] if self.image_models else None

    def models_json(self) -> dict:
        """Every offered model's choices, for the page's script (embedded with json_script)."""
        return {str(m.pk): image_model_choices(m) for m in self.image_models}

    def choice_fields(self) -> list:
        return [self[field] for field in CHOICE_LABELS]

    def request_body(self) -> dict:
        """The body of the /v1/images/generations call this form asks for."""
        data = self.cleaned_data
        body = {
            "model": data["model"].model_id,
            "prompt": data["prompt"],
            "n": data["n"],
            # Links, not the images: the session keeps references to them (hosted images, for an
            # upstream answering base64), never megabytes of base64.
            "response_format": "url",
        }
        for field in CHOICE_LABELS:
            if data.get(field):
                body[field] = data[field]
        return body


def _model_label(image_model: ImageModel) -> str:
    return f"{image_model.model_id} — {image_model.group.name}, {money_display(image_model.price)} per call"


STATUS_PATTERN = r"^(ok|error|[1-5][0-9]{2})$"


class UsageFilterForm(forms.Form):
    """The usage page's filters (a GET form); the key and model choices are the account's own."""

    key = forms.ChoiceField(required=False, label="Key")
    model = forms.ChoiceField(required=False, label="Model")
    status = forms.RegexField(regex=STATUS_PATTERN, required=False, label="Status")
    first_day = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    last_day = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, data, *, choices: dict[str, list[tuple[str, str]]]) -> None:
        super().__init__(data)
        self.fields["key"].choices = [("", "All keys"), *choices["credentials"]]
        self.fields["model"].choices = [("", "All models"), *choices["models"]]
        self.status_choices = [
            ("", "Any status"),
            ("ok", "OK (2xx)"),
            ("error", "Errors"),
            *choices["statuses"],
        ]

    def clean(self):
        cleaned = super().clean()
        first, last = cleaned.get("first_day"), cleaned.get("last_day")
        if first and last and first > last:
            raise ValidationError("The first day comes after the last.")
        return cleaned


class ChatPlaygroundForm(FormTokenMixin, forms.Form):
    """The chat playground: one of the account's text models and a prompt."""

    model = forms.ChoiceField()
    prompt = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 5}),
        max_length=settings.GATEWAY_MAX_PROMPT_CHARS,
        strip=True,
    )

    def __init__(self, *args, text_models: Sequence, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.text_models = {model.key: model for model in text_models}
        self.fields["model"].choices = [(model.key, model.label) for model in text_models]
        self.form_token_add()

    def text_model(self):
        return self.text_models[self.cleaned_data["model"]]

    def request_body(self, *, stream: bool) -> bytes:
        """The body of the /v1/chat/completions call this form asks for."""
        body = {
            "model": self.text_model().model_id,
            "messages": [{"role": "user", "content": self.cleaned_data["prompt"]}],
        }
        if stream:
            body["stream"] = True
        return json.dumps(body).encode()


class AlertSettingsForm(forms.Form):
    """The account's alert settings (notifications.services checks them: the floor, the percentages,
    the webhook URL under the request-forgery rules)."""

    balance_floor = forms.CharField(
        required=False,
        label="Balance floor (¥)",
        help_text="An alert when a charge leaves the available balance below it; empty: none.",
    )
    percentages = forms.CharField(
        required=False,
        label="Budget and cap percentages",
        help_text="Of each key budget and subscription cap, once per window, e.g. 80, 100.",
    )
    webhook_url = forms.CharField(
        required=False,
        label="Webhook URL",
        max_length=500,
        help_text="An https URL that receives each alert as a signed JSON POST; empty: none.",
    )
    email_enabled = forms.BooleanField(required=False, label="Also email me each alert")
