"""cosyedge.host.diskspace: the free-disk guard, with its probe as the seam."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyedge.host.diskspace import DiskGuard, free_bytes
from cosyedge.errors import StorageFullError

MB = 1_000_000


def test_the_guard_refuses_under_the_threshold_naming_the_fullest_folder(tmp_path):
    free = {tmp_path / "outputs": 900 * MB, tmp_path / "cache": 40 * MB}
    guard = DiskGuard(free, 100 * MB, probe=lambda folder: free[folder])
    with pytest.raises(StorageFullError) as caught:
        guard.check("an upload")
    exc = caught.value
    assert (exc.code, exc.http_status) == ("disk_low", 507)
    assert exc.params["folder"] == str(tmp_path / "cache") and exc.params["free_mb"] == 40.0
    assert exc.params["min_free_mb"] == 100 and "an upload" in exc.message
    free[tmp_path / "cache"] = 100 * MB
    guard.check()  # at the threshold: accepted


def test_a_zero_threshold_never_refuses_and_an_unreadable_folder_is_skipped(tmp_path):
    DiskGuard([tmp_path], 0, probe=lambda _: 0).check()

    def probe(folder: Path) -> int:
        raise OSError("gone")

    DiskGuard([tmp_path], 10 * MB, probe=probe).check()


def test_watch_adds_a_folder_once(tmp_path):
    guard = DiskGuard([tmp_path], 1, probe=lambda _: 0)
    guard.watch(tmp_path / "cache")
    guard.watch(tmp_path / "cache")
    assert guard.folders == (tmp_path, tmp_path / "cache")


def test_the_real_probe_reads_the_nearest_existing_folder(tmp_path):
    assert free_bytes(tmp_path / "not" / "yet") == free_bytes(tmp_path) > 0
