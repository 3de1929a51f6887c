from django.db import migrations, models


class Migration(migrations.Migration):
    """The Upstream model moves to the upstreams app with its table as it is: only the state changes."""

    dependencies = [
        ("images", "0003_upstream_retry_settings"),
        ("upstreams", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="imagemodel",
                    name="upstreams",
                    field=models.ManyToManyField(related_name="image_models", to="upstreams.upstream"),
                ),
                migrations.DeleteModel(name="Upstream"),
            ],
            database_operations=[],
        ),
    ]
