"""The worker as it runs in production: a long-running process that delivers what is due, round
after round, and stops cleanly on SIGTERM. PostgreSQL: the process shares the test database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from django.conf import settings

from notifications.models import Notification
from tests.billing.conftest import FakeUpstream, alpha_call, credential_for, postgres_only
from tests.gunicorn_server import shared_database_url
from tests.notifications.conftest import alerts_set
from tests.notifications.receiver import webhook_receiver

pytestmark = [pytest.mark.postgres, postgres_only, pytest.mark.django_db(transaction=True)]


def test_the_worker_delivers_while_running_and_stops_on_sigterm(alice, alpha_group, alpha_model):
    with webhook_receiver() as receiver:
        alerts_set(alice, floor="9.90", webhook_url=receiver.url, webhook_secret="whsec_x")
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "gateway_project.settings_test",
            "DATABASE_URL": shared_database_url(),
            "GATEWAY_ENV_FILE": "",
            "GATEWAY_FETCH_PRIVATE_NETWORKS": "127.0.0.0/8",
        }
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "deliver_notifications", "--interval", "0.2"],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            # An event written while the worker runs is picked up by a later round.
            alpha_call(credential_for(alice), alpha_group, FakeUpstream())
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not receiver.received:
                time.sleep(0.1)
            assert len(receiver.received) == 1
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and Notification.objects.get().status != "delivered":
                time.sleep(0.1)
            assert Notification.objects.get().status == "delivered"
            worker.send_signal(signal.SIGTERM)
            _, stderr = worker.communicate(timeout=10)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        assert worker.returncode == 0, stderr.decode()
