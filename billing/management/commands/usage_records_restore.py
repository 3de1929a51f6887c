import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from billing.usage import usage_records_restore


class Command(BaseCommand):
    help = (
        "Read the gateway's log (stdin or files) and write the usage records of its "
        "signed `usage_record_lost` lines that are not in the database yet; unsigned or altered "
        "lines are refused and reported. Safe to run twice."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("logs", nargs="*", help="Log files (default: standard input).")

    def handle(self, *args: Any, logs: Any, **options: Any) -> None:
        written = skipped = refused = 0
        for name in logs or ["-"]:
            if name == "-":
                report = usage_records_restore(lines=sys.stdin)
            else:
                with open(name, encoding="utf-8", errors="replace") as lines:
                    report = usage_records_restore(lines=lines)
            for number, why in report.refused:
                self.stderr.write(f"{name}:{number}: refused ({why})")
            written, skipped = written + report.written, skipped + report.skipped
            refused += len(report.refused)
        self.stdout.write(
            f"Restored {written} usage record(s); {skipped} already there; {refused} line(s) refused."
        )
