"""The overview: the wallet, the groups and plans, the spend chart and the latest calls."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from console import queries
from console.charts import spend_chart
from console.views.base import ConsoleView


class OverviewView(ConsoleView):
    section = "overview"

    def get(self, request: HttpRequest) -> HttpResponse:
        account = self.account
        spend = queries.spend_per_day_for_account(account=account)
        spend_models, spend_by_model = queries.spend_per_day_by_model_for_account(account=account)
        return self.render(
            "console/overview.html",
            {
                "wallet": queries.wallet_state_for_account(account=account),
                "allowed_groups": sorted(account.allowed_groups.all(), key=lambda group: group.pk),
                "subscriptions": queries.subscriptions_for_account(account=account),
                "spend": spend,
                "chart": spend_chart(spend, by_model=spend_by_model, models=spend_models),
                "calls": queries.latest_calls_for_account(account=account),
            },
        )
