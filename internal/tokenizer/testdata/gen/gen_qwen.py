import json, random
random.seed(20261130)
edge = ["", " ", "  ", "\n", "\r\n", " \n ", "a\n\n\nb", "a  \n  b", "trailing\n", "x \t\n\t y", "\u00a0", "a\u00a0\u00a0b",
"'s", "'S 'T 'RE 'Ve 'LL 'd 'M", "don't I'm you're we've they'll he'd", "'\u017f", "'\u017fa", "''''", "'''s", "hello'world", "it's'", "'", "' s",
"123456789", "\u0661\u0662\u0663 Arabic digits", "\u216b roman numeral", "\u00bd \u00be", "x\u00b2", "Hindi: \u0939\u093f\u0928\u094d\u0926\u0940",
"Thai: \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22", "Korean: \ud55c\uad6d\uc5b4", "Japanese: \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u30ab\u30bf\u30ab\u30ca",
"emoji \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family", "flags \U0001F1FA\U0001F1F8\U0001F1EF\U0001F1F5",
"combining e\u0301 NFD", "A\u030a ngstrom NFD", "\u1100\u1161\u11a8 jamo",
"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|><|endoftext|>", "<think>\n\n</think>\n\n", "a<|im_start|", "<|im_start|>\u0338",
"<tool_call>{\"a\":1}</tool_call>", "x<|endoftext|>y", " <|im_end|> ", "<|im_end|>>", "<<|im_end|>",
"\r\r\n\n", "a\r\nb", "....\n\n", " !!!", "!!! \n", "  !!", "\t\tfoo", "foo\t\t", " 3", "a1b2", "x_y", "snake_case_name", "CamelCaseWord",
"http://example.com/path?q=1&r=2", "C++ && Rust || Go", "tabs\t\t\tand", "    code indent\n        more\n", " " * 100, "\n" * 50, "a" * 1000,
"\u00ff\u00fe", "\x00\x01\x1f control", "\u2028\u2029", "\ufeffBOM", "zero\u200bwidth", "\u3000\u3000full width space", "end with space ",
"\u4e2d" * 700, "Mixed\u4e2d\u6587English\u6df7\u5408", "(S1) A presenter says <d>[English] Fast H3 is amazing.</d> (S2) Reply <d>[Chinese] \u4f60\u597d</d>",
"\u00e9\u00e8\u00ea \u00c7a va? \u00dcber \u00df", "\u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2 \u0391\u0398\u0397\u039d\u0391", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
"\u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627", "math: \u2200x\u2208\u211d, x\u00b2 \u2265 0", "price: $12.50 \u20ac9,99 \u00a5100", "a\u0300\u0301\u0302\u0303",
"\U0001F600\U0001F601\U0001F602", "\u0301 leading combining", "\U00010348 gothic", "\U0001D400 math bold", "'\U0001F600", "\t'll", "\n's",
]
alphabet = list("aZsStTlLdDvVrReEmM'  \t\n\r\u00a0\u3000\u2028\u0085\u000b\u001c,.!?-_()<>|/\\\"0123456789") + \
  ["\u017f", "\u00e9", "e\u0301", "\u4e2d", "\u6587", "\u3002", "\uff0c", "\u0939", "\u093f", "\u094d", "\U0001F600", "\U0001F3AC", "\u200d", "\u200b",
   "\u00bd", "\u0661", "\u216b", "\u00b2", "\u0338", "\u212b", "\u00c5", "\u1100", "\u1161", "\uac00", "\u0410", "\u03a3", "<|im_end|>", "<|endoftext|>", "<think>", "\ufffd", "\u00ad", "\u0600"]
rand_cases = []
for n in range(400):
    L = random.randint(1, 30)
    rand_cases.append("".join(random.choice(alphabet) for _ in range(L)))
json.dump(edge + rand_cases, open("qwen_texts.json", "w"))
print(len(edge), len(rand_cases))
