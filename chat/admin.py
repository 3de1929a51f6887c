from decimal import Decimal

from django import forms
from django.contrib import admin

from chat.models import TextModel

PRICES = ("input_price", "output_price", "cached_input_price", "cache_write_price", "cache_write_1h_price")


def price_text(amount: Decimal) -> str:
    """A price as people read it: all its places up to the column's 8, never fewer than 2 ("2.00",
    "0.000024"), where the column itself would show "2.00000000"."""
    text = f"{amount:f}"
    if "." in text:
        text = text.rstrip("0")
    whole, _, places = text.partition(".")
    return f"{whole}.{places.ljust(2, '0')}"


class PriceField(forms.DecimalField):
    """A price edited as it reads ("2.00", not "2.00000000"); still up to 8 places."""

    def prepare_value(self, value):
        return price_text(value) if isinstance(value, Decimal) else value


class TextModelForm(forms.ModelForm):
    """The text model's rules, as the service (chat.services.text_model_upsert) applies them: the
    model's clean() refuses an id the group has as an image model, this form upstreams of mixed kinds."""

    class Meta:
        model = TextModel
        fields = (
            "model_id",
            "group",
            "upstream_model",
            "upstreams",
            *PRICES,
            "max_output_tokens",
            "sticky_seconds",
            "enabled",
        )
        field_classes = dict.fromkeys(PRICES, PriceField)


@admin.register(TextModel)
class TextModelAdmin(admin.ModelAdmin):
    form = TextModelForm
    list_display = (
        "model_id",
        "group",
        "input",
        "output",
        "cached_input",
        "cache_write",
        "cache_write_1h",
        "max_output_tokens",
        "sticky",
        "upstream_model",
        "enabled",
    )
    list_filter = ("group", "enabled")
    search_fields = ("model_id", "upstream_model")
    filter_horizontal = ("upstreams",)
    list_select_related = ("group",)

    @admin.display(description="Input ¥/M tokens", ordering="input_price")
    def input(self, obj: TextModel) -> str:
        return price_text(obj.input_price)

    @admin.display(description="Output ¥/M tokens", ordering="output_price")
    def output(self, obj: TextModel) -> str:
        return price_text(obj.output_price)

    @admin.display(description="Cached input ¥/M tokens", ordering="cached_input_price")
    def cached_input(self, obj: TextModel) -> str:
        return _or_input_price(obj.cached_input_price)

    @admin.display(description="Cache write ¥/M tokens", ordering="cache_write_price")
    def cache_write(self, obj: TextModel) -> str:
        return _or_input_price(obj.cache_write_price)

    @admin.display(description="1-hour cache write ¥/M tokens", ordering="cache_write_1h_price")
    def cache_write_1h(self, obj: TextModel) -> str:
        return "= twice input" if obj.cache_write_1h_price is None else price_text(obj.cache_write_1h_price)

    @admin.display(description="Sticky routing", ordering="sticky_seconds")
    def sticky(self, obj: TextModel) -> str:
        return f"{obj.sticky_seconds} s" if obj.sticky_seconds else "off"


def _or_input_price(amount: Decimal | None) -> str:
    return "= input" if amount is None else price_text(amount)
