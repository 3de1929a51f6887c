from typing import Any

from django.core.management.base import BaseCommand, CommandError

from billing.selectors import ledger_check


class Command(BaseCommand):
    help = (
        "Check the billing invariants: for every wallet balance = sum of its ledger entries, held = "
        "open holds, available >= 0; subscription counters = their holds. Exits non-zero on a failure."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        problems = ledger_check()
        if problems:
            for problem in problems:
                self.stderr.write(f"FAIL {problem}")
            raise CommandError(f"{len(problems)} billing invariant violation(s) found.", returncode=1)
        self.stdout.write("Ledger OK: every wallet and subscription counter matches its entries and holds.")
