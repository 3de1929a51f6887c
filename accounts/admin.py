from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.models import Group as DjangoGroup

from accounts.models import Account, User
from accounts.services import account_create_for_user

# Django's permission groups are not used here (staff get permissions one by one, and the gateway's
# own groups are groups.Group): their admin page would only be confused with the gateway's groups.
admin.site.unregister(DjangoGroup)


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    # Without Django's permission groups (above): permissions are given one by one.
    fieldsets = tuple(
        (name, {**options, "fields": tuple(f for f in options["fields"] if f != "groups")})
        for name, options in DjangoUserAdmin.fieldsets
    )
    list_filter = ("is_staff", "is_superuser", "is_active")


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    list_display = ("user", "current_group", "balance", "created_at")
    list_filter = ("current_group", "allowed_groups")
    search_fields = ("user__username", "user__email")
    filter_horizontal = ("allowed_groups",)
    list_select_related = ("user", "current_group", "wallet")
    autocomplete_fields = ("user",)

    @admin.display(description="Balance")
    def balance(self, obj: Account):
        wallet = getattr(obj, "wallet", None)
        return wallet.balance_display if wallet is not None else "—"

    def get_readonly_fields(self, request, obj=None):
        return ("user",) if obj is not None else ()

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        # New accounts come with their wallet, through the service.
        account = account_create_for_user(user=form.cleaned_data["user"])
        account.current_group = form.cleaned_data.get("current_group")
        account.save(update_fields=["current_group"])
        obj.pk = account.pk
