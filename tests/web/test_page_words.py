"""The page's Chinese (cosyedge/web/page_words.py): every refusal a page can meet and every note its
report panel shows has it, filled from the real params of the real raise and note sites; the
History notice says all its limits in both languages."""

from __future__ import annotations

import logging

import pytest

from cosyedge.engines.base import Capabilities, SynthesisOptions
from cosyedge.errors import error_codes
from cosyedge.instruct.plan import apply_plan, plan
from cosyedge.notes import NOTE_CODES, Note
from cosyedge.web.page_words import NOTES_IN_BOTH, NOTES_ZH, REASONS_ZH, ZH_IN_MESSAGE, bilingual_note, chinese_note

#: Refusals no page shows: REST/OpenAI body checks, Wyoming events, job routes, the converter, the
#: base kinds (raised without a finer code only where a page never calls), cancellations (the page
#: says "Cancelled / 已取消" itself) and the checks the page's own controls make impossible.
NOT_ON_PAGE = {
    # kinds
    "internal_error", "invalid_input", "invalid_text", "invalid_audio", "invalid_parameter", "invalid_name",
    "invalid_event", "not_found", "conflict", "payload_too_large", "busy", "cancelled", "storage_full",
    "engine_error",
    # REST / OpenAI bodies and routes
    "prompt_not_base64", "text_not_string", "speed_not_number", "instruct_not_string", "job_id_invalid",
    "job_id_in_use", "job_unknown", "job_stream_unknown", "job_stream_released", "lesson_unknown",
    "response_format_unknown", "model_not_loaded", "voice_type_unsupported", "consent_reference_invalid",
    "request_body_over_limit", "request_body_too_large", "model_version_unknown", "quality_unknown",
    "quality_lever_out_of_range", "invalid_reading",
    # the page's controls: a slider, a radio, a dropdown of known languages
    "speed_out_of_range", "flow_steps_out_of_range", "language_unknown", "instruct_too_long",
    # cancellations, the converter (a shell command), Wyoming
    "client_disconnected", "cancelled_on_shutdown", "convert_wrong_family", "convert_unknown_config",
    "event_header_too_long", "event_header_invalid", "event_length_invalid", "event_too_large",
    "event_data_invalid", "event_truncated", "event_unknown", "event_field_invalid", "stream_not_started",
    "stream_already_started",
}
#: Notes with words of their own on the page (the lesson box's progress, cosyedge/web/lesson_ui.py).
OWN_WORDS = {"lesson_progress", "lesson_zipping"}
EMBEDDED = Capabilities(native_clone=False, native_instruct=False, languages=("auto", "zh", "en", "ja"),
                        sample_rate=24000)
NATIVE = Capabilities(native_clone=True, native_instruct=True, languages=("auto", "zh", "en", "ja"),
                      sample_rate=24000)
INSTRUCTIONS = ["用开心的语气说，慢一点", "speak like a robot, loudly, in a male voice", "请用四川话说",
                "whisper, very fast", "sad but happy", "in an elderly voice, in French", "不要生气，大声一点",
                "sing it, not crying, extremely slowly", "用英语说，声音高一点", "not in a female voice",
                "read it with a british accent, calmly, quietly and very very fast", "", "xyzzy frobnicate",
                "extremely excited, extremely surprised, happy and fearful, speed 3x, extremely extremely loud",
                "in a child's voice"]


def test_every_refusal_a_page_can_meet_has_chinese():
    codes = set(error_codes())
    missing = codes - NOT_ON_PAGE - ZH_IN_MESSAGE - set(REASONS_ZH)
    assert missing == set(), f"refusals a page can show without Chinese: {sorted(missing)}"
    assert NOT_ON_PAGE <= codes, sorted(NOT_ON_PAGE - codes)  # the list follows the tree


def test_every_note_the_panel_shows_has_chinese():
    assert set(NOTES_ZH) <= set(NOTE_CODES), sorted(set(NOTES_ZH) - set(NOTE_CODES))
    assert set(NOTE_CODES) - OWN_WORDS - NOTES_IN_BOTH - set(NOTES_ZH) == set()


def test_the_instructions_below_reach_every_instruct_note():
    seen = set()
    for instruction in INSTRUCTIONS:
        embedded = plan(instruction, EMBEDDED, presets=("female_1", "male_1", "child"))
        for result in (embedded, plan(instruction, EMBEDDED, presets=("female_1",)),
                       apply_plan(embedded, SynthesisOptions(speed=1.8), "child").plan,
                       apply_plan(embedded, SynthesisOptions(), "male_1").plan,
                       plan(instruction, NATIVE, native_format=lambda text: text)):
            seen |= {note.code for note in (result.message, *result.applied, *result.not_supported)}
    planned = {code for code in NOTE_CODES if code.startswith("instruct_")} - {"instruct_as_controls"}  # v1's own
    assert planned - seen == set()


#: Params as each other note's site passes them (its English is not needed: the page never reads it).
SITE_PARAMS = {
    "voice_preset": {}, "voice_native_clone": {},
    "voice_instruct_preset": {"voice": "male_1", "instead_of": "female_1"},
    "closest_voice_outside_band": {"voice": "jm_kumo", "prompt_f0_hz": 60.0, "voice_f0_hz": 95.0},
    "closest_voice_no_pitch": {"voice": "jf_alpha"},
    "voice_sound_changed": {"before": "female_2", "voice": "female_1"},
    "instruct_as_controls": {"mode": "instruct", "model": "cosyvoice-300m", "model_name": "CosyVoice-300M"},
    "quality_ignored": {"engine": "kokoro", "quality": "fast"},
    "quality_levers": {"quality": "fast", "levers": ("flow_steps", "cfg_steps"), "flow_steps": 5, "cfg_steps": 0,
                       "left_chunks": 4, "first_hop_tokens": None},
    "quality_not_checked": {"quality": "fast", "stale": True},
    "quality_checked": {"quality": "fast", "date": "2026-12-05", "similarity": 0.91, "intelligibility_delta": -1.5,
                        "recommended": True, "voice": "female_1", "same_voice": True},
    "reading_applied": {"entries": [{"word": "银行", "reading": "yin2 hang2", "count": 2, "inline": False}],
                        "engine": "kokoro"},
    "reading_book_damaged": {"lines": [3, 7]},
    "reading_not_supported": {"word": "GIF", "language": "en", "reading": "JH IH1 F", "engine": "fake",
                              "why": "no phonemes"},
    "reading_other_language": {"word": "行", "language": "zh", "read_as": "ja"},
    "lesson_paragraph_failed": {"paragraph": 3, "total": 9, "reason": "job_failed"},
    "transcript_heard": {"heard": "你好", "confidence": 0.9},
    "transcript_unsure": {"heard": "你好", "confidence": 0.5, "threshold": 0.8},
    "transcript_not_heard": {}, "transcript_unavailable": {"reason": "no recognizer"},
    "tag_not_read": {"tag": "[fr]"}, "emoji_not_read": {"count": 2, "shown": "😀, 🎉"},
    "symbols_not_read": {"count": 1, "shown": "§"}, "script_not_read": {"count": 5, "script": "Hangul", "shown": "안녕"},
    "language_not_applied": {"language": "ja", "count": 3, "read_as": "en"},
    "flow_steps_standard": {"steps": 10}, "flow_steps_fast": {"steps": 5}, "flow_steps_ignored": {"engine": "kokoro"},
    "stream_cache_limit": {"sentence": 2, "budget_mb": 64.0},
    "prompt_clipping": {}, "prompt_silence_trimmed": {"seconds": 1.2},
    "prompt_cut": {"kept": 10.0, "seconds": 25.0, "maximum": 20.0}, "prompt_low_level": {"dbfs": -41.0},
    "prompt_channels_cancel": {},
    "prompt_audio_ignored": {"voice_id": "ms-lee"},
    "speaker_ignored_saved_voice": {"speaker": "male_1", "voice_id": "ms-lee"},
    "speaker_ignored_prompt_audio": {"speaker": "male_1"}, "prompt_text_ignored_saved_voice": {},
    "prompt_text_ignored_no_prompt": {}, "prompt_text_ignored_no_clone": {"engine": "kokoro"},
}


def test_every_other_note_fills_its_chinese_from_its_sites_params(caplog):
    caplog.set_level(logging.WARNING)
    others = {code for code in NOTES_ZH if code not in SITE_PARAMS and code.startswith("instruct_")}
    assert set(NOTES_ZH) - set(SITE_PARAMS) == others  # every note outside the plans has params here
    for code, params in SITE_PARAMS.items():
        chinese = chinese_note(Note("english", code=code, **params))
        assert chinese and "{" not in chinese, code
    assert not caplog.records, [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("instruction", INSTRUCTIONS)
def test_every_item_of_an_instruction_panel_is_bilingual(instruction, caplog):
    caplog.set_level(logging.WARNING)
    embedded = plan(instruction, EMBEDDED, presets=("female_1", "male_1", "child"))
    results = [embedded, plan(instruction, EMBEDDED, presets=("female_1",)),  # a voice it lacks
               *(apply_plan(embedded, SynthesisOptions(speed=1.8), voice).plan  # the voice and speed lines
                 for voice in ("child", "male_1")),
               plan(instruction, NATIVE, native_format=lambda text: text)]
    for result in results:
        for note in (result.message, *result.applied, *result.not_supported):
            chinese = chinese_note(note)
            assert chinese and "{" not in chinese, (note.code, dict(note.params))
            assert bilingual_note(note) == f"{note} / {chinese}"
    assert not caplog.records, [r.getMessage() for r in caplog.records]  # every template found its params


def test_the_voice_used_instead_of_a_recording_says_so_in_chinese():
    from cosyedge.engines.base import VoicePrompt

    recording = VoicePrompt(engine="fake", model_id="fake-sine")
    applied = apply_plan(plan("in a male voice", EMBEDDED, presets=("male_1",)), SynthesisOptions(), recording)
    (voice_line,) = applied.plan.applied
    assert voice_line.code == "instruct_voice_instead"
    assert chinese_note(voice_line).endswith("代替你的录音的音色")


def test_a_plain_string_or_an_unknown_code_stays_english():
    assert bilingual_note("preset") == "preset"
    assert chinese_note(Note("x", code="lesson_progress", paragraph=1, total=2, seconds_left=None)) is None


def test_the_history_notice_says_every_limit_in_both_languages(make_service, web_settings):
    import dataclasses

    from cosyedge.web.history_tab import notice

    service = make_service(dataclasses.replace(web_settings, janitor_max_age_hours=24, janitor_max_files=500,
                                               janitor_max_total_mb=1024))
    text = notice(service)
    assert "at most 500 outputs and 1024 MB in all" in text
    assert "最多保留 24 小时，最多 500 个、总共最多 1024 MB（最旧的先删除）" in text
