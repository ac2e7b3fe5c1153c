"""app.py: LAN exposure needs credentials or an explicit, logged opt-out."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from app import check_exposure, is_loopback
from cosyedge.config import Settings, SettingsError
from tests.helpers import REPO

ROOT = REPO


@pytest.mark.parametrize("host, local", [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True),
                                         ("localhost", True), ("0.0.0.0", False),
                                         ("192.168.1.20", False), ("box.lan", False)])
def test_is_loopback(host, local):
    assert is_loopback(host) is local


def test_lan_without_credentials_is_refused():
    with pytest.raises(SettingsError, match="COSYEDGE_AUTH"):
        check_exposure(Settings(host="0.0.0.0"))
    check_exposure(Settings(host="0.0.0.0", auth="teacher:pw"))
    check_exposure(Settings(host="127.0.0.1"))


def test_insecure_opt_out_logs_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        check_exposure(Settings(host="0.0.0.0", insecure_no_auth=True))
    assert "WITHOUT credentials" in caplog.text


def test_app_exits_with_a_reason_when_exposed_without_auth():
    proc = subprocess.run([sys.executable, "app.py", "--host", "0.0.0.0", "--port", "7999"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert "COSYEDGE_AUTH" in proc.stderr and "--insecure-no-auth" in proc.stderr
