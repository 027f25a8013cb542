#!/usr/bin/env python3
"""gen_tok_corpus.py — writes the tokenizer parity corpus, deterministically.

Output: JSON lines, one string per line ("chunks"), about 1.2 MB of UTF-8 text in total:
English prose, source code (C, Python, JS, JSON, shell), CJK, emoji with ZWJ and skin-tone
sequences, RTL (Arabic, Hebrew), combining marks (decomposed and precomposed Latin,
Devanagari, Thai), long whitespace/newline/tab runs, digit runs, special-token strings of
the common chat formats, and mixtures of all of them. Fixed seed + Python's Mersenne Twister:
the same bytes on every run and Python 3 version.

usage: gen_tok_corpus.py OUT.jsonl [--size BYTES]
"""
import json
import random
import sys

WORDS = ("the of and to in is was that for it with as his on be at by had are but from or "
         "have an they which one you were her all she there would their we him been has when "
         "who will more no if out so said what up its about into than them can only other new "
         "some could time these two may then do first any my now such like our over man me "
         "even most made after also did many before must through back years where much your "
         "way well down should because each just those people how too little state good very "
         "make world still own see men work long get here between both life being under never "
         "day same another know while last might us great old year off come since against go "
         "came right used take three tokenizer inference server model latency throughput cache "
         "kernel matrix vector gradient transformer attention embedding sequence Hugging Face "
         "Linux NVIDIA don't can't won't it's I'm you're we've they'll she'd O'Neil rock'n'roll "
         "naïve café résumé coöperate façade Zürich Ångström São Paulo Kraków Dvořák").split()

CODE = [
    "int main(int argc, char **argv) {\n    for (int i = 0; i < argc; i++)\n        printf(\"%s\\n\", argv[i]);\n    return 0;\n}\n",
    "def fib(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    "const xs = [1, 2, 3].map((x) => x * 2).filter(x => x !== 4);\nconsole.log(`${xs.length} items`);\n",
    "{\"model\": \"qwen3\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"temperature\": 0.7, \"max_tokens\": 128}\n",
    "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.gguf; do\n\techo \"$f: $(stat -c %s \"$f\") bytes\"\ndone\n",
    "SELECT id, name FROM users WHERE created_at >= '2024-01-01' AND email LIKE '%@example.com' ORDER BY id DESC;\n",
    "template <typename T>\nstd::vector<T> slice(const std::vector<T>& v, size_t a, size_t b) { return {v.begin() + a, v.begin() + b}; }\n",
    "    if (x->len != y->len)\r\n        return x->len > y->len ? -1 : 1;\r\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).collect();\n    println!(\"{:?}\", v.iter().sum::<u32>());\n}\n",
    "<html><body><div class=\"x\">&lt;tag&gt; &amp; &#x1F600;</div></body></html>\n",
]

CJK = ("我想在苹果公司工作。今天天气很好，我们去公园散步吧！人工智能正在改变世界。"
       "東京は日本の首都です。ひらがなとカタカナと漢字を使います。こんにちは、世界！"
       "한국어는 한글로 씁니다. 안녕하세요, 반갑습니다. 서울특별시 강남구"
       "中华人民共和国成立于一九四九年。機械学習モデルの推論サーバー。")

EMOJI = ["😀", "😁", "🚀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "😶‍🌫️", "🧑🏿‍💻", "👩🏻‍🔬", "❤️", "🇯🇵", "🇺🇸",
         "🫠", "🦙", "✨", "🤖", "1️⃣", "#️⃣", "🧔‍♂️", "🐈‍⬛", "☕", "🍣"]

RTL = ["مرحبا بالعالم، كيف حالك اليوم؟", "اللغة العربية جميلة جدا ١٢٣٤٥", "שלום עולם, מה שלומך?",
       "עברית נכתבת מימין לשמאל 2024", "مدل زبان بزرگ روی کارت گرافیک اجرا می‌شود",
       "\u202bembedded RTL\u202c and \u200fmarks\u200e"]

MARKS = ["e\u0301", "a\u0308", "o\u0302\u0323", "n\u0303", "Z\u0336a\u0336l\u0336g\u0336o\u0336",
         "\u00e9", "\u1e69", "ǅ", "ﬁ", "Ⅻ", "①", "ｆｕｌｌｗｉｄｔｈ", "हिन्दी भाषा", "ภาษาไทย สวัสดี",
         "각", "İstanbul", "ß", "ẞ", "Σίσυφος", "ῼ", "\u0345", "q\u0307\u0323"]

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>", "<pad>",
            "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
            "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<|user|>", "<|assistant|>",
            "<|end|>", "<|system|>", "<think>", "</think>", "[INST]", "[/INST]", "<<SYS>>",
            "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<tool_call>", "<0x0A>", "▁"]

WS = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", " \n ", "\u00a0", "\u3000",
      "\u2009", "\u200b", "\v", "\f"]


def prose(r):
    out = []
    for _ in range(r.randint(2, 8)):
        n = r.randint(4, 22)
        ws = [r.choice(WORDS) for _ in range(n)]
        ws[0] = ws[0].capitalize()
        s = " ".join(ws)
        if r.random() < 0.2:
            s += ", " + " ".join(r.choice(WORDS) for _ in range(r.randint(2, 8)))
        out.append(s + r.choice([".", ".", ".", "?", "!", "...", ";", ":"]))
    return " ".join(out)


def cjk(r):
    a = r.randrange(len(CJK))
    return CJK[a:a + r.randint(5, 60)]


def digits(r):
    k = r.random()
    if k < 0.3:
        return str(r.randint(0, 10 ** r.randint(1, 30)))
    if k < 0.5:
        return f"{r.uniform(-1e6, 1e6):.{r.randint(0, 8)}f}"
    if k < 0.7:
        return "-".join(str(r.randint(0, 9999)) for _ in range(r.randint(2, 5)))
    if k < 0.85:
        return "٣٤٥٦ १२३ ７８９ ⅷ ²³"
    return "0x%x 1e-9 3.14159 1,000,000 10^12" % r.randint(0, 2 ** 32)


def ws_run(r):
    return "".join(r.choice(WS) for _ in range(r.randint(1, 12))) * r.randint(1, 20)


def piece(r):
    k = r.random()
    if k < 0.30:
        return prose(r)
    if k < 0.45:
        return r.choice(CODE)
    if k < 0.55:
        return cjk(r)
    if k < 0.62:
        return "".join(r.choice(EMOJI) for _ in range(r.randint(1, 6)))
    if k < 0.68:
        return r.choice(RTL)
    if k < 0.74:
        return " ".join(r.choice(MARKS) for _ in range(r.randint(1, 6)))
    if k < 0.80:
        return ws_run(r)
    if k < 0.88:
        return digits(r)
    if k < 0.95:
        return r.choice(SPECIALS) + r.choice(["", "user\n", "assistant\n", " ", "\n", "Hello"])
    return "".join(chr(r.choice([r.randint(0x20, 0x7e), r.randint(0xa0, 0x24f),
                                  r.randint(0x370, 0x52f), r.randint(0x2000, 0x2bff),
                                  r.randint(0x1f300, 0x1faff)]))
                   for _ in range(r.randint(1, 30)))


def chunk(r):
    parts = [piece(r) for _ in range(r.randint(1, 12))]
    return "".join(p + r.choice(["", " ", "\n", "\n\n", " ", ""]) for p in parts)


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    size = 1_200_000
    if "--size" in sys.argv:
        size = int(sys.argv[sys.argv.index("--size") + 1])
    r = random.Random(20251129)
    total = 0
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        # a few fixed edge cases first
        for s in ["", " ", "\n", "  leading", "trailing  ", " " * 300, "\n" * 200, "\t" * 50,
                  "a" * 2000, "1" * 500, "😀" * 100, "<|im_start|><|im_end|>", "<s></s><unk>",
                  "Hello world", " Hello world", "\u200d", "\ufeffBOM", "\u0000nul\u0000"]:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
            total += len(s.encode())
        while total < size:
            c = chunk(r)
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
            total += len(c.encode())
    print(f"wrote {sys.argv[1]}: {total} bytes of text", file=sys.stderr)


if __name__ == "__main__":
    main()
