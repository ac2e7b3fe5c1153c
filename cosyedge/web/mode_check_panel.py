"""The page's words for the speed-mode check: the Models tab's verdict table (:func:`describe`) and
the verdict after each mode's name in the generate tabs' quality control (:func:`label_verdict`).
Plain functions of what the service returns (``Service.mode_check``, ``Service.mode_verdicts``);
user-given names are HTML-escaped."""

from __future__ import annotations

import html
from typing import Any

NOT_CHECKED = "Speed modes not checked on this model yet / 尚未在本模型上检查速度模式"
STALE = ("**The model changed since this check** (converted again): these verdicts no longer hold; "
         "check again / **模型在检查后已更改**（重新转换）：结论已失效，请重新检查")
RUNNING = "Checking / 检查中"
STATES = {"cancelled": "cancelled, the previous verdicts are kept / 已取消，保留之前的结论",
          "failed": "failed / 失败", "done": "done / 完成"}
FAILED_RULES = {"similarity_low": "voice less similar to exact / 与精确模式音色相差较大",
                "intelligibility_drop": "heard less clearly than exact / 清晰度低于精确模式",
                "intelligibility_not_scored": "intelligibility not scored / 未评估清晰度",
                "exact_not_heard": "exact itself not heard clearly: cannot vouch / 精确模式本身听不清，无法评判"}

#: The record's notes in Chinese, by code (the English is the note's message).
NOTE_WORDS = {"mode_check_judge_fallback": "模型自带的 campplus.onnx 无法使用，音色相似度改由 d-vector 评判"}


def _voice(voice: dict[str, Any] | None) -> str:
    if not voice:
        return ""
    kind = "preset / 预设" if voice.get("kind") == "preset" else "saved voice / 已保存的声音"
    return f"{kind} {html.escape(str(voice.get('name', '')))}"


def _points(value: float | None) -> str:
    return "not scored / 未评估" if value is None else f"{value:+.1f}"


def describe(answer: dict[str, Any]) -> str:
    """Markdown of :meth:`Service.mode_check`: the run under way or its end, then the stored verdicts."""
    parts = []
    status = answer["status"]
    progress = status["progress"]
    if status["state"] == "running":
        step = html.escape(progress.get("step") or "starting")
        parts.append(f"{RUNNING}: {step} ({progress['done']}/{progress['total']}); it pauses while anyone's job "
                     "runs / 有任务时自动暂停")
    elif status["state"] in STATES:
        error = status.get("error") or {}
        why = f": {html.escape(error.get('message', ''))}" if error.get("message") else ""
        parts.append(f"Last check / 上次检查: {STATES[status['state']]}{why}")
    result = answer.get("result")
    if result is None:
        parts.append(NOT_CHECKED)
        return "\n\n".join(parts)
    if answer.get("current") is False:
        parts.append(STALE)
    parts.append(f"Checked on this model on {html.escape(str(result.get('finished', ''))[:10])} with "
                 f"{_voice(result.get('voice'))}, judged by {html.escape(str(result.get('judge')))} / 检查日期与声音如上")
    for note in result.get("notes") or []:  # e.g. the model's campplus could not be used: the d-vector judged
        zh = NOTE_WORDS.get(str(note.get("code")))
        parts.append(f"Note / 注意: {html.escape(str(note.get('message', '')))}" + (f" / {zh}" if zh else ""))
    exact = result.get("exact") or {}
    units = exact.get("units") or 0
    heard = f"{100 * (1 - exact.get('heard_errors', 0) / units):.1f} %" if units else "not scored / 未评估"
    rows = ["| Mode / 模式 | Verdict / 结论 | Similarity / 相似度 | Intelligibility / 清晰度 (points / 分) "
            "| Duration / 时长 | Mel distance / 梅尔距离 |", "|---|---|---|---|---|---|",
            f"| exact | reference / 基准 | 1.00 | {heard} | ×1.00 | 0 dB |"]
    for name, entry in (result.get("modes") or {}).items():
        figures, verdict = entry["figures"], entry["verdict"]
        if verdict.get("recommended") and answer.get("current") is not False:
            said = "recommended on this model / 本模型推荐"
        else:
            said = "not recommended / 不推荐" + "".join(
                f"; {FAILED_RULES.get(rule, html.escape(rule))}" for rule in verdict.get("failed", []))
        rows.append(f"| {html.escape(name)} | {said} | {figures['similarity']:.2f} | "
                    f"{_points(figures.get('intelligibility_delta'))} | ×{figures['duration_ratio']:.2f} | "
                    f"{figures['mel_distance_db']:.1f} dB |")
    parts.append("\n".join(rows))
    return "\n\n".join(parts)


def label_verdict(label: str, verdict: dict[str, Any] | None) -> str:
    """A quality mode's label with what the check found of it on the served model."""
    if verdict is None:
        return f"{label} — not checked on this model / 未在本模型上检查"
    if verdict.get("stale"):
        return f"{label} — check outdated (model changed) / 检查已过期"
    if verdict.get("recommended"):
        return f"{label} — recommended on this model / 本模型推荐"
    return f"{label} — not recommended on this model / 本模型不推荐"
