#!/usr/bin/env python3
"""Writes tests/golden/tokenizer/corpus.json: the strings every tokenizer oracle encodes.

Deterministic (seeded RNG, no network). Reads the special tokens of the five tokenizer families
from assets/tokenizers/<family>/tokenizer.json (fetched by scripts/setup.sh) so that every special
token appears in the corpus; run again after changing anything here and commit the result.

    python3 tools/make_tokenizer_corpus.py [--out tests/golden/tokenizer/corpus.json]
"""
import argparse
import json
import os
import random
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = ["qwen3", "llama3", "gemma3", "deepseek_v3", "gptoss"]

LANGUAGES = [
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll love it, won't you? We've said they'd come. SHE'S HERE! IT'LL WORK.",
    "Portez ce vieux whisky au juge blond qui fume. L'été à Paris, c'était déjà très chaud.",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich. Straße, Maß, Fußgänger.",
    "El pingüino Wenceslao hizo kilómetros bajo exhaustiva lluvia y frío, añoraba a su querido cachorro. ¿Qué? ¡Sí!",
    "À noite, vovô Kowalsky vê o ímã cair no pé do pinguim queixoso e vovó põe açúcar no chá de tâmaras do jabuti feliz.",
    "Quel fez sghembo copre davanti. Perché più città è così?",
    "Pa's wijze lynx bezag vroom het fikse aquaduct. Één, twee, drie.",
    "Pchnąć w tę łódź jeża lub ośm skrzyń fig. Zażółć gęślą jaźń.",
    "Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Pijamalı hasta yağız şoföre çabucak güvendi. İstanbul'da ılık bir gün.",
    "Tiếng Việt có dấu: Trăm năm trong cõi người ta, chữ tài chữ mệnh khéo là ghét nhau.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. Ёлка, объём.",
    "Чуєш їх, доцю, га? Кумедна ж ти, прощайся без ґольфів!",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Γειά σου Κόσμε!",
    "דג סקרן שט בים מאוכזב ולפתע מצא חברה. שָׁלוֹם עוֹלָם",
    "نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر ومغلف بجلد أزرق. مَرْحَبًا بِالْعَالَم",
    "به نام خداوند جان و خرد، کزین برتر اندیشه برنگذرد. ۱۲۳۴۵۶۷۸۹۰",
    "یہ ایک اردو جملہ ہے جس میں کچھ الفاظ ہیں۔",
    "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम। नमस्ते दुनिया १२३",
    "আমি বাংলায় গান গাই। এটি একটি পরীক্ষা বাক্য।",
    "யாமறிந்த மொழிகளிலே தமிழ்மொழி போல் இனிதாவது எங்கும் காணோம்.",
    "తెలుగు భాష చాలా మధురమైనది. ఇది ఒక పరీక్ష.",
    "ಕನ್ನಡ ಒಂದು ಸುಂದರ ಭಾಷೆ. ಇದು ಪರೀಕ್ಷೆ.",
    "മലയാളം ഒരു മനോഹരമായ ഭാഷയാണ്. ഇത് ഒരു പരീക്ഷണമാണ്.",
    "ગુજરાતી ભાષા સુંદર છે. પંજાબੀ: ਪੰਜਾਬੀ ਬੋਲੀ ਮਿੱਠੀ ਹੈ।",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน",
    "ພາສາລາວເປັນພາສາທີ່ສວຍງາມ. ខ្ញុំស្រឡាញ់ភាសាខ្មែរ។",
    "မြန်မာဘာသာစကား အလွန်လှပသည်။ བོད་ཡིག་ནི་སྐད་ཡིག་ཡིན།",
    "ქართული ენა ძალიან ლამაზია. Հայերենը գեղեցիկ լեզու է։",
    "አማርኛ ቋንቋ በጣም ቆንጆ ነው። ᐃᓄᒃᑎᑐᑦ ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ",
    "我能吞下玻璃而不伤身体。中华人民共和国成立于1949年。",
    "我能吞下玻璃而不傷身體。臺灣的繁體字與簡體字不同。",
    "私はガラスを食べられます。それは私を傷つけません。カタカナとひらがな、漢字。",
    "나는 유리를 먹을 수 있어요. 그래도 아프지 않아요. 한국어 문장입니다.",
    "Монгол хэл бол сайхан хэл юм. ᠮᠣᠩᠭᠣᠯ ᠪᠢᠴᠢᠭ",
    "සිංහල භාෂාව ඉතා ලස්සනයි. Ẹ kú àárọ̀, ṣé dáadáa ni?",
    "Þetta er íslenska. Ærøskøbing på Ærø. Æsir og Vanir. Dansk, norsk, svensk: åäö.",
    "Lietuvių kalba: ąčęėįšųūž. Latviešu valoda: āčēģīķļņšūž. Eesti keel: õäöü.",
    "Magyar: árvíztűrő tükörfúrógép. Română: Înjurătura șchioapă țâșnește.",
    "Hrvatski: Gojazni đačić s biciklom drži hmelj i finu vatu u džepu nošnje. Slovenščina: čšž.",
    "Kiswahili ni lugha nzuri. Bahasa Indonesia itu mudah. Tagalog: Magandang umaga po!",
    "Esperanto: Eĥoŝanĝo ĉiuĵaŭde. Cymraeg: Mae hen wlad fy nhadau yn annwyl i mi. Gàidhlig: Tha mi gu math.",
    "Ελληνικά με τόνους: ά έ ή ί ό ύ ώ ΐ ΰ. Coptic: ⲁⲃⲅⲇ. Runic: ᚠᚢᚦᚨᚱᚲ. Gothic: 𐌰𐌱𐌲",
    "Math: ∀x∈ℝ, ∃y: x²+y²=z², ∫₀^∞ e^{-x} dx = 1, √2 ≈ 1.414, π ≠ 3, ∑_{i=1}^n i = n(n+1)/2",
    "Currency: $100, €200, £300, ¥400, ₹500, ₽600, ₩700, ₿0.01, ¢5",
    "Punctuation: „quoted“ «guillemets» ‹single› “smart” ‘quotes’ — en–dash … ellipsis • bullet ¶ § † ‡",
    "Old Italic 𐌀𐌁𐌂, Linear B 𐀀𐀁𐀂, cuneiform 𒀀𒀁𒀂, Egyptian 𓀀𓀁𓀂, musical 𝄞𝄢, math bold 𝐀𝐁𝐂 𝕒𝕓𝕔",
]

EMOJI = [
    "👍", "👍🏻", "👍🏼", "👍🏽", "👍🏾", "👍🏿", "👨‍👩‍👧‍👦", "👩‍❤️‍💋‍👨", "🧑🏽‍💻", "🏳️‍🌈", "🏴‍☠️", "🇺🇸🇫🇷🇯🇵🇩🇪",
    "1️⃣2️⃣#️⃣*️⃣", "❤️", "❤", "☺️", "🤷‍♀️", "🤷🏿‍♂️", "👁️‍🗨️", "🐕‍🦺", "😀😃😄😁😆😅😂🤣", "🫠🫢🫣🫡🫥",
    "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "Hello 👋 world 🌍!", "emoji🎉inside🎊words", "🔥🔥🔥🔥🔥🔥🔥🔥🔥🔥",
    "👩🏻‍🤝‍👩🏿 and 🧔🏾‍♀️", "©️®️™️", "⌚⌛⏰", "🀄🃏🎴",
]

COMBINING = [
    "e\u0301", "cafe\u0301 vs café", "A\u030a vs Å vs \u212b", "\u2126 ohm", "n\u0303o", "\u1100\u1161\u11a8",
    "\u1112\u1161\u11ab\u1100\u1173\u11af", "Z̸̢̛̤̫̗͕͓̲̊̾͗̆͛a̶̡̗̯͇͈͍̯̠͚̿̀͑̈́̔ͅl̵̨̢̜̝̪̣̼̈͋̉͗̋g̷̢̢̜̗̗̞̈̓̾̄͋o̸̧̙̘̳̥̅̃͛̃̅",
    "\uf900\uf901\uf902", "ﬁﬂﬀ ligatures", "ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ　１２３", "①②③ ⅠⅡⅢ ½ ¼ ¾ ²³¹",
    "x\u0308\u0304", "\u0915\u094d\u0937", "a\u0328\u0301", "\u0041\u030a\u0301", "o\u0302\u0323 vs \u1ed9",
    "\u00c5\u0301", "q\u0307\u0323", "\u05d1\u05bc\u05b8", "\u0627\u064b\u0651", "\u0e01\u0e34\u0e4a",
    "\u1e9b\u0323", "\u0390", "\u2000\u2001\u2002", "\u0958\u0959", "\u2adc", "\u1b06 \u1b05\u1b35",
]

CONTROL = [
    "\x00", "a\x00b", "\x01\x02\x03\x04\x05\x06\x07\x08", "\x0b\x0c", "\x0e\x0f\x10\x11\x12", "\x1b[31mred\x1b[0m",
    "\x7f", "\u0085", "line\u2028sep\u2029para", "zero\u200bwidth\u200cnon\u200djoiner", "\ufeffBOM",
    "mongolian\u180evowel", "bidi\u202eoverride\u202c", "\u2066isolate\u2069", "soft\u00adhyphen",
    "tab\there", "bell\x07", "\x1f\x1e\x1d\x1c", "nbsp\u00a0space", "ideographic\u3000space",
    "\u2060word\u2061joiner", "\ufff9\ufffa\ufffb", "\ue000private\uf8ff", "\U000f0000plane15", "\ufffd", "\ufffe\uffff",
]

WHITESPACE = [
    " ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", "\n\n\n", " \n", "\n ", " \t \n ", "a  b", "a   b",
    "a    b", "  leading", "trailing  ", "  both  ", "\tindented\n\t\tmore\n", "a\r\nb\r\nc\r\n", "\r\r\n\n",
    " " * 16, " " * 17, " " * 31, " " * 32, " " * 33, " " * 64, " " * 100, "\t" * 10, "\n" * 20, "\n" * 31,
    "\n" * 33, "x" + " " * 50 + "y", "a \n b \n\n c", "  \n  \n  ", "\u3000\u3000", "\u00a0\u00a0a", " \u00a0 ",
    "end with space ", "end with newline\n", "\n\nstart with newlines", "word\t\tword", "▁▁▁", "▁hello▁world",
    "\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t", "\n\t\n\t", "  \r\n  ",
]

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <iostream>\nint main() {\n  std::cout << \"Hello, world!\" << std::endl;\n  return 0;\n}\n",
    "const x = (a, b) => a ?? b; let y = `template ${x}`; // comment\n",
    "{\"key\": \"value\", \"n\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"\\u00e9\"}}",
    "<!DOCTYPE html><html><head><title>Test</title></head><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC LIMIT 10;",
    "for f in *.txt; do echo \"$f\" | sed -e 's/a/b/g' > \"${f%.txt}.out\"; done 2>&1",
    "^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*)$",
    "# Title\n\n- item 1\n- item 2\n\n```python\nprint('hi')\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n",
    "\\begin{equation} E = mc^2 \\quad \\frac{\\partial f}{\\partial x} \\end{equation}",
    "fn main() -> Result<(), Box<dyn Error>> { let v: Vec<u8> = vec![0u8; 16]; Ok(()) }",
    "public static void main(String[] args) { System.out.println(\"Java\"); }",
    "x = [i**2 for i in range(10) if i % 2 == 0]  # list comprehension",
    "if (a != b && c <= d || !e) { x += 1; y -= 2; z *= 3; w /= 4; } else { return -1; }",
    "    \t    mixed indentation\n\t    \tline",
    "path/to/file.txt C:\\Windows\\System32 https://example.com/a?b=c&d=e#frag user@example.com",
    "git commit -m \"fix: don't crash\" && git push origin main --force-with-lease",
    "<|python_tag|>print(1)<|eom_id|>", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "a=1;b=2;c=a+b;print(c)", "0x1F 0b1010 0o777 1_000_000 3.14159f 1e-9 .5 5.",
    "while True:\n\tpass\r\n", "'''docstring''' \"\"\"another\"\"\"", "a->b::c<d>(e)[f]{g}",
]

NUMBERS = [str(10 ** k) for k in range(0, 30)] + [str(k) for k in [7, 42, 123, 1234, 12345, 123456, 1234567,
    98765432, 2024, 1999, 31415926535, 271828182845904523536]] + [
    "3.14", "-2.5", "1,000,000", "1.000.000,50", "+1 (555) 123-4567", "12:34:56", "2024-01-15T10:30:00Z",
    "١٢٣٤٥", "０１２３４", "¹²³", "٣.١٤", "۱۴۰۳", "१२३४", "๑๒๓", "〇一二三", "1st 2nd 3rd 4th", "v1.2.3-rc.4",
    "$1.99", "50%", "1e100", "0.000001", "123abc456", "abc123def", "9" * 50, "1234567890" * 10, "12 34 56 78",
]

LOOKALIKES = [
    "<|im_start", "<|im_start|", "< |im_start|>", "<|IM_START|>", "<|im_start|><|im_end|>", "<|im_start|>user\nHi<|im_end|>\n",
    "<<|im_start|>>", "|im_start|", "<|endoftext|><|endoftext|>", "text<|endoftext|>text", " <|endoftext|> ",
    "<|begin_of_text|>Hello", "<|begin_of_text", "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<bos>", "<bos><bos>", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "<start_of_turn",
    "<eos>", "<pad>", "<unk>", "<mask>", "[multimodal]", "<unused0>", "<unused99>", "<unused6241>", "<unused6242>",
    "<｜begin▁of▁sentence｜>", "<｜begin▁of▁sentence｜", "<｜User｜>Hi<｜Assistant｜>", "<|begin▁of▁sentence|>",
    "<|start|>user<|message|>Hi<|end|>", "<|start|>assistant<|channel|>analysis<|message|>x<|end|>", "<|return|>",
    "<|startoftext|>", "<think>\nreasoning\n</think>\n\nanswer", "<think></think>", "</think>", "<tool_response>",
    "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "<s>", "</s>", "[INST]", "<|eot_id|>", "<|eot_id",
    "<|reserved_special_token_0|>", "<|reserved_special_token_250|>", "<|reserved_special_token_251|>",
    "<|vision_start|><|image_pad|><|vision_end|>", "<image_soft_token>", "<start_of_image>",
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜>",
    "<｜place▁holder▁no▁0｜>", "<｜place▁holder▁no▁796｜>", "\n\n<|im_end|>", "<|im_end|>\n\n", "▁<bos>▁",
]

LONG = [
    "a" * 1000, "ab" * 500, "abc " * 300, "x" * 5000, "Supercalifragilisticexpialidocious" * 20, "z" * 200 + "!",
    "中" * 2000, "文字" * 700, "한" * 1000, "ж" * 1000, "é" * 600, "🙂" * 300, "👨‍👩‍👧‍👦" * 50, "-" * 500, "=" * 300,
    "." * 1000, "_" * 400, "0" * 1000, "ab1" * 400, "Ω" * 500, "\u0301" * 200, "a\u0301" * 300, "ﷺ" * 50, "ﷻ" * 20,
    "pneumonoultramicroscopicsilicovolcanoconiosis", "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch",
    "Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft",
    "the " * 2000, "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 40, "\n".join(["line"] * 300),
]


def special_tokens_of_families():
    tokens = []
    numbered = re.compile(r"\d+")
    for family in FAMILIES:
        path = os.path.join(ROOT, "assets", "tokenizers", family, "tokenizer.json")
        with open(path, encoding="utf-8") as f:
            added = json.load(f)["added_tokens"]
        by_shape = {}
        for token in added:
            shape = numbered.sub("N", token["content"])
            by_shape.setdefault(shape, []).append(token["content"])
        for shape in sorted(by_shape):
            contents = by_shape[shape]
            # Every token whose shape is unique; a few of each numbered family (<unusedN>, ...).
            keep = contents if len(contents) <= 3 else contents[:3] + contents[-2:]
            tokens.extend(keep)
    return sorted(set(tokens))


def mixed(rng, pools, count):
    out = []
    for _ in range(count):
        parts = [rng.choice(rng.choice(pools)) for _ in range(rng.randint(2, 6))]
        seps = ["", " ", "\n", "  ", "\t", ", ", " - "]
        text = parts[0]
        for p in parts[1:]:
            text += rng.choice(seps) + p
        if len(text) > 600:
            text = text[:600]
            # Do not cut a surrogate-free string badly: Python str slicing is by code point.
        out.append(text)
    return out


def words_of(sentences):
    words = []
    for s in sentences:
        words.extend(w for w in re.split(r"(\s+)", s) if w)
    return words


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "golden", "tokenizer", "corpus.json"))
    args = parser.parse_args()
    rng = random.Random(20240601)

    specials = special_tokens_of_families()
    corpus = [""]
    for group in (LANGUAGES, EMOJI, COMBINING, CONTROL, WHITESPACE, CODE, NUMBERS, LOOKALIKES, LONG):
        corpus.extend(group)
    corpus.extend(specials)
    # Each special token glued to text, with spaces, repeated.
    for token in specials:
        corpus.append(f"Hello{token}world")
        corpus.append(f" {token} \n")
    # Single characters of many kinds, and every ASCII character.
    corpus.extend(chr(c) for c in range(0x20, 0x7F))
    corpus.extend(["é", "ß", "ſ", "İ", "ı", "K", "ǅ", "ﬀ", "Ⅻ", "〆", "々", "ー", "・", "ゝ", "〜"])
    # Contractions in every case.
    for c in ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]:
        corpus.extend([f"it{c}", f"IT{c.upper()}", f"It{c.capitalize()}", f"x {c}", c, f"{c}{c}"])
    corpus.extend(["can’t", "ſ's", "'S'T", "don'T", "O'Neil's", "''", "'''s"])
    # Random mixes of everything, so neighbouring contexts vary.
    pools = [LANGUAGES, EMOJI, COMBINING, CONTROL, WHITESPACE, CODE, NUMBERS, LOOKALIKES, specials,
             words_of(LANGUAGES), words_of(CODE)]
    corpus.extend(mixed(rng, pools, 500))
    # Random code point soup from assorted blocks.
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF), (0x900, 0x97F),
              (0xE00, 0xE7F), (0x1100, 0x11FF), (0x3040, 0x30FF), (0x4E00, 0x9FA5), (0xAC00, 0xD7A3),
              (0x1F300, 0x1F6FF), (0x2000, 0x206F), (0xFF00, 0xFFEF), (0x0300, 0x036F)]
    for _ in range(150):
        n = rng.randint(1, 40)
        chars = []
        for _ in range(n):
            lo, hi = rng.choice(blocks)
            chars.append(chr(rng.randint(lo, hi)))
        corpus.append("".join(chars))

    seen = set()
    unique = []
    for s in corpus:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"description": "tokenizer oracle corpus, written by tools/make_tokenizer_corpus.py",
                   "strings": unique}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"wrote {len(unique)} strings to {args.out}")


if __name__ == "__main__":
    main()
