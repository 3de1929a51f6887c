from decimal import Decimal

from django.apps import apps
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from core.modelutils import MONEY

PRICE_HELP = "¥ per million tokens."


def image_model_exists(*, group_id: int, model_id: str) -> bool:
    """Whether the group has an image model called `model_id` (a text model may not take its id).

    The image models are another family's table, read by label: the families import neither."""
    image_model = apps.get_model("images", "ImageModel")
    return image_model.objects.filter(group_id=group_id, model_id=model_id).exists()


class TextModel(models.Model):
    """A text model offered in one group, billed per token: its prices per million tokens, the most
    output a call may ask for, and the upstreams that serve it (of any kinds that serve text: a call
    is translated for each upstream it tries).

    A model id is unique within its group across image and text models: a group may hold both, and a
    caller names either with the same `model` field.
    """

    model_id = models.CharField(max_length=200, help_text="The id callers send as `model`.")
    group = models.ForeignKey("groups.Group", on_delete=models.PROTECT, related_name="text_models")
    upstream_model = models.CharField(
        max_length=200, blank=True, help_text="Name sent upstream; blank = model id."
    )
    upstreams = models.ManyToManyField("upstreams.Upstream", related_name="text_models")
    input_price = models.DecimalField(
        **MONEY, validators=[MinValueValidator(Decimal("0"))], help_text=PRICE_HELP
    )
    output_price = models.DecimalField(
        **MONEY, validators=[MinValueValidator(Decimal("0"))], help_text=PRICE_HELP
    )
    cached_input_price = models.DecimalField(
        **MONEY,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="¥ per million cached input tokens; blank = the input price.",
    )
    cache_write_price = models.DecimalField(
        **MONEY,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="¥ per million cache-write input tokens (Anthropic); blank = the input price.",
    )
    cache_write_1h_price = models.DecimalField(
        **MONEY,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="¥ per million tokens written to a one-hour cache (Anthropic); blank = twice the input "
        "price.",
    )
    max_output_tokens = models.PositiveIntegerField(
        validators=[MinValueValidator(1)],
        help_text="The most output tokens a call may ask for, and the hold's ceiling when it asks for none.",
    )
    sticky_seconds = models.PositiveIntegerField(
        default=3600,
        help_text="Seconds a conversation (its prompt_cache_key, user or metadata.user_id) keeps going to "
        "the upstream that answered it, so the provider's prompt cache is hit; 0 = off.",
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["group_id", "model_id"]
        constraints = [
            models.UniqueConstraint(fields=["group", "model_id"], name="text_model_unique_in_group"),
            models.CheckConstraint(
                condition=models.Q(input_price__gte=0, output_price__gte=0)
                & (models.Q(cached_input_price__isnull=True) | models.Q(cached_input_price__gte=0))
                & (models.Q(cache_write_price__isnull=True) | models.Q(cache_write_price__gte=0))
                & (models.Q(cache_write_1h_price__isnull=True) | models.Q(cache_write_1h_price__gte=0)),
                name="text_model_prices_not_negative",
            ),
            models.CheckConstraint(
                condition=models.Q(max_output_tokens__gte=1), name="text_model_max_output_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model_id} [{self.group_id}]"

    @property
    def upstream_model_name(self) -> str:
        return self.upstream_model or self.model_id

    def clean(self) -> None:
        if self.group_id is not None and image_model_exists(group_id=self.group_id, model_id=self.model_id):
            raise ValidationError(
                {"model_id": f"The group already has an image model called {self.model_id!r}."}
            )


class KeptResponse(models.Model):
    """A translated `/v1/responses` answer kept for its account (`store` not false), so that a later
    call can continue its conversation by `previous_response_id` and the caller can retrieve or delete
    it, as OpenAI's Responses API allows: the call's own input (its references resolved), the
    response object as the caller got it with its `output` empty, and, as its ResponseItems, that
    output. A conversation is the chain of `previous_response_id`s back to its first response
    (`root_id`), the response `depth` links from it. Kept GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS days
    after the conversation's last response (`purge_response_items`)."""

    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="+")
    response_id = models.CharField(max_length=200)
    previous_response_id = models.CharField(max_length=200, blank=True)
    root_id = models.CharField(max_length=200)
    depth = models.PositiveIntegerField(default=0)
    input = models.JSONField(default=list)
    response = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account", "response_id"], name="kept_response_unique_in_account")
        ]
        indexes = [models.Index(fields=["account", "root_id", "depth"], name="kept_response_conversation")]

    def __str__(self) -> str:
        return self.response_id


class ResponseItem(models.Model):
    """An output item of a translated `/v1/responses` answer, kept for its account so that a later call
    can name it by `item_reference`, as OpenAI's Responses API allows for a response stored (`store`
    not false; the Vercel AI SDK sends references by default), and `position`-th of its response's
    output, which `previous_response_id` puts back. Kept as long as its response (an item kept before
    its response was: GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS days)."""

    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="+")
    # Null for an item kept before its response was.
    response = models.ForeignKey(KeptResponse, null=True, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField(default=0)
    item_id = models.CharField(max_length=200)
    item = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account", "item_id"], name="response_item_unique_in_account")
        ]

    def __str__(self) -> str:
        return self.item_id
