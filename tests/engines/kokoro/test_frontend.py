"""KokoroFrontend without a model: sentences, languages, limits, token ids, bad input."""

import threading

import pytest

from cosyedge.engines.kokoro.frontend import FIRST_CHUNK_PHONEMES, MAX_PHONEMES, KokoroFrontend, Sentence
from cosyedge.errors import ParameterError, TextError


@pytest.fixture(scope="module")
def frontend():
    f = KokoroFrontend()
    yield f
    f.close()


def check_model_ready(frontend, sentences):
    """What the engine relies on, for every sentence."""
    assert sentences
    for s in sentences:
        assert isinstance(s, Sentence)
        assert s.text.strip() and s.phonemes.strip()
        assert 0 < len(s.phonemes) <= MAX_PHONEMES
        assert set(s.phonemes) <= set(frontend.vocab)
        assert s.language in ("zh", "en", "ja")


def test_seed_example_tags(frontend):
    out = frontend.sentences("[zh]今天天气真好[en]It's sunny today")
    assert [(s.language, s.text, s.phonemes) for s in out] == [
        ("zh", "今天天气真好", "ʨi→ntʰjɛ→ntʰjɛ→nʨʰi↘ ꭧə→n xau↓"),
        ("en", "It's sunny today", "ɪts sˈʌni tədˈA"),
    ]


def test_chinese_with_english_word_is_one_sentence_with_english_phonemes(frontend):
    out = frontend.sentences("我喜欢Python编程")
    assert [(s.language, s.phonemes) for s in out] == [
        ("zh", "wo↗ ɕi↓xwa→n pˈIθən pjɛ→nꭧʰə↗ŋ")]   # 我喜欢: wo3 xi3 -> wo2 (3-3 across words)


def test_japanese_kana_makes_kanji_japanese(frontend):
    out = frontend.sentences("こんにちは世界")
    assert [(s.language, s.phonemes) for s in out] == [("ja", "koɲɲiʨiβa sekai")]


@pytest.mark.parametrize("text, phonemes", [
    ("下午2点上课。", "ɕja↘u↓ lja↗ŋtjɛ↓n ʂa↘ŋkʰɤ↘."),            # 两点, not 二点
    ("一个一个地", "i↗kɤ↘ i↗kɤ↘ ti↘"),                          # yi2 ge4 twice, no neutral yi
    ("It is -5°C.", "ɪT ɪz mˈInəs fˈIv dᵻɡɹˈiz sˈɛlsiəs."),      # the minus is read
    ("Is it a dog? No.", "ɪz ɪT ə dˈɑɡ? nˈO."),                  # "No." is no, not "number"
    ("Say nǐ hǎo to your friends.", "sˈA ni↓ xau↓ tə jʊɹ fɹˈɛndz."),  # pinyin as Mandarin, not "nigh how"
    ("I love the café.", "I lˈʌv ðə kæfˈA."),                       # an accent alone is no pinyin
    ("Sí, à la carte.", "ʃˈi, ˌɑlæ kˈɑɹt."),                                 # acute/grave alone: not pinyin
    ("已知a=2，求a+b的值。", "i↓ꭧɨ→ ˈA tə↓ŋy↗ ɚ↘, ʨʰjou↗ ˈA ʨja→ bˈi tɤ ꭧɨ↗."),  # variables in English only
])
def test_classroom_misreadings(frontend, text, phonemes):
    assert " ".join(s.phonemes for s in frontend.sentences(text)) == phonemes


def test_numbers_dates_and_punctuation_in_chinese(frontend):
    out = frontend.sentences("你好，世界！今天是2024年1月1日。")
    assert [(s.text, s.phonemes) for s in out] == [
        ("你好，世界！", "ni↗xau↓, ʂɨ↘ʨje↘!"),
        ("今天是二零二四年一月一日。", "ʨi→ntʰjɛ→n ʂɨ↘ ɚ↘li↗ŋɚ↘ sɨ↘njɛ↗n i→ɥe↘ i→ɻɨ↘."),
    ]


def test_english_sentences_and_normalization(frontend):
    out = frontend.sentences("Hello world. I paid $5 at 9:05 pm!")
    assert [(s.text, s.phonemes) for s in out] == [
        ("Hello world.", "həlˈO wˈɜɹld."),
        ("I paid five dollars at nine oh five P M!", "I pˈAd fˈIv dˈɑləɹz æt nˈIn ˈO fˈIv pˈi ˈɛm!"),
    ]


def test_seed_tags_with_mul(frontend):
    out = frontend.sentences("[zh]你好，世界！[en]How are you?[ja]こんにちは[mul]混合模式启动[/mul]")
    assert [s.language for s in out] == ["zh", "en", "ja", "zh"]
    assert out[1].phonemes == "hˈW ɑɹ ju?"


def test_language_argument_forces_han_reading(frontend):
    assert frontend.sentences("東京", "ja")[0].language == "ja"
    assert frontend.sentences("東京", "zh")[0].language == "zh"
    assert frontend.sentences("2024", "en")[0].phonemes == "tˈu θˈWzənd twˈɛntifˈɔɹ"
    assert frontend.sentences("東京", "MUL")[0].language == "zh"


def test_unknown_language_argument(frontend):
    with pytest.raises(ParameterError, match="not supported"):
        frontend.sentences("hello", "fr")


@pytest.mark.parametrize("text, message", [
    ("", "empty"), ("   \n\t ", "empty"), ("\x00\x01\u200b", "empty"),
    ("。。！？……", "only punctuation"), ("!!! ...", "only punctuation"),
    ("😀😀🎉", "nothing speakable"), ("안녕하세요", "nothing speakable"), ("★☆♪", "nothing speakable"),
])
def test_bad_input_raises_text_error(frontend, text, message):
    with pytest.raises(TextError, match=message):
        frontend.sentences(text)


def test_non_string_raises_text_error(frontend):
    with pytest.raises(TextError, match="string"):
        frontend.sentences(None)


def test_control_characters_and_emoji_inside_text_are_ignored(frontend):
    out = frontend.sentences("你\x00好\u200b😀！")
    assert [(s.text, s.phonemes) for s in out] == [("你好！", "ni↗xau↓!")]


def test_long_sentence_is_cut_at_clauses_within_limit(frontend):
    clause = "今天天气真好我们一起去公园散步吧"
    text = "，".join([clause] * 40) + "。"   # one sentence, ~40 clauses, ~1,800 phonemes
    out = frontend.sentences(text)
    check_model_ready(frontend, out)
    assert len(out) >= 4
    assert all(s.phonemes.endswith((",", ".")) for s in out)   # cut after a clause mark
    assert "".join(s.text for s in out) == text


def test_unpunctuated_text_is_cut_at_words(frontend):
    out = frontend.sentences("我们一起去公园散步吧" * 200)
    check_model_ready(frontend, out)
    out = frontend.sentences("the quick brown fox jumps over the lazy dog " * 100)
    check_model_ready(frontend, out)
    assert all(s.text.split()[0] in ("the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog")
               for s in out)


def test_one_giant_word_is_truncated_not_fatal(frontend):
    check_model_ready(frontend, frontend.sentences("a" * 3000))


def test_no_empty_sentences_with_odd_punctuation(frontend):
    out = frontend.sentences("。。你好！！！？？，，，\n\n\n世界……——")
    check_model_ready(frontend, out)
    assert [s.text for s in out] == ["你好！！！？？，，，", "世界……——"]


def test_token_ids(frontend):
    ids = frontend.token_ids("ni↗xau↓.")
    v = frontend.vocab
    assert ids == [v["n"], v["i"], v["↗"], v["x"], v["a"], v["u"], v["↓"], v["."]]
    assert frontend.token_ids("n☃i") == [v["n"], v["i"]]
    assert len(frontend.token_ids("a" * 600)) == MAX_PHONEMES


def test_unread_names_what_sentences_leave_out(frontend):
    out = frontend.sentences("[fr]Bonjour. [ko]안녕하세요 class.")
    assert "fr" not in " ".join(s.text for s in out).lower()  # the tag is not read as letters
    notes = frontend.analyze("[fr]Bonjour. [ko]안녕하세요 class.").skipped
    assert [n.split(" not read")[0] for n in notes] == ["tag [fr]", "tag [ko]", "5 Hangul characters"]
    assert frontend.analyze("[zh]今天天气真好[en]It's sunny today").skipped == ()


@pytest.mark.parametrize("text, language", [
    ("[fr]Bonjour. [ko]안녕하세요 class.", "auto"), ("今天天气真好。Hello there!", "en"),
    ("東京に行きます。I like it.", "ZH"), ("[en]Hello[/en] 你好 Привет 😀", "mul"),
    ("你好，世界！今天是2024年1月1日。", "ja"),
])
def test_analyze_is_sentences_and_their_notes_in_one_pass(frontend, text, language):
    """The engine's one text pass gives the same sentences as ``sentences`` and the same reports as
    the language rules run on their own (cleanup, then langid)."""
    from cosyedge.text import cleanup, langid

    analysis = frontend.analyze(text, language)
    assert list(analysis.sentences) == frontend.sentences(text, language)
    lang = "auto" if language.lower() == "mul" else language.lower()
    unread = langid.Unread()
    langid.segment(cleanup.clean(text), lang, frontend.default_language, unread)
    assert list(analysis.skipped) == unread.notes()
    assert list(analysis.notes) == langid.language_notes(cleanup.clean(text), lang, frontend.default_language)
    assert analysis.text == text and analysis.language == language


def test_runs_without_model_files_from_injected_vocab():
    vocab = {"a": 1, "b": 2, " ": 3}
    f = KokoroFrontend(vocab=vocab)
    try:
        assert f.token_ids("abz a") == [1, 2, 3, 1]
    finally:
        f.close()


def test_two_threads_at_once(frontend):
    results = {}

    def work(name, text):
        results[name] = [s.phonemes for s in frontend.sentences(text)]

    texts = {"en": "Hello world. " * 20, "ja": "こんにちは。" * 20, "zh": "你好。" * 20}
    threads = [threading.Thread(target=work, args=item) for item in texts.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results["en"] == ["həlˈO wˈɜɹld."] * 20
    assert results["ja"] == ["koɲɲiʨiβa."] * 20
    assert results["zh"] == ["ni↗xau↓."] * 20


@pytest.mark.slow
@pytest.mark.parametrize("unit", [
    "今天天气真好，我们一起去公园散步吧。", "It's a sunny day, and we go to the park. ",
    "今日はとても良い天気ですね、公園に行きましょう。", "我们一起去公园散步吧😀", "[en]hi[zh]你好[ja]はい",
])
def test_100k_characters(frontend, unit):
    text = (unit * (100_000 // len(unit) + 1))[:100_000]
    check_model_ready(frontend, frontend.sentences(text))


def test_random_text_never_crashes(frontend):
    """Seeded junk from every character family: either model-ready sentences or a TextError."""
    import random

    rng = random.Random(7)
    pools = ["你好世界一不二三点月日号第", "こんにちはカタカナー々", "abcXYZ'- ", "0123456789",
             ".,!?;:…—~，。！？、；：（）「」《》“”\"'()[]", "$€£¥%&+@#°℃/*=<>^_|\\",
             "\n\t\x00\u200b😀한Ωжé", "[zh][en][ja][mul][/mul][ko]"]
    for _ in range(150):
        text = "".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(0, 40)))
        try:
            out = frontend.sentences(text, rng.choice(["auto", "zh", "en", "ja"]))
        except TextError:
            continue
        check_model_ready(frontend, out)


def test_missing_espeak_is_reported_not_swallowed(tmp_path, monkeypatch):
    from cosyedge.errors import ModelMissingError
    from cosyedge.text import espeak

    script = tmp_path / "worker.py"
    script.write_text('import json\nprint(json.dumps({"fatal": "no libespeak-ng"}), flush=True)\n')
    monkeypatch.setattr(espeak, "WORKER", script)
    f = KokoroFrontend()
    try:
        assert f.sentences("你好")[0].phonemes == "ni↗xau↓"      # no English: espeak not needed
        with pytest.raises(ModelMissingError, match="espeakng-loader"):
            f.sentences("hello")
    finally:
        f.close()


@pytest.mark.parametrize("text, phonemes", [
    ("2024年", "ɚ↘li↗ŋɚ↘ sɨ↘njɛ↗n"),                 # year read digit by digit
    ("增长了3.5%", "ʦə→ŋꭧa↓ŋ lɤ pai↓fə→nꭧɨ→sa→ntjɛ↗n u↓"),   # 点五: dian3 wu3 -> dian2 wu3
    ("我有2个苹果", "wo↗ jou↗ lja↓ŋkɤ↘ pʰi↗ŋkwo↓"),   # 两个, not 二个; you3 liang3 -> you2
])
def test_chinese_numbers(frontend, text, phonemes):
    assert frontend.sentences(text)[0].phonemes == phonemes


# --- short first chunk (first audio sooner) ---------------------------------------------------------

LONG_FIRST_EN = ("Every spring, the school organizes a trip to the mountains for the younger classes. "
                 "The children walk along the river, look for birds and learn the names of the trees.")
LONG_FIRST_ZH = "每年春天，学校都会组织低年级的同学去山里春游。孩子们沿着小河散步，寻找小鸟，认识各种树木。"


@pytest.fixture(scope="module")
def uncut_frontend(frontend):
    """The same frontend (shared G2P) with the first-sentence cut turned off."""
    f = KokoroFrontend(vocab=frontend.vocab, g2p=frontend.g2p, first_chunk_phonemes=0)
    return f


@pytest.mark.parametrize("text", [LONG_FIRST_EN, LONG_FIRST_ZH])
def test_long_first_sentence_is_cut_at_its_first_clause(frontend, uncut_frontend, text):
    cut = frontend.sentences(text)
    whole = uncut_frontend.sentences(text)
    check_model_ready(frontend, cut)
    assert len(cut) == len(whole) + 1
    first, rest = cut[0], cut[1]
    assert len(first.phonemes) <= FIRST_CHUNK_PHONEMES < len(whole[0].phonemes)
    assert first.phonemes.endswith(",") and not first.ends_sentence   # cut after a clause mark
    assert first.text in ("Every spring,", "每年春天，")
    assert rest.ends_sentence
    # nothing re-read or split inside a word: the two calls are the uncut sentence's phonemes
    assert f"{first.phonemes} {rest.phonemes}" == whole[0].phonemes
    # only the first sentence is cut: the later ones (with commas) are unchanged and whole
    assert [(s.text, s.phonemes, s.ends_sentence) for s in cut[2:]] == \
        [(s.text, s.phonemes, s.ends_sentence) for s in whole[1:]]
    assert all(s.ends_sentence for s in whole)


def test_short_first_sentence_or_one_without_clause_marks_is_not_cut(frontend, uncut_frontend):
    for text in ("Hello, world. How are you today, my friend?",
                 "我们明天早上八点在学校门口集合。请大家带好水和午饭，不要迟到。"):
        assert frontend.sentences(text) == uncut_frontend.sentences(text)


def test_first_cut_takes_the_longest_clause_prefix_within_the_limit(frontend):
    f = KokoroFrontend(vocab=frontend.vocab, g2p=frontend.g2p, first_chunk_phonemes=40)
    out = f.sentences("Well, I think, if you ask me, that this is a very long first sentence that "
                      "goes on and on without any end in sight. Short.")
    assert out[0].text == "Well, I think, if you ask me,"   # three clauses fit in 40, a fourth does not
    assert len(out[0].phonemes) <= 40 and not out[0].ends_sentence
    rest = "that this is a very long first sentence that goes on and on without any end in sight."
    assert [s.text for s in out[1:]] == [rest, "Short."]


def test_a_list_number_is_never_the_end_of_the_first_chunk(frontend):
    """"2.写生字" is read 二、写生字: the cut goes before 二, not after it (二 was left hanging at the
    end of the first call, its item in the next)."""
    out = frontend.sentences("作业：1.读课文 2.写生字 3.背诵第一段")
    assert [s.text for s in out] == ["作业：一、读课文；", "二、写生字；三、背诵第一段"]


def test_first_clause_longer_than_the_limit_is_still_the_first_chunk(frontend):
    f = KokoroFrontend(vocab=frontend.vocab, g2p=frontend.g2p, first_chunk_phonemes=20)
    out = f.sentences("我们明天早上八点在学校门口集合，请大家带好水和午饭，不要迟到。")
    assert out[0].text == "我们明天早上八点在学校门口集合，"
    assert not out[0].ends_sentence and out[1].ends_sentence and len(out) == 2


def test_decimal_numbers_are_never_cut(frontend, uncut_frontend):
    text = "The answer is 3.14159 and the next value is 2.71828, which are both constants of nature."
    cut = frontend.sentences(text)
    assert cut[0].text == "The answer is three point one four one five nine and the next value is " \
                          "two point seven one eight two eight,"
    assert f"{cut[0].phonemes} {cut[1].phonemes}" == uncut_frontend.sentences(text)[0].phonemes


@pytest.mark.parametrize("text", ["我今天用iPhone拍了很多很多非常漂亮的照片，然后发给了我的好朋友们看。",
                                  ("Today we learned 你好 and 谢谢 in our Chinese class with the new "
                                   "teacher, it was fun.")])
def test_first_cut_never_falls_at_a_language_switch(frontend, uncut_frontend, text):
    """A language change inside a clause is no clause end: the first call ends at a clause mark."""
    cut = frontend.sentences(text)
    whole = uncut_frontend.sentences(text)
    check_model_ready(frontend, cut)
    assert len(cut) == len(whole) + 1
    assert cut[0].text.endswith(("，", ",")) and not cut[0].ends_sentence
    assert f"{cut[0].phonemes} {cut[1].phonemes}" == whole[0].phonemes
