"""`python -m cosyedge convert cosyvoice2|cosyvoice3|cosyvoice1 --src DIR --out models/<id> [--quantize int8]`.

Turns an official checkpoint directory into a cosyedge ONNX model directory. Needs torch at export
time only (the command says how to install it when it is missing); the converted model runs without it.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

logger = logging.getLogger(__name__)

#: The checkpoint families the command converts (the converter's registry,
#: cosyedge.export.cosyvoice.versions, has a line for each; named here so that the CLI starts without it).
FAMILIES = ("cosyvoice2", "cosyvoice3", "cosyvoice1")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "convert", help="convert an official CosyVoice checkpoint into an ONNX model directory",
        description="Convert an official checkpoint (cosyvoice2.yaml, flow.pt, hift.pt, ...) into "
                    "models/<id> with ONNX graphs and manifest.json. Needs torch (export time only).")
    parser.add_argument("family", choices=FAMILIES, help="model family of the checkpoint")
    parser.add_argument("--src", type=Path, required=True, help="official model directory")
    parser.add_argument("--out", type=Path, required=True, help="output directory, e.g. models/cosyvoice2-int8")
    parser.add_argument("--quantize", choices=("none", "int8"), default=None,
                        help="weight int8 for the graphs where it helps (default: none, fp32, for "
                             "cosyvoice2; int8 for cosyvoice3 and cosyvoice1; `none` keeps fp32)")
    parser.add_argument("--variant", choices=("base", "sft", "instruct"), default=None,
                        help="cosyvoice1 only: CosyVoice-300M, -SFT or -Instruct (default: detected from the "
                             "directory: '-Instruct' in its name, else spk2info.pt present)")
    parser.add_argument("--llm-bits", type=int, choices=(4, 8), default=None,
                        help="with --quantize int8: the LLM's weight bits (default 8; 4 halves the backbone, "
                             "LLM files -28 %%, with ~10x the log-prob deviation, see docs/benchmarks.md)")
    parser.add_argument("--speech-tokenizer-int8", action="store_true",
                        help="with --quantize int8: also store the copied speech tokenizer with int8 MatMul "
                             "weights (~4x smaller on disk, ~3x less memory when opened; token agreement on "
                             "a random input is recorded; check it on real speech first)")
    parser.add_argument("--steps", default=None,
                        help="comma-separated subset of export steps (default: all)")
    parser.add_argument("--force", action="store_true", help="replace a non-empty --out")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cosyedge.export.cosyvoice.versions import convert

    steps = [s.strip() for s in args.steps.split(",") if s.strip()] if args.steps else None
    options = {"llm_bits": args.llm_bits, "speech_tokenizer_int8": args.speech_tokenizer_int8}
    return _report(args, convert(args.family, args.src, args.out, quantize=args.quantize, steps=steps,
                                 force=args.force, variant=args.variant, options=options))


def _report(args: argparse.Namespace, manifest: dict) -> int:
    total = sum(f["bytes"] for f in manifest["files"].values())
    variant = manifest.get("config", {}).get("model", {})
    print(f"wrote {args.out} ({len(manifest['files'])} files, {total / 1e6:.1f} MB, "
          f"{manifest['quantization']})" + (f": {variant['name']}, modes {', '.join(variant['modes'])}"
                                            if variant else ""))
    if "source_file" in manifest["graphs"].get("llm", {}):
        print(f"  LLM read from {manifest['graphs']['llm']['source_file']}")
    for name, info in manifest["graphs"].items():
        snr = info.get("snr_db_vs_fp32")
        print(f"  {name}: {info['precision']}" + (f", SNR vs fp32 {snr} dB" if snr else ""))
    return 0
