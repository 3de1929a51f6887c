from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("upstreams", "0002_upstream_kind_anthropic"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="upstream",
            name="upstream_kind_valid",
        ),
        migrations.AlterField(
            model_name="upstream",
            name="kind",
            field=models.CharField(
                choices=[
                    ("openai", "OpenAI"),
                    ("openai-compatible", "OpenAI-compatible (chat completions only)"),
                    ("gemini", "Gemini"),
                    ("anthropic", "Anthropic"),
                    ("demo", "Built-in demo (offline)"),
                ],
                max_length=32,
            ),
        ),
        migrations.AddConstraint(
            model_name="upstream",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("kind__in", ["openai", "openai-compatible", "gemini", "anthropic", "demo"])
                ),
                name="upstream_kind_valid",
            ),
        ),
    ]
