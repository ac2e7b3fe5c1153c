"""cosyedge.errors: every error has a code its type lists, and no code reads a message to decide.

The two source checks walk the package with the standard library's ``ast``: every ``XError(...,
code="...")`` names a code that ``XError`` lists (and every listed code is raised somewhere), and no
code compares, searches or edits message text (``"..." in str(exc)``, ``message.replace(...)``,
``re.search(..., exc.message)``). Each check is also run on a deliberately broken snippet, to show it
fails.
"""

from __future__ import annotations

import ast

import pytest

from cosyedge.errors import BusyError, InputError, ModelMissingError, TextError, error_codes
from tests.helpers.code_scan import PACKAGE, code_problems, package_sources

def error_code_problems(sources: dict[str, str]) -> tuple[list[str], set[str]]:
    """(problems, codes raised): a code its type does not list, or one that is no literal."""
    types = {cls.__name__: cls for cls in error_codes().values()}
    return code_problems(sources, set(types), lambda callee: types[callee].__dict__.get("codes", ()),
                         lambda callee, code: f"{callee} does not list the code {code!r}")


def test_every_raise_site_names_a_code_its_type_lists():
    problems, _ = error_code_problems(package_sources())
    assert problems == []


def test_every_listed_error_code_is_raised_somewhere():
    _, used = error_code_problems(package_sources())
    listed = {code for cls in set(error_codes().values()) for code in cls.__dict__.get("codes", ())}
    assert listed - used == set(), "listed but never raised"


def test_the_code_check_fails_on_a_wrong_code():
    bad = {"bad.py": 'raise TextError("x", code="no_such_code")\n'
                     'raise AudioError("y", code="text_empty")\n'  # TextError's code on another type
                     'raise NotFoundError("z", code=CODE)\n'}
    problems, _ = error_code_problems(bad)
    assert len(problems) == 3, problems


def test_codes_are_unique_across_the_tree():
    seen: dict[str, str] = {}
    for cls in set(error_codes().values()):
        for code in cls.__dict__.get("codes", ()):
            assert code not in seen, f"{code} listed on {seen[code]} and {cls.__name__}"
            seen[code] = cls.__name__
    kinds = {cls.kind for cls in error_codes().values()}
    assert not kinds & set(seen), "a code that is also a kind would name two things"


def test_an_error_without_a_code_has_its_kind_and_params_are_read_only():
    plain = ModelMissingError("no model")
    assert (plain.code, dict(plain.params), plain.message) == ("model_missing", {}, "no model")
    coded = TextError("text is 9 characters; the limit is 5", code="text_too_long", length=9, limit=5)
    assert (coded.code, coded.kind, coded.http_status) == ("text_too_long", "invalid_text", 400)
    assert isinstance(coded, InputError) and dict(coded.params) == {"length": 9, "limit": 5}
    with pytest.raises(TypeError):
        coded.params["length"] = 10  # type: ignore[index]
    busy = BusyError("busy", retry_after=7, code="queue_full", running=2, waiting=8)
    assert (busy.retry_after, busy.code, busy.params["waiting"]) == (7, "queue_full", 8)


def test_rest_error_body_carries_the_code(make_service):
    from fastapi.testclient import TestClient

    from cosyedge.web.api import create_api

    client = TestClient(create_api(make_service()))
    body = client.post("/tts", json={"text": "x" * 5001}).json()
    assert set(body["error"]) == {"type", "code", "message", "param"}  # param: OpenAI's shape
    assert body["error"]["type"] == "invalid_text" and body["error"]["code"] == "text_too_long"
    assert body["error"]["message"] == "text is 5001 characters; the limit is 5000"
    assert client.get("/jobs/nope").json()["error"]["code"] == "job_unknown"
    assert client.get("/no-such-route").json()["error"]["code"] == "not_found"  # no finer code: the type


# --- nothing reads a message to decide ----------------------------------------------------------

#: Attributes and names that hold message text (ours, or a library's).
MESSAGE_ATTRS = {"message", "error_string", "voice_match", "notes"}
MESSAGE_NAMES = {"message", "reason", "note", "detail"}
EXCEPTION_NAMES = {"exc", "e", "err", "error"}
#: Methods whose result is still the message ("msg.lower()").
SAME_TEXT = {"lower", "upper", "casefold", "strip", "lstrip", "rstrip"}
TEXT_METHODS = {"startswith", "endswith", "replace", "find", "rfind", "index", "count", "partition",
                "rpartition"}
REGEX_METHODS = {"search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"}


def _is_message(node: ast.AST, tainted: set[str]) -> bool:
    """True when ``node`` is message text: ``exc.message``, ``str(exc)``, a name holding one..."""
    if isinstance(node, ast.Attribute):
        return node.attr in MESSAGE_ATTRS
    if isinstance(node, ast.Name):
        return node.id in MESSAGE_NAMES or node.id in tainted
    if isinstance(node, ast.BoolOp):
        return any(_is_message(value, tainted) for value in node.values)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in SAME_TEXT:
            return _is_message(func.value, tainted)
        if isinstance(func, ast.Name) and func.id == "str" and node.args:
            return any((isinstance(n, ast.Name) and n.id in EXCEPTION_NAMES)
                       or (isinstance(n, ast.Attribute) and n.attr in MESSAGE_ATTRS)
                       for n in ast.walk(node.args[0]))
        if isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) > 1:
            name = node.args[1]
            return isinstance(name, ast.Constant) and name.value in MESSAGE_ATTRS
    return False


def message_parsing(source: str) -> list[int]:
    """Lines that compare, search or edit message text."""
    tree = ast.parse(source)
    tainted: set[str] = set()
    for _ in range(2):  # names assigned message text, and names assigned those
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _is_message(node.value, tainted):
                tainted |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            against_text = any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) or any(
                isinstance(o, ast.Constant) and isinstance(o.value, str) for o in operands)
            if against_text and any(_is_message(o, tainted) for o in operands):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in TEXT_METHODS and _is_message(node.func.value, tainted):
                lines.append(node.lineno)
            elif node.func.attr in REGEX_METHODS and any(_is_message(a, tainted) for a in node.args):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_no_code_in_the_package_reads_a_message():
    found = {path: lines for path, source in package_sources().items() if (lines := message_parsing(source))}
    assert found == {}


def test_the_page_has_no_regex_at_all():
    tree = ast.parse((PACKAGE / "web" / "ui.py").read_text("utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "re" not in imported


@pytest.mark.parametrize("snippet", [
    # the page's old translation, its old page words and its old voice-search check
    "def chinese_reason(message):\n    for pattern, zh in REASONS:\n        m = pattern.search(message)\n",
    "def page_words(note):\n    for k, v in WORDS.items():\n        note = note.replace(k, v)\n",
    "if 'similarity' in result.voice_match:\n    pass\n",
    # a library's words instead of its error number
    "detail = str(getattr(exc, 'error_string', '') or exc)\n"
    "if 'format not recognised' in detail.lower():\n    pass\n",
    "if exc.message.startswith('busy'):\n    pass\n",
    "if 'disk' in str(e):\n    pass\n",
])
def test_the_message_check_fails_on_message_parsing(snippet):
    assert message_parsing(snippet), snippet


def test_the_message_check_lets_codes_and_display_pass():
    ok = ("if exc.code == 'text_too_long':\n    pass\n"
          "logger.info('%s: %s', exc.kind, exc.message)\n"
          "text = f'{exc.message} / {chinese}'\n"
          "if value.startswith(SAVED_PREFIX):\n    pass\n")
    assert message_parsing(ok) == []
