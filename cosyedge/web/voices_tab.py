"""The page's My voices tab: the saved voices, each playable, renamable (its id stays), deletable
(after asking), exportable as the .zip that ``python -m cosyedge library export`` writes (with its
encodings), and importable with the same checks as ``library import`` (:meth:`Service.import_voice`):
when a voice with its id is here already, the tab asks whether to import it as a copy. A line says
how much room the library has left (its bounds, settings ``voice_library_max_voices`` / ``_mb``).

Each voice's transcript is shown for editing: typed, or heard offline (with the recognizer's
confidence) when it was saved without one; "Transcribe again" hears it anew in a queued job. An
edited transcript counts as typed (CosyVoice then always clones zero-shot with it).

"Encoded for" comes from the voice's own record (``encoded_for`` in its ``meta.json``, written when a
job uses it), not from the prompt cache, which may evict an encoding at any time. "Use in the clone
tab" is wired by the page (ui.py), which owns the clone tab: this tab hands it the chosen voice id.
"""

# No `from __future__ import annotations`: Gradio reads handler annotations at build time.
import html
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from cosyedge.voices.consent import describe as describe_consent
from cosyedge.errors import CosyedgeError
from cosyedge.service.facade import Service
from cosyedge.voices.transcripts import SOURCE_HEARD, ZERO_SHOT_CONFIDENCE, PromptTranscript
from cosyedge.voices.exchange import Imported
from cosyedge.voices.library import LibraryUsage, VoiceInfo

if TYPE_CHECKING:
    import gradio as gr

logger = logging.getLogger(__name__)

HEADERS = ["Name / 名称", "Length / 时长", "Encoded for / 已编码", "Saved with / 保存时的模型",
           "Saved on / 保存时间", "Speaker's consent / 说话人同意"]
INTRO = ("Voices saved from the clone tab (or imported). They are stored on this box as audio and "
         "can be used with every model; \"encoded for\" lists the models that have already used "
         "one (its first use on another model takes longer) / 从克隆页保存（或导入）的音色，以音频形式"
         "存在本机，任何模型都可使用；“已编码”列出已使用过它的模型（在其他模型上首次使用较慢）")
CANNOT = "Cannot do that / 无法执行"
CHOOSE_FIRST = "Choose a voice first / 请先选择音色"
NO_FILE = "Choose a voice .zip to import first / 请先选择要导入的音色 .zip"
#: Exported zips older than this are removed from the tab's temp folder (Gradio has copied them to
#: its own cache, which it sweeps, by the time the download link shows).
EXPORT_KEEP_S = 600.0

#: Maps a service error to the page's lasting toast (ui.py's mapping, passed in: ui.py mounts this
#: module, so this module does not import it).
Explain = Callable[[CosyedgeError, str], "gr.Error"]


@dataclass
class VoicesTab:
    """What the page wires to its other tabs: ``use`` (button) hands ``choice`` (the voice id) to
    the clone tab; ``changed`` are the events after which the voice dropdowns need new choices."""

    use: Any
    choice: Any
    changed: list[Any]


def rows(voices: list[VoiceInfo]) -> list[list[str]]:
    """The table's rows: name, length, the models it is encoded for, the model it was saved with,
    when, and when the speaker's consent was confirmed (cosyedge.voices.consent; it travels in the zip)."""
    return [[voice.name, f"{voice.duration_s:.1f} s",
             ", ".join(voice.encoded_for) or "none recorded / 无记录",
             voice.model_id or "-", time.strftime("%Y-%m-%d %H:%M", time.localtime(voice.created)),
             describe_consent(voice.consent)]
            for voice in voices]


def room_line(usage: LibraryUsage) -> str:
    """How full the library is and about how many more voices fit, in both languages."""
    held = f"{usage.voices} voice{'s' if usage.voices != 1 else ''}, {usage.bytes / 1e6:.1f} MB"
    held_zh = f"已有 {usage.voices} 个音色，{usage.bytes / 1e6:.1f} MB"
    if usage.room is None:
        return f"Saved: {held}; no bound set / {held_zh}；未设上限"
    bounds = " and ".join(b for b in (f"{usage.max_voices} voices" if usage.max_voices else "",
                                      f"{usage.max_bytes / 1e6:.0f} MB" if usage.max_bytes else "") if b)
    bounds_zh = "、".join(b for b in (f"{usage.max_voices} 个" if usage.max_voices else "",
                                     f"{usage.max_bytes / 1e6:.0f} MB" if usage.max_bytes else "") if b)
    if usage.room == 0:
        return (f"**The library is full**: {held} of at most {bounds}; delete a voice to save or import "
                f"another (nothing is removed by itself) / **音色库已满**：{held_zh}，上限 {bounds_zh}；"
                "删除一个音色后才能保存或导入新的（不会自动删除）")
    return (f"Room for about {usage.room} more voice{'s' if usage.room != 1 else ''} ({held} of at most "
            f"{bounds}) / 还能保存约 {usage.room} 个音色（{held_zh}，上限 {bounds_zh}）")


def imported_line(done: Imported) -> str:
    """What an import did, for the message line: the voice, and the encodings it brought."""
    line = f"Imported / 已导入: {html.escape(done.info.name)} ({html.escape(done.info.id)})"
    if done.reused:
        models = ", ".join(html.escape(m) for m in done.reused)
        line += (f"; its encoding for {models} reused: no encoding needed there / "
                 f"已复用 {models} 的编码，无需重新编码")
    if done.skipped:
        line += "; encoded again at first use for " + ", ".join(
            f"{html.escape(m)} ({html.escape(why)})" for m, why in done.skipped) + " / 首次使用时重新编码"
    return line


def choices(voices: list[VoiceInfo]) -> list[tuple[str, str]]:
    """Dropdown (label, value) pairs: the name (and id, which two similar names can share a
    stem of), valued by id."""
    return [(f"{voice.name} ({voice.id})", voice.id) for voice in voices]


def transcript_line(transcript: PromptTranscript) -> str:
    """Where a voice's transcript came from, in words, under its box."""
    if not transcript.text:
        return ("No transcript yet: it is heard offline when the voice is saved or first cloned / "
                "暂无文本：保存或首次克隆时离线识别")
    if transcript.source != SOURCE_HEARD:
        return "Typed (used as it is for zero-shot cloning) / 手动输入（零样本克隆直接使用）"
    confidence = transcript.confidence or 0.0
    verdict = ("sure enough for zero-shot cloning / 可用于零样本克隆" if transcript.trusted else
               "unsure: cloned cross-lingually until you correct it / 不可靠：修改前按跨语种克隆")
    return (f"Heard offline, confidence {confidence:.2f} (zero-shot needs {ZERO_SHOT_CONFIDENCE:.2f}): "
            f"{verdict} / 离线识别")


class ExportFolder:
    """A temp folder for exported zips, emptied of old ones at each export (bounded on disk)."""

    def __init__(self) -> None:
        self._path: Path | None = None

    def write(self, voice_id: str, data: bytes) -> Path:
        if self._path is None or not self._path.is_dir():
            self._path = Path(tempfile.mkdtemp(prefix="cosyedge-voice-export-"))
        now = time.time()
        for old in self._path.iterdir():
            try:
                if now - old.stat().st_mtime > EXPORT_KEEP_S:
                    old.unlink()
            except OSError as exc:
                logger.warning("could not remove old export %s: %s", old, exc)
        target = self._path / f"{voice_id}.voice.zip"
        target.write_bytes(data)
        return target


def build(service: Service, explain: Explain) -> VoicesTab:
    """The tab, inside the page's ``gr.Tabs``."""
    import gradio as gr

    exports = ExportFolder()

    def fail(message: str) -> "gr.Error":
        return gr.Error(html.escape(f"{CANNOT}: {message}", quote=False), duration=None)

    def view(selected: str | None = None) -> tuple[dict, dict, str]:
        voices = service.saved_voices()
        ids = [voice.id for voice in voices]
        return (gr.update(value=rows(voices)),
                gr.update(choices=choices(voices), value=selected if selected in ids else None),
                room_line(service.library.usage()))

    def pick(voice_id: str | None) -> tuple[Any, Any, Any, str, str]:
        """The chosen voice's recording for the player, its name in the rename box and its
        transcript in the transcript box."""
        if not voice_id:
            return None, "", gr.update(visible=False), "", ""
        try:
            pcm, rate = service.voice_recording(voice_id)
            name = next((v.name for v in service.saved_voices() if v.id == voice_id), "")
            transcript = service.voice_transcript(voice_id)
        except CosyedgeError as exc:
            raise explain(exc, CANNOT) from exc
        pcm16 = (np.clip(pcm, -1.0, 1.0) * 32767).astype(np.int16)  # what the player plays, unconverted
        return (rate, pcm16), name, gr.update(visible=False), transcript.text, transcript_line(transcript)

    def save_transcript(voice_id: str | None, text: str) -> tuple[str, str]:
        if not voice_id:
            raise fail(CHOOSE_FIRST)
        try:
            service.set_voice_transcript(voice_id, text or "")
            transcript = service.voice_transcript(voice_id)
        except CosyedgeError as exc:
            raise explain(exc, CANNOT) from exc
        return transcript_line(transcript), "Transcript saved / 文本已保存"

    async def transcribe_again(voice_id: str | None, request: gr.Request) -> tuple[str, str, str]:
        if not voice_id:
            raise fail(CHOOSE_FIRST)
        try:
            job = service.transcribe_voice(voice_id, owner=f"voices-{request.session_hash}")
            await job.wait_async()
            transcript = service.voice_transcript(voice_id)
        except CosyedgeError as exc:
            raise explain(exc, CANNOT) from exc
        return transcript.text, transcript_line(transcript), "Transcribed / 已识别"

    def rename(voice_id: str | None, new_name: str) -> tuple[dict, dict, str]:
        if not voice_id:
            raise fail(CHOOSE_FIRST)
        try:
            info = service.rename_voice(voice_id, new_name or "")
        except CosyedgeError as exc:
            raise explain(exc, CANNOT) from exc
        table, dropdown, _ = view(info.id)
        return table, dropdown, (f"Renamed / 已重命名: {html.escape(info.name)} (id {html.escape(info.id)} "
                                 "stays / id 不变)")

    def ask_delete(voice_id: str | None) -> tuple[dict, str]:
        if not voice_id:
            raise fail(CHOOSE_FIRST)
        name = next((v.name for v in service.saved_voices() if v.id == voice_id), voice_id)
        return (gr.update(visible=True),
                f"Delete **{html.escape(name)}** for everyone on this box? This cannot be undone / "
                f"删除音色 {html.escape(name)}？本机所有用户都将无法使用，且无法恢复")

    def delete(voice_id: str | None) -> tuple[dict, dict, dict, Any, str]:
        if not voice_id:
            raise fail(CHOOSE_FIRST)
        try:
            service.delete_voice(voice_id)
        except CosyedgeError as exc:
            raise explain(exc, CANNOT) from exc
        table, dropdown, room = view()
        return (table, dropdown, gr.update(visible=False), None, f"Deleted / 已删除: {html.escape(voice_id)}",
                room)

    def export(voice_id: str | None) -> tuple[str, str]:
        if not voice_id:
            raise fail(CHOOSE_FIRST)
        try:
            data = service.export_voice(voice_id)
        except CosyedgeError as exc:
            raise explain(exc, CANNOT) from exc
        path = exports.write(voice_id, data)
        return str(path), f"Exported / 已导出: {html.escape(path.name)} ({len(data) / 1024:.0f} KiB)"

    def import_zip(path: str | None, name: str, rename: bool = False) -> tuple[Any, ...]:
        """(table, dropdown, message, the "import as a copy?" row, its question, room line). A voice
        whose id is here already is not refused outright: the row asks."""
        if not path:
            raise fail(NO_FILE)
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise fail(f"the uploaded file is no longer on the server ({exc.strerror}): choose it again"
                       " / 上传的文件已不在服务器上，请重新选择") from None
        try:
            done = service.import_voice(data, name=(name or "").strip() or None, rename=rename)
        except CosyedgeError as exc:
            if exc.code != "voice_exists":
                raise explain(exc, CANNOT) from exc
            held, held_id = html.escape(str(exc.params["name"])), html.escape(str(exc.params["voice_id"]))
            return (gr.skip(), gr.skip(), "", gr.update(visible=True),
                    f"A voice with id **{held_id}** ({held}) is on this box already. Import this one as a "
                    f"copy beside it (under the name typed above, or its own numbered)? / 本机已有 id 为 "
                    f"{held_id} 的音色（{held}）。要把它作为副本导入吗（使用上面输入的名称，或原名加编号）？",
                    gr.skip())
        table, dropdown, room = view(done.info.id)
        return table, dropdown, imported_line(done), gr.update(visible=False), "", room

    voices = service.saved_voices()
    with gr.Tab("My voices / 我的音色", id="voices") as tab:
        gr.Markdown(INTRO)
        room = gr.Markdown(room_line(service.library.usage()), elem_id="voices-room")
        table = gr.Dataframe(headers=HEADERS, value=rows(voices), interactive=False, wrap=True,
                             elem_id="voices-table")
        choice = gr.Dropdown(choices(voices), value=None, label="Voice / 音色", elem_id="voices-choice")
        recording = gr.Audio(type="numpy", label="Recording / 录音", interactive=False,
                             buttons=["download"], elem_id="voices-recording")
        with gr.Row():
            new_name = gr.Textbox(label="Name / 名称", scale=3, elem_id="voices-new-name")
            rename_btn = gr.Button("Rename / 重命名", scale=1, elem_id="voices-rename")
        with gr.Row():
            transcript_box = gr.Textbox(label="Transcript (what the recording says) / 文本（录音内容）", scale=3,
                                        elem_id="voices-transcript")
            save_transcript_btn = gr.Button("Save transcript / 保存文本", scale=1, elem_id="voices-save-transcript")
            transcribe_btn = gr.Button("Transcribe again / 重新识别", scale=1, elem_id="voices-transcribe")
        transcript_info = gr.Markdown(elem_id="voices-transcript-info")
        with gr.Row():
            use = gr.Button("Use in the clone tab / 在克隆页使用", variant="primary", elem_id="voices-use")
            export_btn = gr.Button("Export .zip / 导出 .zip", elem_id="voices-export")
            delete_btn = gr.Button("Delete… / 删除…", variant="stop", elem_id="voices-delete")
        with gr.Row(visible=False, elem_id="voices-confirm") as confirm:
            question = gr.Markdown(elem_id="voices-confirm-text")
            yes = gr.Button("Yes, delete / 确认删除", variant="stop", elem_id="voices-delete-yes")
            no = gr.Button("Keep it / 保留", elem_id="voices-delete-no")
        exported = gr.File(label="Exported voice / 导出的音色", interactive=False, elem_id="voices-exported")
        with gr.Row():
            upload = gr.File(label="Import a voice .zip / 导入音色 .zip", file_types=[".zip"], type="filepath",
                             scale=3, elem_id="voices-import-file")
            import_name = gr.Textbox(label="Import as (optional) / 导入为（可选）", scale=2,
                                     elem_id="voices-import-name")
            import_btn = gr.Button("Import / 导入", scale=1, elem_id="voices-import")
        with gr.Row(visible=False, elem_id="voices-import-confirm") as import_confirm:
            import_question = gr.Markdown(elem_id="voices-import-question")
            import_copy = gr.Button("Import as a copy / 作为副本导入", variant="primary",
                                    elem_id="voices-import-copy")
            import_cancel = gr.Button("Cancel / 取消", elem_id="voices-import-cancel")
        message = gr.Markdown(elem_id="voices-message")

    tab.select(view, inputs=[choice], outputs=[table, choice, room], queue=False)
    choice.change(pick, inputs=[choice], outputs=[recording, new_name, confirm, transcript_box, transcript_info])

    def then_clear(button: Any) -> Any:
        """``button``'s click, after the last action's message is cleared: a refused action must not
        leave the line of an earlier one that succeeded ("Imported" beside an import's error)."""
        return button.click(lambda: "", inputs=None, outputs=[message], queue=False)

    then_clear(save_transcript_btn).then(save_transcript, inputs=[choice, transcript_box],
                                         outputs=[transcript_info, message])
    then_clear(transcribe_btn).then(transcribe_again, inputs=[choice],
                                    outputs=[transcript_box, transcript_info, message])
    # Queued events (the default): only a queued event shows a gr.Error as a toast.
    renamed = then_clear(rename_btn).then(rename, inputs=[choice, new_name], outputs=[table, choice, message])
    delete_btn.click(ask_delete, inputs=[choice], outputs=[confirm, question])
    no.click(lambda: gr.update(visible=False), inputs=None, outputs=[confirm], queue=False)
    deleted = then_clear(yes).then(delete, inputs=[choice],
                                   outputs=[table, choice, confirm, recording, message, room])
    then_clear(export_btn).then(export, inputs=[choice], outputs=[exported, message])
    import_outputs = [table, choice, message, import_confirm, import_question, room]
    imported = then_clear(import_btn).then(import_zip, inputs=[upload, import_name], outputs=import_outputs)
    copied = then_clear(import_copy).then(lambda path, name: import_zip(path, name, rename=True),
                                          inputs=[upload, import_name], outputs=import_outputs)
    import_cancel.click(lambda: gr.update(visible=False), inputs=None, outputs=[import_confirm], queue=False)
    return VoicesTab(use=use, choice=choice, changed=[renamed, deleted, imported, copied])
