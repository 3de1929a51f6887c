import sys

from django.core.management.base import BaseCommand

from billing.usage import usage_records_restore


class Command(BaseCommand):
    help = (
        "Read the gateway's log (stdin or files) and write the usage records of its "
        "`usage_record_lost {json}` lines that are not in the database yet. Safe to run twice."
    )

    def add_arguments(self, parser):
        parser.add_argument("logs", nargs="*", help="Log files (default: standard input).")

    def handle(self, *args, logs, **options):
        written = skipped = 0
        for name in logs or ["-"]:
            if name == "-":
                done = usage_records_restore(lines=sys.stdin)
            else:
                with open(name, encoding="utf-8", errors="replace") as lines:
                    done = usage_records_restore(lines=lines)
            written, skipped = written + done[0], skipped + done[1]
        self.stdout.write(f"Restored {written} usage record(s); {skipped} already there.")
