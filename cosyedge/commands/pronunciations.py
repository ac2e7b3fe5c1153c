"""`python -m cosyedge pronunciations list|add|delete|import|export`: the box's pronunciation dictionary.

The dictionary is ``prompts/pronunciations.tsv`` (docs/pronunciation.md); every route and `speak`
read it. A bad entry is refused with its code, naming the word; an import keeps its good lines and
lists the bad ones.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cosyedge import config
from cosyedge.errors import InputError, PayloadTooLargeError
from cosyedge.files import write_atomic
from cosyedge.service.pronunciations import Pronunciations, book_for

#: The largest TSV ``import`` reads (the book's own limit, checked before reading).
_TSV_LIMIT = 1_000_000


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("pronunciations", help="the pronunciation dictionary: list, add, delete, import, export")
    actions = parser.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="list the entries (and the file's unreadable lines)")
    listing.set_defaults(func=run_list)

    add = actions.add_parser("add", help="add or replace an entry")
    add.add_argument("language", choices=("zh", "en", "ja"))
    add.add_argument("word", help="the word as written (银行, Nice, 東京)")
    add.add_argument("reading", help="toned pinyin per character (yin2 hang2), English IPA (/niːs/) or "
                                     "ARPAbet (N IY1 S), or kana (とうきょう)")
    add.set_defaults(func=run_add)

    delete = actions.add_parser("delete", help="delete an entry")
    delete.add_argument("language", choices=("zh", "en", "ja"))
    delete.add_argument("word")
    delete.set_defaults(func=run_delete)

    imp = actions.add_parser("import", help="add or replace the entries of a TSV (language<TAB>word<TAB>reading)")
    imp.add_argument("tsv", type=Path)
    imp.set_defaults(func=run_import)

    export = actions.add_parser("export", help="write the dictionary as TSV")
    export.add_argument("-o", "--output", type=Path, help="file to write (default: standard output)")
    export.set_defaults(func=run_export)

    for p in (listing, add, delete, imp, export):
        config.add_arguments(p)


def _pronunciations(args: argparse.Namespace) -> Pronunciations:
    return Pronunciations(book_for(config.from_args(args)))


def run_list(args: argparse.Namespace) -> int:
    listing = _pronunciations(args).listing()
    for entry in listing["entries"]:
        print(f"{entry['language']}\t{entry['word']}\t{entry['reading']}")
    for problem in listing["problems"]:
        print(f"unreadable line {problem['line']} ({problem['code']}): {problem['message']}", file=sys.stderr)
    if listing["kept_copy"]:
        print(f"the damaged file was kept as {listing['kept_copy']}", file=sys.stderr)
    print(f"{len(listing['entries'])} entries", file=sys.stderr)
    return 0


def run_add(args: argparse.Namespace) -> int:
    done = _pronunciations(args).add(args.language, args.word, args.reading)
    entry = done["entry"]
    print(f"{'replaced' if done['replaced'] else 'added'}: {entry['language']} {entry['word']} -> {entry['reading']}")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    entry = _pronunciations(args).delete(args.language, args.word)["deleted"]
    print(f"deleted: {entry['language']} {entry['word']}")
    return 0


def run_import(args: argparse.Namespace) -> int:
    try:
        size = args.tsv.stat().st_size
        if size > _TSV_LIMIT:
            raise PayloadTooLargeError(f"{args.tsv} is {size / 1e6:.1f} MB; the limit is {_TSV_LIMIT / 1e6:.1f} MB",
                                       code="reading_tsv_too_large", size=size, limit=_TSV_LIMIT)
        data = args.tsv.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {args.tsv}: {exc.strerror or exc}") from None
    report = _pronunciations(args).import_tsv(data)
    for problem in report["problems"]:
        print(f"line {problem['line']} not imported ({problem['code']}): {problem['message']}", file=sys.stderr)
    print(f"imported: {report['added']} added, {report['replaced']} replaced, "
          f"{len(report['problems'])} line(s) refused")
    return 1 if report["problems"] else 0


def run_export(args: argparse.Namespace) -> int:
    text = _pronunciations(args).export_tsv()
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_atomic(args.output, text.encode("utf-8"), suffix=".tsv")
        print(f"wrote {args.output}", file=sys.stderr)
    return 0
