"""The Gradio page: three generate tabs over one :class:`~cosyedge.service.facade.Service`, and the
studio tabs it mounts (``models_tab``, ``voices_tab``, ``history_tab``). Handlers stay thin.

Every generate handler submits a streaming :class:`TTSRequest`, shows a live player at once
(:mod:`cosyedge.web.live_player`), then waits for its job while reporting the queue position or
per-sentence progress through ``gr.Progress``; the finished WAV lands in the tab's download player
with the report panel beside it (:mod:`cosyedge.web.report_panel`). Cancel comes from the cancel
button (which cancels the session's jobs; the waiting handler then ends with "Cancelled / 已取消"),
from the page being closed (``demo.unload``), or from Gradio cancelling the event; each cancels the
jobs in the JobQueue, which stops synthesis between sentences.

Feedback: errors are toasts that stay until closed, led by a bilingual title (this Gradio shows no
toast titles) and HTML-escaped (toasts render HTML); user text in the result panel is escaped too.
The page's Chinese for a refusal and its words for a note come from tables keyed by the error's or
note's code (:mod:`cosyedge.web.page_words`), never from reading the English text.
"""

# No `from __future__ import annotations` here: Gradio reads the handlers' annotations at build time
# to inject gr.Request and gr.Progress, so they must be real objects, not strings.
import asyncio
import html
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from cosyedge.errors import BusyError, CancelledError, CosyedgeError
from cosyedge.service.jobs import PHASE_STARTING, Job
from cosyedge.service.facade import Service
from cosyedge.service.requests import (DEFAULT_QUALITY, PHASE_LOADING, PHASE_PREPARING_VOICE, PHASE_SCORING,
                                       PHASE_SYNTHESIZING, PHASE_TRANSCRIBING, SPEED_RANGE, TTSRequest, TTSResult)
from cosyedge.voices.transcripts import ZERO_SHOT_CONFIDENCE, PromptTranscript
from cosyedge.web.job_wait import voice_progress, wait_reporting
from cosyedge.web.lesson_ui import (CANNOT_READ_LESSON, LESSON_GONE, NO_LESSON_FILE, download_name,
                                    follow_lesson, lesson_controls, lesson_line, named_download)
from cosyedge.web.live_player import LIVE_LESSON, LIVE_PLAYER_HTML, LIVE_PLAYER_JS, LIVE_STOP, live_player
from cosyedge.web.mode_check_panel import label_verdict
from cosyedge.web.page_words import chinese_reason
from cosyedge.web.report_panel import caption_lines, describe, plain

if TYPE_CHECKING:  # gradio is heavy; import it only when the page is built
    import gradio as gr

logger = logging.getLogger(__name__)

STATUS_REFRESH_S = 2.0
INSTRUCT_EXAMPLES = [
    "用开心的语气说",
    "请用温柔、缓慢的语气朗读",
    "用四川话说这句话",
    "Read this slowly and warmly.",
    "Speak cheerfully, like a children's storyteller.",
    "Whisper, as if telling a secret.",
]
#: The language dropdown's labels, by code, in the order it lists them; it offers the served engine's
#: (``language_choices``).
LANGUAGE_LABELS = {"auto": "auto / 自动", "zh": "中文 zh", "en": "English en", "ja": "日本語 ja",
                   "ko": "한국어 ko", "de": "Deutsch de", "es": "Español es", "fr": "Français fr",
                   "it": "Italiano it", "ru": "Русский ru"}
#: System fonts only: the page must not ask any font server for anything.
SANS = ["system-ui", "-apple-system", "Segoe UI", "Noto Sans", "Noto Sans CJK SC", "PingFang SC",
        "Microsoft YaHei", "sans-serif"]
MONO = ["ui-monospace", "DejaVu Sans Mono", "Consolas", "monospace"]


#: The page's own CSS. Toasts: Gradio stacks them at the top right, where a few errors in a row
#: covered the tab bar; they go to the bottom right instead, and a pile of them scrolls within 40 %
#: of the window. The tab bar is a little more compact than Gradio's, so the eight tabs fit a
#: 1280-pixel screen (Gradio moves the tabs that do not fit under "More tabs").
PAGE_CSS = """
.toast-wrap { top: auto !important; bottom: 12px !important; max-height: 40vh; overflow-y: auto; }
.tab-container button { padding: 0 var(--size-2); }
"""


def theme() -> "gr.themes.Base":
    """The default look with system fonts (no Google or CDN requests)."""
    import gradio as gr

    return gr.themes.Default(font=SANS, font_mono=MONO)


def _session(request: "gr.Request | None") -> str:
    """The owner key of this browser session's jobs."""
    return f"ui:{getattr(request, 'session_hash', None) or 'anonymous'}"


#: Title of the toasts a failed generate raises (the page's language: English / 中文).
CANNOT_GENERATE = "Cannot generate / 无法生成"
CANNOT_SAVE = "Cannot save the voice / 无法保存音色"
CANNOT_TRANSCRIBE = "Cannot transcribe the prompt / 无法识别参考音频文本"
CANCELLED = "Cancelled / 已取消"
EMPTY_TEXT = "Type some text to read / 请输入要合成的文本"
NO_PROMPT_TO_SAVE = "Record or upload 3-10 s of a voice first / 请先录制或上传 3-10 秒参考音频"
#: How long Gradio keeps an upload, a recording or its copy of a result in its cache: a school day,
#: so a prompt uploaded in the morning still works in the afternoon (it was one hour).
UPLOAD_KEEP_S = 24 * 3600
PROMPT_GONE = ("The prompt audio is no longer on the server (the page keeps uploads and recordings for "
               f"{UPLOAD_KEEP_S // 3600} hours): upload or record it again / 参考音频已不在服务器上"
               f"（上传和录音保留 {UPLOAD_KEEP_S // 3600} 小时），请重新上传或录制")
NO_SAVE_NAME = "Type a name to save the voice as / 请输入音色名称"
#: The clone tab's one consent box, for generating from the prompt and for saving it
#: (cosyedge.voices.consent: the service refuses both without it).
CONSENT_LABEL = ("The speaker of the prompt audio agreed to have their voice cloned / "
                 "参考音频的说话人已同意克隆其声音")


def ui_error(message: str, title: str = CANNOT_GENERATE) -> "gr.Error":
    """A toast that stays until it is closed: a reason that vanishes after 10 s leaves a teacher
    with only the red "Error" badges and no idea what went wrong. The page's Gradio (6.x) heads
    every error toast "Error" and does not show ``title``, so the bilingual title also leads the
    message: a service reason (English) still comes with the page's Chinese. The toast renders its
    text as HTML, and reasons quote user input (a voice name, an SSML tag), so it is escaped."""
    import gradio as gr

    return gr.Error(html.escape(f"{title}: {message}", quote=False), title=title, duration=None)


def _ui_error(exc: CosyedgeError, title: str = CANNOT_GENERATE) -> "gr.Error":
    """Map the project's errors to a lasting Gradio error with a title naming the kind. The message
    is the service's own (English); the title and the retry hint are the page's (bilingual)."""
    chinese = chinese_reason(exc)
    message = f"{exc.message} / {chinese}" if chinese else exc.message
    if isinstance(exc, BusyError):
        return ui_error(f"{message} (retry in about {exc.retry_after} s / 约 {exc.retry_after} 秒后重试)",
                        title="Busy / 繁忙")
    return ui_error(message, title=title)


#: The page's bilingual words for service phases that take long enough to be read (a new prompt's
#: encoding on CosyVoice; on Kokoro, about a second); others show as they are.
PREPARING_VOICE = "preparing the voice (a new prompt takes longer the first time) / 正在准备音色（新的参考音频首次较慢）"
PHASE_LABELS = {PHASE_PREPARING_VOICE: PREPARING_VOICE, PHASE_LOADING: "loading the model… / 正在加载模型…",
                PHASE_STARTING: "starting / 正在开始", PHASE_SYNTHESIZING: "synthesizing / 正在合成",
                PHASE_SCORING: "measuring the similarity to the prompt / 正在测量与参考音频的相似度",
                PHASE_TRANSCRIBING: "transcribing the prompt offline / 正在离线识别参考音频文本"}


async def run_request(service: Service, tts: TTSRequest, request: "gr.Request | None",
                      progress: Any) -> tuple[str | None, str, list[str] | None]:
    """Submit one request, report position/progress while it runs, return (wav path, panel, caption files)."""
    job = await _submit(service, tts, request, stream=False)
    return await _follow(service, job, progress)


async def stream_request(service: Service, tts: TTSRequest, request: "gr.Request | None",
                         progress: Any) -> AsyncIterator[tuple[Any, Any, Any]]:
    """Like :func:`run_request` for a generate button with a live player: yields (download player,
    panel, caption files, live player) twice: at once with the player reading the job's stream, then
    the result."""
    import gradio as gr

    if not (tts.text or "").strip():  # the commonest mistake gets the page's own bilingual words
        raise ui_error(EMPTY_TEXT)
    job = await _submit(service, tts, request, stream=True)
    yield None, "", None, live_player(job, tts.text or "")
    path, panel, captions = await _follow(service, job, progress)
    yield path, panel, captions, gr.skip()  # the live player keeps playing what it has


#: The page's words for the ``quality`` modes (docs/models.md, "Quality modes"), by mode name; a mode
#: not listed is shown by its name.
QUALITY_LABELS = {
    "exact": "exact: as upstream / 精确（与官方一致）",
    "balanced": "balanced: faster, not validated on real weights / 均衡：更快，未在真实权重上验证",
    "live": "live: speaks while it thinks, not validated on real weights / 实时：边想边说，未在真实权重上验证",
}


def quality_choices(service: Service) -> list[tuple[str, str]]:
    """(label, mode) pairs of the served engine's quality modes (none: the control is hidden); each
    mode but exact says what the speed-mode check found of it on the served model."""
    modes = service.quality_modes()
    verdicts = service.mode_verdicts() if modes else {}
    return [(QUALITY_LABELS.get(mode, mode) if mode == DEFAULT_QUALITY
             else label_verdict(QUALITY_LABELS.get(mode, mode), verdicts.get(mode)), mode) for mode in modes]


def quality_field(service: Service, quality: str | None) -> str | None:
    """The request's ``quality`` for the page's choice: None where the served engine has no modes
    (the hidden control's value must not earn every Kokoro answer an "ignored" note)."""
    return quality if quality and quality in service.quality_modes() else None


async def _submit(service: Service, tts: TTSRequest, request: "gr.Request | None", stream: bool) -> Job:
    try:
        return await asyncio.to_thread(service.submit, tts, _session(request), None, stream)
    except CosyedgeError as exc:
        raise _ui_error(exc) from exc


async def _follow(service: Service, job: Job, progress: Any) -> tuple[str | None, str, list[str] | None]:
    """Wait for ``job``, reporting position/progress; (wav path, panel with the captions, caption
    files), or raise a gr.Error."""
    import gradio as gr

    def report(job: Job) -> None:
        position = service.position(job)
        preparing = voice_progress(job.phase)
        if position is not None:
            progress(0.0, desc=f"waiting: position {position} / 排队中：第 {position} 位")
        elif preparing is not None:  # a new voice's encoding, step by step
            progress(preparing[0], desc=preparing[1])
        elif job.total_steps and job.done_steps < job.total_steps:  # the sentence being made
            progress((job.done_steps, job.total_steps),
                     desc=f"sentence {job.done_steps + 1}/{job.total_steps} / "
                          f"第 {job.done_steps + 1}/{job.total_steps} 句")
        elif job.total_steps:  # all sentences made: scoring, writing the file
            progress((job.done_steps, job.total_steps),
                     desc=PHASE_LABELS.get(job.phase, "finishing / 正在完成"))
        else:
            progress(0.0, desc=PHASE_LABELS.get(job.phase, job.phase))

    try:
        result: TTSResult = await wait_reporting(service, job, report)
    except CancelledError:
        gr.Info(CANCELLED)
        return None, CANCELLED, None
    except CosyedgeError as exc:
        raise _ui_error(exc) from exc
    return ((str(result.path) if result.path else None), describe(result) + caption_lines(result.captions),
            caption_paths(result))


def caption_paths(result: Any) -> list[str] | None:
    """A result's caption files for the page's download box (WebVTT first), None without."""
    files = getattr(result, "caption_files", None) or {}
    return [str(files[fmt]) for fmt in ("vtt", "srt") if fmt in files] or None


#: Dropdown values of saved voices carry this prefix; presets are plain names (never prefixed).
SAVED_PREFIX = "saved:"


def voice_choices(service: Service, with_presets: bool = True) -> list[tuple[str, str]]:
    """(label, value) pairs: the presets, then the saved voices (value ``saved:<id>``)."""
    presets = [(name, name) for name in service.presets()] if with_presets else []
    saved = [(f"{v['name']} (saved / 已保存)", SAVED_PREFIX + v["id"]) for v in service.voices()["saved"]]
    return presets + saved


def language_choices(service: Service) -> list[tuple[str, str]]:
    """(label, value) pairs: auto and the loaded engine's languages; before the first load
    auto/zh/en/ja, which every engine reads (:meth:`Service.languages`)."""
    spoken = service.languages()
    return [(label, code) for code, label in LANGUAGE_LABELS.items() if code == "auto" or code in spoken]


def voice_fields(value: str | None) -> dict[str, str | None]:
    """A dropdown value as TTSRequest fields: ``speaker`` for a preset, ``voice_id`` for a saved voice."""
    if value and value.startswith(SAVED_PREFIX):
        return {"speaker": None, "voice_id": value[len(SAVED_PREFIX):]}
    return {"speaker": value or None, "voice_id": None}


def _read_prompt(path: str | None, title: str = CANNOT_GENERATE) -> bytes | None:
    """Bytes of the uploaded or recorded prompt file (Gradio stores it in its cache, which it sweeps:
    a page left open past :data:`UPLOAD_KEEP_S` still names a file that is gone)."""
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        logger.warning("prompt file unreadable (%s): %s", path, exc)
        raise ui_error(PROMPT_GONE, title=title) from None


async def lesson_request(service: Service, lesson_path: str | None, per_paragraph: bool, tts: TTSRequest,
                         request: "gr.Request | None",
                         progress: Any) -> tuple[str | None, str, str | None, list[str] | None]:
    """A tab's "read the lesson": the lesson in ``tts``'s voice and options; (wav, panel, zip,
    caption files)."""
    import gradio as gr

    if not lesson_path:
        raise ui_error(NO_LESSON_FILE, title=CANNOT_READ_LESSON)
    try:
        lesson = await asyncio.to_thread(service.read_lesson, Path(lesson_path))
        job = await asyncio.to_thread(service.submit_lesson, lesson, tts, _session(request),
                                      bool(per_paragraph))
        result = await follow_lesson(service, job, progress, PHASE_LABELS)
    except CancelledError:
        gr.Info(CANCELLED)
        return None, CANCELLED, None, None
    except CosyedgeError as exc:
        raise _ui_error(exc, title=CANNOT_READ_LESSON) from exc
    except OSError as exc:  # the upload left the page's cache in between
        logger.warning("lesson file unreadable (%s): %s", lesson_path, exc)
        raise ui_error(LESSON_GONE, title=CANNOT_READ_LESSON) from None
    archive = None
    if result.zip_path is not None:  # offered as "<lesson>-paragraphs.zip", not "<job id>.zip"
        from gradio.utils import get_upload_folder

        archive = await asyncio.to_thread(named_download, result.zip_path,
                                          download_name(lesson_path, "-paragraphs.zip"), get_upload_folder())
    return (str(result.path), describe(result) + lesson_line(result)  # type: ignore[arg-type]
            + caption_lines(result.captions), archive, caption_paths(result))


#: The clone tab's one line on how to get true cloning, under an engine that cannot clone.
TRUE_CLONING = ("For true cloning, add a CosyVoice model in the Models tab (docs/models.md) / "
                "如需真正的声音克隆，请在“模型”标签页添加 CosyVoice 模型（见 docs/models.md）")


def capability_notes(service: Service) -> tuple[str, str]:
    """(clone tab note, instruct tab note): what the engine can truly do, from its capabilities as
    the service knows them (the loaded engine's, or before the first load what the manifest's
    engine is known to do; unknown only for an engine without an entry in NATIVE_ABILITIES)."""
    engine = plain(service.model_engine_name())
    clone, instruct = service.abilities()
    if clone is None:
        unknown = (f"Engine / 引擎: **{engine}**. What it can do is shown once the model has loaded "
                   "(the first Generate) / 模型加载后（首次生成）显示其能力")
        return unknown, unknown
    if clone:
        clone_note = f"**{engine}** clones the prompt's voice / 该引擎可克隆参考音频的音色"
    else:
        clone_note = (f"**{engine}** cannot clone a voice: a prompt picks its closest built-in voice / "
                      f"该引擎不能克隆：参考音频只会选出最接近的内置音色。{TRUE_CLONING}")
    if instruct:
        instruct_note = f"**{engine}** follows instructions itself / 该引擎可直接理解指令"
        if service.instruct_note():
            instruct_note += f". {service.instruct_note()}"
    else:
        instruct_note = (f"**{engine}** cannot follow instructions itself: speed, pitch, volume and the "
                         "choice of voice are read from it and applied as controls; the rest is listed "
                         "as not supported / 该引擎不能直接理解指令：只从中读取语速、音高、音量和音色"
                         "并作为参数执行，其余会列为不支持")
    return clone_note, instruct_note


def cancel_session(service: Service, request: "gr.Request | None") -> str | None:
    """Cancel this browser session's jobs; the confirmation for the panel, or None when nothing
    was running (the panel then keeps the last result's report)."""
    count = service.cancel_owner(_session(request))
    logger.info("UI session cancelled %d job(s)", count)
    return CANCELLED if count else None


async def transcribe_prompt(service: Service, prompt_path: str | None, language: str, consent: bool,
                            request: "gr.Request | None") -> tuple[Any, str]:
    """The clone tab's transcribe button: hear the prompt in a queued job; (the transcript box's
    new value, the line under it). A transcript the recognizer is unsure of is shown, not filled
    in: the box's text counts as typed, and an unsure one must not pass for that."""
    import gradio as gr

    prompt_bytes = await asyncio.to_thread(_read_prompt, prompt_path, CANNOT_TRANSCRIBE)
    if prompt_bytes is None:
        raise ui_error("Record or upload the prompt audio first / 请先录制或上传参考音频", title=CANNOT_TRANSCRIBE)
    service.lease(Path(prompt_path))
    try:
        job = service.submit_transcription(prompt_bytes, language, owner=_session(request), consent=bool(consent))
        heard: PromptTranscript = await job.wait_async()
    except CancelledError:
        return gr.skip(), CANCELLED
    except CosyedgeError as exc:
        raise _ui_error(exc, title=CANNOT_TRANSCRIBE) from exc
    if not heard.text:
        return gr.skip(), "No speech heard in the prompt / 参考音频中未识别到语音"
    figure = f"confidence / 置信度 {heard.confidence:.2f}, zero-shot needs / 零样本需要 {ZERO_SHOT_CONFIDENCE:.2f}"
    if heard.trusted:
        return heard.text, f"Heard offline ({figure}); correct it if needed / 离线识别结果（{figure}），如有错误请修改"
    return gr.skip(), (f"Heard offline, unsure ({figure}): “{plain(heard.text)}”. Not filled in: type the "
                       f"correct transcript, or leave it empty for a cross-lingual clone / 识别结果不可靠，未填入：请输入"
                       "正确文本，或留空以跨语种克隆")


def save_prompt(service: Service, prompt_path: str | None, prompt_text: str | None,
                name: str | None, consent: bool) -> tuple[str, str]:
    """Save the clone tab's prompt as a voice; (dropdown value of the saved voice, confirmation).
    Raises a lasting gr.Error naming the problem (the button must be queued for it to be shown)."""
    if not prompt_path:
        raise ui_error(NO_PROMPT_TO_SAVE, title=CANNOT_SAVE)
    if not (name or "").strip():
        raise ui_error(NO_SAVE_NAME, title=CANNOT_SAVE)
    try:
        info = service.save_voice(name or "", _read_prompt(prompt_path, CANNOT_SAVE),
                                  (prompt_text or "").strip(), consent=bool(consent))
    except CosyedgeError as exc:
        raise _ui_error(exc, title=CANNOT_SAVE) from exc
    return SAVED_PREFIX + info.id, f"Saved / 已保存: {info.name}"


def build_ui(service: Service) -> "gr.Blocks":
    """The Blocks for mounting with ``gr.mount_gradio_app`` (see app.py)."""
    import gradio as gr

    from cosyedge.web import history_tab, models_tab, pronunciation_tab, voices_tab

    presets = service.presets()
    low, high = SPEED_RANGE

    def status(request: gr.Request) -> tuple[str, str, str, str, str]:
        line = f"<small>{service.status(_session(request)).line()}</small>"
        return (line, line, line) + capability_notes(service)

    async def clone(prompt: str | None, prompt_text: str, text: str, saved: str | None, speed: float,
                    language: str, consent: bool, quality: str | None, request: gr.Request,
                    progress: gr.Progress = gr.Progress()):
        prompt_bytes = await asyncio.to_thread(_read_prompt, prompt)
        if prompt:  # the janitor keeps the prompt in the upload cache while the page may reuse it
            service.lease(Path(prompt))
        if prompt_bytes is None and not saved:
            raise ui_error("Record or upload 3-10 s of a voice, or choose a saved voice / "
                           "请录制或上传 3-10 秒参考音频，或选择已保存的音色")
        voice = voice_fields(saved) if prompt_bytes is None else {}
        tts = TTSRequest(text=text or "", prompt_audio=prompt_bytes, **voice,
                         prompt_text=(prompt_text or "").strip() or None, speed=float(speed),
                         language=language, keep_file=True, consent=bool(consent),
                         quality=quality_field(service, quality))
        async for update in stream_request(service, tts, request, progress):
            yield update

    async def instruct(instruction: str, voice: str, text: str, speed: float, language: str,
                       quality: str | None, request: gr.Request, progress: gr.Progress = gr.Progress()):
        tts = TTSRequest(text=text or "", **voice_fields(voice), instruct=(instruction or "").strip() or None,
                         speed=float(speed), language=language, keep_file=True,
                         quality=quality_field(service, quality))
        async for update in stream_request(service, tts, request, progress):
            yield update

    async def preset(voice: str, text: str, speed: float, language: str, quality: str | None,
                     request: gr.Request, progress: gr.Progress = gr.Progress()):
        tts = TTSRequest(text=text or "", **voice_fields(voice), speed=float(speed), language=language,
                         keep_file=True, quality=quality_field(service, quality))
        async for update in stream_request(service, tts, request, progress):
            yield update

    # "Read the lesson" in each tab: the tab's voice fields, the lesson's text (cosyedge.web.lesson_ui)
    async def clone_lesson(lesson: str | None, per_paragraph: bool, prompt: str | None, prompt_text: str,
                           saved: str | None, speed: float, language: str, consent: bool,
                           request: gr.Request, progress: gr.Progress = gr.Progress()):
        prompt_bytes = await asyncio.to_thread(_read_prompt, prompt, CANNOT_READ_LESSON)
        if prompt:
            service.lease(Path(prompt))
        if prompt_bytes is None and not saved:
            raise ui_error("Record or upload 3-10 s of a voice, or choose a saved voice / "
                           "请录制或上传 3-10 秒参考音频，或选择已保存的音色", title=CANNOT_READ_LESSON)
        voice = voice_fields(saved) if prompt_bytes is None else {}
        tts = TTSRequest(text="", prompt_audio=prompt_bytes, **voice,
                         prompt_text=(prompt_text or "").strip() or None, speed=float(speed), language=language,
                         consent=bool(consent))
        return await lesson_request(service, lesson, per_paragraph, tts, request, progress)

    async def instruct_lesson(lesson: str | None, per_paragraph: bool, instruction: str, voice: str,
                              speed: float, language: str, request: gr.Request,
                              progress: gr.Progress = gr.Progress()):
        tts = TTSRequest(text="", **voice_fields(voice), instruct=(instruction or "").strip() or None,
                         speed=float(speed), language=language)
        return await lesson_request(service, lesson, per_paragraph, tts, request, progress)

    async def preset_lesson(lesson: str | None, per_paragraph: bool, voice: str, speed: float, language: str,
                            request: gr.Request, progress: gr.Progress = gr.Progress()):
        tts = TTSRequest(text="", **voice_fields(voice), speed=float(speed), language=language)
        return await lesson_request(service, lesson, per_paragraph, tts, request, progress)

    def wire_lesson(box: Any, fn: Callable, inputs: list, audio: gr.Audio, panel: gr.Markdown,
                    captions: gr.File, live: gr.HTML) -> Any:
        # The live player first: it silences what it still had scheduled and says that a lesson
        # plays only once it is whole (the line under it said "playing while it is made").
        return box.go.click(lambda: f"{LIVE_LESSON}{time.monotonic_ns()}", inputs=None, outputs=[live],
                            queue=False).then(
            fn, inputs=[box.file, box.per_paragraph] + inputs, outputs=[audio, panel, box.archive, captions],
            concurrency_id="synthesis", show_progress_on=[panel])

    def cancel(request: gr.Request) -> tuple[Any, Any]:
        # An empty live player: what the page had scheduled stops at once, also after the job has
        # finished (it may still have minutes to play). Unqueued (it must not wait behind the
        # synthesis it cancels), so the confirmation goes to the panel, not a toast. With nothing
        # running the panel stays: it is the report of the audio in the download player.
        confirmation = cancel_session(service, request)
        # a value of its own each time: a player already empty must still run its stop (the audio
        # scheduled may be another tab's)
        return f"{LIVE_STOP}{time.monotonic_ns()}", (confirmation if confirmation else gr.skip())

    def common_inputs(prefix: str) -> tuple[gr.Slider, gr.Dropdown, gr.Radio]:
        with gr.Row():
            speed = gr.Slider(low, high, value=1.0, step=0.05, label="Speed / 语速",
                              elem_id=f"{prefix}-speed")
            language = gr.Dropdown(language_choices(service), value="auto", label="Language / 语言",
                                   elem_id=f"{prefix}-language")
            modes = quality_choices(service)
            quality = gr.Radio(modes, value=service.default_quality if modes else None,
                               label="Quality (CosyVoice) / 音质", visible=bool(modes), elem_id=f"{prefix}-quality")
        return speed, language, quality

    def outputs(prefix: str) -> tuple[gr.Button, gr.Button, gr.Audio, gr.Markdown, gr.HTML, gr.File]:
        with gr.Row():
            go = gr.Button("Generate / 生成", variant="primary", elem_id=f"{prefix}-generate")
            stop = gr.Button("Cancel / 取消", variant="stop", elem_id=f"{prefix}-cancel")
        live = gr.HTML("", html_template=LIVE_PLAYER_HTML, js_on_load=LIVE_PLAYER_JS,
                       elem_id=f"{prefix}-live")
        audio = gr.Audio(type="filepath", format="wav", label="Output / 输出 (WAV)",
                         interactive=False, buttons=["download"], elem_id=f"{prefix}-output")
        panel = gr.Markdown("", label="What the engine did / 引擎实际做了什么",
                            elem_id=f"{prefix}-panel")
        captions = gr.File(label="Captions / 字幕 (WebVTT, SRT)", file_count="multiple", interactive=False,
                           elem_id=f"{prefix}-captions")
        return go, stop, audio, panel, live, captions

    def wire(go: gr.Button, stop: gr.Button, fn: Callable, inputs: list, out: list) -> Any:
        """``out``: download player, panel, caption files, live player (last; Cancel gives it a stop
        value). Returns the generate event."""
        # Progress (and a failed event's "Error" mark) on the panel alone: a refused Generate put a
        # red "Error" badge over the player still holding the last good result, and over the live
        # player's line.
        event = go.click(fn, inputs=inputs, outputs=out, concurrency_id="synthesis",
                         show_progress_on=[out[1]])
        # The job is cancelled in the JobQueue; the generate event then ends by itself with
        # "Cancelled / 已取消". Gradio's own ``cancels=[event]`` is not used: a Gradio-cancelled
        # event can leave red "Error" badges over the three outputs.
        stop.click(cancel, inputs=None, outputs=[out[-1], out[1]], queue=False)
        return event

    # Gradio keeps uploads, recordings and a copy of each result in its own cache; every hour it
    # removes those older than UPLOAD_KEEP_S.
    generated: list[Any] = []  # the three generate events
    with gr.Blocks(title="cosyedge", analytics_enabled=False, delete_cache=(3600, UPLOAD_KEEP_S)) as demo:
        gr.Markdown("## cosyedge — offline speech studio / 离线语音工作室")
        with gr.Tabs() as tabs:
            with gr.Tab("3s quick clone / 3秒极速复刻", id="clone"):
                status_clone = gr.Markdown(elem_id="clone-status")
                ability_clone = gr.Markdown(elem_id="clone-ability")
                prompt = gr.Audio(sources=["upload", "microphone"], type="filepath",
                                  label="Prompt audio, 3-10 s / 参考音频（3-10 秒）", elem_id="clone-prompt",
                                  buttons=["download"])
                with gr.Row():
                    prompt_text = gr.Textbox(label="Prompt transcript (optional: heard offline when empty) / "
                                                   "参考音频文本（可选，留空则离线识别）", scale=4,
                                             elem_id="clone-prompt-text")
                    transcribe_btn = gr.Button("Transcribe / 识别文本", scale=1, elem_id="clone-transcribe")
                heard_c = gr.Markdown(elem_id="clone-heard")
                text_clone = gr.Textbox(label="Text to read / 合成文本", lines=4, elem_id="clone-text")
                saved_c = gr.Dropdown(voice_choices(service, with_presets=False), value=None,
                                      label="Or a saved voice (when no prompt is given) / 或使用已保存的音色",
                                      elem_id="clone-saved")
                consent = gr.Checkbox(False, label=CONSENT_LABEL, elem_id="clone-consent")
                with gr.Row():
                    save_name = gr.Textbox(label="Save the prompt as / 保存参考音频为", scale=3,
                                           placeholder="e.g. Ms Lee / 王老师", elem_id="clone-save-name")
                    save_btn = gr.Button("Save voice / 保存音色", scale=1, elem_id="clone-save")
                speed_c, lang_c, quality_c = common_inputs("clone")
                lesson_c = lesson_controls("clone", service.max_lesson_chars)
                go_c, stop_c, audio_c, panel_c, live_c, captions_c = outputs("clone")
                generated.append(wire_lesson(lesson_c, clone_lesson, [prompt, prompt_text, saved_c, speed_c, lang_c,
                                                                     consent], audio_c, panel_c, captions_c,
                                             live_c))
                generated.append(wire(go_c, stop_c, clone,
                                      [prompt, prompt_text, text_clone, saved_c, speed_c, lang_c,
                                       consent, quality_c],
                                      [audio_c, panel_c, captions_c, live_c]))

            with gr.Tab("natural-language instruct / 自然语言控制", id="instruct"):
                status_instruct = gr.Markdown(elem_id="instruct-status")
                ability_instruct = gr.Markdown(elem_id="instruct-ability")
                instruction = gr.Textbox(label="Instruction / 指令", elem_id="instruct-instruction")
                gr.Examples([[e] for e in INSTRUCT_EXAMPLES], inputs=[instruction],
                            label="Examples (click) / 示例（点击）")
                voice_i = gr.Dropdown(presets, value=presets[0], label="Voice / 音色",
                                      elem_id="instruct-voice")
                text_instruct = gr.Textbox(label="Text to read / 合成文本", lines=4,
                                           elem_id="instruct-text")
                speed_i, lang_i, quality_i = common_inputs("instruct")
                lesson_i = lesson_controls("instruct", service.max_lesson_chars)
                go_i, stop_i, audio_i, panel_i, live_i, captions_i = outputs("instruct")
                generated.append(wire_lesson(lesson_i, instruct_lesson, [instruction, voice_i, speed_i, lang_i],
                                             audio_i, panel_i, captions_i, live_i))
                generated.append(wire(go_i, stop_i, instruct,
                                      [instruction, voice_i, text_instruct, speed_i, lang_i, quality_i],
                                      [audio_i, panel_i, captions_i, live_i]))

            with gr.Tab("preset voices / 预置音色", id="preset"):
                status_preset = gr.Markdown(elem_id="preset-status")
                voice_p = gr.Dropdown(presets, value=presets[0], label="Voice / 音色",
                                      elem_id="preset-voice")
                text_preset = gr.Textbox(label="Text to read / 合成文本", lines=4, elem_id="preset-text")
                speed_p, lang_p, quality_p = common_inputs("preset")
                lesson_p = lesson_controls("preset", service.max_lesson_chars)
                go_p, stop_p, audio_p, panel_p, live_p, captions_p = outputs("preset")
                generated.append(wire_lesson(lesson_p, preset_lesson, [voice_p, speed_p, lang_p], audio_p, panel_p,
                                             captions_p, live_p))
                generated.append(wire(go_p, stop_p, preset, [voice_p, text_preset, speed_p, lang_p, quality_p],
                                      [audio_p, panel_p, captions_p, live_p]))

            models = models_tab.build(service, explain=_ui_error)
            my_voices = voices_tab.build(service, explain=_ui_error)
            history_tab.build(service)
            pronunciation_tab.build(service, explain=_ui_error, voice_choices=lambda: voice_choices(service),
                                    voice_fields=voice_fields, session=_session)

        statuses = [status_clone, status_instruct, status_preset, ability_clone, ability_instruct]
        for event in generated:  # the status line says at once that the job has ended, not up to 2 s later
            event.then(status, inputs=None, outputs=statuses, queue=False, show_progress="hidden")
        demo.load(status, inputs=None, outputs=statuses, queue=False)

        def voices() -> tuple[dict, dict, dict]:
            """The engine's own presets once it has loaded (the seed's list before that) and the
            saved voices."""
            choices = voice_choices(service)
            return (gr.update(choices=voice_choices(service, with_presets=False)),
                    gr.update(choices=choices, value=choices[0][1]),
                    gr.update(choices=choices, value=choices[0][1]))

        def save_voice(prompt_path: str | None, prompt_text: str, name: str, consent: bool):
            try:
                value, confirmation = save_prompt(service, prompt_path, prompt_text, name, consent)
            except gr.Error as exc:
                # A lasting warning toast rather than a failed event: a failed event also puts red
                # "Error" badges on the three voice dropdowns it updates, two of them on other tabs.
                gr.Warning(exc.message, duration=None, title=CANNOT_SAVE)
                return gr.skip(), gr.skip(), gr.skip()
            gr.Info(html.escape(confirmation, quote=False))  # a toast renders HTML; the name is user text
            return (gr.update(choices=voice_choices(service, with_presets=False), value=value),
                    gr.update(choices=voice_choices(service)), gr.update(choices=voice_choices(service)))

        demo.load(voices, inputs=None, outputs=[saved_c, voice_i, voice_p], queue=False)

        def languages(*chosen: str) -> tuple[dict, ...]:
            """The loaded engine's languages on the three tabs; a choice it does not read -> auto."""
            choices = language_choices(service)
            codes = {code for _, code in choices}
            return tuple(gr.update(choices=choices, value=c if c in codes else "auto") for c in chosen)

        def qualities(*chosen: str | None) -> tuple[dict, ...]:
            """The served engine's quality modes on the three tabs, shown only when it has some."""
            choices = quality_choices(service)
            modes = {mode for _, mode in choices}
            return tuple(gr.update(choices=choices, visible=bool(choices),
                                   value=c if c in modes else (service.default_quality if choices else None))
                         for c in chosen)

        langs, qualities_in = [lang_c, lang_i, lang_p], [quality_c, quality_i, quality_p]
        demo.load(languages, inputs=langs, outputs=langs, queue=False)
        demo.load(qualities, inputs=qualities_in, outputs=qualities_in, queue=False)
        models.switched.then(languages, inputs=langs, outputs=langs, queue=False)
        models.switched.then(qualities, inputs=qualities_in, outputs=qualities_in, queue=False)
        # opening any tab reads the verdicts again: a speed-mode check finished on the Models tab shows
        tabs.select(qualities, inputs=qualities_in, outputs=qualities_in, queue=False, show_progress="hidden")
        for event in generated:  # the first job loads the engine: its languages are known from then on
            event.then(languages, inputs=langs, outputs=langs, queue=False, show_progress="hidden")
            event.then(qualities, inputs=qualities_in, outputs=qualities_in, queue=False, show_progress="hidden")
        # the studio tabs: a new model has its own presets; the voice list changed; a saved voice to clone
        models.switched.then(voices, inputs=None, outputs=[saved_c, voice_i, voice_p], queue=False).then(
            status, inputs=None, outputs=statuses, queue=False, show_progress="hidden")
        for event in my_voices.changed:
            event.then(voices, inputs=None, outputs=[saved_c, voice_i, voice_p], queue=False)
        my_voices.use.click(lambda voice_id: (gr.update(choices=voice_choices(service, with_presets=False),
                                                        value=SAVED_PREFIX + voice_id if voice_id else None),
                                              None, gr.Tabs(selected="clone")),
                            inputs=[my_voices.choice], outputs=[saved_c, prompt, tabs], queue=False)
        # Queued: only a queued event delivers gr.Error / gr.Info to the page. Unqueued, every
        # refusal was a bare HTTP 500 and a red badge on the dropdown, and success said nothing.
        async def transcribe(prompt_path: str | None, language: str, consent: bool, request: gr.Request):
            return await transcribe_prompt(service, prompt_path, language, consent, request)

        transcribe_btn.click(transcribe, inputs=[prompt, lang_c, consent], outputs=[prompt_text, heard_c])
        save_btn.click(save_voice, inputs=[prompt, prompt_text, save_name, consent],
                       outputs=[saved_c, voice_i, voice_p], show_progress="hidden")
        gr.Timer(STATUS_REFRESH_S).tick(status, inputs=None, outputs=statuses, queue=False,
                                        show_progress="hidden")

        def page_closed(request: gr.Request) -> None:
            service.cancel_owner(_session(request))

        demo.unload(page_closed)
    return demo


def queue_settings(service: Service) -> dict[str, int]:
    """Gradio queue settings that agree with the JobQueue.

    Gradio may run as many synthesis handlers as the JobQueue can hold (running + waiting), so the
    JobQueue alone decides who runs, who waits and who is told "busy"; Gradio never queues work of
    its own behind the JobQueue's back.
    """
    capacity = service.capacity
    return {"max_size": capacity, "default_concurrency_limit": capacity}
