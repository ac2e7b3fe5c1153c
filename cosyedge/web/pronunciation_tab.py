"""The page's "Pronunciation / 读音" tab: the box's pronunciation dictionary (docs/pronunciation.md).

A table of the entries (choose a row to edit it); language, word and reading boxes with Save (adds
or replaces), Delete and Listen (the word read with the reading in the chosen voice, through the
inline form ``{word|reading}``, so an edit can be heard before it is saved); TSV import (the bad
lines listed, the good ones kept) and export; and the file's unreadable lines, if any. Everything
goes through the service (``Service.pronunciation_entries`` and friends); a bad entry is the
service's coded refusal, shown as a lasting toast in both languages.
"""

# No `from __future__ import annotations`: Gradio reads handler annotations at build time.
import asyncio
import html
import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from cosyedge.errors import CancelledError, CosyedgeError
from cosyedge.service.facade import Service
from cosyedge.service.requests import TTSRequest
from cosyedge.web.job_wait import wait_reporting

if TYPE_CHECKING:
    import gradio as gr

logger = logging.getLogger(__name__)

CANNOT = "Cannot change the pronunciation dictionary / 无法修改读音词典"
CANNOT_LISTEN = "Cannot read the entry / 无法试听词条"
HEADERS = ["Language / 语言", "Word / 词", "Reading / 读音"]
LANGUAGES = [("Mandarin / 普通话 (zh)", "zh"), ("English / 英语 (en)", "en"), ("Japanese / 日语 (ja)", "ja")]
INTRO = ("How the box reads a word, for every voice, model and route (page, REST, CLI, lessons). Mandarin: "
         "toned pinyin, one syllable per character (银行 → `yin2 hang2` or `yín háng`); English: IPA "
         "(`/ˈniːs/`) or ARPAbet (`N IY1 S`); Japanese: kana. The longest entry wins; English ignores case. "
         "For one place only, write `{word|reading}` in the text: `他在{银行|yin2 hang2}上班` / "
         "本机朗读某个词的读法，对所有音色、模型和入口都有效。普通话写带声调的拼音，一字一音节；英语写 IPA "
         "或 ARPAbet；日语写假名。只改一处时，在文本里写 `{词|读音}`。")

#: Maps a service error to the page's lasting toast (ui.py's mapping, passed in).
Explain = Callable[[CosyedgeError, str], "gr.Error"]


def rows(listing: dict[str, Any]) -> list[list[str]]:
    """The table's rows from :meth:`Service.pronunciation_entries`."""
    return [[e["language"], e["word"], e["reading"]] for e in listing["entries"]]


def file_note(listing: dict[str, Any]) -> str:
    """The entry count, and the file's unreadable lines (skipped, kept) when it has any."""
    lines = [f"{len(listing['entries'])} entr{'y' if len(listing['entries']) == 1 else 'ies'} / 个词条"]
    for problem in listing["problems"][:20]:
        where = f"line {problem['line']}" if problem["line"] else "the file"
        lines.append(f"Unreadable {where} (skipped) / 无法读取，已跳过: {html.escape(problem['message'])}")
    if listing.get("kept_copy"):
        lines.append(f"The damaged file was kept whole as / 损坏的文件已完整保留为 "
                     f"`{html.escape(Path(listing['kept_copy']).name)}`")
    return "  \n".join(lines)


def import_note(report: dict[str, Any]) -> str:
    """What an import did, with each refused line and why."""
    lines = [f"Imported / 已导入: {report['added']} added / 新增, {report['replaced']} replaced / 替换, "
             f"{len(report['problems'])} line(s) refused / 行未导入"]
    for problem in report["problems"][:50]:
        lines.append(f"line / 行 {problem['line']}: {html.escape(problem['message'])}")
    return "  \n".join(lines)


def build(service: Service, explain: Explain, voice_choices: Callable[[], list[tuple[str, str]]],
          voice_fields: Callable[[str | None], dict[str, Any]],
          session: Callable[[Any], str]) -> None:
    """The tab, inside the page's ``gr.Tabs``; the voice list and its request fields are the page's."""
    import gradio as gr

    export_dir = Path(tempfile.mkdtemp(prefix="cosyedge-pronunciations-"))

    def view() -> tuple[dict, str]:
        listing = service.pronunciation_entries()
        return gr.update(value=rows(listing)), file_note(listing)

    def save(language: str, word: str, reading: str) -> tuple[dict, str, str]:
        try:
            done = service.add_pronunciation(language, word, reading)
        except CosyedgeError as exc:
            raise explain(exc, CANNOT) from exc
        entry = done["entry"]
        table, note = view()
        said = "Replaced / 已替换" if done["replaced"] else "Saved / 已保存"
        return table, note, f"{said}: {html.escape(entry['word'])} → {html.escape(entry['reading'])}"

    def delete(language: str, word: str) -> tuple[dict, str, str]:
        try:
            done = service.delete_pronunciation(language, word)
        except CosyedgeError as exc:
            raise explain(exc, CANNOT) from exc
        table, note = view()
        return table, note, f"Deleted / 已删除: {html.escape(done['deleted']['word'])}"

    def pick(evt: gr.SelectData) -> tuple[str, str, str]:
        language, word, reading = (evt.row_value or ["zh", "", ""])[:3]
        return language, word, reading

    async def listen(language: str, word: str, reading: str, voice: str | None, request: gr.Request):
        if not (word or "").strip() or not (reading or "").strip():
            raise gr.Error(f"{CANNOT_LISTEN}: type the word and its reading / 请输入词和读音", duration=None)
        text = "{" + word.strip() + "|" + reading.strip() + "}"
        tts = TTSRequest(text=text, **voice_fields(voice), language=language, keep_file=True)
        try:
            job = await asyncio.to_thread(service.submit, tts, session(request))
            result = await wait_reporting(service, job, lambda job: None)
        except CancelledError:
            return None
        except CosyedgeError as exc:
            raise explain(exc, CANNOT_LISTEN) from exc
        return str(result.path)

    def import_tsv(path: str | None) -> tuple[dict, str, str]:
        if not path:
            raise gr.Error(f"{CANNOT}: choose a .tsv file first / 请先选择 .tsv 文件", duration=None)
        try:
            data = Path(path).read_bytes()
            report = service.import_pronunciations(data)
        except OSError as exc:
            raise gr.Error(f"{CANNOT}: the file is no longer on the server: choose it again / "
                           "文件已不在服务器上，请重新选择", duration=None) from exc
        except CosyedgeError as exc:
            raise explain(exc, CANNOT) from exc
        table, note = view()
        return table, note, import_note(report)

    def export() -> str:
        target = export_dir / "pronunciations.tsv"
        target.write_text(service.export_pronunciations(), encoding="utf-8")
        return str(target)

    listing = service.pronunciation_entries()
    with gr.Tab("Pronunciation / 读音", id="pronunciation") as tab:
        gr.Markdown(INTRO)
        table = gr.Dataframe(headers=HEADERS, value=rows(listing), interactive=False, wrap=True,
                             elem_id="pron-table")
        note = gr.Markdown(file_note(listing), elem_id="pron-file")
        with gr.Row():
            language = gr.Dropdown(LANGUAGES, value="zh", label="Language / 语言", scale=1, elem_id="pron-language")
            word = gr.Textbox(label="Word / 词", scale=2, placeholder="银行 / Nice / 東京", elem_id="pron-word")
            reading = gr.Textbox(label="Reading / 读音", scale=3, placeholder="yin2 hang2 / ˈniːs / とうきょう",
                                 elem_id="pron-reading")
        with gr.Row():
            save_btn = gr.Button("Save entry / 保存词条", variant="primary", elem_id="pron-save")
            delete_btn = gr.Button("Delete / 删除", variant="stop", elem_id="pron-delete")
        done = gr.Markdown(elem_id="pron-result")
        with gr.Row():
            voice = gr.Dropdown(voice_choices(), value=(voice_choices() or [(None, None)])[0][1],
                                label="Listen in the voice / 试听音色", scale=2, elem_id="pron-voice")
            listen_btn = gr.Button("Listen / 试听", scale=1, elem_id="pron-listen")
        heard = gr.Audio(type="filepath", label="The entry read aloud / 词条朗读", interactive=False,
                         elem_id="pron-audio")
        with gr.Row():
            upload = gr.File(file_types=[".tsv", ".txt"], type="filepath", label="Import TSV / 导入 TSV",
                             elem_id="pron-import-file")
            with gr.Column():
                import_btn = gr.Button("Import / 导入", elem_id="pron-import")
                export_btn = gr.Button("Export TSV / 导出 TSV", elem_id="pron-export")
        exported = gr.File(label="Dictionary (TSV) / 词典（TSV）", interactive=False, elem_id="pron-export-file")
        imported = gr.Markdown(elem_id="pron-import-result")
    tab.select(view, inputs=None, outputs=[table, note], queue=False)
    tab.select(lambda: gr.update(choices=voice_choices()), inputs=None, outputs=[voice], queue=False)
    table.select(pick, inputs=None, outputs=[language, word, reading], queue=False)
    # queued: only a queued event shows gr.Error as a toast
    save_btn.click(save, inputs=[language, word, reading], outputs=[table, note, done], concurrency_limit=1)
    delete_btn.click(delete, inputs=[language, word], outputs=[table, note, done], concurrency_limit=1)
    listen_btn.click(listen, inputs=[language, word, reading, voice], outputs=[heard], concurrency_id="synthesis")
    import_btn.click(import_tsv, inputs=[upload], outputs=[table, note, imported], concurrency_limit=1)
    export_btn.click(export, inputs=None, outputs=[exported], concurrency_limit=1)
