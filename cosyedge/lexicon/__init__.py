"""The box's pronunciation dictionary: entries ``word -> reading`` per language, the file that keeps
them, and how they are found in a text.

``readings`` checks and parses one reading (Mandarin toned pinyin, English IPA or ARPAbet, Japanese
kana) into the plain parts every engine reads; ``entries`` checks a word and makes an entry;
``book`` keeps the entries in one human-readable TSV under the data folder (written atomically,
TSV import and export, a damaged file reported and kept); ``matching`` finds the entries and the
inline form ``{word|reading}`` in a text, by the rules in docs/pronunciation.md. The engines apply
what is found in their own text front ends; the service edits the book.

May import: root, host, catalog, text (docs/ARCHITECTURE.md, "Layers").
"""
