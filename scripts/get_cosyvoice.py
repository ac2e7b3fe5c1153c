#!/usr/bin/env python3
"""Fetch CosyVoice2-0.5B or Fun-CosyVoice3-0.5B on a connected machine, check it, convert it into models/<id>.

    python scripts/get_cosyvoice.py                       # CosyVoice2: ModelScope, then Hugging Face
    python scripts/get_cosyvoice.py --source huggingface --out models/cosyvoice2-int8
    python scripts/get_cosyvoice.py --skip-download --dest /media/usb/CosyVoice2-0.5B
    python scripts/get_cosyvoice.py --model cosyvoice3    # Fun-CosyVoice3-0.5B-2512 -> models/cosyvoice3-int8

Run it where the network is (it needs ``modelscope`` or ``huggingface_hub`` plus the converter's torch);
copy the resulting ``models/<id>`` directory to the edge box, which needs neither. Downloading is the
only step that touches the network; ``--skip-download`` converts a directory fetched some other way.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

logger = logging.getLogger("get_cosyvoice")

REPOS = {"modelscope": "iic/CosyVoice2-0.5B", "huggingface": "FunAudioLLM/CosyVoice2-0.5B"}
#: Per model: the hub repositories, the files the converter needs and the default folders.
MODELS = {
    "cosyvoice2": {"repos": REPOS, "dest": "CosyVoice2-0.5B", "out": "cosyvoice2-int8",
                   "required": ("cosyvoice2.yaml", "llm.pt", "flow.pt", "hift.pt", "campplus.onnx",
                                "speech_tokenizer_v2.onnx", "CosyVoice-BlankEN/config.json")},
    "cosyvoice3": {"repos": {"modelscope": "FunAudioLLM/Fun-CosyVoice3-0.5B-2512",
                             "huggingface": "FunAudioLLM/Fun-CosyVoice3-0.5B-2512"},
                   "dest": "Fun-CosyVoice3-0.5B", "out": "cosyvoice3-int8",
                   "required": ("cosyvoice3.yaml", "llm.pt|llm.rl.pt", "flow.pt", "hift.pt", "campplus.onnx",
                                "speech_tokenizer_v3.onnx", "CosyVoice-BlankEN/config.json")},
}
INSTALL = {"modelscope": "pip install modelscope", "huggingface": "pip install huggingface_hub"}
REQUIRED = ("cosyvoice2.yaml", "llm.pt", "flow.pt", "hift.pt", "campplus.onnx", "speech_tokenizer_v2.onnx",
            "CosyVoice-BlankEN/config.json")
TOKENIZER_SETS = (("CosyVoice-BlankEN/tokenizer.json",),
                  ("CosyVoice-BlankEN/vocab.json", "CosyVoice-BlankEN/merges.txt"))


class FetchError(RuntimeError):
    """A download or check failed; the message says what to do."""


def _modelscope(repo: str, dest: Path) -> None:
    from modelscope import snapshot_download

    snapshot_download(repo, local_dir=str(dest))


def _huggingface(repo: str, dest: Path) -> None:
    from huggingface_hub import snapshot_download

    snapshot_download(repo_id=repo, local_dir=str(dest))


DOWNLOADERS: dict[str, Callable[[str, Path], None]] = {"modelscope": _modelscope, "huggingface": _huggingface}


def download(source: str, dest: Path, downloaders: dict[str, Callable[[str, Path], None]] | None = None,
             repos: dict[str, str] = REPOS) -> str:
    """Download into ``dest`` from ``source`` ("auto" tries ModelScope, then Hugging Face); returns the hub used."""
    downloaders = downloaders or DOWNLOADERS
    order = ["modelscope", "huggingface"] if source == "auto" else [source]
    reasons = []
    for hub in order:
        try:
            logger.info("downloading %s from %s into %s", repos[hub], hub, dest)
            downloaders[hub](repos[hub], dest)
            return hub
        except ImportError:
            reasons.append(f"{hub}: client not installed ({INSTALL[hub]})")
        except Exception as exc:  # network, auth, disk: try the next hub, report all
            reasons.append(f"{hub}: {type(exc).__name__}: {exc}")
    raise FetchError("download failed; " + "; ".join(reasons))


def missing_files(directory: Path, required: tuple[str, ...] = REQUIRED) -> list[str]:
    """Files the converter needs that are absent or empty in ``directory`` (``a|b``: either will do)."""
    def ok(name: str) -> bool:
        return any((directory / n).is_file() and (directory / n).stat().st_size > 0 for n in name.split("|"))

    missing = [name.replace("|", " or ") for name in required if not ok(name)]
    if not any(all(ok(n) for n in names) for names in TOKENIZER_SETS):
        missing.append("CosyVoice-BlankEN/vocab.json + merges.txt (or tokenizer.json)")
    return missing


def main(argv: list[str] | None = None,
         downloaders: dict[str, Callable[[str, Path], None]] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=tuple(MODELS), default="cosyvoice2",
                        help="which checkpoint (cosyvoice3 = Fun-CosyVoice3-0.5B-2512)")
    parser.add_argument("--source", choices=("auto", "modelscope", "huggingface"), default="auto")
    parser.add_argument("--dest", type=Path, default=None,
                        help="where the official checkpoint goes (default: downloads/<official name>)")
    parser.add_argument("--out", type=Path, default=None,
                        help="converted model directory (default: models/<model>-int8)")
    parser.add_argument("--quantize", choices=("none", "int8"), default="int8")
    parser.add_argument("--skip-download", action="store_true", help="convert an existing --dest")
    parser.add_argument("--force", action="store_true", help="replace a non-empty --out")
    args = parser.parse_args(argv)
    model = MODELS[args.model]
    args.dest = args.dest or ROOT / "downloads" / model["dest"]
    args.out = args.out or ROOT / "models" / model["out"]
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if not args.skip_download:
            args.dest.mkdir(parents=True, exist_ok=True)
            hub = download(args.source, args.dest, downloaders, model["repos"])
            print(f"downloaded {model['repos'][hub]} from {hub} into {args.dest}")
        missing = missing_files(args.dest, model["required"])
        if missing:
            raise FetchError(f"{args.dest} lacks {', '.join(missing)}; download again "
                             "(an interrupted download leaves files out)")
        if args.model == "cosyvoice3":
            from cosyedge.export.cosyvoice.v3.convert import convert
        else:
            from cosyedge.export.cosyvoice.v2.convert import convert

        manifest = convert(args.dest, args.out, quantize=args.quantize, force=args.force)
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the converter's own errors carry a message meant for the user
        message = getattr(exc, "message", None) or str(exc)
        print(f"error: {message}", file=sys.stderr)
        return 2
    total = sum(f["bytes"] for f in manifest["files"].values())
    print(f"converted into {args.out} ({len(manifest['files'])} files, {total / 1e6:.0f} MB); "
          f"run the app with --model {args.out.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
