"""The commit this process runs and the state of the OTA update, for ``GET /health``.

``scripts/update.sh`` keeps its transaction in ``var/update/`` of the checkout (or
``COSYEDGE_UPDATE_STATE_DIR``), files of ``key=value`` lines that it replaces atomically:
``transaction`` while an update is under way, or was cut off and waits for the next run to finish or
roll it back; ``verified``, the last commit that passed the self-test and answered after its restart;
``last``, how the last update ended. The running commit is read from git's own files once, when the
process starts: the checkout may move on under a running app (an update under way), and /health must
name the code that answers, not the files on disk.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

STATE_DIR_ENV = "COSYEDGE_UPDATE_STATE_DIR"
_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


def _sha(text: str) -> str | None:
    text = text.strip()
    return text if _SHA.fullmatch(text) else None


def read_head(root: Path) -> str | None:
    """The commit checked out at ``root``, from git's files (no git process): ``.git`` a folder or,
    in a worktree, a file naming one; HEAD a commit or a branch (loose or packed). None when
    ``root`` is no checkout or git's files cannot be read."""
    dot_git = root / ".git"
    try:
        gitdir = dot_git
        if dot_git.is_file():
            pointer = dot_git.read_text().strip()
            if not pointer.startswith("gitdir:"):
                return None
            gitdir = (root / pointer[len("gitdir:"):].strip()).resolve()
        head = (gitdir / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return _sha(head)
        ref = head[len("ref:"):].strip()
        common = gitdir
        if (gitdir / "commondir").is_file():
            common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
        for base in (gitdir, common):
            if (base / ref).is_file():
                return _sha((base / ref).read_text())
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                sha, _, name = line.partition(" ")
                if name == ref:
                    return _sha(sha)
    except OSError as exc:
        logger.debug("cannot read the checkout's HEAD under %s: %s", root, exc)
    return None


def read_state(path: Path) -> dict[str, str] | None:
    """One of update.sh's ``key=value`` files, or None when it is absent or unreadable."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@dataclass(frozen=True)
class UpdateStatus:
    """The running commit and the update's state, as /health shows them."""

    running: str | None  # the commit this process started on
    checkout: str | None  # the checkout's commit now
    verified: str | None
    transaction: dict[str, str] | None
    last: dict[str, str] | None

    @property
    def pending(self) -> bool:
        """An update is under way or was cut off, or the checkout has moved past the running code
        (a restart is due)."""
        moved = bool(self.running and self.checkout and self.running != self.checkout)
        return self.transaction is not None or moved

    @property
    def rolled_back(self) -> bool:
        """The last update failed and the box went back to the commit it ran before."""
        return bool(self.last and self.last.get("result") == "rolled_back")

    def as_dict(self) -> dict[str, Any]:
        txn, last = self.transaction, self.last
        return {"commit": self.running,
                "update": {"pending": self.pending, "rolled_back": self.rolled_back,
                           "checkout": self.checkout, "verified": self.verified,
                           "transaction": None if txn is None else {
                               "from": txn.get("old"), "to": txn.get("new"), "phase": txn.get("phase"),
                               "step": txn.get("step"), "attempt": txn.get("attempt"),
                               "since": txn.get("started")},
                           "last": None if last is None else {
                               key: last.get(key) for key in ("result", "from", "to", "step", "reason", "at")}}}


class Deployment:
    """Where this process's code came from: its checkout, the commit it started on, and the folder
    of the update's state."""

    def __init__(self, root: Path, state_dir: Path | None = None) -> None:
        self.root = root
        self.state_dir = state_dir if state_dir is not None else root / "var" / "update"
        self.running = read_head(root)

    @classmethod
    def of_this_code(cls) -> "Deployment":
        """The checkout this package was imported from (the folder above ``cosyedge/``), its state
        where update.sh keeps it (``COSYEDGE_UPDATE_STATE_DIR``, else ``var/update``)."""
        root = Path(__file__).resolve().parents[2]
        state_dir = os.environ.get(STATE_DIR_ENV)
        return cls(root, Path(state_dir) if state_dir else None)

    def status(self) -> UpdateStatus:
        verified = read_state(self.state_dir / "verified")
        return UpdateStatus(running=self.running, checkout=read_head(self.root),
                            verified=(verified or {}).get("commit"),
                            transaction=read_state(self.state_dir / "transaction"),
                            last=read_state(self.state_dir / "last"))
