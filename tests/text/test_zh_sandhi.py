"""Mandarin tone sandhi rules on citation tones (no dictionary involved: inputs are written out)."""

import pytest

from cosyedge.text.zh_sandhi import apply


def w(*pairs):
    """A word from 'char:pinyin' strings."""
    return [tuple(p.split(":")) for p in pairs]


def flat(words):
    return [p for word in apply(words) for p in word]


@pytest.mark.parametrize("words, expected", [
    ([w("你:ni3", "好:hao3")], ["ni2", "hao3"]),
    ([w("老:lao3", "鼠:shu3")], ["lao2", "shu3"]),
    ([w("展:zhan3", "览:lan3", "馆:guan3")], ["zhan2", "lan2", "guan3"]),
    ([w("展:zhan3", "览:lan3"), w("馆:guan3")], ["zhan2", "lan2", "guan3"]),   # 2+1
    ([w("老:lao3"), w("保:bao3", "管:guan3")], ["lao3", "bao2", "guan3"]),     # 1+2
    ([w("我:wo3"), w("很:hen3"), w("好:hao3")], ["wo2", "hen2", "hao3"]),
    ([w("你:ni3"), w("想:xiang3"), w("买:mai3"), w("水:shui3", "果:guo3")],
     ["ni2", "xiang2", "mai3", "shui2", "guo3"]),
    ([w("姐:jie3", "姐:jie5")], ["jie3", "jie5"]),                                # neutral tone breaks
])
def test_third_tone(words, expected):
    assert flat(words) == expected


def test_non_han_breaks_the_chain():
    assert flat([w("我:wo3"), [("x", None)], w("好:hao3")]) == ["wo3", None, "hao3"]


@pytest.mark.parametrize("words, expected", [
    ([w("不:bu4", "是:shi4")], ["bu2", "shi4"]),
    ([w("不:bu4"), w("要:yao4")], ["bu2", "yao4"]),                # across a word boundary
    ([w("我:wo3"), w("不:bu4"), w("知:zhi1", "道:dao4")], ["wo3", "bu4", "zhi1", "dao4"]),
    ([w("不:bu4")], ["bu4"]),
    ([w("是:shi4", "不:bu5", "是:shi4")], ["shi4", "bu5", "shi4"]),   # neutral from the dictionary stays
])
def test_bu(words, expected):
    assert flat(words) == expected


@pytest.mark.parametrize("words, expected", [
    ([w("一:yi1", "个:ge4")], ["yi2", "ge4"]),
    ([w("一:yi1", "天:tian1")], ["yi4", "tian1"]),
    ([w("一:yi1", "起:qi3")], ["yi4", "qi3"]),
    ([w("一:yi1", "百:bai3")], ["yi4", "bai3"]),
    ([w("第:di4", "一:yi1")], ["di4", "yi1"]),
    ([w("统:tong3", "一:yi1"), w("中:zhong1", "国:guo2")], ["tong3", "yi1", "zhong1", "guo2"]),
    ([w("十:shi2", "一:yi1")], ["shi2", "yi1"]),
    ([w("一:yi1", "二:er4", "三:san1")], ["yi1", "er4", "san1"]),
    ([w("一:yi1", "月:yue4")], ["yi1", "yue4"]),
    ([w("三:san1", "月:yue4"), w("一:yi1", "日:ri4")], ["san1", "yue4", "yi1", "ri4"]),
    ([w("一:yi1", "点:dian3", "五:wu3")], ["yi1", "dian2", "wu3"]),   # 点五 is itself 3-3
    ([w("一:yi1", "点:dian3")], ["yi4", "dian3"]),
    ([w("看:kan4", "一:yi1", "看:kan4")], ["kan4", "yi5", "kan4"]),
    ([w("一:yi1", "个:ge4"), w("一:yi1", "个:ge4")], ["yi2", "ge4", "yi2", "ge4"]),   # not 看一看
    ([w("一:yi1", "天:tian1"), w("一:yi1", "天:tian1")], ["yi4", "tian1", "yi4", "tian1"]),
    ([w("一:yi1")], ["yi1"]),
])
def test_yi(words, expected):
    assert flat(words) == expected


def test_yi_before_third_tone_is_not_a_third_tone_itself():
    # 一 -> yi4 before 起, and 一 never joins a third-tone chain
    assert flat([w("一:yi1", "起:qi3"), w("走:zou3")]) == ["yi4", "qi2", "zou3"]


def test_shape_is_kept():
    words = [w("你:ni3", "好:hao3"), w("世:shi4", "界:jie4")]
    assert apply(words) == [["ni2", "hao3"], ["shi4", "jie4"]]
