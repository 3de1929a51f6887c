"""`make run`'s keys and hints (keys/management/commands/demo_keys.py, scripts/run_demo.py), run twice
against the test database; gunicorn is never started."""

import importlib.util
import io
import json
import stat
from pathlib import Path

import pytest
from django.core.management import call_command

from accounts.models import User
from keys.management.commands.demo_keys import demo_keys_ensure
from keys.models import ApiKey
from keys.selectors import api_key_get_by_secret
from keys.services import api_key_revoke

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def load_run_demo():
    spec = importlib.util.spec_from_file_location("run_demo", ROOT / "scripts" / "run_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def demo(db):
    call_command("loadconfig", str(ROOT / "config" / "demo.toml"), stdout=io.StringIO())


def test_the_second_run_prints_the_same_keys_and_creates_none(demo, tmp_path):
    path = tmp_path / ".demo-keys"

    first = demo_keys_ensure(path=path)
    count = ApiKey.objects.count()
    second = demo_keys_ensure(path=path)

    assert first["created"] == ["Alpha-Image", "Demo-Chat"] and second["created"] == []
    assert second["keys"] == first["keys"]
    assert ApiKey.objects.count() == count == 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == first["keys"]
    groups = {api_key_get_by_secret(secret=s).group.name for s in first["keys"].values()}
    assert groups == {"Alpha-Image", "Demo-Chat"}


def test_a_revoked_or_unknown_key_is_replaced(demo, tmp_path):
    path = tmp_path / ".demo-keys"
    first = demo_keys_ensure(path=path)
    api_key_revoke(api_key=api_key_get_by_secret(secret=first["keys"]["Alpha-Image"]))

    second = demo_keys_ensure(path=path)

    assert second["created"] == ["Alpha-Image"]
    assert second["keys"]["Alpha-Image"] != first["keys"]["Alpha-Image"]
    assert second["keys"]["Demo-Chat"] == first["keys"]["Demo-Chat"]
    assert json.loads(path.read_text()) == second["keys"]
    path.write_text("not json")
    assert demo_keys_ensure(path=path)["created"] == ["Alpha-Image", "Demo-Chat"]


def test_the_hints_disappear_once_they_are_done(demo, tmp_path):
    path = tmp_path / ".demo-keys"
    run_demo = load_run_demo()

    before = demo_keys_ensure(path=path)
    user = User.objects.get(username="demo")
    user.set_password("demo-password-1")
    user.save(update_fields=["password"])
    User.objects.create_superuser(username="root", password="root-password-1")
    after = demo_keys_ensure(path=path)

    assert (before["needs_password"], before["needs_superuser"]) == (True, True)
    assert (after["needs_password"], after["needs_superuser"]) == (False, False)
    shown_before = run_demo.banner(before, bind="127.0.0.1:8000")
    shown_after = run_demo.banner(after, bind="127.0.0.1:8000")
    assert "changepassword demo" in shown_before and "createsuperuser" in shown_before
    assert "changepassword" not in shown_after and "createsuperuser" not in shown_after
    assert after["keys"]["Alpha-Image"] in shown_after and "kept in .demo-keys" in shown_after


def test_the_command_prints_the_facts_as_json(demo, tmp_path):
    out = io.StringIO()
    call_command("demo_keys", str(tmp_path / ".demo-keys"), stdout=out)
    assert set(json.loads(out.getvalue())) == {"keys", "created", "needs_password", "needs_superuser"}
