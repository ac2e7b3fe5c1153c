"""The page's Models tab: the usable models under models/ and the switch between them.

The list and the switch are the service's (:meth:`Service.models`, :meth:`Service.switch_model`,
over :mod:`cosyedge.catalog.models`); this tab only shows them. A switch is refused while jobs run or
wait (the service's 409, shown as a lasting toast); the new model loads on the next Generate. With
``COSYEDGE_AUTH`` set the whole page, this tab included, is behind the credentials.
"""

# No `from __future__ import annotations`: Gradio reads handler annotations at build time.
import html
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from cosyedge.errors import CosyedgeError
from cosyedge.service.facade import Service
from cosyedge.web.mode_check_panel import describe as describe_check

if TYPE_CHECKING:
    import gradio as gr

logger = logging.getLogger(__name__)

CANNOT_SWITCH = "Cannot switch the model / 无法切换模型"
CANNOT_CHECK = "Cannot check the speed modes / 无法检查速度模式"
CHECK_INTRO = ("**Speed modes / 速度模式** of the model served: the check renders a fixed set of short sentences "
               "in exact and in each faster mode with one voice, and judges each mode by how close its voice "
               "and its clarity stay to exact's. It runs in the background and pauses while anyone's job runs "
               "/ 用同一个声音以精确模式和各个更快的模式朗读一组固定短句，按音色和清晰度与精确模式的差距评判；"
               "在后台运行，有任务时自动暂停")
DEFAULT_VOICE = ("the model's first preset speaker / 模型的第一个预设说话人", "")
#: How often the check's panel is read again while the page is open (seconds).
CHECK_REFRESH_S = 2.0
HEADERS = ["Model / 模型", "Engine / 引擎", "Can do / 能力", "Size / 大小", "Licence / 许可"]
SERVED = " (serving / 使用中)"
INTRO = ("Every usable model folder under models/. The model serves everyone on this box: switching "
         "is refused while anyone's job runs or waits, and the new model loads on the next Generate. "
         "Add a copied model folder with `python -m cosyedge models import PATH` (it checks every "
         "file first) / models/ 下所有可用的模型。模型由本机所有用户共用：有任务在运行或排队时不能切换，"
         "新模型在下次生成时加载。用 `python -m cosyedge models import 路径` 导入复制来的模型（先校验每个文件）")

#: Maps a service error to the page's lasting toast (ui.py's mapping, passed in: ui.py mounts this
#: module, so this module does not import it).
Explain = Callable[[CosyedgeError, str], "gr.Error"]


@dataclass
class ModelsTab:
    """The tab's parts that the page wires to others: ``switched`` fires after a switch."""

    switched: Any


def rows(listing: dict[str, Any]) -> list[list[str]]:
    """The table's rows from :meth:`Service.models`."""
    out = []
    for model in listing["models"]:
        caps = model["capabilities"]
        can = ("clones a voice" if caps["native_clone"] else "closest built-in voice") + "; " + (
            "follows instructions" if caps["native_instruct"] else "instructions as controls")
        out.append([model["id"] + (SERVED if model["current"] else ""), model["engine"], can, model["size"],
                    model["licence"]])
    return out


def reconvert_note(listing: dict[str, Any]) -> str:
    """A line naming the models that a reconversion would improve, and what it brings (the catalog's
    ``reconvert``, read from each manifest)."""
    parts = "; ".join(f"{html.escape(model['id'])}: {html.escape(model['reconvert'])}"
                      for model in listing["models"] if model.get("reconvert"))
    return f"Convert again? / 建议重新转换: {parts}" if parts else ""


def unusable_note(listing: dict[str, Any]) -> str:
    """A line naming the folders under models/ that hold no usable model, and why."""
    if not listing["unusable"]:
        return ""
    parts = "; ".join(f"{html.escape(entry['id'])}: {html.escape(entry['problem'])}"
                      for entry in listing["unusable"])
    return f"Not usable / 不可用: {parts}"


def folder_notes(listing: dict[str, Any]) -> str:
    """Under the table: the folders that hold no usable model, then the models a reconversion improves."""
    return "\n\n".join(note for note in (unusable_note(listing), reconvert_note(listing)) if note)


def check_voices(service: Service) -> list[tuple[str, str]]:
    """The check's voice choices: the model's first preset (the default), then each saved voice."""
    return [DEFAULT_VOICE] + [(f"saved voice / 已保存的声音: {voice.name}", voice.id)
                              for voice in service.saved_voices()]


def check_view(service: Service) -> str:
    """The served model's check: the run under way and the stored verdicts."""
    try:
        return describe_check(service.mode_check())
    except CosyedgeError as exc:
        return html.escape(exc.message)


def build(service: Service, explain: Explain) -> ModelsTab:
    """The tab, inside the page's ``gr.Tabs``."""
    import gradio as gr

    def view() -> tuple[dict, dict, str]:
        listing = service.models()
        choices = [model["id"] for model in listing["models"]]
        current = listing["current"] if listing["current"] in choices else None
        return (gr.update(value=rows(listing)), gr.update(choices=choices, value=current),
                folder_notes(listing))

    def switch(model_id: str | None) -> tuple[dict, dict, str, str]:
        if not model_id:
            raise gr.Error(f"{CANNOT_SWITCH}: choose a model first / 请先选择模型", duration=None)
        try:
            info = service.switch_model(model_id)
        except CosyedgeError as exc:
            raise explain(exc, CANNOT_SWITCH) from exc
        table, choice, unusable = view()
        done = (f"Now serving **{html.escape(info.id)}** ({html.escape(info.engine)}); it loads on the "
                f"next Generate / 已切换到 {html.escape(info.id)}，下次生成时加载")
        return table, choice, unusable, done

    listing = service.models()  # what the page shows before the tab is first opened
    ids = [model["id"] for model in listing["models"]]
    with gr.Tab("Models / 模型", id="models") as tab:
        gr.Markdown(INTRO)
        table = gr.Dataframe(headers=HEADERS, value=rows(listing), interactive=False,
                             wrap=True, elem_id="models-table")
        unusable = gr.Markdown(folder_notes(listing), elem_id="models-unusable")
        with gr.Row():
            choice = gr.Dropdown(ids, value=listing["current"] if listing["current"] in ids else None,
                                 label="Model to serve / 使用的模型", scale=3, elem_id="models-choice")
            go = gr.Button("Use this model / 使用此模型", scale=1, variant="primary", elem_id="models-switch")
        done = gr.Markdown(elem_id="models-result")
        gr.Markdown(CHECK_INTRO)
        with gr.Row():
            check_voice = gr.Dropdown(check_voices(service), value="", scale=3, elem_id="models-check-voice",
                                      label="Voice to check with / 检查用的声音")
            check = gr.Button("Check speed modes / 检查速度模式", scale=1, elem_id="models-check")
            stop = gr.Button("Cancel check / 取消检查", scale=1, variant="stop", elem_id="models-check-cancel")
        verdicts = gr.Markdown(check_view(service), elem_id="models-check-result")

    def start_check(voice: str | None) -> str:
        try:
            service.check_modes(None, voice or None)
        except CosyedgeError as exc:
            raise explain(exc, CANNOT_CHECK) from exc
        return check_view(service)

    def cancel_check() -> str:
        service.cancel_mode_check()
        return check_view(service)

    def refresh() -> tuple[dict, str]:
        return gr.update(choices=check_voices(service)), check_view(service)

    check.click(start_check, inputs=[check_voice], outputs=[verdicts], concurrency_limit=1, show_progress="hidden")
    stop.click(cancel_check, inputs=None, outputs=[verdicts], queue=False)
    gr.Timer(CHECK_REFRESH_S).tick(lambda: check_view(service), inputs=None, outputs=[verdicts], queue=False,
                                   show_progress="hidden")
    tab.select(refresh, inputs=None, outputs=[check_voice, verdicts], queue=False)
    tab.select(view, inputs=None, outputs=[table, choice, unusable], queue=False)
    # queued: only a queued event shows gr.Error as a toast
    switched = go.click(switch, inputs=[choice], outputs=[table, choice, unusable, done],
                        concurrency_limit=1, show_progress="hidden")
    return ModelsTab(switched=switched)
