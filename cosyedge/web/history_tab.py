"""The page's History tab: the last outputs the page made (text start, voice, model, duration,
time), each playable and downloadable.

The page is shared: the list holds everyone's outputs on this box, and the texts are stored with
them; the tab says both, and how long things are kept. What stays is the janitor's alone (its limits
from :meth:`Service.retention`); the list is :meth:`Service.history`, the records next to the WAVs
still in outputs/ (:mod:`cosyedge.service.history`). Opening an entry leases its WAV (the janitor spares it
while it is downloaded).
"""

# No `from __future__ import annotations`: Gradio reads handler annotations at build time.
import logging
import time
from typing import TYPE_CHECKING, Any

from cosyedge.service.history import HistoryEntry
from cosyedge.service.facade import Service

if TYPE_CHECKING:
    import gradio as gr

logger = logging.getLogger(__name__)

HEADERS = ["Made at / 时间", "Text / 文本", "Voice / 音色", "Model / 模型", "Length / 时长"]
#: Entries listed (newest first).
SHOWN = 50


def kept_for(retention: dict[str, float]) -> str:
    """The janitor's limits in words, e.g. "up to 24 h, at most 500 outputs and 1024 MB in all"."""
    age, files, size = retention["max_age_hours"], retention["max_files"], retention["max_total_mb"]
    parts = [f"up to {age:g} h" if age else "with no age limit"]
    limits = [f"{files:g} outputs" if files else "", f"{size:g} MB in all" if size else ""]
    limits = [limit for limit in limits if limit]
    if limits:
        parts.append("at most " + " and ".join(limits) + " (the oldest go first)")
    return ", ".join(parts)


def kept_for_zh(retention: dict[str, float]) -> str:
    """:func:`kept_for` in Chinese, e.g. "最多保留 24 小时，最多 500 个、总共最多 1024 MB（最旧的先删除）"."""
    age, files, size = retention["max_age_hours"], retention["max_files"], retention["max_total_mb"]
    parts = [f"最多保留 {age:g} 小时" if age else "没有时间限制"]
    limits = [f"最多 {files:g} 个" if files else "", f"总共最多 {size:g} MB" if size else ""]
    limits = [limit for limit in limits if limit]
    if limits:
        parts.append("、".join(limits) + "（最旧的先删除）")
    return "，".join(parts)


def notice(service: Service) -> str:
    """Whose history this is, that texts are stored, and how long things are kept."""
    retention = service.retention()
    return ("**Shared by everyone on this box / 本机所有用户共用**: this lists the last outputs made on "
            "this page by anyone using this box, not only yours. The start of each text is stored on "
            f"the box with its audio. Outputs are kept {kept_for(retention)}, then removed with their "
            "text; download what you want to keep / 此列表显示本机所有用户在此页面生成的最新音频，而不仅"
            "是你的。每段文本的开头与音频一起保存在本机。音频" + kept_for_zh(retention)
            + "，之后连同文本一起删除；需要保留的请下载")


def rows(entries: list[HistoryEntry]) -> list[list[str]]:
    return [[time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.created)), entry.text_start,
             entry.voice, f"{entry.model} ({entry.engine})", f"{entry.duration_s:.1f} s"]
            for entry in entries]


def label(entry: HistoryEntry) -> str:
    return f"{time.strftime('%H:%M:%S', time.localtime(entry.created))} · {entry.text_start}"


def build(service: Service) -> None:
    """The tab, inside the page's ``gr.Tabs``."""
    import gradio as gr

    def view() -> tuple[dict, dict, str]:
        entries = service.history(SHOWN)
        return (gr.update(value=rows(entries)),
                gr.update(choices=[(label(entry), entry.job_id) for entry in entries], value=None),
                notice(service))

    def play(job_id: str | None) -> Any:
        """The chosen output's WAV for the player (and its download button)."""
        if not job_id:
            return None
        entry = next((entry for entry in service.history(SHOWN) if entry.job_id == job_id), None)
        if entry is None or not entry.path.is_file():
            gr.Warning("That output has been removed (outputs are kept for a limited time) / "
                       "该音频已被删除（音频保留时间有限）", duration=None)
            return None
        service.lease(entry.path)  # the janitor spares it while it is played and downloaded
        return str(entry.path)

    entries = service.history(SHOWN)
    with gr.Tab("History / 历史", id="history") as tab:
        note = gr.Markdown(notice(service), elem_id="history-notice")
        refresh = gr.Button("Refresh / 刷新", size="sm", elem_id="history-refresh")
        table = gr.Dataframe(headers=HEADERS, value=rows(entries), interactive=False, wrap=True,
                             elem_id="history-table")
        choice = gr.Dropdown([(label(entry), entry.job_id) for entry in entries], value=None,
                             label="Play / 播放", elem_id="history-choice")
        player = gr.Audio(type="filepath", format="wav", label="Output / 输出 (WAV)", interactive=False,
                          buttons=["download"], elem_id="history-player")
    tab.select(view, inputs=None, outputs=[table, choice, note], queue=False)
    refresh.click(view, inputs=None, outputs=[table, choice, note], queue=False)
    choice.change(play, inputs=[choice], outputs=[player])
