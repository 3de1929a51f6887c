from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Account
from accounts.selectors import account_get_by_username
from billing.ledger import wallet_top_up
from billing.money import MoneyError, money_display
from core.commands import text


class Command(BaseCommand):
    help = "Credit USERNAME's wallet with AMOUNT (e.g. 10.00), writing a ledger entry."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", type=text)
        parser.add_argument("amount", type=text)
        parser.add_argument("--note", type=text, default="")

    def handle(self, *args: Any, username: Any, amount: Any, note: Any, **options: Any) -> None:
        try:
            account = account_get_by_username(username=username)
            entry = wallet_top_up(account=account, amount=amount, note=note, reference="command:topup")
        except (Account.DoesNotExist, MoneyError) as exc:
            raise CommandError(str(exc)) from None
        # Amounts as the console shows them (¥12.35), not money_str's fixed places.
        amount, balance = money_display(entry.amount), money_display(entry.balance_after)
        self.stdout.write(f"Topped up {username} by {amount}; balance {balance}")
