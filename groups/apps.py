from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save

from core.config_cache import config_generation_bump_on_commit


def _group_changed(**_: object) -> None:
    # Cached access answers, limits (rpm, concurrency) and credentials hold Group rows: every
    # process must read them again once this write is committed.
    config_generation_bump_on_commit()


class GroupsConfig(AppConfig):
    name = "groups"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from groups.models import Group

        post_save.connect(_group_changed, sender=Group, dispatch_uid="groups_group_saved")
        post_delete.connect(_group_changed, sender=Group, dispatch_uid="groups_group_deleted")
